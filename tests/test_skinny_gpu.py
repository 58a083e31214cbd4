"""GPU correctness of rung 16 (skinny, small M): every element against a float64 reference, outputs
poisoned with NaN first, for both layouts of B (row-major K x N, and B^T given as a linear layer's weight),
odd shapes, every split of K, rows of A beyond one block's MT, the fused epilogue, and kernel="auto"'s
choice of the rung by shape.

Per-element bound: |out - ref| <= u_out |ref| + 1e-5 (|A| |B|)_ij + tiny, where u_out is the output's unit
roundoff (one rounding at the store) and the second term covers fp32 accumulation in any order. A wrong
element (a misplaced fragment, a lost split) is off by about |ref| itself, hundreds of times the bound.
"""

import numpy as np
import pytest

import gemmlab

from test_tensor_gpu import ACTS

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

UNIT = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
SHAPES = [(1, 4096, 4096), (1, 1, 1), (2, 130, 70), (3, 1000, 3001), (5, 8192, 1024), (8, 4104, 520),
          (13, 777, 4097), (16, 2048, 8192), (24, 96, 33), (33, 1025, 2000), (64, 3000, 1024), (63, 64, 96)]


def _rand(shape, dtype, gen):
    return (torch.rand(shape, generator=gen, device="cuda") * 2 - 1).to(getattr(torch, dtype))


def _f64(x):
    return x.double().cpu().numpy()


def _b(k, n, layout, dtype, gen):
    """B (K x N) as the kernel's layout 1 (row-major) or 2 (the transpose of an N x K weight)."""
    if layout == 2:
        return _rand((n, k), dtype, gen).t()
    return _rand((k, n), dtype, gen)


def _check(out, ref, bound_scale, out_dtype, what):
    c = _f64(out)
    assert np.isfinite(c).all(), f"{what}: {np.count_nonzero(~np.isfinite(c))} non-finite elements"
    bound = UNIT[out_dtype] * np.abs(ref) + 1e-5 * bound_scale + 1e-30
    bad = np.abs(c - ref) > bound
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} elements off; first ({i}, {j}): {c[i, j]} "
                             f"against {ref[i, j]} (bound {bound[i, j]:.2e})")


@pytest.fixture
def gen():
    g = torch.Generator(device="cuda")
    g.manual_seed(20)
    return g


@pytest.mark.parametrize("layout", [1, 2], ids=["B row-major", "B^T given"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("mnk", SHAPES, ids=lambda t: "x".join(map(str, t)))
def test_every_element_against_float64(mnk, dtype, layout, gen):
    m, n, k = mnk
    if dtype == "float16" and m not in (1, 13, 33):
        pytest.skip("fp16 on three row counts (one per MT of the heuristic's first three); bf16 and fp32 on all")
    a, b = _rand((m, k), dtype, gen), _b(k, n, layout, dtype, gen)
    a64, b64 = _f64(a), _f64(b)
    ref, scale = a64 @ b64, np.abs(a64) @ np.abs(b64)
    for out_dtype in sorted({dtype, "float32"}):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
        gemmlab.matmul(a, b, out, kernel="skinny")
        _check(out, ref, scale, out_dtype, f"{dtype} {m}x{n}x{k} layout {layout} -> {out_dtype}")


@pytest.mark.parametrize("params", [dict(MT=8, NT=4, UNROLL=2, SPLIT=1, STAGES=2), dict(MT=8, NT=4, UNROLL=1, SPLIT=3, STAGES=6),
                                    dict(MT=8, NT=4, UNROLL=2, SPLIT=64), dict(MT=8, NT=1, WARPS=1, SPLIT=5),
                                    dict(MT=16, NT=2, WARPS=8, UNROLL=1, SPLIT=7, STAGES=3),
                                    dict(MT=64, NT=2, UNROLL=2, SPLIT=9)], ids=str)
@pytest.mark.parametrize("layout", [1, 2], ids=["B row-major", "B^T given"])
def test_parameters_and_rows_beyond_one_block(params, layout, gen):
    """Every split of K (more slices than chunks too) and M > MT (grid.z tiles of rows)."""
    for m, n, k in [(5, 300, 1000), (70, 200, 333), (129, 520, 96)]:
        a, b = _rand((m, k), "bfloat16", gen), _b(k, n, layout, "bfloat16", gen)
        a64, b64 = _f64(a), _f64(b)
        out = torch.full((m, n), float("nan"), device="cuda")
        gemmlab.matmul(a, b, out, kernel="skinny", **params)
        _check(out, a64 @ b64, np.abs(a64) @ np.abs(b64), "float32", f"{m}x{n}x{k} {params} layout {layout}")


@pytest.mark.parametrize("params", [dict(MT=8, NT=1, UNROLL=4, STAGES=4, WARPS=8, SPLIT=3),
                                    dict(MT=16, NT=4, UNROLL=1, STAGES=3, WARPS=4, SPLIT=1),
                                    dict(MT=64, NT=2, UNROLL=2, STAGES=3, WARPS=8, SPLIT=5)], ids=str)
@pytest.mark.parametrize("layout", [1, 2], ids=["B row-major", "B^T given"])
def test_fp32_on_the_cuda_cores(params, layout, gen):
    """Strict fp32 (no TF32): lanes that share a column (NT = 1), lanes with two columns (NT = 4), splits,
    rows beyond one block, the fused epilogue."""
    for m, n, k in [(3, 1000, 3001), (70, 200, 333)]:
        a, b = _rand((m, k), "float32", gen), _b(k, n, layout, "float32", gen)
        bias = torch.rand(n, generator=gen, device="cuda") - 0.5
        r = _rand((m, n), "float32", gen)
        a64, b64, bias64, r64 = _f64(a), _f64(b), _f64(bias), _f64(r)
        out = torch.full((m, n), float("nan"), device="cuda")
        gemmlab.matmul(a, b, out, bias=bias, activation="relu", residual=r, kernel="skinny", **params)
        z = a64 @ b64 + bias64[None, :]
        _check(out, np.maximum(z, 0) + r64, np.abs(a64) @ np.abs(b64) + np.abs(z) + np.abs(r64), "float32",
               f"fp32 {m}x{n}x{k} {params} layout {layout}")


@pytest.mark.parametrize("copy", [0, 1, 2, 3], ids=["cp.async", "bulk", "bulk evict-first", "bulk with A"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("layout", [1, 2], ids=["B row-major", "B^T given"])
def test_copy_paths(copy, dtype, layout, gen):
    """Both ways of filling the ring (each lane's cp.async, the copy engine's bulk copies per row) on the
    cases that change what a slot holds: groups cut short by the end of K or of a split (K a multiple of 8 but
    not of the group), N not a multiple of a warp's columns, a warp past N, several splits, rows beyond one
    block, row-major slots of 128-byte rows (NT = 4: the copy engine) and of 32-byte rows (NT = 1: cp.async
    whatever COPY says), and K with a 16-byte piece cut (the copy engine's fallback)."""
    shapes = [(1, 4104, 2056), (9, 1000, 4104), (16, 72, 6152), (3, 520, 776), (70, 136, 1000), (2, 130, 333)]
    sets = [dict(MT=8, NT=1, UNROLL=8, STAGES=4, WARPS=4), dict(MT=8, NT=1, UNROLL=8, STAGES=3, WARPS=4, SPLIT=3),
            dict(MT=16, NT=4, UNROLL=2, STAGES=3, WARPS=2, SPLIT=5), dict(MT=32, NT=2, UNROLL=4, STAGES=2, WARPS=8)]
    for (m, n, k), params in zip(shapes, sets * 2):
        if copy == 3:  # A's rows in every slot: fewer slots fit
            params = dict(params, STAGES=min(params["STAGES"], 3), WARPS=min(params["WARPS"], 4))
        a, b = _rand((m, k), dtype, gen), _b(k, n, layout, dtype, gen)
        a64, b64 = _f64(a), _f64(b)
        out = torch.full((m, n), float("nan"), device="cuda")
        gemmlab.matmul(a, b, out, kernel="skinny", COPY=copy, **params)
        _check(out, a64 @ b64, np.abs(a64) @ np.abs(b64), "float32", f"{dtype} {m}x{n}x{k} {params} COPY={copy}")


@pytest.mark.parametrize("copy", [0, 1, 3], ids=["cp.async", "bulk", "bulk with A"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("layout", [1, 2], ids=["B row-major", "B^T given"])
def test_persistent_stream_k(copy, dtype, layout, gen):
    """SCHED 1: SPLIT persistent blocks, each a run of groups that may start and end inside an item: an item
    summed from 2 or more parts (in block order), whole items, runs crossing from one item (columns, or a
    tile of rows) into the next, one block for everything, more blocks than groups (empty runs), K's short
    last group, K with a cut 16-byte piece (cp.async whatever COPY says), K = 0. Then repeat calls bit for
    bit."""
    base = dict(MT=8, NT=1, UNROLL=8, STAGES=3, WARPS=4) if layout == 2 else dict(MT=8, NT=4, UNROLL=2, STAGES=3,
                                                                                 WARPS=2)
    cases = [((1, 4104, 2056), 7), ((9, 1000, 4104), 132), ((70, 136, 1000), 5), ((3, 72, 6152), 400),
             ((16, 520, 776), 1), ((2, 130, 333), 3), ((33, 300, 520), 64), ((4, 100, 0), 3)]
    for (m, n, k), blocks in cases:
        a, b = _rand((m, k), dtype, gen), _b(k, n, layout, dtype, gen)
        a64, b64 = _f64(a), _f64(b)
        out = torch.full((m, n), float("nan"), device="cuda")
        p = dict(base, MT=8 if m < 16 else 16, COPY=copy, SCHED=1, SPLIT=blocks)
        if copy == 3 and m >= 16 and layout == 2:  # A's 16 rows in every slot: shorter slots fit
            p["UNROLL"] = 4
        gemmlab.matmul(a, b, out, kernel="skinny", **p)
        _check(out, a64 @ b64, np.abs(a64) @ np.abs(b64), "float32", f"{dtype} {m}x{n}x{k} {p}")
        again = torch.full((m, n), float("nan"), device="cuda")
        gemmlab.matmul(a, b, again, kernel="skinny", **p)
        assert torch.equal(out, again), f"{m}x{n}x{k} {p}: not repeatable"


@pytest.mark.parametrize("copy", [0, 1, 3], ids=["cp.async", "bulk", "bulk with A"])
@pytest.mark.parametrize("layout", [1, 2], ids=["B row-major", "B^T given"])
def test_a_short_last_group_reads_no_stale_weights(copy, layout, gen):
    """A slot filled by a short last group still holds the end of an earlier group of the same columns: with
    infinite weights there and A positive, the true column is +inf; a stale inf times A's zero padding would
    make it NaN."""
    m, n, k = 2, 64, 4 * 256 + 8  # groups of 256 k (64 row-major), the last of 8 in a slot used before
    a = torch.rand((m, k), generator=gen, device="cuda").to(torch.bfloat16) + 0.5
    b = _b(k, n, layout, "bfloat16", gen)
    b[: k - 8, 5] = float("inf")  # every group of column 5 but the last: the slot's tail holds inf
    out = torch.full((m, n), float("nan"), device="cuda")
    gemmlab.matmul(a, b, out, kernel="skinny", COPY=copy, MT=8, NT=4 if layout == 1 else 1, UNROLL=8 if layout == 2
                   else 2, STAGES=3, WARPS=4, SPLIT=1)
    got = out.double().cpu().numpy()
    assert np.isposinf(got[:, 5]).all(), got[:, 5]
    keep = [j for j in range(n) if j != 5]
    a64, b64 = _f64(a), _f64(b)[:, keep]
    _check(out[:, keep], a64 @ b64, np.abs(a64) @ np.abs(b64), "float32", f"COPY={copy} layout {layout}")
    # The same for A's rows (in the slot with COPY 3, in the panel otherwise): infinite A, positive weights.
    a[:, : k - 8] = float("inf")
    b = (_b(k, n, layout, "bfloat16", gen).abs() + 0.5).to(torch.bfloat16)
    out.fill_(float("nan"))
    gemmlab.matmul(a, b, out, kernel="skinny", COPY=copy, MT=8, NT=4 if layout == 1 else 1, UNROLL=8 if layout == 2
                   else 2, STAGES=3, WARPS=4, SPLIT=1)
    assert torch.isposinf(out).all(), f"COPY={copy} layout {layout}: {out}"


@pytest.mark.parametrize("act", list(ACTS), ids=str)
@pytest.mark.parametrize("layout", [1, 2], ids=["B row-major", "B^T given"])
def test_fused_epilogue(act, layout, gen):
    """act(alpha A B + beta C + bias) + residual, bias per column and per row, 16-bit and fp32 outputs."""
    m, n, k = 9, 1030, 2050
    a, b = _rand((m, k), "bfloat16", gen), _b(k, n, layout, "bfloat16", gen)
    a64, b64 = _f64(a), _f64(b)
    for out_dtype in ("bfloat16", "float32"):
        for bias_len in (n, m):
            bias = torch.rand(bias_len, generator=gen, device="cuda") - 0.5
            c = _rand((m, n), out_dtype, gen)
            r = _rand((m, n), out_dtype, gen)
            c64, r64, bias64 = _f64(c), _f64(r), _f64(bias)
            z = 0.5 * (a64 @ b64) + 0.25 * c64 + (bias64[None, :] if bias_len == n else bias64[:, None])
            ref = ACTS[act](z) + r64
            gemmlab.matmul(a, b, c, alpha=0.5, beta=0.25, bias=bias, activation=act, residual=r, kernel="skinny")
            scale = 0.5 * np.abs(a64) @ np.abs(b64) + np.abs(z) + np.abs(r64)
            _check(c, ref, 100 * scale, out_dtype, f"{act} bias[{bias_len}] -> {out_dtype}")


def test_deterministic_and_graph_captured(gen):
    """The split's partial sums are added in a fixed order: repeated calls agree bit for bit, also replayed
    from a CUDA graph (the counters left zero by every launch)."""
    m, n, k = 4, 4096, 8192
    a, b = _rand((m, k), "bfloat16", gen), _b(k, n, 2, "bfloat16", gen)
    _repeatable_and_graph_replayed(a, b, kernel="skinny", SPLIT=16)


def _repeatable_and_graph_replayed(a, b, **call):
    """gemmlab.matmul(a, b, **call) three times more, equal bit for bit to the first, then captured into a CUDA
    graph on a side stream and replayed three times into an output zeroed first: equal again. The first
    result comes back."""
    first = gemmlab.matmul(a, b, **call)
    for _ in range(3):
        assert torch.equal(gemmlab.matmul(a, b, **call), first)
    out = torch.empty_like(first)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        gemmlab.matmul(a, b, out, **call)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            gemmlab.matmul(a, b, out, **call)
    out.zero_()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, first)
    return first


def test_unaligned_operands_are_staged(gen):
    """Rows that are not 16-byte aligned (an odd K of a weight, an offset view) are copied, not misread."""
    m, n, k = 3, 500, 1001
    w = _rand((n, k), "bfloat16", gen)
    big = _rand((m, k + 1), "bfloat16", gen)
    a = big[:, 1:]
    b = w.t()
    out = gemmlab.matmul(a, b, kernel="skinny", out_dtype="float32")
    a64, b64 = _f64(a), _f64(b)
    _check(out, a64 @ b64, np.abs(a64) @ np.abs(b64), "float32", "unaligned")


def test_auto_takes_the_rung_by_shape():
    from gemmlab import api

    cc = torch.cuda.get_device_capability()
    from gemmlab.kernels.rungs import skinny

    for m in (1, skinny.MAX_M):
        assert api.explain_choice("bfloat16", shape=(m, 8192, 8192), cc=cc).spec.name == "skinny"
    assert api.explain_choice("bfloat16", shape=(skinny.MAX_M + 1, 8192, 8192), cc=cc).spec.name != "skinny"
    assert api.explain_choice("bfloat16", shape=(1, skinny.WIDE_N, 8192), cc=cc).spec.name != "skinny"
    assert api.explain_choice("float32", shape=(1, 8192, 8192), cc=cc).spec.name == "skinny"
    assert api.explain_choice("float32", shape=(skinny.MAX_M_FP32 + 1, 8192, 8192), cc=cc).spec.name != "skinny"
