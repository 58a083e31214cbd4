"""GPU correctness of the Hopper steps (rungs 12-14: tma_wgmma, warp_specialized, persistent; sm_90a):
shapes that are not multiples of the tile (M, N and K), every tiling each spec allows, B given transposed and
read in place, the fused epilogue element by element, output types, the BLAS rule, operands TMA cannot read,
and the persistent grid walking several tiles in clusters with a block below the matrix. Skipped on GPUs
other than sm_90."""

import itertools

import numpy as np
import pytest

import gemmlab
from gemmlab.kernels import get

from test_tensor_gpu import ACTS, TOL, _host, _make, _rel, check_epilogue_elementwise, epilogue_case

pytestmark = pytest.mark.gpu
STEPS = ("tma_wgmma", "warp_specialized", "persistent")
# Edges in every direction, one k step and less, K not a multiple of 64, more tiles than SMs (2100 x 2056:
# the persistent grid's blocks walk several tiles; 17 tile rows of 128: a cluster's second block lies below
# the matrix).
SHAPES = [(1, 8, 8), (64, 128, 64), (129, 264, 72), (7, 304, 136), (300, 8, 64), (33, 72, 1000), (256, 512, 8),
          (130, 136, 4104), (2100, 2056, 200)]


def _tilings(name):
    """Every combination of the tile parameters the spec allows (its constraints decide), small rings
    included, at one GROUP_M that is not the default."""
    spec = get(name)
    choice = {p.name: p.choices for p in spec.params if p.name in ("BM", "BN", "CLUSTER")}
    out = []
    for values in itertools.product(*choice.values()):
        p = dict(zip(choice, values))
        for stages in (2, 4):
            q = {**p, "STAGES": stages, "GROUP_M": 4}
            if not spec.problems(q):
                out.append(q)
    return out


TILINGS = [(name, p) for name in STEPS for p in _tilings(name)]


@pytest.fixture(autouse=True)
def _hopper_only():
    from gemmlab.runtime import device

    arch = device.device_info().arch
    if get("tma_wgmma").target_arch(arch) is None:
        pytest.skip(f"the Hopper steps need sm_90a; this GPU is {arch}")


def test_every_step_has_tilings():
    assert {name for name, _ in TILINGS} == set(STEPS) and len(TILINGS) >= 10


@pytest.mark.parametrize("kernel", STEPS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mnk", SHAPES, ids=lambda t: "x".join(map(str, t)))
def test_shapes_against_float64(kernel, dtype, mnk, rng):
    m, n, k = mnk
    a, a64 = _make(dtype, (m, k), rng)
    b, b64 = _make(dtype, (k, n), rng)
    for out_dtype in (None, "float32"):
        out = gemmlab.matmul(a, b, kernel=kernel, out_dtype=out_dtype)
        err = _rel(_host(out), a64 @ b64)
        assert err <= TOL, f"{kernel} {dtype} -> {out_dtype} {m}x{n}x{k}: rel. error {err:.2e}"


@pytest.mark.parametrize("kernel,params", TILINGS, ids=lambda x: str(x))
def test_every_tiling(kernel, params, rng):
    for m, n, k in [(129, 264, 72), (520, 392, 712), (2100, 2056, 200)]:
        a, a64 = _make("bfloat16", (m, k), rng)
        b, b64 = _make("bfloat16", (k, n), rng)
        out = gemmlab.matmul(a, b, kernel=kernel, out_dtype="float32", **params)
        assert _rel(_host(out), a64 @ b64) <= TOL, (kernel, params, m, n, k)


@pytest.mark.parametrize("kernel,params", [(name, p) for name, p in TILINGS if p["STAGES"] == 4], ids=lambda x: str(x))
@pytest.mark.parametrize("mnk", [(129, 264, 72), (2100, 2056, 200), (300, 8, 4104)], ids=lambda t: "x".join(map(str, t)))
def test_transposed_b_is_read_in_place(kernel, params, mnk, rng):
    """B given as the transpose of an N x K weight (x @ w.t()): read K-major where it lies, nothing copied."""
    torch = pytest.importorskip("torch")
    from gemmlab import api

    m, n, k = mnk
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    ref = x.double() @ w.double().t()
    api.call._plans.clear()
    c = torch.empty(m, n, device="cuda", dtype=torch.float32)
    gemmlab.matmul(x, w.t(), c, kernel=kernel, **params)
    assert ((c.double() - ref).norm() / ref.norm()).item() <= TOL, (kernel, params)
    (plan,) = api.call._plans.values()
    assert plan.b.transposed and plan.params["B_LAYOUT"] == 2 and not plan.b.copy and plan.stage == ""


@pytest.mark.parametrize("kernel", STEPS)
@pytest.mark.parametrize("activation", list(ACTS), ids=str)
@pytest.mark.parametrize("bias_mode", [None, "row", "col"], ids=str)
def test_epilogues_against_numpy(kernel, activation, bias_mode, rng):
    """act(alpha A B + beta C + bias) + R: beta with flags takes the staged path."""
    a, b, c, res, bias, want = epilogue_case(lambda shape, r: _make("bfloat16", shape, r), 133, 72, 88, bias_mode,
                                             activation, rng)
    out = gemmlab.matmul(a, b, c, alpha=1.5, beta=-0.5, bias=bias, activation=activation, residual=res,
                         kernel=kernel)
    assert out is c and _rel(_host(c), want) <= TOL, (kernel, activation, bias_mode)


@pytest.mark.parametrize("kernel", STEPS)
@pytest.mark.parametrize("activation", list(ACTS), ids=str)
@pytest.mark.parametrize("bias_mode", [None, "row", "col"], ids=str)
def test_epilogue_element_by_element(kernel, activation, bias_mode, rng):
    """The plain and the act(alpha AB + bias) epilogues straight from the accumulators, edge blocks included
    (300 x 520: partial tiles both ways), and a C whose rows are an odd number of elements apart (the staged
    path): element by element, fp32 and bf16 out, nothing written past N."""
    check_epilogue_elementwise(rng, activation, bias_mode, kernel=kernel)


@pytest.mark.parametrize("kernel", STEPS)
def test_beta_zero_never_reads_c_and_output_types(kernel, rng):
    torch = pytest.importorskip("torch")
    a, a64 = _make("float16", (77, 48), rng)
    b, b64 = _make("float16", (48, 96), rng)
    for cdt in (torch.float16, torch.bfloat16, torch.float32):
        c = torch.full((77, 96), float("nan"), device="cuda", dtype=cdt)
        gemmlab.matmul(a, b, c, beta=0.0, alpha=2.0, kernel=kernel)
        assert _rel(_host(c), 2 * (a64 @ b64)) <= TOL, (kernel, cdt)


@pytest.mark.parametrize("kernel", STEPS)
def test_k_zero_runs_the_epilogue_only(kernel):
    import cupy as cp

    c = cp.full((40, 24), 3.0, cp.float16)
    gemmlab.matmul(cp.ones((40, 0), cp.float16), cp.ones((0, 24), cp.float16), c, beta=0.5, kernel=kernel)
    assert bool((c == 1.5).all())


@pytest.mark.parametrize("kernel", STEPS)
@pytest.mark.parametrize("mnk", [(64, 64, 63), (4095, 520, 333), (130, 37, 91)], ids=lambda t: "x".join(map(str, t)))
def test_operands_tma_cannot_read_are_staged(kernel, mnk, rng):
    """Rows of A or B that are not 16-byte aligned are copied into padded rows first."""
    import cupy as cp

    m, n, k = mnk
    a = cp.asarray(rng.uniform(-1, 1, (m, k)).astype(np.float16))
    b = cp.asarray(rng.uniform(-1, 1, (k, n)).astype(np.float16))
    ref = a.get().astype(np.float64) @ b.get().astype(np.float64)
    out = gemmlab.matmul(a, b, kernel=kernel, out_dtype="float32")
    assert _rel(_host(out), ref) <= TOL, kernel


def test_persistent_grid_is_whole_resident_clusters(rng):
    """The persistent step's grid is capped at the resident blocks in whole clusters, so its blocks walk
    several tiles (4096 x 4096: 512 tiles of 128 x 256)."""
    from gemmlab import api
    from gemmlab.runtime import device

    a, a64 = _make("bfloat16", (4096, 1024), rng)
    b, b64 = _make("bfloat16", (1024, 4096), rng)
    api.call._plans.clear()
    out = gemmlab.matmul(a, b, kernel="persistent", out_dtype="float32")
    (plan,) = api.call._plans.values()
    sms = device.device_info().sm_count
    assert plan.grid[0] <= sms and plan.grid[0] % 2 == 0 and plan.grid[0] < 512
    assert _rel(_host(out), a64 @ b64) <= TOL


@pytest.mark.parametrize("kernel", STEPS)
def test_torch_on_a_side_stream(kernel):
    """torch tensors run on torch's current stream: a product queued behind work on a side stream."""
    torch = pytest.importorskip("torch")
    s = torch.cuda.Stream()
    x = torch.randn(1000, 520, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(520, 776, device="cuda", dtype=torch.bfloat16)
    with torch.cuda.stream(s):
        x2 = x * 2  # queued on s; the product must see it
        out = gemmlab.matmul(x2, w, kernel=kernel)
    s.synchronize()
    ref = (x.double() * 2) @ w.double()
    assert ((out.double() - ref).norm() / ref.norm()).item() <= TOL
