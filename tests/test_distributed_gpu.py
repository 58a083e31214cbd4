"""Tensor-parallel products on NCCL, two GPUs of one host (skipped with fewer): both products, whole shards and
in pieces, against the single-GPU gemmlab product of the gathered operands and against float64; the fused
epilogue on the full sum; the harness end to end (the Linear pair is checked on gloo, tests/test_distributed.py).
Every process has NVLink multicast off (bench.distributed.ENV). Results are rank 0's."""

import contextlib

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

WORLD = 2


@pytest.fixture(autouse=True)
def _two_gpus():
    if torch.cuda.device_count() < WORLD or not torch.distributed.is_nccl_available():
        pytest.skip(f"needs {WORLD} GPUs and NCCL")


def _products(torch, dist, rank, world, dev):
    import gemmlab
    import gemmlab.distributed as gd

    g = torch.Generator(device=dev).manual_seed(5)
    out = []
    for m, n, k in [(1024, 768, 512), (4096, 2048, 1024), (256, 136, 264)]:
        a = torch.randn(m, k, generator=g, device=dev).bfloat16()
        b = torch.randn(k, n, generator=g, device=dev).bfloat16()
        bias = torch.randn(n, generator=g, device=dev)
        rows, cols, ks = m // world, n // world, k // world
        b_cols = b[:, rank * cols:(rank + 1) * cols]
        single = gemmlab.matmul(a, b_cols, bias=bias[rank * cols:(rank + 1) * cols], activation="gelu_tanh")
        full = a.double() @ b.double() + bias.double()
        # auto (on these small shapes the sequential form), each form by name, the ring in pieces
        for chunks, transport in ((1, "auto"), (1, "copy"), (1, "sequential"), (1, "ring"), (2, "auto"), (3, "auto")):
            y, gathered = gd.all_gather_matmul(a[rank * rows:(rank + 1) * rows], b_cols,
                                               bias=bias[rank * cols:(rank + 1) * cols], activation="gelu_tanh",
                                               return_gathered=True, chunks=chunks, transport=transport)
            z = gd.matmul_reduce_scatter(a[:, rank * ks:(rank + 1) * ks].contiguous(), b[rank * ks:(rank + 1) * ks],
                                         bias=bias, activation="silu", chunks=chunks, transport=transport)
            want_z = torch.nn.functional.silu(full)[rank * rows:(rank + 1) * rows]
            out.append(dict(
                shape=(m, n, k), chunks=chunks, transport=transport, gathered=bool(torch.equal(gathered, a)),
                ag_vs_single=float((y.float() - single.float()).abs().max()),
                ag_err=float((y.double() - torch.nn.functional.gelu(full[:, rank * cols:(rank + 1) * cols],
                                                                     approximate="tanh")).norm()
                             / full.norm()),
                rs_err=float((z.double() - want_z).norm() / want_z.norm())))
    return out


def test_products_on_nccl_match_the_single_gpu_product():
    from gemmlab.bench.distributed import spawn_ranks

    for r in spawn_ranks(WORLD, "nccl", _products):
        assert r["gathered"], r
        # each shard's rows run the rung on fewer rows than the single product: the same sums up to tile order
        assert r["ag_vs_single"] <= 2e-2 and r["ag_err"] <= 1e-2 and r["rs_err"] <= 1e-2, r
        if r["transport"] == "sequential":  # the single product's very launch on the gathered A: bitwise the same
            assert r["ag_vs_single"] == 0.0, r


def _repeats(torch, dist, rank, world, dev):
    """The copy paths called again and again on one shape with new values each time (their buffers reused: each
    call's pushes must wait until every rank has read its buffer of the call before), against the ring on the
    same operands and float64: the all-gather's (the default on NCCL) and the reduce-scatter's (opt-in), each
    caller overwriting its inputs as soon as the call returns."""
    import gemmlab.distributed as gd

    g = torch.Generator(device=dev).manual_seed(11)
    m, n, k = 2048, 512, 1024
    rows = m // world
    out = []
    for i in range(5):
        a = torch.randn(m, k, generator=g, device=dev).bfloat16()
        b = torch.randn(k, n, generator=g, device=dev).bfloat16()
        shard = a[rank * rows:(rank + 1) * rows]
        full = a.double() @ b.double()
        ks = k // world  # (the reduce-scatter's slices, taken before the shard, a view of A, is overwritten)
        a_slice, b_slice = a[:, rank * ks:(rank + 1) * ks].contiguous(), b[rank * ks:(rank + 1) * ks].contiguous()
        ring = gd.all_gather_matmul(shard, b, transport="ring")
        # the sequential form keeps its buffers: every other call on a stream of its own
        side = torch.cuda.Stream(device=dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side) if i % 2 else contextlib.nullcontext():
            y_seq = gd.all_gather_matmul(shard, b, transport="sequential")
        torch.cuda.current_stream(dev).wait_stream(side)
        y, gathered = gd.all_gather_matmul(shard, b, transport="copy", return_gathered=True)
        same = torch.equal(gathered, a)
        shard.fill_(float("nan"))  # (the caller may write its shard once the call returns: the pushes are done)
        # GEMM + reduce-scatter by the copy engines (the default on NCCL), against the ring and float64, with an
        # epilogue
        bias = torch.randn(n, generator=g, device=dev)
        z = gd.matmul_reduce_scatter(a_slice, b_slice, bias=bias, activation="silu")  # (auto: the copy engines)
        z_ring = gd.matmul_reduce_scatter(a_slice, b_slice, transport="ring", bias=bias, activation="silu")
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side) if i % 2 == 0 else contextlib.nullcontext():
            z_seq = gd.matmul_reduce_scatter(a_slice, b_slice, transport="sequential", bias=bias, activation="silu")
        torch.cuda.current_stream(dev).wait_stream(side)
        want_z = torch.nn.functional.silu(full + bias.double())[rank * rows:(rank + 1) * rows]
        a_slice.fill_(float("nan"))  # (likewise: the partials have left before the call returns)
        out.append(dict(call=i, gathered=bool(same), vs_ring=float((y.float() - ring.float()).abs().max()),
                        err=float((y.double() - full).norm() / full.norm()),
                        rs_vs_ring=float((z.double() - z_ring.double()).norm() / z_ring.double().norm()),
                        rs_err=float((z.double() - want_z).norm() / want_z.norm()),
                        seq_vs_ring=float((y_seq.float() - ring.float()).abs().max()),
                        rs_seq_vs_ring=float((z_seq.double() - z_ring.double()).norm() / z_ring.double().norm())))
    return out


def test_the_copy_paths_reuse_their_buffers_call_after_call():
    from gemmlab.bench.distributed import spawn_ranks

    for r in spawn_ranks(WORLD, "nccl", _repeats):
        assert r["gathered"] and r["err"] <= 1e-2 and r["vs_ring"] <= 2e-2, r
        assert r["rs_err"] <= 1e-2 and r["rs_vs_ring"] <= 1e-2, r
        assert r["seq_vs_ring"] <= 2e-2 and r["rs_seq_vs_ring"] <= 1e-2, r  # (the sequential form's kept buffers)


def test_the_harness_runs_on_nccl():
    from gemmlab.bench import distributed as tp

    rows = tp.run(WORLD, [(2048, 1024, 1024)], backend="nccl", dtype="bfloat16", budget_ms=50, rounds=2,
                  chunks=(1, 2))
    for r in rows:
        assert r.errors["gemmlab"] <= 1e-2 and r.errors["gemmlab_2"] <= 1e-2, r.errors
        assert all(r.seconds[c] for c in ("gemmlab", "gemmlab_2", "sequential", "comm", "gemm_gemmlab")), r.seconds
        assert r.seconds["gemmlab_ring"] and r.errors["gemmlab_ring"] <= 1e-2, r  # the copy path's default, the ring beside
        assert r.predicted["busbw"] > 0
