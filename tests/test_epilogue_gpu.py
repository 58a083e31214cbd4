"""GPU correctness of the fused epilogue on the fp32 kernel (sgemm, what kernel="auto" runs for float32):
alpha / beta, bias per row and per column, every activation and a residual against a numpy float64
reference; split-K applies the epilogue once, after the reduction; beta = 0 never reads C; unaligned C and
R take the element-wise path; the repeat-call fast path stays epilogue-free.

Error measure: ||C - ref|| / ||ref|| <= 1e-5 (strict fp32 throughout).
"""


import numpy as np
import pytest

import gemmlab

from test_tensor_gpu import ACTS, _f32, _rel

pytestmark = pytest.mark.gpu
TOL = 1e-5
# Shapes across sgemm's shape classes, edges that are not multiples of 4 or of the tile, and (last two)
# problems the heuristic splits along K.
SHAPES = [(1, 1, 1), (17, 33, 65), (133, 70, 90), (300, 7, 129), (1000, 1000, 1000), (257, 129, 31),
          (64, 64, 16384), (100, 90, 20000)]


def _bias(mode, m, n, rng):
    import cupy as cp

    if mode is None:
        return None, 0.0
    vec = rng.uniform(-1, 1, m if mode == "row" else n).astype(np.float32)
    dev = cp.asarray(vec.reshape(m, 1) if mode == "row" else vec)
    return dev, vec.reshape(m, 1) if mode == "row" else vec.reshape(1, n)


def test_auto_runs_sgemm_for_fp32_epilogues():
    from gemmlab import api
    from gemmlab.runtime import device

    cc = device.device_info().compute_capability
    spec = api.choose_kernel("float32", cc, epilogue=True)
    assert spec.name == "sgemm" and spec.epilogue


@pytest.mark.parametrize("mnk", SHAPES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("activation", list(ACTS), ids=str)
def test_every_activation_with_bias_and_residual(mnk, activation, rng):
    m, n, k = mnk
    a, a64 = _f32((m, k), rng)
    b, b64 = _f32((k, n), rng)
    res, r64 = _f32((m, n), rng)
    for mode in (None, "row", "col"):
        bias, b_ref = _bias(mode, m, n, rng)
        c, c64 = _f32((m, n), rng)
        want = ACTS[activation](1.5 * (a64 @ b64) - 0.5 * c64 + b_ref) + r64
        out = gemmlab.matmul(a, b, c, alpha=1.5, beta=-0.5, bias=bias, activation=activation, residual=res)
        assert out is c
        err = _rel(c.get().astype(np.float64), want)
        assert err <= TOL, f"{m}x{n}x{k} {activation} bias={mode}: rel. error {err:.2e}"


@pytest.mark.parametrize("split,reduce,n", [(2, 1, 80), (4, 1, 80), (16, 1, 80), (4, 2, 80), (16, 2, 80), (16, 2, 81)])
def test_split_k_applies_the_epilogue_once(split, reduce, n, rng):
    """Bias, ReLU and residual per split would add the bias and residual `split` times and clip partial
    sums: the result would be far off. Once, after the fixed-order reduction, it matches and repeats bitwise
    (N = 81: C_STAGE 1)."""
    m, k = 96, 8192
    a, a64 = _f32((m, k), rng)
    b, b64 = _f32((k, n), rng)
    res, r64 = _f32((m, n), rng)
    bias, b_ref = _bias("col", m, n, rng)
    want = np.maximum(a64 @ b64 + b_ref, 0) + r64
    params = dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, SPLIT_K=split, REDUCE=reduce, C_STAGE=int(n % 4 != 0))
    first = gemmlab.matmul(a, b, kernel="sgemm", bias=bias, activation="relu", residual=res, **params)
    assert _rel(first.get().astype(np.float64), want) <= TOL
    again = gemmlab.matmul(a, b, kernel="sgemm", bias=bias, activation="relu", residual=res, **params)
    assert bool((first == again).all()), "split-K with an epilogue must be deterministic"


@pytest.mark.parametrize("b_copy,c_stage", [(16, 0), (4, 0), (4, 1)])
def test_split_tail_applies_the_epilogue_once(b_copy, c_stage, rng):
    """With a split tail (WAVE), whole tiles reach C through slab 0 and the row-by-row epilogue (with C_STAGE
    straight from their registers, a row at a time through shared memory), split ones after their reduction:
    bias (per row), GELU and residual once on both, with beta reading C."""
    m, n, k = 300, 301 if b_copy == 4 else 300, 700
    a, a64 = _f32((m, k), rng)
    b, b64 = _f32((k, n), rng)
    res, r64 = _f32((m, n), rng)
    c, c64 = _f32((m, n), rng)
    bias, b_ref = _bias("row", m, n, rng)
    want = ACTS["gelu_tanh"](0.75 * (a64 @ b64) + 0.5 * c64 + b_ref) + r64
    params = dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, SPLIT_K=4, WAVE=7, B_COPY=b_copy, C_STAGE=c_stage)
    gemmlab.matmul(a, b, c, alpha=0.75, beta=0.5, kernel="sgemm", bias=bias, activation="gelu_tanh", residual=res,
                   **params)
    assert _rel(c.get().astype(np.float64), want) <= TOL


def test_beta_zero_never_reads_c(rng):
    import cupy as cp

    for m, n, k in ((77, 99, 45), (64, 64, 16384)):
        a, a64 = _f32((m, k), rng)
        b, b64 = _f32((k, n), rng)
        bias, b_ref = _bias("row", m, n, rng)
        c = cp.full((m, n), cp.nan, cp.float32)
        gemmlab.matmul(a, b, c, alpha=2.0, beta=0.0, bias=bias, activation="silu")
        assert _rel(c.get().astype(np.float64), ACTS["silu"](2 * (a64 @ b64) + b_ref)) <= TOL


def test_unaligned_c_and_residual_take_the_element_path(rng):
    """C and R as views with odd leading dimensions and offset bases: no 8-byte pair accesses."""
    import cupy as cp

    m, n, k = 67, 45, 70
    a, a64 = _f32((m, k), rng)
    b, b64 = _f32((k, n), rng)
    big_c = cp.asarray(rng.uniform(-1, 1, (m + 1, n + 2)).astype(np.float32))
    big_r = cp.asarray(rng.uniform(-1, 1, (m + 2, n + 4)).astype(np.float32))
    c, r = big_c[1:, 1:n + 1], big_r[1:m + 1, 3:n + 3]  # ldc = 47, ldr = 49 (odd): no 8-byte pairs
    assert c.strides[0] // 4 % 2 == 1 and r.strides[0] // 4 % 2 == 1
    c64, r64 = c.get().astype(np.float64), r.get().astype(np.float64)
    bias, b_ref = _bias("col", m, n, rng)
    want = ACTS["gelu_tanh"](a64 @ b64 + 0.25 * c64 + b_ref) + r64
    gemmlab.matmul(a, b, c, beta=0.25, bias=bias, activation="gelu_tanh", residual=r)
    assert _rel(c.get().astype(np.float64), want) <= TOL


def test_torch_and_numpy_inputs(rng):
    torch = pytest.importorskip("torch")
    ha = rng.uniform(-1, 1, (50, 30)).astype(np.float32)
    hb = rng.uniform(-1, 1, (30, 20)).astype(np.float32)
    hbias = rng.uniform(-1, 1, 20).astype(np.float32)
    want = np.maximum(ha.astype(np.float64) @ hb + hbias, 0)
    out = gemmlab.matmul(ha, hb, bias=hbias, activation="relu")
    assert isinstance(out, np.ndarray) and _rel(out.astype(np.float64), want) <= TOL
    ta, tb = torch.from_numpy(ha).cuda(), torch.from_numpy(hb).cuda()
    tout = gemmlab.matmul(ta, tb, bias=torch.from_numpy(hbias).cuda(), activation="relu", out_dtype="float32")
    assert isinstance(tout, torch.Tensor) and _rel(tout.cpu().numpy().astype(np.float64), want) <= TOL


@pytest.mark.parametrize("mnk", [(128, 128, 128), (64, 64, 16384)], ids=lambda t: "x".join(map(str, t)))
def test_fast_path_and_epilogue_calls_interleave(mnk, rng):
    """Repeat calls without an epilogue take the fast plan (the kernel's epilogue arguments set to none);
    calls with one take the full path. Interleaved, each gets its own result."""
    import cupy as cp

    m, n, k = mnk
    a, a64 = _f32((m, k), rng)
    b, b64 = _f32((k, n), rng)
    bias, b_ref = _bias("col", m, n, rng)
    plain = a64 @ b64
    for _ in range(3):
        out = gemmlab.matmul(a, b)
        assert _rel(out.get().astype(np.float64), plain) <= TOL
        out = gemmlab.matmul(a, b, bias=bias, activation="relu")
        assert _rel(out.get().astype(np.float64), np.maximum(plain + b_ref, 0)) <= TOL
        c = cp.empty((m, n), cp.float32)
        gemmlab.matmul(a, b, c)
        assert _rel(c.get().astype(np.float64), plain) <= TOL
    assert any(key[1][0] == (m, k) for key in gemmlab.api.call._plans)  # the plan exists and was used
