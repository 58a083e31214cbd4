"""Tests for the CPU baselines (gemmlab.cpu)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmlab.cpu import BASELINES, CpuBaseline, get

NAMES = list(BASELINES)
TILED = [name for name, baseline in BASELINES.items() if "TILE" in baseline.params]
NUMBA_RUNGS = [name for name in NAMES if name != "cpu_blas"]
DTYPES = [np.float32, np.float64]
REL_TOL = {np.float32: 1e-5, np.float64: 1e-12}

# Sizes that stress loop edges: 1, odd sizes, one past a power of two.
EDGE_SIZES = [0, 1, 3, 17, 33, 65]
ALPHA_BETA = [(1.0, 0.0), (1.5, 0.0), (-0.75, 0.0), (1.0, 1.0), (0.5, -2.0), (0.0, 1.5)]
TILES = [8, 13, 24, 64, 512]  # 13 and 24 divide none of the edge sizes


def random_matrix(rng: np.random.Generator, rows: int, cols: int, dtype) -> np.ndarray:
    """Random C-contiguous matrix with entries in +-[0.25, 1]: never zero."""
    magnitude = rng.uniform(0.25, 1.0, size=(rows, cols))
    sign = rng.choice([-1.0, 1.0], size=(rows, cols))
    return np.ascontiguousarray(magnitude * sign, dtype=dtype)


def make_problem(seed: int, m: int, n: int, k: int, dtype, beta: float):
    """A, B and C; with beta == 0, C is all NaN so a read of it would show."""
    rng = np.random.default_rng(seed)
    a = random_matrix(rng, m, k, dtype)
    b = random_matrix(rng, k, n, dtype)
    if beta == 0:
        c = np.full((m, n), np.nan, dtype=dtype)
    else:
        c = random_matrix(rng, m, n, dtype)
    return a, b, c


def reference(a, b, c, alpha, beta) -> np.ndarray:
    """alpha*a@b + beta*c in float64, c ignored when beta == 0."""
    result = alpha * (a.astype(np.float64) @ b.astype(np.float64))
    if beta != 0:
        result += beta * c.astype(np.float64)
    return result


def check_result(result, a, b, c, alpha, beta) -> None:
    expected = reference(a, b, c, alpha, beta)
    assert isinstance(result, np.ndarray)
    assert result.dtype == a.dtype
    assert result.shape == expected.shape
    for operand in (a, b, c):
        assert operand is None or not np.shares_memory(result, operand)
    assert np.isfinite(result).all()
    # Rounding error of a product is bounded by the magnitudes it sums, |alpha| |A| |B| + |beta| |C|, not by
    # the result, which cancellation can make arbitrarily small (one 17-term dot product can cancel to 1e-2).
    magnitude = abs(alpha) * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    if beta != 0:
        magnitude = magnitude + abs(beta) * np.abs(c.astype(np.float64))
    scale = np.linalg.norm(magnitude)
    if scale == 0:  # empty result, or K == 0 with beta == 0
        assert not result.any()
        return
    rel_err = np.linalg.norm(result.astype(np.float64) - expected) / scale
    assert rel_err < REL_TOL[a.dtype.type], rel_err


sizes = st.one_of(st.sampled_from(EDGE_SIZES), st.integers(0, 40))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=30, deadline=None)
@given(
    m=sizes,
    n=sizes,
    k=sizes,
    alpha_beta=st.sampled_from(ALPHA_BETA),
    tile=st.one_of(st.none(), st.sampled_from(TILES)),
    seed=st.integers(0, 2**32 - 1),
)
def test_matches_float64_reference(name, dtype, m, n, k, alpha_beta, tile, seed):
    baseline = get(name)
    alpha, beta = alpha_beta
    a, b, c = make_problem(seed, m, n, k, dtype, beta)
    a_before, b_before, c_before = a.copy(), b.copy(), c.copy()
    params = {"TILE": tile} if tile is not None and "TILE" in baseline.params else {}

    result = baseline.run(a, b, c, alpha, beta, **params)

    check_result(result, a, b, c, alpha, beta)
    np.testing.assert_array_equal(a, a_before)
    np.testing.assert_array_equal(b, b_before)
    np.testing.assert_array_equal(c, c_before)  # NaNs compare equal here


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("name", TILED)
def test_tile_not_dividing_the_sizes(name, tile, dtype):
    a, b, c = make_problem(7, 65, 47, 71, dtype, beta=0.5)
    result = get(name).run(a, b, c, 1.25, 0.5, TILE=tile)
    check_result(result, a, b, c, 1.25, 0.5)


@pytest.mark.parametrize("name", NUMBA_RUNGS)
def test_float32_accumulates_in_float32(name):
    """The numba rungs add the products in float32, k ascending, with no FMA.

    So they must agree bit for bit with a float32 running sum, which differs
    from the float64-accumulated answer.
    """
    a, b, c = make_problem(3, 9, 11, 300, np.float32, beta=-0.5)
    alpha, beta = np.float32(1.5), np.float32(-0.5)
    running_sum = np.zeros((9, 11), dtype=np.float32)
    for k in range(a.shape[1]):
        running_sum += np.outer(a[:, k], b[k, :])  # float32 product, then sum
    expected = alpha * running_sum + beta * c

    result = get(name).run(a, b, c, 1.5, -0.5)

    np.testing.assert_array_equal(result, expected)
    assert not np.array_equal(result, reference(a, b, c, 1.5, -0.5).astype(np.float32))


@pytest.mark.parametrize("name", NAMES)
def test_empty_inner_dimension_gives_beta_c(name):
    a, b, c = make_problem(5, 4, 6, 0, np.float64, beta=2.0)
    np.testing.assert_array_equal(get(name).run(a, b, c, 3.0, 2.0), 2.0 * c)
    zeros = get(name).run(a, b, None, 3.0, 0.0)
    assert zeros.shape == (4, 6) and not zeros.any()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("m, n, k", [(0, 5, 3), (5, 0, 3), (0, 0, 0)])
def test_empty_output(name, m, n, k):
    a, b, c = make_problem(6, m, n, k, np.float32, beta=1.0)
    result = get(name).run(a, b, c, 1.0, 1.0)
    assert result.shape == (m, n) and result.dtype == np.float32


@pytest.mark.parametrize("name", NAMES)
def test_beta_zero_needs_no_c(name):
    a, b, _ = make_problem(8, 5, 7, 3, np.float64, beta=0.0)
    check_result(get(name).run(a, b, None, 2.0, 0.0), a, b, None, 2.0, 0.0)


@pytest.mark.parametrize("name", NAMES)
def test_beta_without_c_is_an_error(name):
    a, b, _ = make_problem(8, 2, 2, 2, np.float64, beta=0.0)
    with pytest.raises(ValueError, match="beta"):
        get(name).run(a, b, None, 1.0, 1.0)


def test_ladder_is_ordered_and_complete():
    assert NAMES == ["cpu_naive", "cpu_reordered", "cpu_blocked", "cpu_threaded", "cpu_blas"]
    assert [baseline.rung for baseline in BASELINES.values()] == [1, 2, 3, 4, 5]
    for name, baseline in BASELINES.items():
        assert isinstance(baseline, CpuBaseline)
        assert baseline.name == name
        assert baseline.idea and "\n" not in baseline.idea
        assert isinstance(baseline.max_cube, int) and baseline.max_cube > 0
        assert baseline.validate({}) == dict(baseline.params)
    assert TILED == ["cpu_blocked", "cpu_threaded"]
    assert all(BASELINES[name].params == {"TILE": 64} for name in TILED)


def test_get_unknown_name_lists_known_names():
    assert get("cpu_blas") is BASELINES["cpu_blas"]
    with pytest.raises(ValueError, match="cpu_naive.*cpu_blas"):
        get("cpu_magic")


@pytest.mark.parametrize("name", TILED)
def test_validate_merges_and_converts(name):
    baseline = get(name)
    assert baseline.validate({"TILE": 8}) == {"TILE": 8}
    assert baseline.validate({"TILE": np.int64(512)}) == {"TILE": 512}
    assert baseline.validate({"TILE": "24"}) == {"TILE": 24}
    assert baseline.params == {"TILE": 64}  # defaults untouched


@pytest.mark.parametrize("bad", [7, 513, 0, -64, 64.0, True, "big", None])
@pytest.mark.parametrize("name", TILED)
def test_validate_rejects_bad_tile(name, bad):
    with pytest.raises(ValueError, match=r"TILE.*8\.\.512"):
        get(name).validate({"TILE": bad})


@pytest.mark.parametrize("name", NAMES)
def test_validate_rejects_unknown_parameter(name):
    allowed = "TILE" if name in TILED else "none"
    with pytest.raises(ValueError, match=f"'BLOCK'.*{allowed}"):
        get(name).validate({"BLOCK": 32})


def test_run_validates_params():
    a, b, c = make_problem(9, 3, 3, 3, np.float64, beta=1.0)
    with pytest.raises(ValueError, match="TILE"):
        get("cpu_blocked").run(a, b, c, 1.0, 1.0, TILE=4)
    with pytest.raises(ValueError, match="TILE"):
        get("cpu_naive").run(a, b, c, 1.0, 1.0, TILE=64)


def test_the_threaded_rung_runs_off_openmp_and_takes_concurrent_callers():
    """Rung 4's pool is TBB or numba's work queue (OpenMP beside the BLAS's threads cost a fixed ~8 ms a
    call), and calls from several threads at once are served one after another, each right."""
    import os
    import threading

    import numba

    a = np.random.default_rng(3).uniform(-1, 1, (200, 150)).astype(np.float32)
    b = np.random.default_rng(4).uniform(-1, 1, (150, 90)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    outs = []

    def work():
        for _ in range(3):
            outs.append(BASELINES["cpu_threaded"].run(a, b, None, 1.0, 0.0))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outs) == 12 and all(np.abs(o - ref).max() < 1e-4 for o in outs)
    if not ({"NUMBA_THREADING_LAYER", "NUMBA_THREADING_LAYER_PRIORITY"} & set(os.environ)):
        assert numba.threading_layer() in ("tbb", "workqueue")
