"""GPU correctness of calls kernel="auto" computes as C^T = B^T A^T (dispatch.computes_transposed: B given
transposed to a rung that cannot read it so, and A smaller than B): every element against float64, the
fused epilogue with both kinds of bias, beta with a C given, a new output (row-major, of the call's type),
torch and CuPy arrays, repeat calls through the remembered plan, and a caller's stream."""

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


@pytest.mark.parametrize("mnk", [(64, 1000, 777), (100, 2048, 1024), (33, 4100, 300), (128, 11008, 512)],
                         ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("activation", list(ACTS), ids=str)
@pytest.mark.parametrize("bias_mode", [None, "col", "row"], ids=str)
def test_transposed_weight_fp32_against_float64(mnk, activation, bias_mode):
    torch = _torch()
    from gemmlab import api

    torch.backends.cuda.matmul.allow_tf32 = False
    m, n, k = mnk
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    x = torch.rand(m, k, device="cuda", generator=g) * 2 - 1
    w = torch.rand(n, k, device="cuda", generator=g) * 2 - 1
    r = torch.rand(m, n, device="cuda", generator=g) * 2 - 1
    c = torch.rand(m, n, device="cuda", generator=g) * 2 - 1
    bias = None if bias_mode is None else torch.rand(n if bias_mode == "col" else m, device="cuda", generator=g)
    x64, w64, r64, c64 = (t.double().cpu().numpy() for t in (x, w, r, c))
    b64 = 0.0 if bias is None else (bias.double().cpu().numpy().reshape(1, n) if bias_mode == "col"
                                    else bias.double().cpu().numpy().reshape(m, 1))
    api.call._plans.clear()
    for _ in range(2):  # the second call replays the remembered (transposed) plan
        out = gemmlab.matmul(x, w.t(), bias=bias, activation=activation, residual=r)
        assert _plan_of_last_call().transposed
        assert out.shape == (m, n) and out.is_contiguous() and out.dtype == torch.float32
        _check(out.cpu().numpy(), ACTS[activation](x64 @ w64.T + b64) + r64, f"new output {bias_mode} {activation}")
        cc = c.clone()
        got = gemmlab.matmul(x, w.t(), cc, alpha=1.5, beta=-0.5, bias=bias, activation=activation)
        assert got is cc
        _check(cc.cpu().numpy(), ACTS[activation](1.5 * (x64 @ w64.T) - 0.5 * c64 + b64), f"beta {bias_mode} {activation}")
    assert len(api.call._plans) == 2


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
    assert _plan_of_last_call().transposed and out.flags.c_contiguous
    _check(out.get(), want, "cupy on a stream")


def test_not_transposed_where_b_is_not_larger_or_the_rung_reads_it():
    """A as large as B (square), a 16-bit product (the tensor-core rungs read B^T in place), a batch, or a
    named rung: computed as asked."""
    torch = _torch()

    cases = [(torch.float32, 512, 512, 512, "auto"), (torch.bfloat16, 64, 4096, 1024, "auto"),
             (torch.float32, 64, 4096, 1024, "sgemm")]
    for dt, m, n, k, kernel in cases:
        x = torch.randn(m, k, device="cuda", dtype=dt)
        w = torch.randn(n, k, device="cuda", dtype=dt)
        out = gemmlab.matmul(x, w.t(), kernel=kernel)
        assert not _plan_of_last_call().transposed, (dt, m, n, k, kernel)
        ref = x.double() @ w.double().t()
        assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-2
    for batch in (3, 1):  # a batch of one keeps its batch dimension: never swapped either
        xb = torch.randn(batch, 64, 256, device="cuda")
        wb = torch.randn(batch, 2048, 256, device="cuda")
        out = gemmlab.matmul(xb, wb.transpose(1, 2))
        assert not _plan_of_last_call().transposed and out.shape == (batch, 64, 2048)
        ref = xb.double() @ wb.double().transpose(1, 2)
        assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-5
