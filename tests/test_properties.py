"""Property-based tests of the public API's inputs, on the host path (no GPU needed): whatever shapes
(0 included), strides (transposed, stepped, negative, broadcast), dtypes, scalars, kernels and parameters a
caller passes, `gemmlab.matmul` either returns the right product or raises a ValueError, a TypeError or a
GemmlabError (e.g. a GPU rung without a GPU) whose message is one line; never another exception, never a
wrong number.

CI runs `EXAMPLES` cases per property; GEMMLAB_HYPOTHESIS_EXAMPLES=10000 runs more.
"""

import math
import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import gemmlab
from gemmlab.runtime.errors import GemmlabError

EXAMPLES = int(os.environ.get("GEMMLAB_HYPOTHESIS_EXAMPLES", "150"))
ALLOWED = (ValueError, TypeError, GemmlabError)
DIMS = st.sampled_from([0, 1, 2, 3, 5, 8, 17])
DTYPES = st.sampled_from([np.float32, np.float64, np.float16, np.int32, np.bool_, np.complex64])
KERNELS = st.sampled_from(["auto", "cpu_naive", "cpu_reordered", "cpu_blocked", "cpu_blas", "naive", "sgemm",
                           "nope", "cpu_", ""])
SCALARS = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.integers(-3, 3),
                    st.sampled_from(["1", None, True, 1j]))
LAYOUTS = st.sampled_from(["c", "f", "transposed", "stepped", "reversed", "broadcast"])


def _array(rng, rows, cols, dtype, layout):
    """A rows x cols array of `dtype` laid out as `layout` (a view where the layout is one)."""
    side = 2 * max(rows, cols) + 1  # room for every layout's view (a transpose swaps the sides)
    base = rng.uniform(-1, 1, (side, side)).astype(dtype) if dtype != np.bool_ else \
        rng.uniform(-1, 1, (side, side)) > 0
    if layout == "c":
        return np.ascontiguousarray(base[:rows, :cols])
    if layout == "f":
        return np.asfortranarray(base[:rows, :cols])
    if layout == "transposed":
        return np.ascontiguousarray(base[:cols, :rows]).T
    if layout == "stepped":
        return base[: 2 * rows : 2, : 2 * cols : 2]
    if layout == "reversed":
        return base[:rows, :cols][::-1, ::-1]
    return np.broadcast_to(base[:1, :cols], (rows, cols)) if cols else base[:rows, :0]


def _reference(a, b, c, alpha, beta):
    z = alpha * (a.astype(np.float64) @ b.astype(np.float64))
    if c is not None and beta != 0:
        z = z + beta * c.astype(np.float64)
    return z


def _one_line(exc):
    text = str(exc).strip()
    assert text and "Traceback" not in text, repr(exc)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(m=DIMS, n=DIMS, k=DIMS, k2=st.one_of(st.none(), DIMS), dt_a=DTYPES, dt_b=DTYPES,
       la=LAYOUTS, lb=LAYOUTS, with_c=st.booleans(), alpha=SCALARS, beta=SCALARS, kernel=KERNELS,
       params=st.dictionaries(st.sampled_from(["TILE", "BLOCK_DIM", "BM", "out", "x"]),
                              st.one_of(st.integers(-2, 70), st.sampled_from([2**31, "8", None])), max_size=2),
       seed=st.integers(0, 2**16))
def test_matmul_is_right_or_refuses_with_one_line(m, n, k, k2, dt_a, dt_b, la, lb, with_c, alpha, beta, kernel,
                                                  params, seed):
    rng = np.random.default_rng(seed)
    a = _array(rng, m, k, dt_a, la)
    b = _array(rng, k if k2 is None else k2, n, dt_b, lb)
    c = _array(rng, m, n, dt_a, "c") if with_c else None
    c_before = None if c is None else c.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the one-time "no GPU: cpu_blas" notice
        try:
            out = gemmlab.matmul(a, b, c, alpha=alpha, beta=beta, kernel=kernel, **params)
        except ALLOWED as exc:
            _one_line(exc)
            if c is not None:
                assert np.array_equal(c, c_before, equal_nan=True), "a refused call wrote into C"
            return
    # It ran: the product must be right.
    assert kernel in ("auto",) or kernel.startswith("cpu_"), (kernel, "ran without a GPU")
    assert isinstance(alpha, (int, float)) and isinstance(beta, (int, float)) and not isinstance(alpha, bool)
    assert math.isfinite(alpha) and math.isfinite(beta)
    ref = _reference(a, b, c_before, alpha, beta)
    got = np.asarray(out, dtype=np.float64)
    assert got.shape == (m, n)
    with np.errstate(over="ignore"):
        beyond = ~np.isfinite(ref.astype(np.asarray(out).dtype))  # past the output format's range: inf
    assert np.array_equal(np.isinf(got), beyond) and np.all(np.sign(got[beyond]) == np.sign(ref[beyond]))
    got, ref = np.where(beyond, 0, got), np.where(beyond, 0, ref)
    tol = 1e-2 if np.float16 in (dt_a, dt_b) else 1e-5
    scale = (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))) * abs(alpha) + 1.0
    if c_before is not None:
        scale = scale + abs(beta) * np.abs(c_before.astype(np.float64))
    assert np.all(np.abs(got - ref) <= tol * scale), (kernel, a.dtype, b.dtype)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(shape_a=st.lists(st.sampled_from([0, 1, 2, 3, 2**31 - 1, 2**31, 2**40]), min_size=0, max_size=4),
       shape_b=st.lists(st.sampled_from([0, 1, 2, 3, 2**31 - 1, 2**31]), min_size=0, max_size=4),
       kernel=st.sampled_from(["auto", "cpu_blas", "sgemm"]))
def test_huge_and_odd_ranks_are_refused_or_empty(shape_a, shape_b, kernel):
    """Shapes up to and past the 32-bit limits (as zero-stride views: no memory behind them), and ranks 0
    to 4: an empty result, or a clear refusal, never an attempt to allocate or compute them."""
    try:
        a = np.broadcast_to(np.float32(1), tuple(shape_a))
        b = np.broadcast_to(np.float32(1), tuple(shape_b))
    except ValueError:
        assume(False)  # numpy itself cannot describe the operands
    big = [d for d in (*shape_a, *shape_b) if d >= 2**31 - 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = gemmlab.matmul(a, b, kernel=kernel)
        except ALLOWED as exc:
            _one_line(exc)
            return
    assert np.asarray(out).size == 0 or not big, (shape_a, shape_b)


@pytest.mark.parametrize("shape_a,shape_b", [((2**31 - 1, 1), (1, 0)), ((0, 2**31 - 1), (2**31 - 1, 3))])
def test_an_empty_product_of_huge_sides_is_empty(shape_a, shape_b):
    a = np.broadcast_to(np.float32(1), shape_a)
    b = np.broadcast_to(np.float32(1), shape_b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = gemmlab.matmul(a, b)
    assert out.shape == (shape_a[0], shape_b[1]) and out.size == 0


# ------------------------------------------------------------------------------------ gemmlab report's inputs

JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63), st.floats(allow_nan=True, allow_infinity=True),
              st.sampled_from(["", "$\\foo$", "a_b^c", "\\", "nan", "inf", "-1", "0", "1e400", "GPU $x$ \\alpha"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8)


@settings(max_examples=EXAMPLES if "GEMMLAB_HYPOTHESIS_EXAMPLES" in os.environ else 80, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(edits=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(
    ["median_ms", "m", "n", "k", "kernel", "label", "gpu", "l2", "mode", "family", "rung", "dtype", "status",
     "rel_error", "tflops", "params", "sm_count", "peak_tflops", "precision", "batch", "q1_ms"]), JSON_VALUES),
    max_size=6), drop=st.booleans())
def test_report_reads_any_damage_to_a_results_file(edits, drop, tmp_path_factory):
    """Any field of any record replaced by any JSON value (or records removed): loading and building the
    report end in sections or in a ValueError of one line, never in another exception."""
    import json as _json

    from gemmlab.bench.records import load
    from gemmlab.report import build_report
    from gemmlab.report.render import markdown
    from test_report import synthetic

    doc = _json.loads(synthetic().to_json())
    for i, field, value in edits:
        doc["records"][i % len(doc["records"])][field] = value
    if drop:
        doc["records"] = doc["records"][::3]
    path = tmp_path_factory.mktemp("r") / "results.json"
    path.write_text(_json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            res = load([path], warn=lambda _: None)
            markdown(build_report(res))
        except ValueError as exc:
            _one_line(exc)
