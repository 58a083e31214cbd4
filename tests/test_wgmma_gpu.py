"""GPU correctness of rung 15 (wgmma, sm_90a): shapes that are not multiples of the tile, every tiling the
spec allows, the fused epilogue, output types, the BLAS rule, and the refusal of operands TMA cannot read.
Skipped on GPUs other than sm_90."""

import numpy as np
import pytest

import gemmlab
from gemmlab.kernels import get

from test_tensor_gpu import ACTS, TOL, _host, _make, _rel, check_epilogue_elementwise, epilogue_case

pytestmark = pytest.mark.gpu
SPEC = get("wgmma")
# TMA needs rows 16-byte aligned: K and N multiples of 8 (A is M x K, B is K x N, both row-major).
SHAPES = [(1, 8, 8), (64, 128, 64), (129, 264, 72), (1000, 1000, 1000), (7, 304, 136), (300, 8, 64),
          (33, 72, 1000), (256, 512, 8), (130, 136, 4104), (2048, 2048, 2048)]
TILINGS = [dict(BM=128, BN=256, STAGES=4), dict(BM=128, BN=128, STAGES=6), dict(BM=256, BN=128, STAGES=3),
           dict(BM=128, BN=128, STAGES=2, HELD=1), dict(BM=128, BN=256, STAGES=3, HELD=1, GROUP_M=1),
           dict(BM=128, BN=128, STAGES=5, SCHEDULE=2), dict(BM=128, BN=128, STAGES=3, SCHEDULE=2, HELD=2),
           dict(BM=128, BN=256, STAGES=4, CLUSTER=1), dict(BM=256, BN=128, STAGES=3, CLUSTER=1),
           dict(BM=128, BN=128, STAGES=5, SCHEDULE=2, CLUSTER=1), dict(BM=64, BN=256, STAGES=5, SCHEDULE=2, HELD=2),
           dict(BM=64, BN=256, STAGES=4, SCHEDULE=2, CLUSTER=1), dict(BM=128, BN=192, STAGES=4, CLUSTER=1),
           dict(BM=64, BN=192, STAGES=5, SCHEDULE=2, HELD=2, CLUSTER=1), dict(BM=128, BN=192, STAGES=4),
           dict(BM=64, BN=192, STAGES=5, SCHEDULE=2, HELD=2), dict(BM=64, BN=128, STAGES=6, SCHEDULE=2, HELD=2)]


@pytest.fixture(autouse=True)
def _hopper_only():
    from gemmlab.runtime import device

    arch = device.device_info().arch
    if SPEC.target_arch(arch) is None:
        pytest.skip(f"wgmma needs sm_90a; this GPU is {arch}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mnk", SHAPES, ids=lambda t: "x".join(map(str, t)))
def test_shapes_against_float64(dtype, mnk, rng):
    m, n, k = mnk
    a, a64 = _make(dtype, (m, k), rng)
    b, b64 = _make(dtype, (k, n), rng)
    for out_dtype in (None, "float32"):
        out = gemmlab.matmul(a, b, kernel="wgmma", out_dtype=out_dtype)
        err = _rel(_host(out), a64 @ b64)
        assert err <= TOL, f"{dtype} -> {out_dtype} {m}x{n}x{k}: rel. error {err:.2e}"


@pytest.mark.parametrize("params", TILINGS, ids=str)
def test_every_tiling(params, rng):
    # The last shape has more tiles than SMs for every tiling: blocks walk several tiles (and in ping-pong
    # both consumers work, in turn). The last two have odd tile-row counts: in clusters of two, one block
    # of the last cluster tiles lies below the matrix.
    for m, n, k in [(129, 264, 72), (520, 392, 712), (2100, 2056, 200)]:
        a, a64 = _make("bfloat16", (m, k), rng)
        b, b64 = _make("bfloat16", (k, n), rng)
        out = gemmlab.matmul(a, b, kernel="wgmma", out_dtype="float32", **params)
        assert _rel(_host(out), a64 @ b64) <= TOL, (params, m, n, k)


@pytest.mark.parametrize("activation", list(ACTS), ids=str)
@pytest.mark.parametrize("bias_mode", [None, "row", "col"], ids=str)
def test_epilogues_against_numpy(activation, bias_mode, rng):
    a, b, c, res, bias, want = epilogue_case(lambda shape, r: _make("bfloat16", shape, r), 133, 72, 88, bias_mode,
                                             activation, rng)
    out = gemmlab.matmul(a, b, c, alpha=1.5, beta=-0.5, bias=bias, activation=activation, residual=res,
                         kernel="wgmma")
    assert out is c and _rel(_host(c), want) <= TOL, (activation, bias_mode)


@pytest.mark.parametrize("params", [{}, dict(BM=128, BN=128, STAGES=5, SCHEDULE=2, HELD=2)], ids=str)
@pytest.mark.parametrize("activation", list(ACTS), ids=str)
@pytest.mark.parametrize("bias_mode", [None, "row", "col"], ids=str)
def test_epilogue_of_interior_blocks_element_by_element(params, activation, bias_mode, rng):
    """The plain and the act(alpha AB + bias) epilogues are written straight from the accumulators, edge
    blocks included (300 x 520: partial tiles in both directions, with either tiling); a C whose rows are
    an odd number of elements apart takes the staged path. Checked element by element, fp32 and bf16 out,
    so one misplaced column or row cannot hide in a norm."""
    check_epilogue_elementwise(rng, activation, bias_mode, kernel="wgmma", **params)


def test_beta_zero_never_reads_c_and_output_types(rng):
    torch = pytest.importorskip("torch")
    a, a64 = _make("float16", (77, 48), rng)
    b, b64 = _make("float16", (48, 96), rng)
    for cdt in (torch.float16, torch.bfloat16, torch.float32):
        c = torch.full((77, 96), float("nan"), device="cuda", dtype=cdt)
        gemmlab.matmul(a, b, c, beta=0.0, alpha=2.0, kernel="wgmma")
        assert _rel(_host(c), 2 * (a64 @ b64)) <= TOL, cdt


def test_k_zero_runs_the_epilogue_only():
    import cupy as cp

    c = cp.full((40, 24), 3.0, cp.float16)
    gemmlab.matmul(cp.ones((40, 0), cp.float16), cp.ones((0, 24), cp.float16), c, beta=0.5, kernel="wgmma")
    assert bool((c == 1.5).all())


@pytest.mark.parametrize("mnk", [(64, 64, 63), (4095, 520, 333), (130, 37, 91)], ids=lambda t: "x".join(map(str, t)))
def test_operands_tma_cannot_read_are_staged(mnk, rng):
    """Rows of A or B that are not 16-byte aligned (K or N not a multiple of 8) are copied into padded rows
    (TMA reads only aligned rows); for auto too, which no longer falls back to mma_sync for them."""
    import cupy as cp

    from gemmlab.kernels.rungs import wgmma

    m, n, k = mnk
    a = cp.asarray(rng.uniform(-1, 1, (m, k)).astype(np.float16))
    b = cp.asarray(rng.uniform(-1, 1, (k, n)).astype(np.float16))
    assert wgmma.operand_problems(a.data.ptr, k, b.data.ptr, n)
    ref = a.get().astype(np.float64) @ b.get().astype(np.float64)
    for kernel in ("wgmma", "auto"):
        out = gemmlab.matmul(a, b, kernel=kernel, out_dtype="float32")
        assert _rel(_host(out), ref) <= TOL, kernel


@pytest.mark.parametrize("mnk", [(1, 8, 8), (129, 264, 72), (1000, 1000, 1000), (300, 8, 4104), (2048, 2048, 2048)],
                         ids=lambda t: "x".join(map(str, t)))
def test_tf32_against_float64(mnk, rng):
    """precision='tf32': fp32 inputs on the tensor cores (computed as C^T = B^T A^T): error <= 1e-3, and
    above strict fp32's (so the tensor cores did run)."""
    import cupy as cp

    m, n, k = mnk
    a = cp.asarray(rng.uniform(-1, 1, (m, k)).astype(np.float32))
    b = cp.asarray(rng.uniform(-1, 1, (k, n)).astype(np.float32))
    ref = a.get().astype(np.float64) @ b.get().astype(np.float64)
    out = gemmlab.matmul(a, b, kernel="wgmma", precision="tf32")
    assert out.dtype == np.float32
    err = _rel(out.get().astype(np.float64), ref)
    assert err <= 1e-3, err
    if k >= 64:
        assert err > 1e-5, f"rel. error {err:.1e}: looks like strict fp32, not tf32"


@pytest.mark.parametrize("params", [{}, dict(BN=128, CLUSTER=1), dict(SCHEDULE=2, BN=128, STAGES=5, HELD=2),
                                    dict(BM=64, BN=128, SCHEDULE=2, STAGES=6, HELD=2, CLUSTER=1)], ids=str)
def test_tf32_row_major_b_is_computed_transposed(params, rng):
    """tf32 on a row-major B runs B_LAYOUT 3 (C^T = B^T A^T, B's fragments read into registers): right
    inside C and at its edges in both directions, with several tiles per block (4100 x 136 in tiles of C^T:
    2 x 33 or more), a cluster with a block past the edge, beta, and a 16-bit output."""
    import cupy as cp

    from gemmlab import api
    from gemmlab.runtime import device

    spec = get("wgmma")
    info = device.device_info()
    chosen = api.resolve_params(spec, 520, 300, 200, info, element="tf32", given=params)[0]
    chosen.update(api.type_params(spec, "tf32", "float32"))
    assert chosen["B_LAYOUT"] == 3
    for m, n, k in [(520, 300, 200), (129, 264, 72), (4100, 136, 520), (64, 1000, 33)]:
        a = cp.asarray(rng.uniform(-1, 1, (m, k)).astype(np.float32))
        b = cp.asarray(rng.uniform(-1, 1, (k, n)).astype(np.float32))
        c = cp.asarray(rng.uniform(-1, 1, (m, n)).astype(np.float32))
        want = 1.5 * (a.get().astype(np.float64) @ b.get()) - 0.5 * c.get()
        gemmlab.matmul(a, b, c, alpha=1.5, beta=-0.5, kernel="wgmma", precision="tf32", **params)
        assert _rel(c.get().astype(np.float64), want) <= 1e-3, (params, m, n, k)
    out = gemmlab.matmul(a, b, kernel="wgmma", precision="tf32", out_dtype="bfloat16", **params)
    assert _rel(_host(out), a.get().astype(np.float64) @ b.get()) <= TOL


@pytest.mark.parametrize("params", [{}, dict(SCHEDULE=2, BN=128, STAGES=5, HELD=2),
                                    dict(BM=64, BN=128, SCHEDULE=2, STAGES=6, HELD=2, CLUSTER=1),
                                    dict(BN=192, CLUSTER=1), dict(BN=192)], ids=str)
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16"])
def test_tma_store_epilogue_matches_the_stores_from_registers(params, out_dtype):
    """16-bit C with beta == 0 and 16-byte aligned rows is written through shared memory and TMA stores; the
    same product into a C whose rows are 4-byte but not 16-byte aligned (written straight from the registers)
    gives the same bits:
    plain, with a column or row bias and an activation, on shapes with edge tiles in both directions and
    several tiles per block. Outputs outside C are untouched."""
    torch = pytest.importorskip("torch")
    dt = getattr(torch, out_dtype)
    for m, n, k in [(520, 264, 200), (136, 1000, 72), (1500, 776, 64)]:
        a = torch.randn(m, k, device="cuda").bfloat16()
        b = torch.randn(k, n, device="cuda").bfloat16()
        for kw in ({}, dict(bias=torch.randn(n, device="cuda"), activation="gelu_tanh"),
                   dict(bias=torch.randn(m, 1, device="cuda"), activation="relu")):  # (M, 1): a bias per row
            c = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
            wide = torch.full((m, n + 2), 7.0, device="cuda", dtype=dt)  # rows n + 2 apart: not 16-byte aligned
            gemmlab.matmul(a, b, c, kernel="wgmma", **kw, **params)
            gemmlab.matmul(a, b, wide[:, :n], kernel="wgmma", **kw, **params)
            assert bool(torch.isfinite(c).all()), (m, n, k, list(kw), params)
            assert torch.equal(c, wide[:, :n]), (m, n, k, list(kw), params)
            assert bool((wide[:, n:] == 7.0).all())
        want = a.double() @ b.double()
        got = gemmlab.matmul(a, b, kernel="wgmma", out_dtype=out_dtype, **params)
        assert ((got.double() - want).norm() / want.norm()).item() <= TOL


@pytest.mark.parametrize("params", [{}, dict(SCHEDULE=2, BN=128, STAGES=5, HELD=2),
                                    dict(BM=64, BN=128, SCHEDULE=2, STAGES=6, HELD=2, CLUSTER=1)], ids=str)
def test_tf32_transposed_tma_store_matches_the_stores_from_registers(params, rng):
    """tf32 on a row-major B with fp32 C, beta == 0 and C's rows 16-byte aligned: the tile of C^T goes to C
    through shared memory (transposed there) and TMA stores; into a C whose rows are not 16-byte aligned it is
    stored from registers. The same bits either way, edges in both directions, several tiles per block, and
    C's columns outside the product untouched."""
    import cupy as cp

    for m, n, k in [(520, 264, 200), (136, 1000, 72), (1500, 776, 64)]:
        a = cp.asarray(rng.uniform(-1, 1, (m, k)).astype(np.float32))
        b = cp.asarray(rng.uniform(-1, 1, (k, n)).astype(np.float32))
        c = cp.full((m, n), cp.nan, cp.float32)
        wide = cp.full((m, n + 1), 7.0, cp.float32)
        gemmlab.matmul(a, b, c, alpha=1.5, kernel="wgmma", precision="tf32", **params)
        gemmlab.matmul(a, b, wide[:, :n], alpha=1.5, kernel="wgmma", precision="tf32", **params)
        assert bool(cp.isfinite(c).all()) and bool((c == wide[:, :n]).all()), (m, n, k, params)
        assert bool((wide[:, n] == 7.0).all())
        assert _rel(c.get().astype(np.float64), 1.5 * (a.get().astype(np.float64) @ b.get())) <= 1e-3


def test_tf32_epilogue_and_auto(rng):
    import cupy as cp

    from gemmlab import api
    from gemmlab.runtime import device

    m, n, k = 257, 136, 520
    a = cp.asarray(rng.uniform(-1, 1, (m, k)).astype(np.float32))
    b = cp.asarray(rng.uniform(-1, 1, (k, n)).astype(np.float32))
    c = cp.asarray(rng.uniform(-1, 1, (m, n)).astype(np.float32))
    bias = cp.asarray(rng.uniform(-1, 1, n).astype(np.float32))
    want = np.maximum(2.0 * (a.get().astype(np.float64) @ b.get()) + 0.5 * c.get() + bias.get(), 0)
    gemmlab.matmul(a, b, c, alpha=2.0, beta=0.5, bias=bias, activation="relu", precision="tf32", kernel="wgmma")
    assert _rel(c.get().astype(np.float64), want) <= 1e-3
    assert api.choose_kernel("float32", device.device_info().compute_capability, "tf32").name == "wgmma"


def test_repeat_calls_reuse_the_launch_and_stay_right(rng):
    """A repeat call on the same arrays reuses the last launch (new alpha / beta); new contents are read,
    and different arrays, a staging copy (strided A) or tf32's transposed B never reuse a plan."""
    torch = pytest.importorskip("torch")
    from gemmlab import api

    api.call._plans.clear()
    a = torch.randn(256, 128, device="cuda").bfloat16()
    b = torch.randn(128, 192, device="cuda").bfloat16()
    c = torch.zeros(256, 192, device="cuda")
    bias = torch.randn(192, device="cuda")
    ref = a.double() @ b.double()
    gemmlab.matmul(a, b, c, bias=bias, activation="relu")
    assert len(api.call._plans) == 1
    for alpha, beta in ((2.0, 0.0), (1.0, 0.5)):
        old = c.double().clone()
        gemmlab.matmul(a, b, c, alpha=alpha, beta=beta, bias=bias, activation="relu")
        want = torch.relu(alpha * ref + beta * old + bias.double())
        assert ((c.double() - want).norm() / want.norm()).item() <= TOL
    a.copy_(torch.randn_like(a))  # same memory, new contents
    gemmlab.matmul(a, b, c, bias=bias, activation="relu")
    want = torch.relu(a.double() @ b.double() + bias.double())
    assert ((c.double() - want).norm() / want.norm()).item() <= TOL
    assert len(api.call._plans) == 1
    wide = torch.randn(256, 512, device="cuda").bfloat16()
    gemmlab.matmul(wide[:, :128], b, c)  # rows 512 apart: read in place, so it gets a plan of its own
    assert len(api.call._plans) == 2
    at = torch.randn(128, 256, device="cuda").bfloat16().t()  # column-major A: a row-major copy per call
    gemmlab.matmul(at, b, c)
    assert len(api.call._plans) == 3 and list(api.call._plans.values())[-1].a.copy
    want = at.double() @ b.double()
    assert ((c.double() - want).norm() / want.norm()).item() <= TOL
    a32, b32, c32 = a.float(), b.float(), torch.zeros(256, 192, device="cuda")
    for _ in range(2):  # tf32 on a row-major B reads it in place (computed transposed): a plan, right on reuse
        gemmlab.matmul(a32, b32, c32, precision="tf32")
        want = a32.double() @ b32.double()
        assert ((c32.double() - want).norm() / want.norm()).item() <= 1e-3
    assert len(api.call._plans) == 4


def test_repeat_calls_on_staged_operands_refresh_the_copies(rng):
    """Rows the copy engine cannot read (K = 129, N = 193 in bf16: 258- and 386-byte rows) are staged into
    padded copies; the remembered launch refreshes them from the caller's arrays on every repeat call, so new
    contents in the same memory are read, and the repeat call skips the Python path."""
    torch = pytest.importorskip("torch")
    import time

    from gemmlab import api

    api.call._plans.clear()
    m, n, k = 1000, 193, 129
    a = torch.randn(m, k, device="cuda").bfloat16()
    b = torch.randn(k, n, device="cuda").bfloat16()
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda")
    for step in range(3):
        if step:
            a.copy_(torch.randn_like(a))  # same memory, new contents: the staged copy must follow
            b.copy_(torch.randn_like(b))
        gemmlab.matmul(a, b, c, bias=bias, activation="gelu_tanh")
        want = torch.nn.functional.gelu(a.double() @ b.double() + bias.double(), approximate="tanh")
        assert ((c.double() - want).norm() / want.norm()).item() <= TOL, step
        assert len(api.call._plans) == 1
    (plan,) = api.call._plans.values()
    assert plan.stage == "AB"  # A and B both staged, from the caller's arrays on every call
    rounds = []  # the best of five rounds: other processes sharing the host's cores slow a round, not all five
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            gemmlab.matmul(a, b, c, bias=bias, activation="gelu_tanh")
        rounds.append((time.perf_counter() - t0) / 10 * 1e6)
    torch.cuda.synchronize()
    host_us = min(rounds)
    print(f"repeat call on staged operands: {host_us:.1f} us of host time per call (rounds {rounds})")
    assert host_us < 100  # the whole Python path took about 350 us


def test_persistent_grid_is_whole_resident_clusters():
    from gemmlab import api
    from gemmlab.runtime import device

    info = device.device_info()
    for cluster in (1, 2):
        p = SPEC.validate({"CLUSTER": cluster})
        geo = SPEC.launch(4096, 4096, 4096, p)
        blocks = api.resident_blocks(SPEC, p, api.prepare(SPEC, p).kernel, geo, info.sm_count)
        assert 0 < blocks <= info.sm_count and blocks % cluster == 0, (cluster, blocks)


@pytest.mark.parametrize("cluster", [1, 2])
@pytest.mark.parametrize("precision", [None, "tf32"])
@pytest.mark.parametrize("mnk", [(129, 264, 72), (300, 8, 4104), (2100, 2056, 200)], ids=lambda t: "x".join(map(str, t)))
def test_transposed_b_is_read_in_place(precision, mnk, cluster, rng):
    """B given as the transpose of an N x K weight (column-major K x N): read K-major where it lies (no copy,
    so a repeat call gets a plan), for bf16 and tf32; mma_sync takes the same B through a copy."""
    torch = pytest.importorskip("torch")
    from gemmlab import api

    m, n, k = mnk
    dt = torch.float32 if precision == "tf32" else torch.bfloat16
    x = torch.randn(m, k, device="cuda").to(dt)
    w = torch.randn(n, k, device="cuda").to(dt)  # nn.Linear's weight layout
    ref = x.double() @ w.double().t()
    tol = 1e-3 if precision else TOL
    api.call._plans.clear()
    c = torch.empty(m, n, device="cuda", dtype=torch.float32)
    gemmlab.matmul(x, w.t(), c, kernel="wgmma", precision=precision, CLUSTER=cluster)
    assert ((c.double() - ref).norm() / ref.norm()).item() <= tol
    (plan,) = api.call._plans.values()
    assert plan.b.transposed and plan.stage == "" and not plan.b.copy  # in place: nothing was copied
    if precision is None:
        out = gemmlab.matmul(x, w.t(), kernel="mma_sync", out_dtype="float32")
        assert ((out.double() - ref).norm() / ref.norm()).item() <= tol


@pytest.mark.parametrize("cluster", [1, 2])
@pytest.mark.parametrize("mnk", [(129, 264, 72), (2100, 2056, 200), (700, 200, 4104)], ids=lambda t: "x".join(map(str, t)))
def test_192_column_tiles_on_a_transposed_b(mnk, cluster, rng):
    """BN = 192 with B given as W.t() (read K-major, 96 rows a block in clusters of two), and a batch."""
    torch = pytest.importorskip("torch")
    m, n, k = mnk
    x = torch.randn(m, k, device="cuda").bfloat16()
    w = torch.randn(n, k, device="cuda").bfloat16()
    ref = x.double() @ w.double().t()
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemmlab.matmul(x, w.t(), c, kernel="wgmma", BN=192, CLUSTER=cluster)
    err = ((c.double() - ref).norm() / ref.norm()).item()
    xs, ws = torch.stack([x, -x, 2 * x]), torch.stack([w, w, -w])
    got = gemmlab.matmul(xs, ws.transpose(1, 2), kernel="wgmma", BN=192, CLUSTER=cluster)
    want = xs.double() @ ws.double().transpose(1, 2)
    err_batch = ((got.double() - want).norm() / want.norm()).item()
    assert err <= TOL and err_batch <= TOL, (err, err_batch)


@pytest.mark.parametrize("dtype,shape", [(np.float32, (1, 1)), (np.float32, (33, 70)), (np.float16, (1000, 37)),
                                         (np.float32, (2049, 4097))], ids=str)
def test_transpose_helper(dtype, shape):
    """The tiled transpose (TF32's row-major B goes through it) on edge sizes and padded rows, bit-exact."""
    import cupy as cp

    from gemmlab.kernels.transpose import transpose_into

    rows, cols = shape
    base = cp.random.rand(rows, cols + 3).astype(dtype)
    src = base[:, :cols]  # rows cols + 3 apart
    out = cp.full((cols, rows + 5), -1, dtype)
    transpose_into(src, rows, cols, cols + 3, out, rows + 5)
    assert bool((out[:, :rows] == src.T).all()) and bool((out[:, rows:] == -1).all())


def _grid_clusters(p):
    """Clusters of this GPU's persistent grid for parameters p."""
    from gemmlab import api
    from gemmlab.runtime import device

    p = SPEC.validate(p)
    geo = SPEC.launch(4096, 4096, 4096, p)
    return api.resident_blocks(SPEC, p, api.prepare(SPEC, p).kernel, geo, device.device_info().sm_count) // p["CLUSTER"]


def _stream_k_shape(p, extra_tiles, rows_short=0, n=256, k=552):
    """(M, N, K) with extra_tiles cluster tiles along M (along N with B_LAYOUT 3, whose tiles are of C^T),
    rows_short fewer rows than whole tiles, and stream-K taken on this GPU for parameters p."""
    from gemmlab.kernels.rungs import wgmma

    p = SPEC.validate(p)
    long_side = p["BM"] * p["CLUSTER"] * extra_tiles - rows_short
    m, n = (n, long_side) if p["B_LAYOUT"] == wgmma.B_SWAPPED else (long_side, n)
    blocks = _grid_clusters(p) * p["CLUSTER"]
    assert wgmma.stream_k_tiles(m, n, k, p, blocks) > 0, (p, m, n, k, blocks)
    return m, n, k


@pytest.mark.parametrize("params", [dict(STREAM_K=1), dict(STREAM_K=1, CLUSTER=1), dict(STREAM_K=1, BN=128),
                                    dict(STREAM_K=1, BM=256, BN=128, STAGES=3), dict(STREAM_K=1, HELD=2, GROUP_M=1)],
                         ids=str)
@pytest.mark.parametrize("rounds", [2, 3])
def test_stream_k_tiles_against_float64(params, rounds, rng, monkeypatch):
    """The last rounds of tiles spread over all clusters by k steps: sums handed between clusters through
    global memory, edges in both directions (and, in clusters of two, a block below the matrix), an uneven
    last k step; every flag the launch set is zero again after it."""
    from gemmlab import api
    from gemmlab.kernels.rungs import wgmma

    monkeypatch.setattr(wgmma, "SK_MIN_ROUNDS", 1)  # stream-K on problems of two and three rounds
    monkeypatch.setattr(wgmma, "SK_MAX_PARTS", 1)  # the equal runs, not the last round in parts
    p = {**SPEC.defaults, "A_TYPE": 2, "C_TYPE": 1, **params}
    # rounds 2: a few tiles past one round, all of them in the stream-K part; 3: a whole round first
    extra = (rounds - 1) * _grid_clusters(p) + 4 + rounds
    for short, n in ((0, 256), (100, 200)):
        m, n, k = _stream_k_shape(p, extra, rows_short=short, n=n)
        a, a64 = _make("bfloat16", (m, k), rng)
        b, b64 = _make("bfloat16", (k, n), rng)
        api.call._plans.clear()
        out = gemmlab.matmul(a, b, kernel="wgmma", out_dtype="float32", **params)
        (plan,) = api.call._plans.values()
        assert plan.workspace.scalars[0] > 0 and plan.workspace.ints > 0, "stream-K was not taken"
        assert _rel(_host(out), a64 @ b64) <= TOL, (params, m, n, k)
        for slot in api.launch._scratch.values():  # every flag cleared by the block that read it
            assert int((slot[3] != 0).sum()) == 0


@pytest.mark.parametrize("case", ["bias_gelu_bf16", "beta_residual", "tf32_row_major_b", "tf32_b_transposed",
                                  "fp16_tma_store"])
def test_stream_k_with_epilogues_and_repeat_calls(case, rng, monkeypatch):
    """Stream-K under the other paths: the fused epilogue through TMA stores, beta with a residual (staged),
    tf32 computed transposed and with B^T given; each called twice on the same arrays (the second call
    replays the remembered launch, so the flags must have come back to zero)."""
    torch = pytest.importorskip("torch")
    from gemmlab import api
    from gemmlab.kernels.rungs import wgmma

    monkeypatch.setattr(wgmma, "SK_MIN_ROUNDS", 1)  # stream-K on a problem of two rounds
    monkeypatch.setattr(wgmma, "SK_MAX_PARTS", 1)  # the equal runs (the parts have their own test)
    api.call._plans.clear()
    tf32 = case.startswith("tf32")
    p = {**SPEC.defaults, "STREAM_K": 1, **({"A_TYPE": 3, "C_TYPE": 1, "B_LAYOUT": 3 if case == "tf32_row_major_b" else 2}
                                            if tf32 else {"A_TYPE": 2, "C_TYPE": 3})}
    m, n, k = _stream_k_shape(p, _grid_clusters(p) + 6, rows_short=36, k=600 if tf32 else 552)
    dt = torch.float32 if tf32 else torch.float16 if case == "fp16_tma_store" else torch.bfloat16
    a = torch.randn(m, k, device="cuda").to(dt)
    b = (torch.randn(n, k, device="cuda").to(dt).t() if case == "tf32_b_transposed"
         else torch.randn(k, n, device="cuda").to(dt))
    bias = torch.randn(n, device="cuda")
    res = torch.randn(m, n, device="cuda").to(dt)
    c = torch.randn(m, n, device="cuda").to(dt)
    ref = a.double() @ b.double()
    kw = {"precision": "tf32"} if tf32 else {}
    for _ in range(2):
        c0 = c.double().clone()
        if case == "bias_gelu_bf16":
            gemmlab.matmul(a, b, c, bias=bias, activation="gelu_tanh", kernel="wgmma", STREAM_K=1)
            want = torch.nn.functional.gelu(ref + bias.double(), approximate="tanh")
        elif case == "beta_residual":
            gemmlab.matmul(a, b, c, alpha=0.5, beta=0.25, residual=res, kernel="wgmma", STREAM_K=1)
            want = 0.5 * ref + 0.25 * c0 + res.double()
        else:
            gemmlab.matmul(a, b, c, kernel="wgmma", STREAM_K=1, **kw)
            want = ref
        err = ((c.double() - want).norm() / want.norm()).item()
        assert err <= (1e-3 if tf32 else TOL), (case, err)
    assert len(api.call._plans) == 1


@pytest.mark.parametrize("params", [dict(), dict(CLUSTER=1), dict(BN=128), dict(BM=256, BN=128, STAGES=3),
                                    dict(HELD=2, GROUP_M=1), dict(BN=192, CLUSTER=1, B_LAYOUT=2)], ids=str)
@pytest.mark.parametrize("left", [1, 5, "half"])
def test_stream_k_parts_against_float64(params, left, rng):
    """The last, partial round's tiles cut into parts by k steps (2-4 clusters each, sums handed to the
    owner in cluster order): one whole round first, then 1, 5 or half the clusters' worth of tiles; edges in
    both directions (and, in clusters of two, a block below the matrix); every element against float64,
    twice (the flags back to zero in between), and the same bits as the product without stream-K up to the
    order of the parts' sums."""
    from gemmlab import api
    from gemmlab.kernels.rungs import wgmma

    p = {**SPEC.defaults, "A_TYPE": 2, "C_TYPE": 1, "STREAM_K": 1, **params}
    clusters = _grid_clusters(p)
    r = clusters // 2 if left == "half" else left
    want_parts = min(clusters // r, wgmma.SK_MAX_PARTS)
    k = 64 * 8 * want_parts + 40  # enough k steps for every part, the last one uneven
    for short, cut in ((0, 0), (100, 56)):
        m, n = p["BM"] * p["CLUSTER"] * (clusters + r) - short, p["BN"] - cut
        a, a64 = _make("bfloat16", (m, k), rng)
        if p["B_LAYOUT"] == 2:
            bt, bt64 = _make("bfloat16", (n, k), rng)
            b, b64 = bt.T, bt64.T
        else:
            b, b64 = _make("bfloat16", (k, n), rng)
        assert wgmma.stream_k(m, n, k, p, clusters * p["CLUSTER"]) == (r, want_parts), (m, n, k)
        named = {q: v for q, v in params.items() if q != "B_LAYOUT"}  # (B's layout comes from the array)
        api.call._plans.clear()
        for _ in range(2):
            out = gemmlab.matmul(a, b, kernel="wgmma", out_dtype="float32", **named, STREAM_K=1)
            (plan,) = api.call._plans.values()
            assert plan.workspace.scalars == (r, want_parts), plan.workspace.scalars
            got = _host(out)
            assert np.isfinite(got).all() and _rel(got, a64 @ b64) <= TOL, (params, m, n, k)
            for slot in api.launch._scratch.values():
                assert int((slot[3] != 0).sum()) == 0
        plain = _host(gemmlab.matmul(a, b, kernel="wgmma", out_dtype="float32", **named, STREAM_K=0))
        assert np.abs(got - plain).max() <= 1e-4 * np.abs(plain).max()


@pytest.mark.parametrize("case", ["bias_gelu_bf16", "residual_bf16", "beta_residual", "fp8_row_scales", "tf32"])
def test_stream_k_parts_with_epilogues(case, rng):
    """The parts under the other paths, as the heuristic takes them (no parameters named): the fused
    epilogue through TMA stores, a residual added on the stores, beta with a residual (staged), 8-bit
    inputs with per-row scales (applied to each part's sums before they are added), tf32. Every element
    against float64, NaN-poisoned outputs."""
    torch = pytest.importorskip("torch")
    from gemmlab import api
    from gemmlab.kernels.rungs import wgmma

    from gemmlab.runtime import device

    sms = device.device_info().sm_count
    m, n = 2048, 5120  # 320 tiles of 128 x 256 (clusters of one at so few rounds): 2.4 rounds on 132 SMs
    k = 2048 if case != "tf32" else 1024
    p = dict(wgmma._heuristic(m, n, k, sms, "bfloat16", True))
    assert p.get("STREAM_K") == 1 and p.get("CLUSTER") == 1, p
    dev = "cuda"
    x = torch.randn(m, k, device=dev)
    w = torch.randn(n, k, device=dev)
    bias, res = torch.randn(n, device=dev), torch.randn(m, n, device=dev)
    api.call._plans.clear()
    if case == "fp8_row_scales":
        qa, sa = gemmlab.quantize(x, granularity="row")
        qw, sw = gemmlab.quantize(w, granularity="row")
        out = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)
        gemmlab.matmul(qa, qw.t(), out, scale_a=sa, scale_b=sw.reshape(1, n))
        want = (qa.double() * sa.double()) @ (qw.double() * sw.double()).t()
        tol = 1e-2
    elif case == "tf32":
        out = torch.full((m, n), float("nan"), device=dev)
        gemmlab.matmul(x, w.t(), out, precision="tf32")
        want, tol = x.double() @ w.double().t(), 1e-3
    else:
        xb, wb, rb = x.bfloat16(), w.bfloat16(), res.bfloat16()
        out = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)
        ref = xb.double() @ wb.double().t()
        if case == "bias_gelu_bf16":
            gemmlab.matmul(xb, wb.t(), out, bias=bias, activation="gelu_tanh")
            want = torch.nn.functional.gelu(ref + bias.double(), approximate="tanh")
        elif case == "residual_bf16":
            gemmlab.matmul(xb, wb.t(), out, residual=rb)
            want = ref + rb.double()
        else:
            c0 = torch.randn(m, n, device=dev).bfloat16()
            out.copy_(c0)
            gemmlab.matmul(xb, wb.t(), out, alpha=0.5, beta=0.25, residual=rb)
            want = 0.5 * ref + 0.25 * c0.double() + rb.double()
        tol = TOL
    (plan,) = api.call._plans.values()
    assert plan.workspace.scalars[1] >= 2, (case, plan.workspace.scalars)
    assert bool(torch.isfinite(out).all())
    err = ((out.double() - want).norm() / want.norm()).item()
    assert err <= tol, (case, err)


@pytest.mark.parametrize("params", [dict(), dict(BN=128, STAGES=6), dict(BM=256, BN=128, STAGES=3), dict(CLUSTER=1),
                                    dict(CLUSTER=1, STREAM_K=1)], ids=str)
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16"])
def test_deferred_stores_match_the_immediate_ones(params, out_dtype, monkeypatch):
    """DEFER 1 (a tile's TMA stores issued during the next tile's first k steps, a box after each step's
    wgmmas, its outputs held in registers) writes the same bits as DEFER 0: plain, a bias alone, and every
    activation with a column or row bias; on shapes with several tiles per block and edge tiles, with one k
    step (K = 64, 8: the stores wait for the end of the unit) and none (K = 0), with stream-K units."""
    torch = pytest.importorskip("torch")
    from gemmlab.kernels.rungs import wgmma as host

    monkeypatch.setattr(host, "SK_MIN_ROUNDS", 1)  # stream-K on a test-sized problem
    dt = getattr(torch, out_dtype)
    for m, n, k in [(2100, 4100, 136), (1500, 776, 64), (520, 264, 8), (300, 264, 0)]:
        a = torch.randn(m, k, device="cuda").bfloat16()
        b = torch.randn(k, n, device="cuda").bfloat16()
        col, row = torch.randn(n, device="cuda"), torch.randn(m, 1, device="cuda")
        for kw in ({}, dict(bias=col), dict(bias=col, activation="gelu_tanh"), dict(bias=row, activation="relu"),
                   dict(bias=col, activation="silu"), dict(bias=row, activation="gelu_erf")):
            want = gemmlab.matmul(a, b, kernel="wgmma", out_dtype=out_dtype, DEFER=0, **kw, **params)
            got = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
            gemmlab.matmul(a, b, got, kernel="wgmma", DEFER=1, **kw, **params)
            assert torch.equal(got, want), (m, n, k, list(kw), kw.get("activation"), params)


@pytest.mark.parametrize("params", [dict(), dict(CLUSTER=1, GROUP_M=4), dict(BM=128, BN=128, STAGES=5, SCHEDULE=2),
                                    dict(STREAM_K=1), dict(DEFER=0), dict(BN=128, STAGES=6)], ids=str)
def test_traced_build_matches_and_covers_every_tile(params, rng, monkeypatch):
    """The timeline build (analysis.timeline) computes what the normal build does, bit for bit, and its
    records cover every tile's k steps exactly once per block of a cluster, in a consistent order."""
    import cupy as cp

    from gemmlab.analysis import timeline
    from gemmlab.kernels.rungs import wgmma as host

    monkeypatch.setattr(host, "SK_MIN_ROUNDS", 1)  # stream-K on a test-sized problem
    m, n, k = 2100, 2056, 1000
    a, _ = _make("float16", (m, k), rng)
    b, _ = _make("float16", (k, n), rng)
    normal = gemmlab.matmul(a, b, kernel="wgmma", **params)
    c = cp.empty_like(normal)
    tl = timeline.record(a, b, c, kernel="wgmma", **params)
    assert cp.array_equal(c, normal)
    again = gemmlab.matmul(a, b, kernel="wgmma", **params)  # the normal build is back
    assert cp.array_equal(again, normal)
    p = tl.params
    k_steps = -(-k // 64)
    cluster = p["CLUSTER"]
    tiles = -(-(-(-m // p["BM"])) // cluster) * -(-n // p["BN"])
    cov = timeline.tile_coverage(tl)
    assert sorted(cov) == list(range(tiles))
    consumers = 1 if p["SCHEDULE"] == 2 else 2  # ping-pong: one consumer per tile
    for tile, ranges in cov.items():
        steps = sorted(ranges)
        assert len(steps) % (cluster * consumers) == 0, (tile, steps)
        per = sorted(set(steps))
        assert steps == sorted(per * (cluster * consumers)), (tile, steps)
        assert per[0][0] == 0 and per[-1][1] == k_steps and all(x[1] == y[0] for x, y in zip(per, per[1:])), (tile, per)
    s = timeline.summarise(tl)
    # the phases add up to the duration, up to the global timer's resolution (a microsecond on some GPUs)
    assert abs(s["accounted"] - 1.0) * s["duration_us"] < 2.5, s
    assert s["phases_cycles"]["main"] > 0 and 0.5 < s["clock_ghz"] < 3.0
    assert all(x["begin"] <= x["data"] <= x["main_end"] <= x["epilogue_end"] for x in timeline.segments(tl))


@pytest.mark.parametrize("activation", ["gelu_tanh", "silu", "gelu_erf"])
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16"])
def test_exponential_activations_within_their_stated_error(activation, out_dtype):
    """bf16 outputs take GELU and SiLU through one MUFU.TANH (error about 2^-12 |x|, a sixteenth of a bf16
    rounding at x's scale); fp16 outputs the exponential forms (about 1e-5 relative); GELU with erf, both
    16-bit types, a rational form of erf (absolute error 3e-7, so about 1.5e-7 |x|). Checked on every
    bf16 value in [-12, 12] against float64: C = A B with A's first column the values and B's first row
    ones, so the accumulator is the value exactly; both epilogues (TMA stores, and stores from registers
    where C's rows are not 16-byte aligned)."""
    torch = pytest.importorskip("torch")
    x = torch.arange(-12.0, 12.0, 1 / 64, device="cuda").bfloat16().unique()
    m, n = x.numel(), 16
    a = torch.zeros(m, 8, device="cuda", dtype=torch.bfloat16)
    a[:, 0] = x
    b = torch.zeros(8, n, device="cuda", dtype=torch.bfloat16)
    b[0] = 1
    x64 = x.double().cpu().numpy()[:, None]
    if activation == "gelu_tanh":
        want = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)))
    elif activation == "gelu_erf":
        import math

        want = 0.5 * x64 * (1 + np.vectorize(math.erf)(x64 / math.sqrt(2)))
    else:
        want = x64 / (1 + np.exp(-x64))
    dt = getattr(torch, out_dtype)
    for ld in (n, n + 2):  # 32-byte rows: TMA stores; 36-byte rows: stores from registers
        c = torch.empty(m, ld, device="cuda", dtype=dt)[:, :n]
        gemmlab.matmul(a, b, c, activation=activation, kernel="wgmma")
        got = c.double().cpu().numpy()
        if activation == "gelu_erf":  # rounding (fp16: down to its subnormal spacing) + the formula's error
            bound = (2.0 ** -8 if out_dtype == "bfloat16" else 2.0 ** -11) * np.abs(want) + 2e-6 * np.abs(x64) + 2.0 ** -25
        elif out_dtype == "bfloat16":
            bound = 2.0 ** -8 * np.abs(want) + 2.0 ** -11.5 * np.abs(x64)  # rounding + the tanh's error
        else:
            bound = 2.0 ** -11 * np.abs(want) + 1e-5 * np.abs(x64)
        excess = np.abs(got - want) - bound
        worst = np.unravel_index(excess.argmax(), excess.shape)
        assert (excess <= 0).all(), (ld, float(excess.max()), float(x64[worst[0], 0]), float(got[worst]),
                                     float(want[worst[0], 0]))


@pytest.mark.parametrize("activation", list(ACTS), ids=str)
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("params", [{}, dict(BM=128, BN=128, STAGES=5, SCHEDULE=2, HELD=2)], ids=str)
def test_residual_from_registers(activation, out_dtype, params):
    """beta = 0 with a residual (a down projection's x W^T + R): read in the epilogue from registers, every
    element against float64, output poisoned with NaN first; edge tiles in both directions, bias per column
    and per row, B given transposed (a linear layer's weight) and row-major."""
    torch = pytest.importorskip("torch")
    g = torch.Generator(device="cuda")
    g.manual_seed(3)
    dt = getattr(torch, out_dtype)
    unit = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}[out_dtype]
    for m, n, k, transposed in [(300, 264, 136, True), (129, 520, 72, False), (1000, 1000, 1000, True)]:
        x = (torch.rand(m, k, generator=g, device="cuda") * 2 - 1).bfloat16()
        w = (torch.rand(n, k, generator=g, device="cuda") * 2 - 1).bfloat16()
        b = w.t() if transposed else w.t().contiguous()
        r = (torch.rand(m, n, generator=g, device="cuda") * 2 - 1).to(dt)
        for bias_len in (n, m):
            bias = torch.rand(bias_len, generator=g, device="cuda") - 0.5
            out = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
            gemmlab.matmul(x, b, out, alpha=0.5, bias=bias, activation=activation, residual=r, kernel="wgmma",
                           **params)
            x64, b64, r64, bias64 = (v.double().cpu().numpy() for v in (x, b, r, bias))
            z = 0.5 * (x64 @ b64) + (bias64[None, :] if bias_len == n else bias64[:, None])
            ref = ACTS[activation](z) + r64
            got = out.double().cpu().numpy()
            bound = unit * np.abs(ref) + 1e-4 * (0.5 * np.abs(x64) @ np.abs(b64) + np.abs(z) + np.abs(r64))
            bad = ~(np.abs(got - ref) <= bound)
            assert not bad.any(), (f"{activation} {out_dtype} {m}x{n}x{k} bias[{bias_len}] {params}: "
                                   f"{bad.sum()} elements off, first at {np.argwhere(bad)[0]}")


# What kernel="auto" picks on 132 SMs (the H100, the H200), by rule of wgmma._tiling and narrow_tiles_pay.
AUTO_TILES = [((3000, 3000, 3000), dict(BM=128, BN=192, CLUSTER=2, SCHEDULE=1)),   # 192 columns, clusters
              ((3072, 3072, 8192), dict(BM=128, BN=192, CLUSTER=1, SCHEDULE=1)),   # the same in whole lines
              ((1000, 1000, 1000), dict(BM=64, BN=128, CLUSTER=2, SCHEDULE=2)),    # small C across lines
              ((2048, 2048, 512), dict(BM=64, BN=256, CLUSTER=1, SCHEDULE=2)),     # short K, one wave
              ((4096, 4096, 1024), dict(BM=128, BN=256, CLUSTER=1, SCHEDULE=1))]   # short K in whole lines


@pytest.mark.parametrize("mnk,tiles", AUTO_TILES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else "")
def test_auto_tiles_by_shape_element_by_element(mnk, tiles):
    """kernel="auto" on these shapes runs the tiles its rules name (on 132 SMs), and every element of the
    product into a NaN-poisoned fp32 C is within fp32 accumulation's bound of the float64 product (2 K u
    |A||B|, u = 2^-24, for any order of the sums); the 16-bit output matches it within its rounding."""
    torch = pytest.importorskip("torch")
    from gemmlab import api
    from gemmlab.runtime import device

    m, n, k = mnk
    info = device.device_info()
    choice = api.explain_choice("bfloat16", shape=mnk, info=info)
    if info.sm_count == 132 and choice.params_source == "heuristic":
        assert choice.spec.name == "wgmma" and {p: choice.params[p] for p in tiles} == tiles, choice.params
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    b = torch.randn(k, n, device="cuda", generator=g).bfloat16()
    c = torch.full((m, n), float("nan"), device="cuda")
    gemmlab.matmul(a, b, c)
    ref = a.double() @ b.double()
    bound = 2 * k * 2.0**-24 * (a.double().abs() @ b.double().abs()) + 1e-30
    assert torch.isfinite(c).all() and ((c.double() - ref).abs() <= bound).all(), (mnk, choice.params)
    out = gemmlab.matmul(a, b)  # bf16 out: the TMA-store epilogue of these tiles
    near = (out.double() - ref).abs() <= 2.0**-8 * ref.abs() + 2 * bound  # bf16 rounding of a value within bound
    assert out.dtype == torch.bfloat16 and near.all(), (mnk, choice.params)


# 64-column tiles (BN = 64: one 128-byte chunk of B per k step): ping-pong and cooperative, alone and in clusters,
# a deep ring, and split over K (the last unit's sum and the second launch).
NARROW = [dict(BM=64, BN=64, SCHEDULE=2, HELD=2, STAGES=8, CLUSTER=1),
          dict(BM=64, BN=64, SCHEDULE=2, HELD=2, STAGES=12, CLUSTER=2),
          dict(BM=128, BN=64, STAGES=8, CLUSTER=1), dict(BM=128, BN=64, STAGES=6, CLUSTER=2),
          dict(BM=64, BN=64, SCHEDULE=2, HELD=2, STAGES=8, CLUSTER=1, SPLIT_K=2),
          dict(BM=128, BN=64, STAGES=8, CLUSTER=1, SPLIT_K=8),
          dict(BM=64, BN=64, SCHEDULE=2, HELD=2, STAGES=8, CLUSTER=1, SPLIT_K=16)]


@pytest.mark.parametrize("params", NARROW, ids=str)
def test_narrow_tiles_every_element(params, rng):
    """Every element against float64, outputs poisoned with NaN first: both layouts of B, bf16 and fp32 out, a
    column bias with SiLU and a residual, on shapes off the tile (one row; many tiles per block; K off the k
    step)."""
    torch = pytest.importorskip("torch")
    for m, n, k in [(1, 72, 4104), (65, 200, 1000), (130, 4104, 264), (300, 520, 2056)]:
        a, a64 = _make("bfloat16", (m, k), rng)
        w, w64 = _make("bfloat16", (n, k), rng)
        bias = torch.from_numpy(rng.uniform(-1, 1, n).astype(np.float32)).cuda()
        res, r64 = _make("bfloat16", (m, n), rng)
        aa, ww, rr = (torch.as_tensor(x, device="cuda") for x in (a, w, res))
        for b, what in ((ww.t(), "W.t()"), (ww.t().contiguous(), "K x N")):
            for dt in (torch.bfloat16, torch.float32):
                c = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
                gemmlab.matmul(aa, b, c, kernel="wgmma", **params)
                got = c.double().cpu().numpy()
                ref = a64 @ w64.T
                assert np.isfinite(got).all(), (params, m, n, k, what, dt)
                assert np.abs(got - ref).max() / np.abs(ref).max() <= 1e-2, (params, m, n, k, what, dt)
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            gemmlab.matmul(aa, b, c, bias=bias, activation="silu", residual=rr, kernel="wgmma", **params)
            z = a64 @ w64.T + bias.double().cpu().numpy()
            ref = z / (1 + np.exp(-z)) + r64
            got = c.double().cpu().numpy()
            assert np.isfinite(got).all() and np.abs(got - ref).max() / np.abs(ref).max() <= 1e-2, (params, m, n, k)


@pytest.mark.parametrize("mnk", [(64, 4096, 4096), (40, 2048, 4096), (128, 1000, 8200)], ids=str)
def test_auto_takes_narrow_tiles_on_small_m(mnk, rng):
    """kernel="auto" on an M <= 128 product whose 64 x 128 tiles would be split runs 64 x 64 tiles (unsplit, or
    split in two), and every element is right: B given as W.t() and row-major, NaN-poisoned output."""
    torch = pytest.importorskip("torch")
    from gemmlab import api

    m, n, k = mnk
    a, a64 = _make("bfloat16", (m, k), rng)
    w, w64 = _make("bfloat16", (n, k), rng)
    aa, ww = torch.as_tensor(a, device="cuda"), torch.as_tensor(w, device="cuda")
    for b in (ww.t(), ww.t().contiguous()):
        api.call._plans.clear()
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        gemmlab.matmul(aa, b, c)
        (plan,) = api.call._plans.values()
        assert plan.spec.name == "wgmma" and plan.params["BN"] == 64, plan.params
        got, ref = c.double().cpu().numpy(), a64 @ w64.T
        assert np.isfinite(got).all() and np.abs(got - ref).max() / np.abs(ref).max() <= 1e-5, (mnk, plan.params)


@pytest.mark.parametrize("params", [dict(), dict(DEFER=0), dict(BM=64, BN=256, STAGES=4, SCHEDULE=2, HELD=2, CLUSTER=1),
                                    dict(BM=128, BN=128, STAGES=5, SCHEDULE=2),
                                    dict(BM=256, BN=128, STAGES=3, DEFER=0)],
                         ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "defaults")
@pytest.mark.parametrize("alpha", [1.0, -0.75])
@pytest.mark.parametrize("form", ["plain", "bias_gelu", "residual"])
def test_tma_store_epilogue_forms_every_element(params, alpha, form, rng):
    """The copy engine's epilogue (16-bit C, beta == 0) compiles a form per case: with or without a residual,
    alpha 1 (no multiply) or not, each schedule's stores (deferred, box by box, ping-pong). Edge tiles both ways
    (300 x 520), every element against float64, C filled with NaN first."""
    torch = pytest.importorskip("torch")
    m, n, k = 300, 520, 200
    a, a64 = _make("bfloat16", (m, k), rng)
    b, b64 = _make("bfloat16", (k, n), rng)
    kw, want = {}, alpha * (a64 @ b64)
    if form == "bias_gelu":
        vec = rng.uniform(-1, 1, n).astype(np.float32)
        kw = dict(bias=torch.tensor(vec, device="cuda"), activation="gelu_tanh")
        want = ACTS["gelu_tanh"](want + vec.astype(np.float64))
    elif form == "residual":
        r, r64 = _make("bfloat16", (m, n), rng)
        kw, want = dict(residual=r), want + r64
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemmlab.matmul(a, b, c, alpha=alpha, kernel="wgmma", **kw, **params)
    got = _host(c)
    bad = ~(np.abs(got - want) <= 1e-2 * (np.abs(want) + np.abs(want).max()))  # (NaN counts as bad)
    assert not bad.any(), (params, alpha, form, np.argwhere(bad)[:5])
