"""The dispatcher's promise on fused layers, timed: a fused call (bias and activation, or a residual, in
the one kernel) is never slower than gemmlab's own plain product followed by torch's epilogue on the same
shape, across the suite's kinds of shapes (LLM up / gate and down projections with B as a linear layer's
W.t(), square, odd sizes, small M). Both are timed as a torch user calls them (a new output each call),
interleaved, the L2 flushed, medians; `SLACK` allows for the timing noise of one run (the medians of two
identical calls differ by up to about 1% here).

Marked `gpu` and `slow`: about a minute on an H100 with the kernels in the cache.
"""

import pytest

import gemmlab
from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
torch = pytest.importorskip("torch")
F = torch.nn.functional

SLACK = 1.02
# (M, N, K): up / gate projections (T x intermediate x hidden), square, odd, small M.
ACTIVATED = [(2048, 11008, 4096), (4096, 11008, 4096), (8192, 5504, 2048), (4096, 4096, 4096), (3000, 3000, 3000),
             (1000, 3001, 2000), (16, 11008, 4096), (128, 28672, 8192)]
# down projections (T x hidden x intermediate) with the residual stream added
RESIDUAL = [(2048, 4096, 11008), (4096, 4096, 11008), (8192, 2048, 5504), (16, 4096, 11008)]
TORCH_ACT = {"relu": torch.relu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "gelu_erf": F.gelu,
             "silu": F.silu}


def _time(calls):
    t = time_interleaved({k: TimedCall(v, graph=False) for k, v in calls.items()}, TimingOptions(budget_ms=40.0))
    return {k: v.median_ms for k, v in t.items()}


def _operands(m, n, k):
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    x = (torch.rand(m, k, generator=g, device="cuda") * 2 - 1).to(torch.bfloat16)
    w = (torch.rand(n, k, generator=g, device="cuda") * 2 - 1).to(torch.bfloat16)  # a linear layer's weight
    return g, x, w


@pytest.mark.parametrize("shape", ACTIVATED, ids=str)
def test_bias_and_activation_fused_never_lose_to_the_plain_product_and_torch(shape):
    m, n, k = shape
    g, x, w = _operands(m, n, k)
    bias = torch.rand(n, generator=g, device="cuda") - 0.5
    bias16 = bias.to(torch.bfloat16)
    slower = []
    for act, fn in TORCH_ACT.items():
        fused = lambda act=act: gemmlab.matmul(x, w.t(), bias=bias, activation=act)  # noqa: E731
        plain = lambda fn=fn: fn(gemmlab.matmul(x, w.t()) + bias16)  # noqa: E731
        ref = plain().float()
        torch.testing.assert_close(fused().float(), ref, rtol=3e-2, atol=3e-2)
        t = _time({"fused": fused, "plain": plain})
        if t["fused"] > SLACK * t["plain"]:
            slower.append(f"{act}: fused {t['fused'] * 1e3:.1f} us, plain + torch {t['plain'] * 1e3:.1f} us")
    assert not slower, f"{m} x {n} x {k}: " + "; ".join(slower)


@pytest.mark.parametrize("shape", RESIDUAL, ids=str)
def test_a_residual_fused_never_loses_to_the_plain_product_and_torch(shape):
    m, n, k = shape
    g, x, w = _operands(m, n, k)
    r = (torch.rand(m, n, generator=g, device="cuda") * 2 - 1).to(torch.bfloat16)
    fused = lambda: gemmlab.matmul(x, w.t(), residual=r)  # noqa: E731
    plain = lambda: gemmlab.matmul(x, w.t()) + r  # noqa: E731
    torch.testing.assert_close(fused().float(), plain().float(), rtol=3e-2, atol=3e-2)
    t = _time({"fused": fused, "plain": plain})
    assert t["fused"] <= SLACK * t["plain"], (f"{m} x {n} x {k}: fused {t['fused'] * 1e3:.1f} us, plain + torch "
                                              f"{t['plain'] * 1e3:.1f} us")
