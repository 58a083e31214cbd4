"""GPU correctness of batched products (one launch over the batch): every element of every product
against a float64 reference, outputs poisoned with NaN first, on each rung with a batched form (wgmma on
Hopper, mma_sync, sgemm) and kernel="auto"; odd shapes, an operand shared by the batch (2-D, or a batch of
one), B given per product as the transpose of a weight (read K-major), padded and strided batches, C with
beta, the fused epilogue with a residual per product or shared; then torch's ways of calling it (CUDA
graphs, torch.compile, autograd).

Per-element bound, as in test_skinny_gpu: |out - ref| <= u_out |ref| + e (|A| |B|)_ij + tiny, e = 1e-5 for
fp32 accumulation of exact inputs and 2^-10 for tf32's rounded inputs. A product of the wrong batch, a
misplaced tile or a missed store is off by about |ref|, far outside it.
"""

import numpy as np
import pytest

import gemmlab
from gemmlab.runtime import device

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

UNIT = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
HOPPER = device.gpu_available() and device.device_info().compute_capability >= (9, 0)
SHAPES = [(3, 67, 129, 95), (2, 256, 512, 384), (7, 1, 256, 64), (5, 130, 70, 200), (1, 64, 64, 64),
          (4, 300, 256, 4096), (64, 64, 64, 64)]
CASES = [("bfloat16", None, "wgmma"), ("float16", None, "wgmma"), ("bfloat16", None, "mma_sync"),
         ("float32", None, "sgemm"), ("float32", "tf32", "wgmma"), ("bfloat16", None, "auto"),
         ("float32", None, "auto")]


def _rand(shape, dtype, gen):
    return (torch.rand(shape, generator=gen, device="cuda") * 2 - 1).to(getattr(torch, dtype))


def _f64(x):
    return x.double().cpu().numpy()


def _check(out, ref, scale, out_dtype, eps, what):
    c = _f64(out)
    assert c.shape == ref.shape, f"{what}: shape {c.shape} against {ref.shape}"
    assert np.isfinite(c).all(), f"{what}: {np.count_nonzero(~np.isfinite(c))} non-finite elements"
    bound = UNIT[out_dtype] * np.abs(ref) + eps * scale + 1e-30
    bad = np.abs(c - ref) > bound
    if bad.any():
        idx = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} elements off; first {idx}: {c[idx]} against "
                             f"{ref[idx]} (bound {bound[idx]:.2e})")


def _skip(kernel):
    if kernel == "wgmma" and not HOPPER:
        pytest.skip("wgmma needs sm_90")


@pytest.fixture
def gen():
    g = torch.Generator(device="cuda")
    g.manual_seed(23)
    return g


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype,precision,kernel", CASES, ids=lambda v: str(v))
def test_a_batch_matches_float64(shape, dtype, precision, kernel, gen):
    _skip(kernel)
    bt, m, n, k = shape
    a, b = _rand((bt, m, k), dtype, gen), _rand((bt, k, n), dtype, gen)
    out = torch.full((bt, m, n), float("nan"), device="cuda", dtype=getattr(torch, dtype))
    got = gemmlab.matmul(a, b, out, kernel=kernel, precision=precision)
    assert got is out
    a64, b64 = _f64(a), _f64(b)
    eps = 2.0**-10 if precision == "tf32" else 1e-5
    _check(out, a64 @ b64, np.abs(a64) @ np.abs(b64), dtype, eps, f"{kernel} {dtype} {shape}")


@pytest.mark.parametrize("dtype,precision,kernel", CASES, ids=lambda v: str(v))
def test_shared_operands_transposed_weights_and_strided_batches(dtype, precision, kernel, gen):
    _skip(kernel)
    bt, m, n, k = 6, 100, 136, 72
    eps = 2.0**-10 if precision == "tf32" else 1e-5
    a = _rand((bt, m, k), dtype, gen)
    cases = {
        "A shared (2-D)": (_rand((m, k), dtype, gen), _rand((bt, k, n), dtype, gen)),
        "A a batch of one": (_rand((1, m, k), dtype, gen), _rand((bt, k, n), dtype, gen)),
        "B a batch of one": (a, _rand((1, k, n), dtype, gen)),
        "B^T per product": (a, _rand((bt, n, k), dtype, gen).transpose(1, 2)),
        "padded rows and batches": (_rand((bt, m + 3, k + 8), dtype, gen)[:, 1:m + 1, :k],
                                    _rand((bt + 2, k, n + 8), dtype, gen)[1:bt + 1, :, :n]),
        "every other product": (_rand((2 * bt, m, k), dtype, gen)[::2], _rand((bt, k, n), dtype, gen)),
        "odd strides (not 16 bytes)": (_rand((bt, m, k + 1), dtype, gen)[:, :, :k], _rand((bt, k, n), dtype, gen)),
    }
    for what, (x, w) in cases.items():
        got = gemmlab.matmul(x, w, kernel=kernel, precision=precision)
        ref = np.matmul(_f64(x), _f64(w))
        _check(got, ref, np.matmul(np.abs(_f64(x)), np.abs(_f64(w))), dtype, eps, f"{kernel} {what}")


@pytest.mark.parametrize("dtype,precision,kernel", CASES, ids=lambda v: str(v))
def test_the_epilogue_per_product(dtype, precision, kernel, gen):
    _skip(kernel)
    bt, m, n, k = 4, 130, 200, 96
    eps = 2.0**-10 if precision == "tf32" else 1e-5
    a, b = _rand((bt, m, k), dtype, gen), _rand((bt, k, n), dtype, gen)
    bias = _rand((n,), "float32", gen)
    a64, b64 = _f64(a), _f64(b)
    z = a64 @ b64
    scale = np.abs(a64) @ np.abs(b64)
    for r_shape in ((bt, m, n), (m, n)):
        r = _rand(r_shape, dtype, gen)
        got = gemmlab.matmul(a, b, bias=bias, activation="relu", residual=r, kernel=kernel, precision=precision)
        _check(got, np.maximum(z + _f64(bias), 0) + _f64(r), scale + 1, dtype, eps, f"{kernel} residual {r_shape}")
    c = _rand((bt, m, n), dtype, gen)
    want = 0.5 * z + 2.0 * _f64(c)
    gemmlab.matmul(a, b, c, alpha=0.5, beta=2.0, kernel=kernel, precision=precision)
    _check(c, want, scale + 4, dtype, eps, f"{kernel} alpha, beta")


@pytest.mark.parametrize("params", [dict(CLUSTER=2), dict(CLUSTER=2, BM=128, BN=128), dict(CLUSTER=1),
                                    dict(BM=64, BN=64, SCHEDULE=2, HELD=2, STAGES=12, CLUSTER=1),
                                    dict(BM=128, BN=64, CLUSTER=2)], ids=str)
@pytest.mark.parametrize("kmajor", [False, True], ids=["B row-major", "B^T per product"])
def test_rung_12_tilings_over_a_batch(params, kmajor, gen):
    """Clusters of two over a batch (the tile pairs of a cluster belong to one product; an odd tile-row
    count leaves a block below each product's matrix), both layouts of B."""
    if not HOPPER:
        pytest.skip("wgmma needs sm_90")
    bt, m, n, k = 3, 300, 520, 200
    a = _rand((bt, m, k), "bfloat16", gen)
    b = _rand((bt, n, k), "bfloat16", gen).transpose(1, 2) if kmajor else _rand((bt, k, n), "bfloat16", gen)
    out = torch.full((bt, m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemmlab.matmul(a, b, out, kernel="wgmma", **params)
    a64, b64 = _f64(a), _f64(b)
    _check(out, a64 @ b64, np.abs(a64) @ np.abs(b64), "bfloat16", 1e-5, f"wgmma {params} kmajor={kmajor}")


def test_a_named_rung_without_a_batched_form_is_refused():
    a = torch.ones(2, 8, 8, device="cuda")
    with pytest.raises(ValueError, match="kernel naive runs one product per launch"):
        gemmlab.matmul(a, a, kernel="naive")


def test_a_batch_under_cuda_graphs_and_torch_compile(gen):
    dtype = "bfloat16"
    bt, m, n, k = 8, 192, 256, 128
    a, b = _rand((bt, m, k), dtype, gen), _rand((bt, k, n), dtype, gen)
    out = torch.empty(bt, m, n, device="cuda", dtype=torch.bfloat16)
    gemmlab.matmul(a, b, out)  # the plan exists before capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gemmlab.matmul(a, b, out)
    a.copy_(_rand((bt, m, k), dtype, gen))
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    a64, b64 = _f64(a), _f64(b)
    _check(out, a64 @ b64, np.abs(a64) @ np.abs(b64), dtype, 1e-5, "graph replay")

    fn = torch.compile(lambda x, w: gemmlab.matmul(x, w, activation="silu"), fullgraph=True)
    got = fn(a, b)
    ref = torch.nn.functional.silu(torch.matmul(a.float(), b.float())).to(torch.bfloat16)
    torch.testing.assert_close(got, ref, rtol=2e-2, atol=2e-2)


def test_autograd_through_a_batch_on_the_gpu(gen):
    for a_shape, b_shape in (((4, 64, 96), (4, 96, 80)), ((64, 96), (4, 96, 80)), ((4, 64, 96), (1, 96, 80))):
        a = _rand(a_shape, "float32", gen).requires_grad_()
        b = _rand(b_shape, "float32", gen).requires_grad_()
        y = gemmlab.matmul(a, b, activation="gelu_tanh")
        ref = torch.nn.functional.gelu(torch.matmul(a.double(), b.double()), approximate="tanh")
        torch.testing.assert_close(y.double(), ref, rtol=1e-4, atol=1e-4)
        y.sum().backward()
        ga, gb = a.grad.clone(), b.grad.clone()
        a2, b2 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
        torch.nn.functional.gelu(torch.matmul(a2, b2), approximate="tanh").sum().backward()
        torch.testing.assert_close(ga.double(), a2.grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(gb.double(), b2.grad, rtol=1e-4, atol=1e-4)
