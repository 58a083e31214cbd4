"""Batches on the host path (no GPU needed): A's rows times one B (x @ W with x of shape batch x T x K, one
product of all rows), and batches of products (torch.bmm's and torch.matmul's shapes, an operand shared
by every product); the epilogue per product, C and the residual in the batch's shape, the layouts the
launch reads, the rungs `auto` takes for a batch, and the errors for what does not fit."""

import warnings

import numpy as np
import pytest

import gemmlab


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the one-time "no GPU: cpu_blas" notice
        yield


@pytest.mark.parametrize("lead", [(3,), (2, 3), (1,)], ids=str)
def test_rows_of_a_batch_times_one_b(lead):
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (*lead, 5, 7)).astype(np.float32)
    b = rng.uniform(-1, 1, (7, 4)).astype(np.float32)
    bias = rng.uniform(-1, 1, 4).astype(np.float32)
    r = rng.uniform(-1, 1, (*lead, 5, 4)).astype(np.float32)
    out = gemmlab.matmul(a, b, bias=bias, activation="relu", residual=r, alpha=0.5)
    assert out.shape == (*lead, 5, 4)
    np.testing.assert_allclose(out, np.maximum(0.5 * (a @ b) + bias, 0) + r, rtol=1e-5, atol=1e-5)


def test_c_in_the_batch_shape_is_written_in_place():
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (4, 3, 6)).astype(np.float32)
    b = rng.uniform(-1, 1, (6, 5)).astype(np.float32)
    c = rng.uniform(-1, 1, (4, 3, 5)).astype(np.float32)
    old = c.copy()
    assert gemmlab.matmul(a, b, c, beta=2.0) is c
    np.testing.assert_allclose(c, a @ b + 2.0 * old, rtol=1e-5, atol=1e-5)


def test_a_strided_batch_is_folded_by_a_copy():
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (5, 4, 6)).astype(np.float32).transpose(1, 0, 2)  # (4, 5, 6), rows not foldable
    b = rng.uniform(-1, 1, (6, 3)).astype(np.float32)
    np.testing.assert_allclose(gemmlab.matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_what_does_not_fold_is_refused_by_name():
    a = np.ones((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match=r"C must have the shape \(2, 3, 5\)"):
        gemmlab.matmul(a, np.ones((4, 5), np.float32), np.zeros((6, 5), np.float32))
    with pytest.raises(ValueError, match=r"residual must have the shape"):
        gemmlab.matmul(a, np.ones((4, 5), np.float32), residual=np.zeros((3, 5), np.float32))
    c = np.zeros((3, 2, 5), np.float32).transpose(1, 0, 2)
    with pytest.raises(ValueError, match="does not fold"):
        gemmlab.matmul(a, np.ones((4, 5), np.float32), c)


def test_torch_autograd_through_the_fold():
    torch = pytest.importorskip("torch")
    x = torch.rand(2, 3, 6, dtype=torch.float32, requires_grad=True)
    w = torch.rand(4, 6, dtype=torch.float32, requires_grad=True)
    y = gemmlab.matmul(x, w.t(), activation="silu")
    ref = torch.nn.functional.silu(x @ w.t())
    assert y.shape == (2, 3, 4)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    y.square().sum().backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    ref.square().sum().backward()
    torch.testing.assert_close(gx, x.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gw, w.grad, rtol=1e-4, atol=1e-5)


def test_rows_fold_reads_the_strides():
    from gemmlab.arrays import rows_fold, strides_in_elements

    x = np.zeros((3, 4, 5), np.float32)
    assert rows_fold(x.shape, strides_in_elements(x))
    assert rows_fold((3, 1, 5), (7, 99, 1))            # a size-1 dimension steps over nothing
    assert rows_fold((0, 4, 5), (1, 1, 1))             # empty
    t = x.transpose(1, 0, 2)
    assert not rows_fold(t.shape, strides_in_elements(t))
    assert rows_fold(x[:, :, :3].shape, strides_in_elements(x[:, :, :3]))  # padded rows: pitch 5, still one step
    assert not rows_fold(x[:, :2, :].shape, strides_in_elements(x[:, :2, :]))  # rows 0-1 of every 4


def test_a_torch_c_that_does_not_fold_is_refused():
    torch = pytest.importorskip("torch")
    a, b = torch.ones(2, 3, 4), torch.ones(4, 5)
    with pytest.raises(ValueError, match="does not fold"):
        gemmlab.matmul(a, b, torch.zeros(3, 2, 5).transpose(0, 1))
    c = torch.zeros(2, 3, 5)
    assert gemmlab.matmul(a, b, c) is c and torch.equal(c, torch.full((2, 3, 5), 4.0))


# ------------------------------------------------------------------------------------ batches of products

def _r(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


@pytest.mark.parametrize("a_shape,b_shape", [((3, 5, 7), (3, 7, 4)), ((5, 7), (3, 7, 4)), ((1, 5, 7), (3, 7, 4)),
                                             ((3, 5, 7), (1, 7, 4)), ((2, 3, 5, 7), (2, 3, 7, 4)),
                                             ((5, 7), (2, 3, 7, 4)), ((1, 5, 7), (1, 7, 4))], ids=str)
def test_a_batch_of_products_as_torch_matmul_takes_it(a_shape, b_shape):
    rng = np.random.default_rng(3)
    a, b = _r(rng, *a_shape), _r(rng, *b_shape)
    bias = _r(rng, 4)
    out = gemmlab.matmul(a, b, bias=bias, activation="relu", alpha=0.5)
    want = np.maximum(0.5 * np.matmul(a, b) + bias, 0)
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_a_batch_takes_c_in_place_and_a_residual_per_product_or_shared():
    rng = np.random.default_rng(4)
    a, b = _r(rng, 4, 3, 6), _r(rng, 4, 6, 5)
    c = _r(rng, 4, 3, 5)
    old = c.copy()
    assert gemmlab.matmul(a, b, c, beta=2.0) is c
    np.testing.assert_allclose(c, a @ b + 2.0 * old, rtol=1e-5, atol=1e-5)
    for r in (_r(rng, 4, 3, 5), _r(rng, 3, 5)):
        np.testing.assert_allclose(gemmlab.matmul(a, b, residual=r), a @ b + r, rtol=1e-5, atol=1e-5)
    rows = _r(rng, 3)  # a per-row bias (length M), shared by the batch
    np.testing.assert_allclose(gemmlab.matmul(a, b, bias=rows), a @ b + rows[:, None], rtol=1e-5, atol=1e-5)


def test_a_batch_that_does_not_fit_is_refused_by_name():
    a, b = np.ones((2, 3, 4), np.float32), np.ones((2, 4, 5), np.float32)
    with pytest.raises(ValueError, match=r"C must be 2 x 3 x 5 .* got 3 x 5"):
        gemmlab.matmul(a, b, np.zeros((3, 5), np.float32), beta=1.0)
    with pytest.raises(ValueError, match=r"residual must be batch x M x N = 2 x 3 x 5 \(or M x N"):
        gemmlab.matmul(a, b, residual=np.zeros((1, 3, 5), np.float32))
    with pytest.raises(ValueError, match=r"beta = 1.0 needs a C to scale; pass c \(a batch x M x N = 2 x 3 x 5"):
        gemmlab.matmul(a, b, beta=1.0)
    with pytest.raises(ValueError, match=r"B must be 2-D or 3-D"):
        gemmlab.api.call.matmul(a, np.ones((1, 2, 4, 5), np.float32))
    with pytest.raises(ValueError, match=r"kernel naive runs one product per launch; a batch of 2 runs on "
                                         r"sgemm \(or kernel='auto'\)"):
        gemmlab.matmul(a, b, kernel="naive")


def test_auto_takes_a_rung_with_a_batched_form():
    from gemmlab import api

    assert api.choose_kernel("bfloat16", (9, 0), shape=(64, 64, 64), batched=True).name == "wgmma"
    assert api.choose_kernel("bfloat16", (8, 0), shape=(64, 64, 64), batched=True).name == "mma_sync"
    assert api.choose_kernel("float32", (9, 0), shape=(1, 4096, 4096), batched=True).name == "sgemm"  # not rung 16
    assert api.choose_kernel("float32", (9, 0), shape=(1, 4096, 4096)).name == "skinny"
    assert api.choose_kernel("float32", (9, 0), "tf32", shape=(64, 64, 64), batched=True).name == "wgmma"


def test_a_batch_runs_unsplit_with_its_type_parameter_on():
    from gemmlab.api import dispatch
    from gemmlab.kernels import registry

    sgemm, wgmma = registry.get("sgemm"), registry.get("wgmma")
    one, _, _ = dispatch.full_params(sgemm, 128, 128, 65536, None, "float32", "float32", None, None, False,
                                     sm_count=132)
    assert one["SPLIT_K"] > 1 and one["BATCHED"] == 0
    many, _, detail = dispatch.full_params(sgemm, 128, 128, 65536, None, "float32", "float32", None, None, False,
                                           sm_count=132, batch=8)
    assert many["SPLIT_K"] == 1 and many["BATCHED"] == 1 and "for a batch: SPLIT_K=1" in detail
    w, _, _ = dispatch.full_params(wgmma, 512, 512, 64, None, "bfloat16", "bfloat16", None, None, False,
                                   sm_count=132, batch=64)
    assert w["BATCHED"] == 1 and w["STREAM_K"] == 0
    assert any("no batched form" in e for e in sgemm.problems({"BATCHED": 1, "SPLIT_K": 4}))
    assert all(p["BATCHED"] == 0 for p in wgmma.search_space()[:50])  # a search never tries the batched build


def test_the_layout_of_a_batched_operand():
    from gemmlab.api.plan import layout_of

    lay = layout_of((4, 3, 5), (15, 5, 1), 4)
    assert (lay.batch, lay.bstride, lay.ld, lay.read_bstride, lay.uniform) == (4, 15, 5, 15, True)
    padded = layout_of((4, 3, 5), (40, 8, 1), 2)  # rows 8 apart, matrices 40 apart
    assert (padded.ld, padded.bstride, padded.uniform) == (8, 40, False)
    shared = layout_of((1, 3, 5), (15, 5, 1), 4)   # a batch of one: one matrix
    assert (shared.batch, shared.read_bstride) == (1, 0)
    kmajor = layout_of((4, 5, 3), (15, 1, 5), 2, allow_transposed=True)  # W^T per product, read K-major
    assert kmajor.transposed and (kmajor.rows, kmajor.cols, kmajor.ld, kmajor.bstride) == (3, 5, 5, 15)
    odd = layout_of((4, 3, 5), (5, 20, 1), 4)  # matrices interleaved by rows: evenly spaced, read in place
    assert not odd.copy and odd.bstride == 5 and odd.ld == 20
    neg = layout_of((4, 3, 5), (-15, 5, 1), 4)
    assert neg.copy and neg.read_bstride == 15
    staged = layout_of((4, 3, 5), (15, 5, 1), 2)
    from dataclasses import replace
    assert replace(staged, stage=True).read_bstride == 3 * 64  # rows padded to 128-byte lines, matrices after another


def test_torch_autograd_through_a_batch():
    torch = pytest.importorskip("torch")
    for a_shape, b_shape in (((2, 3, 6), (2, 6, 4)), ((3, 6), (2, 6, 4)), ((2, 3, 6), (1, 6, 4))):
        a = torch.rand(*a_shape, dtype=torch.float32, requires_grad=True)
        b = torch.rand(*b_shape, dtype=torch.float32, requires_grad=True)
        bias = torch.rand(4, dtype=torch.float32, requires_grad=True)
        r = torch.rand(3, 4, dtype=torch.float32, requires_grad=True)  # one residual for every product
        y = gemmlab.matmul(a, b, bias=bias, activation="gelu_tanh", residual=r)
        ref = torch.nn.functional.gelu(torch.matmul(a, b) + bias, approximate="tanh") + r
        torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
        y.square().sum().backward()
        got = [t.grad.clone() for t in (a, b, bias, r)]
        for t in (a, b, bias, r):
            t.grad = None
        ref.square().sum().backward()
        for g, t in zip(got, (a, b, bias, r)):
            assert g.shape == t.shape
            torch.testing.assert_close(g, t.grad, rtol=1e-4, atol=1e-5)
