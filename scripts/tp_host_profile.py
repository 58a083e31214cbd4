"""Where the host's time of one tensor-parallel call goes: each form of both products (gemmlab.distributed's
transports "sequential" and "copy", torch's NCCL collective + torch.matmul beside them, and gemmlab.matmul then
NCCL's reduce-scatter with nothing around them) called back to back
under cProfile on rank 0 of a group of --gpus GPUs (2 unless given), with the host's unprofiled time and the wall
time per call; the functions that took the most time of their own, per form. NVLink multicast off in every process.

    PYTHONPATH=src python scripts/tp_host_profile.py [--shape 2048x1024x1024] [--calls 200] [--gpus 2]
        [--phases | --ag-phases]
"""

import argparse
import cProfile
import io
import pstats
import time


def body(torch, dist, rank, world, dev, shape, calls, phases=False):
    import gemmlab.distributed as gd

    m, n, k = shape
    rows, cols, ks = m // world, n // world, k // world
    g = torch.Generator(device=dev).manual_seed(1)
    a = torch.randn(m, k, generator=g, device=dev).bfloat16()
    b = torch.randn(k, n, generator=g, device=dev).bfloat16()
    shard, b_cols = a[rank * rows:(rank + 1) * rows].contiguous(), b[:, rank * cols:(rank + 1) * cols].contiguous()
    a_slice, b_slice = a[:, rank * ks:(rank + 1) * ks].contiguous(), b[rank * ks:(rank + 1) * ks].contiguous()
    gathered = torch.empty(m, k, dtype=a.dtype, device=dev)

    def torch_rs():
        p = torch.matmul(a_slice, b_slice)
        out = torch.empty(rows, n, dtype=p.dtype, device=dev)
        dist.reduce_scatter_tensor(out, p)
        return out

    def bare_rs():  # gemmlab's GEMM, then NCCL, with none of the product's own steps around them
        p = gd.ops._matmul(a_slice, b_slice)
        out = torch.empty(rows, n, dtype=p.dtype, device=dev)
        dist.reduce_scatter_tensor(out, p)
        return out

    forms = {
        "ag torch": lambda: torch.matmul(dist.all_gather_into_tensor(gathered, shard) or gathered, b_cols),
        "ag sequential": lambda: gd.all_gather_matmul(shard, b_cols, transport="sequential"),
        "ag copy": lambda: gd.all_gather_matmul(shard, b_cols, transport="copy"),
        "rs torch": torch_rs,
        "rs sequential": lambda: gd.matmul_reduce_scatter(a_slice, b_slice, transport="sequential"),
        "rs copy": lambda: gd.matmul_reduce_scatter(a_slice, b_slice, transport="copy"),
        "rs gemmlab.matmul + NCCL": bare_rs,
        "gemm gemmlab": lambda: gd.ops._matmul(a_slice, b_slice),
        "gemm torch": lambda: torch.matmul(a_slice, b_slice),
    }
    out = {}
    if phases == "ag":
        return _ag_phases(torch, dist, dev, gd, shard, b_cols, gathered)
    if phases:
        return _phases(torch, dist, dev, gd, torch_rs, bare_rs, a_slice, b_slice, rows, n)
    for name, fn in forms.items():
        for _ in range(5):
            fn()
        torch.cuda.synchronize(dev)
        dist.barrier()
        t0 = time.perf_counter()  # unprofiled: the host's queueing per call, back to back
        for _ in range(calls):
            fn()
        bare = (time.perf_counter() - t0) / calls
        torch.cuda.synchronize(dev)
        dist.barrier()
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        for _ in range(calls):
            fn()
        prof.disable()
        host = (time.perf_counter() - t0) / calls
        torch.cuda.synchronize(dev)
        wall = (time.perf_counter() - t0) / calls
        # the same calls unprofiled, one at a time between barriers (what the bench times)
        each = []
        for _ in range(20):
            dist.barrier()
            torch.cuda.synchronize(dev)
            t1 = time.perf_counter()
            fn()
            torch.cuda.synchronize(dev)
            each.append(time.perf_counter() - t1)
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(12)
        out[name] = (host, wall, sorted(each)[len(each) // 2], s.getvalue(), bare)
    return out


def _ag_phases(torch, dist, dev, gd, shard, b_cols, gathered, calls=40):
    """The all-gather's sequential forms timed in parts, one call between barriers, medians (us): torch's (NCCL,
    then torch.matmul), the bare pair (NCCL, then gemmlab's GEMM on the same gathered A), gemmlab's form
    (`transport="sequential"`, whole), and two replicas of the form's steps with the host's clock read between
    them (as the form; and with C allocated before the collective). Per call: the host's time to the
    collective's return, to the call's end, the GPU from the call's start to the collective's end (an event
    after it on the current stream) and to the GEMM's end, the wall time to the synchronize's return; for the
    replicas also the host's time at each step (`steps`)."""
    ops = gd.ops
    world = dist.get_world_size()
    rows, k = shard.shape
    n = b_cols.shape[1]

    def replica(marks, out_first):
        out = torch.empty((world * rows, n), dtype=shard.dtype, device=dev) if out_first else None
        marks.append(time.perf_counter())
        kept = ops._Kept(torch, None, "gathered", (world * rows, k), shard.dtype, shard.device)
        marks.append(time.perf_counter())
        dist.all_gather_into_tensor(kept.tensor, shard)
        marks.append(time.perf_counter())
        if out is None:
            out = torch.empty((world * rows, n), dtype=shard.dtype, device=dev)
        marks.append(time.perf_counter())
        ops._matmul(kept.tensor, b_cols, out)
        marks.append(time.perf_counter())
        kept.done(torch)

    forms = {
        "torch": lambda m: torch.matmul(gathered, b_cols),
        "gemmlab GEMM": lambda m: ops._matmul(gathered, b_cols),
        "gemmlab form": None,
        "replica": lambda m: replica(m, False),
        "replica, C first": lambda m: replica(m, True),
    }
    res, steps = {}, {}
    e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    for name, fn in forms.items():
        rows_, marks_ = [], []
        for i in range(calls + 5):
            marks = []
            dist.barrier()
            torch.cuda.synchronize(dev)
            e[0].record()
            t0 = time.perf_counter()
            if name == "gemmlab form":
                gd.all_gather_matmul(shard, b_cols, transport="sequential")
                t1 = time.perf_counter()
                e[1].record()
            elif name.startswith("replica"):
                fn(marks)
                t1 = marks[2]
                e[1].record()
            else:
                dist.all_gather_into_tensor(gathered, shard)
                t1 = time.perf_counter()
                e[1].record()
                fn(marks)
            t2 = time.perf_counter()
            e[2].record()
            torch.cuda.synchronize(dev)
            t3 = time.perf_counter()
            if i >= 5:
                rows_.append(((t1 - t0) * 1e6, (t2 - t0) * 1e6, e[0].elapsed_time(e[1]) * 1e3,
                              e[0].elapsed_time(e[2]) * 1e3, (t3 - t0) * 1e6))
                if marks:
                    marks_.append([(t - t0) * 1e6 for t in marks])
        t = torch.tensor(rows_, dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # (the slowest rank's, call by call)
        res[name] = [float(c) for c in t.median(0).values.cpu()]
        if marks_:
            steps[name] = [sorted(c)[len(c) // 2] for c in zip(*marks_)]
    res["steps"] = steps
    return res


def _phases(torch, dist, dev, gd, torch_rs, bare_rs, a_slice, b_slice, rows, n):
    """The reduce-scatter's two steps timed apart, one call between barriers: the host's time in the GEMM's call
    and in NCCL's, and on the GPU from before the GEMM to after its call was queued, and on to the collective's
    end; with a trivial torch kernel between the two, and with the GEMM's plan named."""
    from gemmlab.api import call

    def bare_then_torch_op():
        p = gd.ops._matmul(a_slice, b_slice)
        p.view(-1)[:1].add_(0.0)  # one torch kernel on the stream between gemmlab's launch and NCCL's call
        out = torch.empty(rows, n, dtype=p.dtype, device=dev)
        dist.reduce_scatter_tensor(out, p)
        return out

    gemms = {"torch": lambda: torch.matmul(a_slice, b_slice), "gemmlab": lambda: gd.ops._matmul(a_slice, b_slice),
             "gemmlab + torch op": None}
    res = {}
    for name, gemm in gemms.items():
        for _ in range(5):
            (bare_then_torch_op if gemm is None else (torch_rs if name == "torch" else bare_rs))()
        rows_ = []
        for _ in range(40):
            e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            dist.barrier()
            torch.cuda.synchronize(dev)
            e[0].record()
            t0 = time.perf_counter()
            p = (gemms["gemmlab"] if gemm is None else gemm)()
            if gemm is None:
                p.view(-1)[:1].add_(0.0)
            t1 = time.perf_counter()
            e[1].record()
            o = torch.empty(rows, n, dtype=p.dtype, device=dev)
            dist.reduce_scatter_tensor(o, p)
            t2 = time.perf_counter()
            e[2].record()
            torch.cuda.synchronize(dev)
            t3 = time.perf_counter()
            rows_.append(((t1 - t0) * 1e6, (t2 - t1) * 1e6, e[0].elapsed_time(e[1]) * 1e3,
                          e[1].elapsed_time(e[2]) * 1e3, (t3 - t0) * 1e6))
        med = [sorted(col)[len(col) // 2] for col in zip(*rows_)]
        res[name] = med
    plan = next(reversed(call._plans.values()))
    res["plan"] = f"{plan.spec.name} {plan.params} second launch: {plan.second is not None}"
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="2048x1024x1024")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--gpus", type=int, default=2, help="ranks, one GPU each")
    ap.add_argument("--phases", action="store_true", help="the reduce-scatter's GEMM and NCCL call timed apart")
    ap.add_argument("--ag-phases", action="store_true", help="the all-gather's sequential forms timed in parts")
    args = ap.parse_args()
    from gemmlab.bench.distributed import spawn_ranks

    shape = tuple(int(v) for v in args.shape.lower().split("x"))
    if args.ag_phases:
        got = spawn_ranks(args.gpus, "nccl", body, shape, args.calls, "ag")
        print(f"all-gather {args.shape} over {args.gpus}: {'form':>14} {'host NCCL us':>13} {'host all us':>12} "
              f"{'GPU to NCCL end':>16} {'GPU to GEMM end':>16} {'wall':>7}")
        steps = got.pop("steps")
        for name, med in got.items():
            print(f"{'':>{len(args.shape) + 20}} {name:>16} " + " ".join(f"{v:12.1f}" for v in med))
        print("rank 0's host, us from the call's start: before the kept buffer / before NCCL / after it / before "
              "the GEMM / after its launch")
        for name, marks in steps.items():
            print(f"{name:>18} " + " ".join(f"{v:8.1f}" for v in marks))
        return
    if args.phases:
        got = spawn_ranks(args.gpus, "nccl", body, shape, args.calls, True)
        print(got.pop("plan"))
        print(f"{'GEMM':>20} {'host GEMM us':>13} {'host NCCL us':>13} {'GPU to GEMM end':>16} {'GPU NCCL':>9} {'wall':>7}")
        for name, med in got.items():
            print(f"{name:>20} " + " ".join(f"{v:13.1f}" for v in med))
        return
    got = spawn_ranks(args.gpus, "nccl", body, shape, args.calls)
    for name, (host, wall, each, text, _) in got.items():
        print(f"== {name}: host {host * 1e6:.1f} us a call (profiled), back to back {wall * 1e6:.1f} us, one call "
              f"between barriers {each * 1e6:.1f} us")
        print("\n".join(text.splitlines()[:30]))
    print(f"\nSUMMARY ({args.gpus} GPUs, rank 0, us a call: host unprofiled / host under cProfile / back to back / "
          "one call between barriers)")
    for name, (host, wall, each, _, bare) in got.items():
        print(f"{name:>24}: {bare * 1e6:8.1f} {host * 1e6:8.1f} {wall * 1e6:8.1f} {each * 1e6:8.1f}")


if __name__ == "__main__":
    main()
