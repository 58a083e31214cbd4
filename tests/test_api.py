"""Input checking in matmul (no GPU needed: every one of these is refused before a GPU is touched)."""

import subprocess
import sys

import numpy as np
import pytest

import gemmlab
from gemmlab.runtime import device

F32 = np.float32


def _m(r, c, dtype=F32):
    return np.ones((r, c), dtype=dtype)


def test_inner_dimensions_must_agree():
    with pytest.raises(ValueError, match=r"A is 3 x 4, B is 5 x 6"):
        gemmlab.matmul(_m(3, 4), _m(5, 6))


def test_c_shape_is_checked():
    with pytest.raises(ValueError, match=r"C must be 3 x 6 .* got 6 x 3"):
        gemmlab.matmul(_m(3, 4), _m(4, 6), _m(6, 3), beta=1.0)


def test_operands_must_be_matrices_or_batches_of_them():
    with pytest.raises(ValueError, match="A must be 2-D"):
        gemmlab.matmul(np.ones((4,), F32), _m(4, 4))
    with pytest.raises(ValueError, match=r"A is 2 x 2 x 2, B is 4 x 4"):  # a batch of rows, named as given
        gemmlab.matmul(np.ones((2, 2, 2), F32), _m(4, 4))
    with pytest.raises(ValueError, match=r"batch sizes differ: A is 3 x 4 x 4, B is 2 x 4 x 4"):
        gemmlab.matmul(np.ones((3, 4, 4), F32), np.ones((2, 4, 4), F32))
    with pytest.raises(ValueError, match=r"leading \(batch\) dimensions must be equal"):
        gemmlab.matmul(np.ones((2, 3, 4, 4), F32), np.ones((3, 2, 4, 4), F32))


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32])
def test_gpu_kernels_name_the_unsupported_dtype(dtype):
    with pytest.raises(TypeError, match=f"B is {np.dtype(dtype).name}"):
        gemmlab.matmul(_m(4, 4), _m(4, 4, dtype))


def test_beta_without_c():
    with pytest.raises(ValueError, match="beta = 2.0 needs a C"):
        gemmlab.matmul(_m(4, 4), _m(4, 4), beta=2.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_scalars(bad):
    with pytest.raises(ValueError, match="alpha must be finite"):
        gemmlab.matmul(_m(4, 4), _m(4, 4), alpha=bad)


def test_non_numeric_scalar():
    with pytest.raises(TypeError, match="beta must be a real number"):
        gemmlab.matmul(_m(4, 4), _m(4, 4), beta="1")


def test_unknown_kernel_lists_known_ones():
    with pytest.raises(ValueError, match="unknown kernel 'fastest'; GPU rungs: naive.*CPU baselines: cpu_naive"):
        gemmlab.matmul(_m(4, 4), _m(4, 4), kernel="fastest")
    with pytest.raises(ValueError, match="unknown kernel 'cpu_fast'.*CPU baselines: cpu_naive.*cpu_blas"):
        gemmlab.matmul(_m(4, 4), _m(4, 4), kernel="cpu_fast")


def test_a_cpu_kernel_refuses_a_gpu_precision():
    with pytest.raises(ValueError, match="precision='tf32' is for the GPU kernels; CPU kernel cpu_blas"):
        gemmlab.matmul(_m(4, 4), _m(4, 4), kernel="cpu_blas", precision="tf32")


def test_a_read_only_c_is_named_before_computing():
    c = np.zeros((4, 4), F32)
    c.setflags(write=False)
    for kernel in ("cpu_blas", "auto"):
        with pytest.raises(ValueError, match="C is read-only"):
            gemmlab.matmul(_m(4, 4), _m(4, 4), c, kernel=kernel)


def test_a_mistaken_keyword_is_named_as_such():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'out'; the output is C, the third argument"):
        gemmlab.matmul(_m(4, 4), _m(4, 4), out=np.zeros((4, 4), F32))
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'blocksize'"):
        gemmlab.matmul(_m(4, 4), _m(4, 4), kernel="smem_tiled", blocksize=8)


def test_bad_parameters_are_named_before_any_gpu_is_needed():
    with pytest.raises(ValueError, match="BLOCK_DIM = 40 must be 2..32"):
        gemmlab.matmul(_m(4, 4), _m(4, 4), kernel="smem_tiled", BLOCK_DIM=40)
    with pytest.raises(ValueError, match="has no parameter 'TILE'"):
        gemmlab.matmul(_m(4, 4), _m(4, 4), kernel="naive", TILE=4)
    with pytest.raises(ValueError, match="need a named kernel"):
        gemmlab.matmul(_m(4, 4), _m(4, 4), BLOCK_DIM=8)


def test_not_an_array():
    with pytest.raises(TypeError, match="expected a numpy, CuPy or torch array"):
        gemmlab.matmul([[1.0]], _m(1, 1))


def test_cpu_kernels_run_through_matmul(rng):
    a = rng.standard_normal((33, 17))
    b = rng.standard_normal((17, 9))
    c = rng.standard_normal((33, 9))
    for name in ("cpu_naive", "cpu_reordered", "cpu_blocked", "cpu_threaded", "cpu_blas"):
        out = gemmlab.matmul(a, b, c.copy(), alpha=0.5, beta=-1.0, kernel=name)
        np.testing.assert_allclose(out, 0.5 * a @ b - c, rtol=1e-10, atol=1e-12)


def test_cpu_kernel_with_nan_c_and_beta_zero(rng):
    a = rng.standard_normal((8, 8)).astype(F32)
    c = np.full((8, 8), np.nan, F32)
    out = gemmlab.matmul(a, a, c, kernel="cpu_blocked", TILE=8)
    assert np.isfinite(out).all() and out is c


def test_cpu_kernel_rejects_mixed_dtypes():
    with pytest.raises(TypeError, match="one dtype"):
        gemmlab.matmul(_m(2, 2), _m(2, 2, np.float64), kernel="cpu_naive")


@pytest.mark.skipif(device.gpu_available(), reason="checks the message shown where there is no GPU")
def test_without_a_gpu_the_error_is_one_clear_line():
    with pytest.raises(gemmlab.GPUUnavailableError) as info:
        gemmlab.matmul(_m(4, 4), _m(4, 4), kernel="sgemm")
    msg = str(info.value)
    assert msg.startswith("GPU unavailable:") and "\n" not in msg


@pytest.mark.skipif(device.gpu_available(), reason="the CPU fallback runs only where there is no GPU")
def test_without_a_gpu_auto_runs_the_best_cpu_kernel_and_says_so_once(rng):
    import warnings

    from gemmlab.api import call

    call._warned_cpu[0] = False
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((37, 19), (19, 23), (37, 23)))
    bias = rng.standard_normal(23).astype(np.float32)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = gemmlab.matmul(a, b)
        fused = gemmlab.matmul(a, b, c.copy(), alpha=0.5, beta=2.0, bias=bias, activation="relu")
    assert [str(w.message) for w in seen if "cpu_blas" in str(w.message)] and len(seen) == 1
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fused, np.maximum(0.5 * a @ b + 2 * c + bias, 0), rtol=1e-5, atol=1e-5)


def test_import_needs_no_cupy():
    code = ("import sys; sys.modules['cupy'] = None\n"
            "import gemmlab, numpy as np\n"
            "print(len(gemmlab.kernels()))\n"
            "try:\n    gemmlab.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), kernel='naive')\n"
            "except gemmlab.GPUUnavailableError as e:\n    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "refused: GPU unavailable: CuPy is not importable" in out


class _DeviceArray:
    """A stand-in for a device array type gemmlab.matmul has seen: shape, ndim and dtype only."""

    def __init__(self, *shape, dtype="bfloat16"):
        self.shape, self.ndim, self.dtype = shape, len(shape), dtype


class _Router:
    def __init__(self, wants):
        self.wanted = wants
        self.calls = 0

    def wants(self, a, b, c, bias, residual):
        return self.wanted

    def call(self, a, b, c=None, **kw):
        self.calls += 1
        return "router"


def test_the_direct_route_takes_only_what_the_keyword_route_would_give_the_same_product(monkeypatch):
    # gemmlab.matmul hands two 2-D arrays of a device type it has seen straight to the product (positional
    # arguments); 8-bit dtypes, scales, batches and calls the operator wants (autograd, torch.compile) keep their
    # own routes, and the direct route passes every argument through unchanged
    from gemmlab.api import call

    seen = []
    monkeypatch.setattr(call, "product", lambda *args: seen.append(("direct", args)) or "direct")
    monkeypatch.setattr(call, "matmul", lambda a, b, c=None, **kw: seen.append(("keywords", kw)) or "keywords")
    monkeypatch.setitem(gemmlab._plain, _DeviceArray, frozenset({"float8_e4m3fn"}))
    router = _Router(wants=False)
    monkeypatch.setattr(gemmlab, "_router", [router])
    a, b, c = _DeviceArray(8, 4), _DeviceArray(4, 6), _DeviceArray(8, 6)

    assert gemmlab.matmul(a, b, c, alpha=2.0, beta=0.5, kernel="wgmma", bias="v", activation="silu",
                          out_dtype="float32", BM=64) == "direct"
    assert seen[-1] == ("direct", (a, b, c, 2.0, 0.5, "wgmma", None, "v", "silu", None, "float32", None,
                                   {"BM": 64}))
    assert gemmlab.matmul(_DeviceArray(8, 4, dtype="float8_e4m3fn"), b) == "keywords"  # 8-bit inputs
    assert gemmlab.matmul(a, b, scale_a=1.0) == "keywords"                              # scales
    assert seen[-1][1]["scale_a"] == 1.0
    router.wanted = True
    assert gemmlab.matmul(a, b) == "router" and router.calls == 1                      # autograd / compile
    router.wanted = False
    before = len(seen)
    gemmlab.matmul(np.ones((8, 4), F32), np.ones((4, 6), F32))                          # a type not seen: keywords
    assert seen[before][0] == "keywords"
