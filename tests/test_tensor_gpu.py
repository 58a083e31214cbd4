"""GPU correctness of the tensor-core rung (mma_sync): fp16 and bf16 inputs against a float64 reference,
every fused epilogue against a numpy reference, and the BLAS rule (beta = 0 never reads C); then TF32 (fp32
inputs with precision="tf32") the same way.

bf16 arrays come from torch (CuPy has no bfloat16 everywhere); fp16 from CuPy. Error measure:
||C - ref|| / ||ref|| <= 1e-2 (inputs rounded to 16 bits, fp32 accumulation, 16-bit outputs rounded once);
TF32 with fp32 output: <= 1e-3 up to K = 8192 (inputs rounded to 10-bit mantissas, fp32 accumulation).
"""

import math

import numpy as np
import pytest

import gemmlab

pytestmark = pytest.mark.gpu
TOL = 1e-2
SHAPES = [(1, 1, 1), (17, 17, 17), (129, 129, 129), (1000, 1000, 1000), (7, 300, 129), (300, 7, 65),
          (33, 65, 1000), (1000, 17, 31), (256, 96, 513), (129, 257, 1), (256, 256, 256)]
ACTS = {
    None: lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "gelu_erf": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
    "silu": lambda x: x / (1 + np.exp(-x)),
}


def _torch():
    return pytest.importorskip("torch")


def _make(dtype, shape, rng):
    """(device array of `dtype`, its exact float64 values on the host)."""
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    if dtype == "float16":
        import cupy as cp

        d = cp.asarray(x.astype(np.float16))
        return d, d.get().astype(np.float64)
    torch = _torch()
    d = torch.from_numpy(x).cuda().to(getattr(torch, dtype))
    return d, d.float().cpu().numpy().astype(np.float64)


def _host(x):
    if type(x).__module__.startswith("torch"):
        return x.float().cpu().numpy().astype(np.float64)
    return x.get().astype(np.float64)


def _rel(c, ref):
    assert np.isfinite(c).all(), f"{np.count_nonzero(~np.isfinite(c))} non-finite elements"
    den = np.linalg.norm(ref)
    return np.linalg.norm(c - ref) / den if den else np.linalg.norm(c)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mnk", SHAPES, ids=lambda t: "x".join(map(str, t)))
def test_shape_suite_against_float64(dtype, mnk, rng):
    m, n, k = mnk
    a, a64 = _make(dtype, (m, k), rng)
    b, b64 = _make(dtype, (k, n), rng)
    ref = a64 @ b64
    for out_dtype in (None, "float32"):
        out = gemmlab.matmul(a, b, out_dtype=out_dtype)
        assert type(out) is type(a) and tuple(out.shape) == (m, n)
        err = _rel(_host(out), ref)
        assert err <= TOL, f"{dtype} -> {out_dtype} {m}x{n}x{k}: rel. error {err:.2e}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("params", [dict(BM=64, BN=64, WM=32, WN=32, STAGES=2), dict(BM=128, BN=256, WM=64, WN=64, STAGES=3),
                                    dict(BM=64, BN=128, BK=16, WM=32, WN=64, STAGES=4)], ids=str)
def test_other_tiles(dtype, params, rng):
    for m, n, k in [(129, 67, 33), (300, 520, 200)]:
        a, a64 = _make(dtype, (m, k), rng)
        b, b64 = _make(dtype, (k, n), rng)
        out = gemmlab.matmul(a, b, kernel="mma_sync", out_dtype="float32", **params)
        assert _rel(_host(out), a64 @ b64) <= TOL



def check_epilogue_elementwise(rng, activation, bias_mode, **call):
    """act(1.5 A B + bias) straight from the accumulators at 300 x 520 x 200 (partial tiles both ways), fp32 and
    bf16 out, then into a C whose rows are 521 apart (no pairs: the staged path), element by element against
    float64 (one misplaced row or column cannot hide in a norm), nothing written past N. `call`: the kernel and
    its parameters."""
    import cupy as cp

    torch = _torch()
    m, n, k = 300, 520, 200
    a, a64 = _make("bfloat16", (m, k), rng)
    b, b64 = _make("bfloat16", (k, n), rng)
    bias, b_ref = None, 0.0
    if bias_mode:
        vec = rng.uniform(-1, 1, m if bias_mode == "row" else n).astype(np.float32)
        bias = cp.asarray(vec)
        b_ref = vec.astype(np.float64).reshape(m, 1) if bias_mode == "row" else vec.astype(np.float64)
    want = ACTS[activation](1.5 * (a64 @ b64) + b_ref)
    for out_dtype, tol in (("float32", 1e-4), ("bfloat16", 1e-2)):
        out = _host(gemmlab.matmul(a, b, alpha=1.5, bias=bias, activation=activation, out_dtype=out_dtype, **call))
        bad = np.abs(out - want) > tol * (np.abs(want) + np.abs(want).max())
        assert not bad.any(), (call, out_dtype, np.argwhere(bad)[:5])
    wide = torch.full((m, n + 1), float("nan"), device="cuda")
    gemmlab.matmul(a, b, wide[:, :n], alpha=1.5, bias=bias, activation=activation, **call)
    got = _host(wide)
    assert np.isnan(got[:, n]).all()  # nothing written past N
    bad = np.abs(got[:, :n] - want) > 1e-4 * (np.abs(want) + np.abs(want).max())
    assert not bad.any(), (call, "odd ldc", np.argwhere(bad)[:5])

def epilogue_case(make, m, n, k, bias_mode, activation, rng):
    """An epilogue test's operands and the float64 reference of act(1.5 A B - 0.5 C + bias) + R:
    (a, b, c, residual, bias, want). make(shape, rng) -> (device array, its float64 values)."""
    import cupy as cp

    a, a64 = make((m, k), rng)
    b, b64 = make((k, n), rng)
    c, c64 = make((m, n), rng)
    res, r64 = make((m, n), rng)
    bias, b_ref = None, 0.0
    if bias_mode:
        vec = rng.uniform(-1, 1, m if bias_mode == "row" else n).astype(np.float32)
        bias = cp.asarray(vec.reshape(m, 1) if bias_mode == "row" else vec)
        b_ref = vec.reshape(m, 1) if bias_mode == "row" else vec.reshape(1, n)
    return a, b, c, res, bias, ACTS[activation](1.5 * (a64 @ b64) - 0.5 * c64 + b_ref) + r64


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("activation", list(ACTS), ids=str)
@pytest.mark.parametrize("bias_mode", [None, "row", "col"], ids=str)
def test_epilogues_against_numpy(dtype, activation, bias_mode, rng):
    a, b, c, res, bias, want = epilogue_case(lambda shape, r: _make(dtype, shape, r), 133, 70, 90, bias_mode,
                                             activation, rng)
    out = gemmlab.matmul(a, b, c, alpha=1.5, beta=-0.5, bias=bias, activation=activation, residual=res)
    assert out is c
    assert _rel(_host(c), want) <= TOL, (dtype, activation, bias_mode)


def test_output_dtypes_and_fp32_c(rng):
    torch = _torch()
    a, a64 = _make("bfloat16", (65, 40), rng)
    b, b64 = _make("bfloat16", (40, 33), rng)
    for od, td in (("float16", torch.float16), ("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        out = gemmlab.matmul(a, b, out_dtype=od)
        assert out.dtype == td and _rel(_host(out), a64 @ b64) <= TOL
    c = torch.full((65, 33), 2.0, device="cuda")
    gemmlab.matmul(a, b, c, beta=1.0)  # fp32 C: the output dtype follows C
    assert _rel(_host(c), a64 @ b64 + 2.0) <= TOL


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_beta_zero_never_reads_c(dtype, rng):
    torch = _torch()
    a, a64 = _make(dtype, (77, 45), rng)
    b, b64 = _make(dtype, (45, 99), rng)
    for cdt in (getattr(torch, dtype), torch.float32):
        c = torch.full((77, 99), float("nan"), device="cuda", dtype=cdt)
        gemmlab.matmul(a, b, c, beta=0.0, alpha=2.0)
        assert _rel(_host(c), 2 * (a64 @ b64)) <= TOL


@pytest.mark.parametrize("kernel", ["auto", "mma_sync"])
def test_unaligned_operands(kernel, rng):
    """Rows not 16-byte aligned (odd leading dimension, offset base): mma_sync's element-wise loader, or
    (auto on Hopper) wgmma on row-padded copies."""
    import cupy as cp

    big = cp.asarray(rng.uniform(-1, 1, (300, 301)).astype(np.float16))
    a, b = big[1:130, 3:70], big[100:167, 1:91]  # lda = ldb = 301, bases off 16 bytes
    out = gemmlab.matmul(a, b, out_dtype="float32", kernel=kernel)
    assert _rel(_host(out), a.get().astype(np.float64) @ b.get().astype(np.float64)) <= TOL


def test_auto_dispatch_by_dtype(rng):
    import cupy as cp

    from gemmlab import api
    from gemmlab.runtime import device

    cc = device.device_info().compute_capability
    # wgmma where the exact sm_90a target exists (Hopper), mma_sync on the other tensor-core GPUs.
    assert api.choose_kernel("float16", cc).name == ("wgmma" if cc == (9, 0) else "mma_sync")
    a = cp.asarray(rng.uniform(-1, 1, (64, 64)).astype(np.float32))
    out = gemmlab.matmul(a, a)  # fp32 stays on the strict fp32 ladder
    assert out.dtype == np.float32
    assert _rel(out.get().astype(np.float64), a.get().astype(np.float64) @ a.get()) < 1e-5


def test_fast_path_does_not_swallow_epilogue_arguments(rng):
    """A repeat fp32 call has a fast plan; the same shapes with an epilogue argument must not reuse it,
    and a named fp32 rung without an epilogue refuses one."""
    import cupy as cp

    a = cp.asarray(rng.uniform(-1, 1, (64, 64)).astype(np.float32))
    plain = a.get().astype(np.float64) @ a.get().astype(np.float64)
    for _ in range(3):
        gemmlab.matmul(a, a)
    out = gemmlab.matmul(a, a, bias=cp.ones(64, cp.float32))
    assert _rel(out.get().astype(np.float64), plain + 1.0) < 1e-5
    assert _rel(gemmlab.matmul(a, a).get().astype(np.float64), plain) < 1e-5  # the plan is still bias-free
    with pytest.raises(ValueError, match="kernel pipelined takes no fused epilogue"):
        gemmlab.matmul(a, a, kernel="pipelined", bias=cp.ones(64, cp.float32))


def test_degenerate_sizes():
    import cupy as cp

    for m, n, k in ((0, 5, 7), (5, 0, 7), (5, 7, 0)):
        c = cp.full((m, n), 3.0, cp.float16)
        out = gemmlab.matmul(cp.ones((m, k), cp.float16), cp.ones((k, n), cp.float16), c, beta=0.5)
        assert out.shape == (m, n)
        if k == 0 and m and n:
            assert bool((out == 1.5).all())


# ------------------------------------------------------------------------------------------ TF32

TF32_TOL = 1e-3
TF32_SHAPES = [(1, 1, 1), (17, 17, 17), (129, 129, 129), (1000, 1000, 1000), (7, 300, 129), (300, 7, 65),
               (33, 65, 1000), (1000, 17, 31), (256, 96, 513), (129, 257, 1), (130, 66, 8192), (256, 256, 8192)]


def _f32(shape, rng):
    """(CuPy fp32 array, its values as float64 on the host)."""
    import cupy as cp

    x = rng.uniform(-1, 1, shape).astype(np.float32)
    return cp.asarray(x), x.astype(np.float64)


def _tf32_rna(x: np.ndarray) -> np.ndarray:
    """fp32 -> tf32 as cvt.rna does: round the magnitude to 10 mantissa bits, ties away from zero."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.mark.parametrize("mnk", TF32_SHAPES, ids=lambda t: "x".join(map(str, t)))
def test_tf32_against_float64(mnk, rng):
    m, n, k = mnk
    a, a64 = _f32((m, k), rng)
    b, b64 = _f32((k, n), rng)
    out = gemmlab.matmul(a, b, precision="tf32", kernel="mma_sync")  # rung 11 rounds its inputs (cvt.rna)
    assert out.dtype == np.float32 and out.shape == (m, n)
    got = out.get().astype(np.float64)
    err = _rel(got, a64 @ b64)
    assert err <= TF32_TOL, f"tf32 {m}x{n}x{k}: rel. error {err:.2e}"
    if k >= 64:
        # It really is tf32 (strict fp32 would be near 1e-7), and the inputs are rounded to nearest (cvt.rna),
        # not truncated: against the product of the rna-rounded inputs only fp32 accumulation error is left.
        assert err > 2e-5, f"tf32 {m}x{n}x{k}: rel. error {err:.2e} looks like strict fp32"
        ra = _tf32_rna(a.get()).astype(np.float64)
        rb = _tf32_rna(b.get()).astype(np.float64)
        assert _rel(got, ra @ rb) < 2e-5


def test_tf32_is_only_used_when_asked(rng):
    a, a64 = _f32((256, 512), rng)
    b, b64 = _f32((512, 128), rng)
    strict = _rel(gemmlab.matmul(a, b).get().astype(np.float64), a64 @ b64)
    tf32 = _rel(gemmlab.matmul(a, b, precision="tf32").get().astype(np.float64), a64 @ b64)
    assert strict < 1e-6 < 2e-5 < tf32 <= TF32_TOL


@pytest.mark.parametrize("params", [dict(BM=64, BN=64, BK=8, WM=32, WN=32, STAGES=2),
                                    dict(BM=128, BN=256, BK=32, WM=64, WN=64, STAGES=3),
                                    dict(BM=64, BN=128, BK=16, WM=32, WN=64, STAGES=4), dict(BK=32)], ids=str)
def test_tf32_other_tiles(params, rng):
    for m, n, k in [(129, 67, 33), (300, 520, 200), (64, 64, 4100)]:
        a, a64 = _f32((m, k), rng)
        b, b64 = _f32((k, n), rng)
        out = gemmlab.matmul(a, b, kernel="mma_sync", precision="tf32", **params)
        assert _rel(out.get().astype(np.float64), a64 @ b64) <= TF32_TOL, (params, m, n, k)


@pytest.mark.parametrize("activation", list(ACTS), ids=str)
@pytest.mark.parametrize("bias_mode", [None, "row", "col"], ids=str)
def test_tf32_epilogues_against_numpy(activation, bias_mode, rng):
    a, b, c, res, bias, want = epilogue_case(_f32, 133, 70, 90, bias_mode, activation, rng)
    out = gemmlab.matmul(a, b, c, alpha=1.5, beta=-0.5, bias=bias, activation=activation, residual=res,
                         precision="tf32")
    assert out is c
    assert _rel(c.get().astype(np.float64), want) <= TF32_TOL, (activation, bias_mode)


def test_tf32_beta_zero_never_reads_c_and_16_bit_outputs(rng):
    import cupy as cp

    torch = _torch()
    a, a64 = _f32((77, 45), rng)
    b, b64 = _f32((45, 99), rng)
    c = cp.full((77, 99), cp.nan, cp.float32)
    gemmlab.matmul(a, b, c, beta=0.0, alpha=2.0, precision="tf32")
    assert _rel(c.get().astype(np.float64), 2 * (a64 @ b64)) <= TF32_TOL
    for od in ("float16", "bfloat16"):
        out = gemmlab.matmul(torch.from_dlpack(a), torch.from_dlpack(b), precision="tf32", out_dtype=od)
        assert out.dtype == getattr(torch, od) and _rel(_host(out), a64 @ b64) <= TOL
    c16 = torch.full((77, 99), float("nan"), device="cuda", dtype=torch.float16)
    gemmlab.matmul(torch.from_dlpack(a), torch.from_dlpack(b), c16, precision="tf32")  # C's dtype is the output's
    assert _rel(_host(c16), a64 @ b64) <= TOL


@pytest.mark.parametrize("kernel", ["auto", "mma_sync"])
def test_tf32_unaligned_operands_and_host_arrays(kernel, rng):
    """Rows not 16-byte aligned (odd leading dimension, offset base): mma_sync's element-wise loader, or
    wgmma on row-padded copies; numpy in, numpy out."""
    import cupy as cp

    big = cp.asarray(rng.uniform(-1, 1, (300, 301)).astype(np.float32))
    a, b = big[1:130, 3:70], big[100:167, 1:91]  # lda = ldb = 301, bases off 16 bytes
    out = gemmlab.matmul(a, b, precision="tf32", kernel=kernel)
    assert _rel(out.get().astype(np.float64), a.get().astype(np.float64) @ b.get().astype(np.float64)) <= TF32_TOL
    ha, hb = rng.uniform(-1, 1, (70, 50)).astype(np.float32), rng.uniform(-1, 1, (50, 40)).astype(np.float32)
    hout = gemmlab.matmul(ha, hb, precision="tf32")
    assert isinstance(hout, np.ndarray) and _rel(hout.astype(np.float64), ha.astype(np.float64) @ hb) <= TF32_TOL


def test_tf32_auto_dispatch_is_explained():
    from gemmlab import api
    from gemmlab.runtime import device

    info = device.device_info()
    choice = api.explain_choice("float32", "tf32", shape=(1024, 1024, 1024), info=info)
    want = "wgmma" if info.compute_capability == (9, 0) else "mma_sync"  # wgmma where sm_90a exists
    assert choice.spec.name == api.choose_kernel("float32", info.compute_capability, "tf32").name == want
    assert choice.params["A_TYPE"] == 3 and choice.params_source in ("defaults", "heuristic", "tuned")
