"""Where the time of the copy-engine all-gather + GEMM goes (gemmlab.distributed, transport "copy"), per world size
and shape, each the slowest rank's median over calls between barriers: the whole call; the plain GEMM over all
of A; the same GEMM through the launch that waits for row blocks, its flags already set (the cost of waiting and
of the rotated walk); the pushes alone; NCCL's all-gather; and the plain GEMM with the pushes running beside it
(what sharing the GPU costs each). NVLink multicast off.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=src python scripts/tp_copy_probe.py
"""

import statistics
import time


def body(torch, dist, rank, world, dev, shapes):
    import gemmlab
    import gemmlab.distributed as gd
    from gemmlab.api.call import matmul_after
    from gemmlab.api.launch import Arrivals
    from gemmlab.distributed import exchange

    res = []
    for m, n, k in shapes:
        rows, cols = m // world, n // world
        g = torch.Generator(device=dev).manual_seed(3)
        a = torch.randn(m, k, generator=g, device=dev).bfloat16()
        b = torch.randn(k, cols, generator=g, device=dev).bfloat16()
        shard = a[rank * rows:(rank + 1) * rows].contiguous()
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
                ex.slots[p].copy_(shard)

        r = dict(shape=(m, n, k), world=world)
        r["full"] = t(lambda: gd.all_gather_matmul(shard, b, transport="copy"))
        r["gemm"] = t(lambda: gemmlab.matmul(ex.rows_view, b, out))
        r["gemm_arrivals_ready"] = t(lambda: matmul_after(ex.rows_view, b, out, arrivals=Arrivals(ex.flag(rank, 0), rows, 0, world, first=rank)))
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
        res.append(r)
    return res


if __name__ == "__main__":
    from gemmlab.bench.distributed import spawn_ranks
    for w in (4, 2):
        for r in spawn_ranks(w, "nccl", body, [(4096, 10240, 8192), (16384, 8192, 8192), (8192, 28672, 8192)]):
            print("W=%d %s " % (w, "x".join(map(str, r["shape"]))) + " ".join(f"{kk} {v:.3f}" for kk, v in r.items() if kk not in ("shape", "world")), flush=True)
