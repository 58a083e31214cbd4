"""GPU correctness of rung 15's split over K (SPLIT_K > 1: every tile's k steps cut into slices, fp32 slabs,
added in slice order with the epilogue applied, by each tile's last unit for a few slices, else by a second
launch): every element against float64, outputs poisoned with NaN beforehand, shapes off the tile and off the
slice, more slices than k steps, every epilogue and output type, B given transposed, repeat calls and bitwise
repeatability, and the two ways of summing bit for bit. Skipped on GPUs other than sm_90."""

import numpy as np
import pytest

import gemmlab
from gemmlab.kernels import get

from test_tensor_gpu import ACTS, _host, _make, epilogue_case

pytestmark = pytest.mark.gpu
SPEC = get("wgmma")
# (M, N, K): one tile, a tile row and column past the edge, K not a multiple of the k step (64) nor of the
# slice count, M of one row, K shorter than SPLIT_K k steps (empty slices), N of one TMA-aligned column group
SHAPES = [(64, 64, 8192), (129, 264, 4104), (200, 136, 3000), (1, 8, 4096), (33, 8, 20008), (70, 128, 256)]
TILINGS = [dict(BN=128, CLUSTER=1), dict(BM=64, BN=128, SCHEDULE=2, STAGES=6, HELD=2, CLUSTER=1),
           dict(BN=256), dict(BM=256, BN=128, STAGES=3, CLUSTER=1)]


@pytest.fixture(autouse=True)
def _hopper_only():
    from gemmlab.runtime import device

    arch = device.device_info().arch
    if SPEC.target_arch(arch) is None:
        pytest.skip(f"wgmma needs sm_90a; this GPU is {arch}")


def _elementwise(out, ref, tol, what):
    """Every element within tol of the reference, relative to the reference's largest magnitude (bf16 and
    fp16 outputs round each element; the sums are fp32 over K)."""
    assert np.isfinite(out).all(), f"{what}: {np.count_nonzero(~np.isfinite(out))} elements not written or not finite"
    scale = max(np.abs(ref).max(), 1e-30)
    worst = np.abs(out - ref).max() / scale
    assert worst <= tol, f"{what}: worst element off by {worst:.2e} of the largest"


def _poisoned(torch, m, n, dtype):
    return torch.full((m, n), float("nan"), device="cuda", dtype=dtype)


@pytest.mark.parametrize("split", [2, 8, 64])
@pytest.mark.parametrize("params", TILINGS, ids=str)
@pytest.mark.parametrize("mnk", SHAPES, ids=lambda t: "x".join(map(str, t)))
def test_split_against_float64_every_element(mnk, params, split, rng):
    torch = pytest.importorskip("torch")
    m, n, k = mnk
    a, a64 = _make("bfloat16", (m, k), rng)
    b, b64 = _make("bfloat16", (k, n), rng)
    ref = a64 @ b64
    # fp32 out: the sums' rounding, which grows with the square root of K (1e-5 of the largest at K = 20008
    # measured; 2e-7 sqrt(K) is 2.8e-5 there); bf16 out: its own rounding
    for dt, tol in ((torch.float32, 2e-7 * np.sqrt(k)), (torch.bfloat16, 1e-2)):
        c = _poisoned(torch, m, n, dt)
        gemmlab.matmul(a, b, c, kernel="wgmma", SPLIT_K=split, **params)
        _elementwise(_host(c), ref, tol, f"{mnk} {params} SPLIT_K={split} -> {dt}")


@pytest.mark.parametrize("activation", list(ACTS), ids=str)
@pytest.mark.parametrize("bias_mode", [None, "row", "col"], ids=str)
def test_split_epilogues(activation, bias_mode, rng):
    """act(1.5 A B - 0.5 C + bias) + R, applied once to the summed slices (fp16 in and out)."""
    import cupy as cp

    def make(shape, rng):
        x = cp.asarray(rng.uniform(-1, 1, shape).astype(np.float16))
        return x, x.get().astype(np.float64)

    m, n, k = 130, 264, 6000
    a, b, c, res, bias, want = epilogue_case(make, m, n, k, bias_mode, activation, rng)
    gemmlab.matmul(a, b, c, alpha=1.5, beta=-0.5, bias=bias, activation=activation, residual=res, kernel="wgmma",
                   SPLIT_K=16, BN=128, CLUSTER=1)
    _elementwise(_host(c), want, 2e-3, f"{activation} {bias_mode}")


def test_split_b_transposed_and_fp16(rng):
    """B given as the transpose of an N x K weight (read K-major in place), fp16 in and out."""
    torch = pytest.importorskip("torch")
    m, n, k = 96, 200, 12296
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    w = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = _poisoned(torch, m, n, torch.float16)
    gemmlab.matmul(a, w.t(), c, kernel="wgmma", SPLIT_K=32, BN=128, CLUSTER=1)
    ref = (a.double() @ w.double().t()).cpu().numpy()
    _elementwise(c.double().cpu().numpy(), ref, 2e-3, "B^T, fp16")


def test_split_is_bitwise_repeatable_and_replays(rng):
    """The same call twice gives the same bits (slices summed in a fixed order), through the remembered
    launch on the second call; beta != 0 reads C once, in the second launch."""
    torch = pytest.importorskip("torch")
    from gemmlab import api

    m, n, k = 64, 64, 65536
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c0 = torch.randn(m, n, device="cuda", dtype=torch.float32)
    api.call._plans.clear()
    outs = []
    for _ in range(3):
        c = c0.clone()
        gemmlab.matmul(a, b, c, alpha=2.0, beta=0.5, kernel="wgmma", SPLIT_K=128, BM=64, SCHEDULE=2, STAGES=6, HELD=2,
                       CLUSTER=1, BN=128)
        outs.append(c)
    assert len(api.call._plans) == 1
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[1], outs[2])
    ref = 2.0 * (a.double() @ b.double()) + 0.5 * c0.double()
    _elementwise(outs[0].double().cpu().numpy(), ref.cpu().numpy(), 2e-7 * np.sqrt(k), "alpha, beta")


def test_split_of_empty_k_applies_beta():
    torch = pytest.importorskip("torch")
    a = torch.zeros(40, 0, device="cuda", dtype=torch.bfloat16)
    b = torch.zeros(0, 72, device="cuda", dtype=torch.bfloat16)
    c = torch.ones(40, 72, device="cuda", dtype=torch.float32)
    gemmlab.matmul(a, b, c, beta=3.0, kernel="wgmma", SPLIT_K=4, BN=128, CLUSTER=1)
    assert torch.equal(c, torch.full_like(c, 3.0))


def test_auto_splits_long_k_on_a_small_c(rng):
    """kernel="auto" on a long K over a C of one tile takes rung 15's split (the heuristic), and is right."""
    torch = pytest.importorskip("torch")
    from gemmlab import api

    m, n, k = 64, 64, 131072
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    api.call._plans.clear()
    out = gemmlab.matmul(a, b, out_dtype="float32")
    (plan,) = api.call._plans.values()
    assert plan.spec.name == "wgmma" and plan.params["SPLIT_K"] > 1, (plan.spec.name, plan.params)
    ref = (a.double() @ b.double()).cpu().numpy()
    _elementwise(out.double().cpu().numpy(), ref, 2e-7 * np.sqrt(k), "auto")


@pytest.mark.parametrize("b_transposed", [False, True])
@pytest.mark.parametrize("mnk", [(300, 8, 4104), (129, 264, 6000), (64, 64, 32768)], ids=lambda t: "x".join(map(str, t)))
def test_split_tf32_both_layouts(mnk, b_transposed):
    """tf32 splits too: B row-major (computed as C^T = B^T A^T, B_LAYOUT 3) and B^T given (B_LAYOUT 2), by
    the heuristic and with a slice count named, every element against float64 of the tf32-rounded inputs'
    tolerance (1e-3 of the largest, as the other tf32 tests)."""
    torch = pytest.importorskip("torch")
    m, n, k = mnk
    a = torch.rand(m, k, device="cuda") * 2 - 1
    b = (torch.rand(n, k, device="cuda") * 2 - 1).t() if b_transposed else torch.rand(k, n, device="cuda") * 2 - 1
    ref = (a.double() @ b.double()).cpu().numpy()
    for kw in ({}, dict(kernel="wgmma", SPLIT_K=16, BN=128, CLUSTER=1)):
        c = _poisoned(torch, m, n, torch.float32)
        gemmlab.matmul(a, b, c, precision="tf32", **kw)
        _elementwise(c.double().cpu().numpy(), ref, 1e-3, f"tf32 {mnk} {kw} B^T={b_transposed}")


def _plan_of(call):
    from gemmlab import api

    api.call._plans.clear()
    out = call()
    (plan,) = api.call._plans.values()
    return plan, out


# (M, N, K, params): 64 x 128 ping-pong tiles (the heuristic's), 128 x 128 alone and in clusters of two,
# edges off the tile, tf32 computed swapped, B given transposed, and more units than the grid has blocks;
# each within split_last_sums's bounds
PP = dict(BM=64, BN=128, SCHEDULE=2, STAGES=6, HELD=2, CLUSTER=1)
LAST_CASES = [((64, 4096, 16384), "bfloat16", dict(PP, SPLIT_K=4)),
              ((129, 264, 4104), "bfloat16", dict(BN=128, CLUSTER=1, SPLIT_K=2)),
              ((200, 520, 20008), "float16", dict(BN=128, SPLIT_K=2)),  # clusters of two
              ((1, 8, 65536), "bfloat16", dict(PP, SPLIT_K=4)),
              ((300, 8, 4104), "tf32", dict(BN=128, CLUSTER=1, SPLIT_K=2)),  # row-major B: computed swapped
              ((96, 200, 12296), "bf16_bt", dict(BN=128, CLUSTER=1, SPLIT_K=2)),
              ((1024, 1000, 8192), "bfloat16", dict(PP, SPLIT_K=4))]  # 512 units on 132 blocks


@pytest.mark.parametrize("case", range(len(LAST_CASES)), ids=lambda i: "x".join(map(str, LAST_CASES[i][0])))
def test_the_last_unit_and_the_second_launch_sum_alike(case, rng):
    """SPLIT_SUM 1 (a few slices: each tile part's last unit adds the others' sums and stores the tile; no
    second launch) and SPLIT_SUM 2 (the second launch) add the same sums in the same order: the same bits into
    fp32; with the whole epilogue (alpha, beta, bias, SiLU, residual) both right against float64, and the last
    unit's bitwise repeatable whichever unit comes last."""
    torch = pytest.importorskip("torch")
    from gemmlab.kernels.rungs import wgmma

    (m, n, k), kind, params = LAST_CASES[case]
    dt = torch.float32 if kind == "tf32" else torch.float16 if kind == "float16" else torch.bfloat16
    a = (torch.rand(m, k, device="cuda") * 2 - 1).to(dt)
    b = (torch.rand(n, k, device="cuda") * 2 - 1).to(dt).t() if kind == "bf16_bt" else \
        (torch.rand(k, n, device="cuda") * 2 - 1).to(dt)
    c0 = (torch.rand(m, n, device="cuda") * 2 - 1).to(dt)
    bias = torch.rand(n, device="cuda") * 2 - 1
    r = (torch.rand(m, n, device="cuda") * 2 - 1).to(dt)
    extra = dict(precision="tf32") if kind == "tf32" else {}
    ref = a.double() @ b.double()
    want = torch.nn.functional.silu(1.5 * ref - 0.5 * c0.double() + bias.double()) + r.double()
    sums, epilogues = {}, {}
    for how in (wgmma.SPLIT_LAST, wgmma.SPLIT_SECOND, wgmma.SPLIT_LAST):
        f = _poisoned(torch, m, n, torch.float32)
        plan, _ = _plan_of(lambda: gemmlab.matmul(a, b, f, kernel="wgmma", SPLIT_SUM=how, **params, **extra))
        assert (plan.second is None) == (how == wgmma.SPLIT_LAST), (how, plan.grid)
        c = c0.clone()
        gemmlab.matmul(a, b, c, alpha=1.5, beta=-0.5, bias=bias, activation="silu", residual=r, kernel="wgmma",
                       SPLIT_SUM=how, **params, **extra)
        if how in sums:  # the last unit's, again
            assert torch.equal(f, sums[how]) and torch.equal(c, epilogues[how]), "the last unit's sum is not repeatable"
        sums[how], epilogues[how] = f, c
    tol = 1e-3 if kind == "tf32" else 2e-7 * np.sqrt(k)
    _elementwise(_host(sums[1]), ref.cpu().numpy(), tol, f"{kind} {(m, n, k)} fp32 out")
    assert torch.equal(sums[1], sums[2]), f"{kind} {(m, n, k)}: the two sums differ"
    for how in (1, 2):
        _elementwise(_host(epilogues[how]), want.cpu().numpy(), 2e-3 if kind in ("tf32", "float16") else 1e-2,
                     f"{kind} {(m, n, k)} epilogue, SPLIT_SUM {how}")
