"""GPU correctness of a B given transposed (a linear layer's weight as W.t()) in strict fp32, which rung 10
reads in place (B_LAYOUT 2: copied element by element as A is) or, at large M, copies into a row-major B
first (where the copy costs less than reading B^T in place loses), and of calls kernel="auto" computes as
C^T = B^T A^T (dispatch.computes_transposed: a rung that cannot read B^T, here rung 11 put in auto's place):
every element against float64 into a NaN-filled C where one is given, the fused epilogue with both kinds of
bias, beta with a C, a new output (row-major, of the call's type), edges of every tile, every form of the
split over K, a batch of transposed weights, torch and CuPy arrays, repeat calls through the remembered
plan, and a caller's stream."""

import numpy as np
import pytest

import gemmlab

pytestmark = pytest.mark.gpu

ACTS = {None: lambda x: x, "relu": lambda x: np.maximum(x, 0), "silu": lambda x: x / (1 + np.exp(-x))}


def _torch():
    return pytest.importorskip("torch")


def _plan_of_last_call():
    from gemmlab import api

    return list(api.call._plans.values())[-1]


def _check(out, want, what, tol=1e-5):
    out = np.asarray(out, dtype=np.float64)
    assert out.shape == want.shape, (what, out.shape, want.shape)
    assert np.isfinite(out).all(), f"{what}: non-finite elements"
    worst = np.abs(out - want).max() / max(np.abs(want).max(), 1e-30)
    assert worst <= tol, f"{what}: worst element off by {worst:.2e} of the largest"


def _operands(torch, m, n, k, dtype=None):
    g = torch.Generator(device="cuda").manual_seed(m + 3 * n + 7 * k)
    dtype = dtype or torch.float32
    return [(torch.rand(*shape, device="cuda", generator=g) * 2 - 1).to(dtype)
            for shape in ((m, k), (n, k), (m, n), (m, n))]


@pytest.mark.parametrize("mnk", [(64, 1000, 777), (100, 2048, 1024), (33, 4100, 300), (128, 11008, 512),
                                 (300, 1001, 515)], ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("activation", list(ACTS), ids=str)
@pytest.mark.parametrize("bias_mode", [None, "col", "row"], ids=str)
def test_transposed_weight_fp32_read_in_place_against_float64(mnk, activation, bias_mode):
    torch = _torch()
    from gemmlab import api

    torch.backends.cuda.matmul.allow_tf32 = False
    m, n, k = mnk
    x, w, r, c = _operands(torch, m, n, k)
    g = torch.Generator(device="cuda").manual_seed(5)
    bias = None if bias_mode is None else torch.rand(n if bias_mode == "col" else m, device="cuda", generator=g)
    x64, w64, r64, c64 = (t.double().cpu().numpy() for t in (x, w, r, c))
    b64 = 0.0 if bias is None else (bias.double().cpu().numpy().reshape(1, n) if bias_mode == "col"
                                    else bias.double().cpu().numpy().reshape(m, 1))
    api.call._plans.clear()
    for _ in range(2):  # the second call replays the remembered plan
        out = gemmlab.matmul(x, w.t(), bias=bias, activation=activation, residual=r)
        plan = _plan_of_last_call()
        assert plan.spec.name == "sgemm" and not plan.transposed and plan.params["B_LAYOUT"] == 2
        assert plan.b.transposed and not plan.b.copy and plan.stage == ""  # W itself, no copy of W^T
        assert out.shape == (m, n) and out.is_contiguous() and out.dtype == torch.float32
        _check(out.cpu().numpy(), ACTS[activation](x64 @ w64.T + b64) + r64, f"new output {bias_mode} {activation}")
        cc = c.clone()
        got = gemmlab.matmul(x, w.t(), cc, alpha=1.5, beta=-0.5, bias=bias, activation=activation)
        assert got is cc
        _check(cc.cpu().numpy(), ACTS[activation](1.5 * (x64 @ w64.T) - 0.5 * c64 + b64), f"beta {bias_mode} {activation}")
    assert len(api.call._plans) == 2


# Every tile class the heuristic picks, unsplit and in every form of the split (two slices summed in the
# kernel, a split tail, slices summed by the second kernel), on shapes with edges in M, N and K.
TILES = {"128x256": dict(BM=128, BN=256, BK=8, WM=128, WN=32, TM=16, TN=8, MIN_BLOCKS=1),
         "128x128": dict(BM=128, BN=128, BK=16, WM=64, WN=32, TM=8, TN=8, MIN_BLOCKS=2),
         "128x64": dict(BM=128, BN=64, BK=16, WM=64, WN=32, TM=8, TN=8, MIN_BLOCKS=3),
         "64x64": dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, MIN_BLOCKS=5)}
SPLITS = {"whole": {}, "split2": dict(SPLIT_K=2), "tail": dict(SPLIT_K=4, WAVE=7),
          "second": dict(SPLIT_K=8, REDUCE=2)}


@pytest.mark.parametrize("tile", list(TILES))
@pytest.mark.parametrize("split", list(SPLITS))
@pytest.mark.parametrize("mnk", [(257, 383, 1031), (128, 512, 2048), (1, 77, 333)], ids=lambda t: "x".join(map(str, t)))
def test_named_rung_10_reads_b_transposed_in_every_form(tile, split, mnk):
    """Named parameters with B^T given: every element against float64, written into a NaN-filled C (beta 0:
    never read) and into a new output; a weight that is a column slice of a wider one (its rows apart by
    more than K)."""
    torch = _torch()
    m, n, k = mnk
    x, w, _, _ = _operands(torch, m, n, k)
    wide = torch.rand(n, k + 13, device="cuda") * 2 - 1
    params = dict(TILES[tile], **SPLITS[split])
    for weight in (w, wide[:, 5:5 + k]):
        want = x.double().cpu().numpy() @ weight.double().cpu().numpy().T
        out = torch.full((m, n), float("nan"), device="cuda")
        gemmlab.matmul(x, weight.t(), out, kernel="sgemm", **params)
        plan = _plan_of_last_call()
        assert plan.params["B_LAYOUT"] == 2 and plan.b.transposed and not plan.b.copy
        _check(out.cpu().numpy(), want, f"{tile} {split} {mnk}")
        _check(gemmlab.matmul(x, weight.t(), kernel="sgemm", **params).cpu().numpy(), want, f"{tile} {split} new")


def test_a_batch_of_transposed_weights_reads_each_in_place():
    torch = _torch()
    for batch, m, n, k in ((3, 100, 300, 200), (5, 64, 128, 96)):
        xb = torch.rand(batch, m, k, device="cuda") * 2 - 1
        wb = torch.rand(batch, n, k, device="cuda") * 2 - 1
        out = gemmlab.matmul(xb, wb.transpose(1, 2))
        plan = _plan_of_last_call()
        assert plan.spec.name == "sgemm" and plan.params["B_LAYOUT"] == 2 and plan.params["BATCHED"] == 1
        want = xb.double().cpu().numpy() @ wb.double().cpu().numpy().transpose(0, 2, 1)
        _check(out.cpu().numpy(), want, f"batch {batch}")
        shared = gemmlab.matmul(xb, wb[0].t())  # one weight for the batch (x @ W.t() on B x T x K)
        _check(shared.cpu().numpy(), xb.double().cpu().numpy() @ wb[0].double().cpu().numpy().T, "shared W")


def test_transposed_cupy_and_a_stream():
    import cupy as cp

    m, n, k = 96, 3000, 640
    rng = np.random.default_rng(3)
    x = cp.asarray(rng.uniform(-1, 1, (m, k)).astype(np.float32))
    w = cp.asarray(rng.uniform(-1, 1, (n, k)).astype(np.float32))
    want = x.get().astype(np.float64) @ w.get().astype(np.float64).T
    s = cp.cuda.Stream(non_blocking=True)
    out = gemmlab.matmul(x, w.T, stream=s)
    s.synchronize()
    assert _plan_of_last_call().params["B_LAYOUT"] == 2 and out.flags.c_contiguous
    _check(out.get(), want, "cupy on a stream")


def test_computed_transposed_where_the_rung_cannot_read_b_transposed(monkeypatch):
    """Rung 11 in auto's place (the choice for 16-bit types below Hopper), which has no B_LAYOUT: the call
    runs as C^T = W x^T with W read in place, the epilogue's bias along the swapped axis, beta with a C, and
    a repeat call through the remembered plan; a square product is computed as asked."""
    torch = _torch()
    from gemmlab import api
    from gemmlab.api import dispatch
    from gemmlab.kernels import get

    monkeypatch.setattr(dispatch, "choose_kernel", lambda *a, **kw: get("mma_sync"))
    api.call._plans.clear()
    for m, n, k in ((64, 2048, 1024), (33, 1000, 520)):
        x, w, _, c = _operands(torch, m, n, k, torch.float16)
        bias = torch.rand(n, device="cuda")
        x64, w64, c64 = (t.double().cpu().numpy() for t in (x, w, c))
        for _ in range(2):
            out = gemmlab.matmul(x, w.t(), bias=bias, activation="relu")
            plan = _plan_of_last_call()
            assert plan.transposed and plan.spec.name == "mma_sync"
            assert out.shape == (m, n) and out.is_contiguous() and out.dtype == torch.float16
            _check(out.cpu().numpy(), np.maximum(x64 @ w64.T + bias.double().cpu().numpy(), 0), "swapped", 2e-3)
            cc = c.clone()
            assert gemmlab.matmul(x, w.t(), cc, alpha=2.0, beta=0.5) is cc
            _check(cc.cpu().numpy(), 2.0 * (x64 @ w64.T) + 0.5 * c64, "swapped beta", 2e-3)
    x, w, _, _ = _operands(torch, 512, 512, 512, torch.float16)
    gemmlab.matmul(x, w.t())
    assert not _plan_of_last_call().transposed


@pytest.mark.parametrize("mnk,how", [((2048, 2048, 1024), "copy"), ((2000, 3000, 4000), "copy"),
                                     ((64, 2000, 6000), "swap"), ((48, 3000, 5000), "swap")],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_where_the_model_says_so_the_transposed_weight_is_copied_or_the_product_swapped(mnk, how):
    """kernel="auto" copies W^T into a row-major B (large M) or computes C^T = W x^T (a C and an x smaller than
    W, on tiles that suit the swapped shape), as dispatch.transposed_b and explain_choice say; every element
    against float64 with the fused epilogue, beta with a C, and a repeat call."""
    torch = _torch()
    from gemmlab import api
    from gemmlab.api import dispatch
    from gemmlab.kernels import get
    from gemmlab.runtime import device

    m, n, k = mnk
    sms = device.device_info().sm_count
    assert dispatch.transposed_b(get("sgemm"), m, n, k, sms, True) == how
    x, w, r, c = _operands(torch, m, n, k)
    bias = torch.rand(n, device="cuda")
    choice = api.explain_choice("float32", shape=(m, n, k), info=device.device_info(), b_kmajor=True)
    assert choice.transposed == (how == "swap")
    prod = (x.double() @ w.double().t()).cpu().numpy()
    for _ in range(2):
        out = gemmlab.matmul(x, w.t(), bias=bias, activation="relu", residual=r)
        plan = _plan_of_last_call()
        assert plan.transposed == (how == "swap") and plan.spec.name == "sgemm"
        if how == "copy":
            assert plan.params["B_LAYOUT"] == 1 and plan.b.copy, plan.params
        want = np.maximum(prod + bias.double().cpu().numpy(), 0) + r.double().cpu().numpy()
        _check(out.cpu().numpy(), want, f"{how} {mnk}")
    cc = c.clone()
    gemmlab.matmul(x, w.t(), cc, alpha=0.5, beta=2.0)
    _check(cc.cpu().numpy(), 0.5 * prod + 2.0 * c.double().cpu().numpy(), f"{how}, beta")
