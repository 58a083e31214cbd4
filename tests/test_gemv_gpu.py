"""GPU correctness of rung 17 (gemv, small M with B given transposed): every element against a float64
reference into outputs poisoned with NaN, odd shapes (N not a multiple of 16, K not a multiple of a block step
or of 8, rows of A beyond one unit's MT), every split of K, blocks that walk several units (16384 columns,
64 slices), the fused epilogue, weights whose row padding
holds infinities, repeatability (also replayed from a CUDA graph), staging of unaligned rows, and
kernel="auto"'s choice of the rung (B as W.t()) and of rung 16 (B row-major).

Per-element bound as in test_skinny_gpu: |out - ref| <= u_out |ref| + 1e-5 (|A| |B|)_ij + tiny.
"""

import numpy as np
import pytest

import gemmlab
import gemmlab.api

from test_skinny_gpu import _check, _f64, _rand, _repeatable_and_graph_replayed
from test_tensor_gpu import ACTS

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

SHAPES = [(1, 4096, 4096), (1, 1, 8), (2, 130, 72), (3, 1000, 3000), (5, 8192, 1024), (8, 4104, 520),
          (13, 777, 4104), (16, 2048, 8192), (24, 96, 40), (33, 1025, 2000), (9, 17, 1032), (16, 4096, 8200),
          (3, 16384, 520)]


@pytest.fixture
def gen():
    g = torch.Generator(device="cuda")
    g.manual_seed(14)
    return g


def _weight(n, k, dtype, gen):
    """B as a linear layer's weight: the transpose of an N x K matrix (K contiguous)."""
    return _rand((n, k), dtype, gen).t()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("mnk", SHAPES, ids=lambda t: "x".join(map(str, t)))
def test_every_element_against_float64(mnk, dtype, gen):
    m, n, k = mnk
    a, b = _rand((m, k), dtype, gen), _weight(n, k, dtype, gen)
    a64, b64 = _f64(a), _f64(b)
    ref, scale = a64 @ b64, np.abs(a64) @ np.abs(b64)
    for out_dtype in (dtype, "float32"):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
        gemmlab.matmul(a, b, out, kernel="gemv")
        _check(out, ref, scale, out_dtype, f"{dtype} {m}x{n}x{k} -> {out_dtype}")


@pytest.mark.parametrize("params", [dict(MT=8, NT=1, WARPS=16, UNROLL=2, SPLIT=1),
                                    dict(MT=8, NT=1, WARPS=8, UNROLL=2, SPLIT=3),
                                    dict(MT=16, NT=1, WARPS=8, UNROLL=2, SPLIT=64),
                                    dict(MT=8, NT=2, WARPS=4, UNROLL=2, SPLIT=5),
                                    dict(MT=16, NT=2, WARPS=16, UNROLL=1, SPLIT=2),
                                    dict(MT=8, NT=1, WARPS=16, UNROLL=1, SPLIT=7)], ids=str)
def test_parameters_splits_and_rows_beyond_one_block(params, gen):
    """Every split of K (more slices than block steps too: empty slices), M > MT (grid.z tiles of rows),
    N past the last block's columns, K ending inside a chunk."""
    for m, n, k in [(5, 300, 1000), (70, 200, 336), (17, 520, 96), (1, 33, 4104)]:
        a, b = _rand((m, k), "bfloat16", gen), _weight(n, k, "bfloat16", gen)
        a64, b64 = _f64(a), _f64(b)
        out = torch.full((m, n), float("nan"), device="cuda")
        gemmlab.matmul(a, b, out, kernel="gemv", **params)
        _check(out, a64 @ b64, np.abs(a64) @ np.abs(b64), "float32", f"{m}x{n}x{k} {params}")


@pytest.mark.parametrize("k", [1000, 1032, 4100])
def test_padding_past_k_is_never_read_into_the_sum(k, gen):
    """A weight that is a view of wider rows (K a multiple of 8 or not, pitch a multiple of 8): the columns
    past K hold infinities, and A's rows past K too; a chunk cut by K's end must not read them (inf x 0 would
    be NaN, inf x a the wrong sum)."""
    m, n, pad = 3, 96, 24
    wide = _rand((n, k + pad), "bfloat16", gen)
    wide[:, k:] = float("inf")
    a_wide = _rand((m, k + pad), "bfloat16", gen)
    a_wide[:, k:] = float("inf")
    a, b = a_wide[:, :k], wide[:, :k].t()
    a64, b64 = _f64(a), _f64(b)
    for split in (1, 3):
        out = torch.full((m, n), float("nan"), device="cuda")
        gemmlab.matmul(a, b, out, kernel="gemv", SPLIT=split)
        _check(out, a64 @ b64, np.abs(a64) @ np.abs(b64), "float32", f"K = {k}, pitch {k + pad}, SPLIT {split}")


@pytest.mark.parametrize("act", list(ACTS), ids=str)
def test_fused_epilogue(act, gen):
    """act(alpha A B + beta C + bias) + residual, bias per column and per row, 16-bit and fp32 outputs, with
    and without a split of K."""
    m, n, k = 9, 1030, 2056
    a, b = _rand((m, k), "bfloat16", gen), _weight(n, k, "bfloat16", gen)
    a64, b64 = _f64(a), _f64(b)
    for out_dtype, split in (("bfloat16", 1), ("float32", 3)):
        for bias_len in (n, m):
            bias = torch.rand(bias_len, generator=gen, device="cuda") - 0.5
            c = _rand((m, n), out_dtype, gen)
            r = _rand((m, n), out_dtype, gen)
            c64, r64, bias64 = _f64(c), _f64(r), _f64(bias)
            z = 0.5 * (a64 @ b64) + 0.25 * c64 + (bias64[None, :] if bias_len == n else bias64[:, None])
            ref = ACTS[act](z) + r64
            gemmlab.matmul(a, b, c, alpha=0.5, beta=0.25, bias=bias, activation=act, residual=r, kernel="gemv",
                           SPLIT=split)
            scale = 0.5 * np.abs(a64) @ np.abs(b64) + np.abs(z) + np.abs(r64)
            _check(c, ref, 100 * scale, out_dtype, f"{act} bias[{bias_len}] -> {out_dtype}, SPLIT {split}")


def test_k_zero_runs_the_epilogue_only(gen):
    """K = 0: C = beta C + bias (no product), with and without a split."""
    m, n = 4, 100
    a = torch.empty((m, 0), device="cuda", dtype=torch.bfloat16)
    b = torch.empty((n, 0), device="cuda", dtype=torch.bfloat16).t()
    bias = torch.rand(n, generator=gen, device="cuda")
    for split in (1, 4):
        c = torch.ones((m, n), device="cuda")
        gemmlab.matmul(a, b, c, beta=2.0, bias=bias, kernel="gemv", SPLIT=split)
        torch.testing.assert_close(c, 2.0 + bias[None, :].expand(m, n), rtol=0, atol=0)


def test_deterministic_and_graph_captured(gen):
    """The warps' sums and the slices' are added in a fixed order: repeated calls agree bit for bit, also
    replayed from a CUDA graph (the counters left zero by every launch)."""
    m, n, k = 4, 4096, 8192
    a, b = _rand((m, k), "bfloat16", gen), _weight(n, k, "bfloat16", gen)
    first = _repeatable_and_graph_replayed(a, b, kernel="gemv", SPLIT=4)
    ref = _f64(a) @ _f64(b)
    _check(first, ref, np.abs(_f64(a)) @ np.abs(_f64(b)), "bfloat16", "split 4")


def test_unaligned_operands_are_staged(gen):
    """Rows that are not 16-byte aligned (an odd K of a weight, an offset view of A) are copied, not misread."""
    m, n, k = 3, 500, 1001
    w = _rand((n, k), "bfloat16", gen)
    a = _rand((m, k + 1), "bfloat16", gen)[:, 1:]
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemmlab.matmul(a, w.t(), out, kernel="gemv")
    a64, b64 = _f64(a), _f64(w.t())
    _check(out, a64 @ b64, np.abs(a64) @ np.abs(b64), "bfloat16", "staged")


def test_auto_takes_the_rung_for_a_transposed_weight_only(gen):
    """kernel="auto" at M <= 16: rung 17 for x @ W.t(), rung 16 for a row-major B; a named gemv with a
    row-major B is refused with the layout named."""
    x = _rand((4, 4096), "bfloat16", gen)
    w = _rand((2048, 4096), "bfloat16", gen)
    assert gemmlab.api.explain_choice("bfloat16", shape=(4, 2048, 4096), b_kmajor=True,
                                  cc=torch.cuda.get_device_capability()).spec.name == "gemv"
    assert gemmlab.api.explain_choice("bfloat16", shape=(4, 2048, 4096), b_kmajor=False,
                                  cc=torch.cuda.get_device_capability()).spec.name == "skinny"
    y = gemmlab.matmul(x, w.t())
    _check(y, _f64(x) @ _f64(w.t()), np.abs(_f64(x)) @ np.abs(_f64(w.t())), "bfloat16", "auto")
    with pytest.raises(ValueError, match="B_LAYOUT|transposed"):
        gemmlab.matmul(x, w.t().contiguous(), kernel="gemv")


def test_parameters_that_would_spill_are_refused(gen):
    """Four chunks a step at MT = 16 need more registers than the launch bounds allow: refused, naming them."""
    a, b = _rand((16, 512), "bfloat16", gen), _weight(64, 512, "bfloat16", gen)
    with pytest.raises(ValueError, match="registers"):
        gemmlab.matmul(a, b, kernel="gemv", MT=16, WARPS=8, UNROLL=4)
