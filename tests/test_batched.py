"""Batches of A's rows times one B (x @ W with x of shape batch x T x K), on the host path (no GPU needed):
one product of all rows, the epilogue on every row, results, C and the residual in the batch's shape, and
the errors for what does not fold."""

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
    with pytest.raises(ValueError, match=r"batch of B matrices is not supported"):
        gemmlab.matmul(a, np.ones((2, 4, 5), np.float32))
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
