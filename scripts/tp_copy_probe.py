"""Where the time of the copy-engine all-gather + GEMM goes (gemmlab.distributed, transport "copy"), per world size
and shape, each the slowest rank's median over calls between barriers: the whole call; the plain GEMM over all
of A; the same GEMM through the launch that waits for row blocks, its flags already set (the cost of waiting and
of the rotated walk); the pushes alone; NCCL's all-gather; and the plain GEMM with the pushes running beside it
(what sharing the GPU costs each). With --variants (4 GPUs): the call with the GEMM queued before the pushes (as
gemmlab.distributed does), after them, and with the pushes on one stream per peer, and the host's time to
queue one call ("host_us_per_call", ms). Beside them, the reduce-scatter by the copy engines on the same shape
("full_rs", its GEMM of M x N x K / W alone "gemm_rs_alone") and the host's time to queue one call of either
product ("host_ag", "host_rs", ms). With --timeline [--pieces]: one call's steps marked per rank (`timeline`);
with --interleave, the call after each of the bench's other candidates (`interleave`). NVLink multicast off.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
        PYTHONPATH=src python scripts/tp_copy_probe.py [--variants | --timeline [--pieces] | --interleave]
            [--gpus 4,2] [--shapes 16384x8192x8192,...]   (--timeline's world sizes and shapes)
"""

import statistics
import time


def _operands(torch, dev, rank, world, m, n, k):
    """(rows, cols, A, this rank's B columns, its shard of A): the same random values on every rank."""
    rows, cols = m // world, n // world
    g = torch.Generator(device=dev).manual_seed(3)
    a = torch.randn(m, k, generator=g, device=dev).bfloat16()
    b = torch.randn(k, cols, generator=g, device=dev).bfloat16()
    return rows, cols, a, b, a[rank * rows:(rank + 1) * rows].contiguous()


def _replica(ex, shard, b, c, rank, world, marks=None):
    """Queue one copy all-gather + GEMM by hand, step for step as gemmlab.distributed does (its exchange `ex`,
    whole blocks or ex.pieces pieces, into C = `c`). `marks` (optional, a callable): called with ("gemm",) once
    the GEMM is queued and ("push", i) once push i is queued, to mark them."""
    import torch

    from gemmlab.api.call import matmul_after
    from gemmlab.api.launch import Arrivals
    from gemmlab.runtime import launch as drv

    P, rows = ex.pieces, ex.rows
    ex.epoch += 1
    e = ex.epoch
    here = torch.cuda.current_stream()
    ex.ready.record(here)
    ex.own.copy_(shard)
    for q in range(P):
        drv.stream_write_value(here.cuda_stream, ex.arrived(rank, rank, q), e)
    matmul_after(ex.rows_view, b, c, arrivals=Arrivals(ex.arrived(rank, 0), rows // P, e, world * P, first=rank * P))
    if marks:
        marks("gemm")
    for p in ex.others:
        drv.stream_write_value(here.cuda_stream, ex.done(p, rank), e)
    ex.stream.wait_event(ex.ready)
    side = ex.stream.cuda_stream
    for i, p in enumerate(ex.push_order):
        drv.stream_wait_value(side, ex.done(rank, p), e - 1)
        for q in range(P):
            off = q * ex.piece_bytes
            drv.stream_copy(side, ex.peer_slot_ptr[p] + off, shard.data_ptr() + off, ex.piece_bytes)
            drv.stream_write_value(side, ex.arrived(p, rank, q), e)
        if marks:
            marks("push", i)
    here.wait_stream(ex.stream)
    return c


def body(torch, dist, rank, world, dev, shapes, variants=False):
    import gemmlab
    import gemmlab.distributed as gd
    from gemmlab.api.call import matmul_after
    from gemmlab.api.launch import Arrivals
    from gemmlab.distributed import exchange

    res = []
    for m, n, k in shapes:
        rows, cols, a, b, shard = _operands(torch, dev, rank, world, m, n, k)
        g = torch.Generator(device=dev).manual_seed(4)
        gath = torch.empty(m, k, dtype=torch.bfloat16, device=dev)
        for _ in range(3):
            gd.all_gather_matmul(shard, b, transport="copy")
        ex = exchange.exchange_for(torch, dist, None, rank, world, rows, k, shard.dtype, dev)
        out = torch.empty(m, cols, dtype=torch.bfloat16, device=dev)

        def t(fn, reps=15):
            fn(); torch.cuda.synchronize()
            xs = []
            for _ in range(reps):
                dist.barrier(); torch.cuda.synchronize()
                t0 = time.perf_counter(); fn(); torch.cuda.synchronize(); xs.append(time.perf_counter() - t0)
            v = torch.tensor([statistics.median(xs)], dtype=torch.float64, device=dev)
            dist.all_reduce(v, op=dist.ReduceOp.MAX)
            return float(v) * 1e3

        def pushes():
            for p in ex.push_order:
                ex.peer_slots[p].copy_(shard)

        r = dict(shape=(m, n, k), world=world)
        r["full"] = t(lambda: gd.all_gather_matmul(shard, b, transport="copy"))
        r["gemm"] = t(lambda: gemmlab.matmul(ex.rows_view, b, out))
        ready = Arrivals(ex.flag(rank, 0), rows, 0, world, first=rank)  # (count 0: every flag has reached it)
        r["gemm_arrivals_ready"] = t(lambda: matmul_after(ex.rows_view, b, out, arrivals=ready))
        r["pushes"] = t(pushes)
        r["nccl_ag"] = t(lambda: dist.all_gather_into_tensor(gath, shard))
        s = torch.cuda.Stream(device=dev)

        def both():  # pushes on a side stream beside the plain GEMM: the cost of sharing the GPU
            s.wait_stream(torch.cuda.current_stream())
            gemmlab.matmul(ex.rows_view, b, out)
            with torch.cuda.stream(s):
                pushes()
            torch.cuda.current_stream().wait_stream(s)
        r["gemm_beside_pushes"] = t(both)
        # the reduce-scatter by the copy engines on the same shape (K split over the ranks), and the host's time
        # to queue one call of each product (ms, no synchronisation: what a call costs before the GPU waits)
        ks = k // world
        a_k, b_k = a[:, rank * ks:(rank + 1) * ks].contiguous(), torch.randn(ks, n, generator=g, device=dev).bfloat16()
        r["full_rs"] = t(lambda: gd.matmul_reduce_scatter(a_k, b_k))
        r["gemm_rs_alone"] = t(lambda: gemmlab.matmul(a_k, b_k))

        def queued(fn, reps=10):
            fn(); torch.cuda.synchronize(); dist.barrier()
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            host = (time.perf_counter() - t0) / reps
            torch.cuda.synchronize()
            return host * 1e3
        r["host_ag"] = queued(lambda: gd.all_gather_matmul(shard, b, transport="copy"))
        r["host_rs"] = queued(lambda: gd.matmul_reduce_scatter(a_k, b_k))
        if variants:
            from gemmlab.runtime import launch as drv

            extra = [torch.cuda.Stream(device=dev) for _ in range(world - 1)]

            def variant(mode):
                ex.epoch += 1
                e = ex.epoch
                here = torch.cuda.current_stream()
                ex.ready.record(here)

                def pushes(streams):
                    for i, p in enumerate(ex.push_order):
                        st = streams[i % len(streams)]
                        st.wait_event(ex.ready)
                        with torch.cuda.stream(st):
                            drv.stream_wait_value(st.cuda_stream, ex.flag(rank, world + p), e - 1)
                            ex.peer_slots[p].copy_(shard)
                            drv.stream_write_value(st.cuda_stream, ex.flag(p, rank), e)
                    for st in streams:
                        here.wait_stream(st)
                if mode == "pushes_first":
                    pushes([ex.stream])
                ex.own.copy_(shard)
                drv.stream_write_value(here.cuda_stream, ex.flag(rank, rank), e)
                matmul_after(ex.rows_view, b, out, arrivals=Arrivals(ex.flag(rank, 0), rows, e, world, first=rank))
                for p in ex.others:
                    drv.stream_write_value(here.cuda_stream, ex.flag(p, world + rank), e)
                if mode != "pushes_first":
                    pushes(extra if mode == "parallel" else [ex.stream])

            for mode in ("gemm_first", "pushes_first", "parallel"):
                r[mode] = t(lambda mode=mode: variant(mode))
            t0 = time.perf_counter()  # the host's time to queue one call
            for _ in range(10):
                gd.all_gather_matmul(shard, b, transport="copy")
            r["host_us_per_call"] = (time.perf_counter() - t0) / 10 * 1e6 / 1e3
            torch.cuda.synchronize()
        res.append(r)
    return res


def timeline(torch, dist, rank, world, dev, shapes, calls=12, in_pieces=False):
    """One copy-engine all-gather + GEMM as gemmlab.distributed queues it, its steps marked: per rank, the
    host's start (wall clock, the same on every process of the host) and, from an event at the call's start on
    the GPU, when each push left this GPU (an event after each copy on the exchange stream) and when the GEMM
    ended; medians over `calls` calls between barriers. Whole blocks, as the library pushes them by default;
    `in_pieces`: each in exchange.pieces(rows) pieces (all_gather_matmul(pieces=))."""
    import gemmlab.distributed as gd
    from gemmlab.distributed import exchange

    out = []
    for m, n, k in shapes:
        rows, cols, a, b, shard = _operands(torch, dev, rank, world, m, n, k)
        for _ in range(3):
            gd.all_gather_matmul(shard, b, transport="copy")
        torch.cuda.synchronize()
        P = exchange.pieces(rows) if in_pieces else 1
        ex = exchange.exchange_for(torch, dist, None, rank, world, rows, k, shard.dtype, dev, pieces=P)
        c = torch.empty(m, cols, dtype=torch.bfloat16, device=dev)
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(world + 2)]
        samples = []
        for _ in range(calls):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.time()
            ev[0].record(torch.cuda.current_stream())
            hosts, at = [], {}

            def marks(what, i=0):  # the GEMM's end on the caller's stream; each push's on the exchange's
                if what == "gemm":
                    ev[1].record(torch.cuda.current_stream())
                    at["gemm"] = time.time()
                else:
                    ev[2 + i].record(ex.stream)
                    hosts.append(time.time() - t0)
            _replica(ex, shard, b, c, rank, world, marks)
            t_gemm = at["gemm"]
            torch.cuda.synchronize()
            end = time.time() - t0
            samples.append([t0, (t_gemm - t0) * 1e3, *(h * 1e3 for h in hosts), end * 1e3,
                            ev[0].elapsed_time(ev[1]), *(ev[0].elapsed_time(ev[2 + i]) for i in range(world - 1))])
        t = torch.tensor(samples, dtype=torch.float64, device=dev)
        every = [torch.zeros_like(t) for _ in range(world)]
        dist.all_gather(every, t)
        if rank == 0:
            # per call, each rank's start after the earliest rank's (ms); then medians per rank
            rows_ = []
            for r in range(world):
                v = every[r].cpu()
                first = torch.stack([x[:, 0] for x in every]).min(0).values.cpu()
                skew = (v[:, 0] - first) * 1e3
                med = [float(skew.median())] + [float(v[:, j].median()) for j in range(1, v.shape[1])]
                rows_.append(med)
            out.append(((m, n, k), rows_))
    return out


def interleave(torch, dist, rank, world, dev, shapes, calls=12):
    """The library's copy all-gather timed as the bench times it (one call between barriers, the slowest rank's
    median) alone, then in turn with each of the bench's other candidates (one of them, then one of ours): does
    a neighbour slow the call after it?"""
    import statistics

    import gemmlab.distributed as gd

    out = []
    for m, n, k in shapes:
        rows, cols, a, b, shard = _operands(torch, dev, rank, world, m, n, k)
        gathered = torch.empty(m, k, dtype=torch.bfloat16, device=dev)
        ours = lambda: gd.all_gather_matmul(shard, b, transport="copy")  # noqa: E731
        others = {"nothing": None,
                  "NCCL + torch.matmul": lambda: torch.matmul(dist.all_gather_into_tensor(gathered, shard) or gathered,
                                                              b),
                  "the sequential form": lambda: gd.all_gather_matmul(shard, b, transport="sequential"),
                  "the ring": lambda: gd.all_gather_matmul(shard, b, transport="ring")}
        try:
            from torch.distributed import _symmetric_memory as symm

            name = dist.group.WORLD.group_name
            symm.enable_symm_mem_for_group(name)
            others["torch's fused"] = lambda: torch.ops.symm_mem.fused_all_gather_matmul(
                shard, [b], gather_dim=0, group_name=name)
        except Exception:  # noqa: BLE001 - a torch without it: left out
            pass

        from gemmlab.distributed import exchange

        ex = exchange.exchange_for(torch, dist, None, rank, world, rows, k, shard.dtype, shard.device)
        c_kept = torch.empty(m, cols, dtype=torch.bfloat16, device=dev)

        def replica(new_c):  # the library's steps by hand, into a kept C or a new one
            c = torch.empty(m, cols, dtype=torch.bfloat16, device=dev) if new_c else c_kept
            return _replica(ex, shard, b, c, rank, world)

        def one(fn):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            return time.perf_counter() - t0

        for fn in [ours, *(f for f in others.values() if f)]:
            fn()
        torch.cuda.synchronize()
        res = {}
        for label, fn in (("alone: the library's call", ours), ("the replica", lambda: replica(False)),
                          ("the replica, a new C each call", lambda: replica(True))):
            xs = [one(fn) for _ in range(calls)]
            v = torch.tensor(xs, dtype=torch.float64, device=dev)
            dist.all_reduce(v, op=dist.ReduceOp.MAX)
            res[label] = statistics.median(v.tolist()) * 1e3
        for label, other in others.items():
            xs = []
            for _ in range(calls):
                if other is not None:
                    one(other)
                xs.append(one(ours))
            v = torch.tensor(xs, dtype=torch.float64, device=dev)
            dist.all_reduce(v, op=dist.ReduceOp.MAX)
            res[label] = statistics.median(v.tolist()) * 1e3
        out.append(((m, n, k), res))
    return out


def _print_timeline(world, got):
    for shape, rows_ in got:
        print(f"W={world} {'x'.join(map(str, shape))}: per rank, ms (medians): start after the first rank | host: "
              "GEMM queued, each push queued, the call's end | GPU from the call's start: GEMM end, each push done")
        for r, v in enumerate(rows_):
            nh = world - 1
            print(f"  rank {r}: start +{v[0]:.3f} | host {v[1]:.3f}, pushes " +
                  ", ".join(f"{x:.3f}" for x in v[2:2 + nh]) + f", end {v[2 + nh]:.3f} | GPU GEMM {v[3 + nh]:.3f}, "
                  "pushes " + ", ".join(f"{x:.3f}" for x in v[4 + nh:]), flush=True)


if __name__ == "__main__":
    import sys

    from gemmlab.bench.distributed import spawn_ranks
    if "--interleave" in sys.argv:  # the library's call after each of the bench's other candidates
        for w in (4,):
            for shape, res in spawn_ranks(w, "nccl", interleave, [(16384, 8192, 8192), (8192, 8192, 8192)]):
                print(f"W={w} {'x'.join(map(str, shape))}: the copy all-gather, ms, after: " +
                      ", ".join(f"{k} {v:.3f}" for k, v in res.items()), flush=True)
        sys.exit(0)
    def _option(name, default):  # "--gpus 4,2", "--shapes 2048x8192x8192,..."
        return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default
    if "--timeline" in sys.argv:  # one call's steps, marked, per rank
        shapes = [tuple(int(v) for v in s.split("x"))
                  for s in _option("--shapes", "16384x8192x8192,8192x8192x8192,4096x10240x8192").split(",")]
        for w in (int(v) for v in _option("--gpus", "4,2").split(",")):
            _print_timeline(w, spawn_ranks(w, "nccl", timeline, shapes, 12, "--pieces" in sys.argv))
        sys.exit(0)
    variants = "--variants" in sys.argv  # the order of the pushes and the GEMM, and pushes on several streams
    worlds = (4,) if variants else (4, 2)
    for w in worlds:
        for r in spawn_ranks(w, "nccl", body, [(4096, 10240, 8192), (16384, 8192, 8192), (8192, 28672, 8192)],
                             variants):
            cells = " ".join(f"{kk} {v:.3f}" for kk, v in r.items() if kk not in ("shape", "world"))
            print(f"W={w} {'x'.join(map(str, r['shape']))} {cells}", flush=True)
