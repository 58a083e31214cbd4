"""CPU baselines: a five-rung ladder from the textbook triple loop to BLAS.

Every baseline computes ``alpha * a @ b + beta * c`` for row-major (C-contiguous)
float32 or float64 arrays, with a of shape (M, K), b of shape (K, N) and c of
shape (M, N) or None, and returns a new array of ``a.dtype``.

Each rung is split into two steps:

* a *product kernel* that writes ``a @ b`` into a fresh array, accumulating in
  the input dtype (float32 stays float32, like the GPU kernels);
* a shared *epilogue* that applies alpha and beta.  It reads c only when
  ``beta != 0``, so NaN or garbage in c can never leak into the result.

The kernels are numba functions compiled lazily on first call (one
specialisation per dtype) and cached on disk; importing this module compiles
nothing.  ``fastmath`` stays off, so the compiler may neither reassociate
sums nor fuse multiply-adds: the float results are the plain loop's.

Throughput quoted below was measured on one core of an AMD EPYC (48 KiB L1d,
1 MiB L2 per core, 32 MiB L3; a shared VM, so +-20%) for float64 square
matrices with TILE=64.  float32 runs about twice as fast once a kernel
vectorises, because a SIMD register holds twice as many elements.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import os
import threading

import numba
import numpy as np

# The threading layer of rung 4's prange: TBB where it is installed, else numba's own work queue, OpenMP last.
# With OpenMP first (numba's default order where no TBB is found), each parallel call cost a fixed ~8 ms beside
# the BLAS library's OpenMP threads (measured at N = 128 and 256: 8.0 ms a call, against 0.22 and 1.1 ms on the
# work queue), which made the threaded rung slower than the single-threaded one. A caller's own choice
# (NUMBA_THREADING_LAYER or NUMBA_THREADING_LAYER_PRIORITY) is left as it is.
if not ({"NUMBA_THREADING_LAYER", "NUMBA_THREADING_LAYER_PRIORITY"} & set(os.environ)):
    numba.config.THREADING_LAYER_PRIORITY = ["tbb", "workqueue", "omp"]

__all__ = ["BASELINES", "CpuBaseline", "get"]

# Inclusive bounds of every tunable parameter any baseline may declare.
# TILE need not be a power of two nor divide the matrix sizes: edge tiles are
# clipped.  Below 8 the loop bookkeeping outweighs the work of a tile; above
# 512 a TILE x TILE block of A (2 MiB in float64) no longer fits in L2, so
# nothing is left to gain.
_PARAM_BOUNDS: dict[str, tuple[int, int]] = {"TILE": (8, 512)}


# --------------------------------------------------------------------------
# Product kernels: out[:, :] = a @ b, accumulated in out.dtype.
# --------------------------------------------------------------------------


@numba.njit(cache=True, fastmath=False)
def _naive_product(a, b, out):
    """Rung 1, i-j-k: one dot product per element of C.

    The inner loop walks down a column of B, a stride of N elements, so every
    multiply-add touches a new cache line (64 bytes fetched, 8 used), and the
    running sum is one long dependency chain that cannot be vectorised without
    reassociating it.  About 1.5 GFLOP/s at n=256, 0.5 GFLOP/s at n=1024.
    """
    m, depth = a.shape
    n = b.shape[1]
    for i in range(m):
        for j in range(n):
            acc = out.dtype.type(0)
            for k in range(depth):
                acc += a[i, k] * b[k, j]
            out[i, j] = acc


@numba.njit(cache=True, fastmath=False)
def _reordered_product(a, b, out):
    """Rung 2, i-k-j: C's row i accumulates a[i, k] times row k of B.

    The inner loop now streams one row of B and one row of C, both contiguous,
    so every byte of each fetched cache line is used and the independent
    element updates map straight onto SIMD lanes (no reassociation needed).
    About 20 GFLOP/s while B fits in cache (n <= 1024, 40x rung 1), dropping to
    about 6 GFLOP/s at n=2048, when all of B (32 MiB) is re-read from memory
    for every row of C.
    """
    m, depth = a.shape
    out[:, :] = 0
    for i in range(m):
        out_row = out[i]
        for k in range(depth):
            a_ik = a[i, k]
            b_row = b[k]
            for j in range(out_row.shape[0]):
                out_row[j] += a_ik * b_row[j]


@numba.njit(cache=True, fastmath=False)
def _row_block_product(a, b, out, row_start, row_stop, tile):
    """Blocked i-k-j product for the rows row_start..row_stop-1 of C.

    K is cut into panels of `tile` rows of B; each panel is used by all the
    rows of the block before the next panel is loaded, so B is read from
    memory once per row block rather than once per row.  N is deliberately
    left whole: the inner loop runs along full rows and stays vectorised,
    whereas tiling it as well measured slower (short loops pay their set-up
    cost too often: 10 against 15 GFLOP/s at n=2048, TILE=64).
    """
    depth = a.shape[1]
    out[row_start:row_stop, :] = 0
    for k_start in range(0, depth, tile):
        k_stop = min(k_start + tile, depth)
        for i in range(row_start, row_stop):
            out_row = out[i]
            for k in range(k_start, k_stop):
                a_ik = a[i, k]
                b_row = b[k]
                for j in range(out_row.shape[0]):
                    out_row[j] += a_ik * b_row[j]


@numba.njit(cache=True, fastmath=False)
def _blocked_product(a, b, out, tile):
    """Rung 3: the row-block kernel over all row blocks, one after another.

    A TILE x N panel of B is reused TILE times while it sits in cache, so the
    memory traffic for B falls by a factor of TILE; at n=2048 this runs at
    15-19 GFLOP/s against 6 for rung 2, and still 13-17 at n=3072.  (While B
    fits in cache, n <= 1024, rungs 2 and 3 are within ~30% of each other.)
    """
    m = a.shape[0]
    for row_start in range(0, m, tile):
        _row_block_product(a, b, out, row_start, min(row_start + tile, m), tile)


@numba.njit(cache=True, fastmath=False, parallel=True)
def _threaded_product(a, b, out, tile):
    """Rung 4: rung 3 with the row blocks shared among threads (prange).

    Row blocks write disjoint rows of C, so they need no synchronisation; the
    speed-up is close to the number of cores as long as there are at least as
    many row blocks (M / TILE) as cores.
    """
    m = a.shape[0]
    n_blocks = (m + tile - 1) // tile
    for block in numba.prange(n_blocks):
        row_start = block * tile
        _row_block_product(a, b, out, row_start, min(row_start + tile, m), tile)


# --------------------------------------------------------------------------
# Python wrappers: allocate the result and call a kernel.
# --------------------------------------------------------------------------


def _empty_result(a, b):
    return np.empty((a.shape[0], b.shape[1]), dtype=a.dtype)


def _run_naive(a, b):
    out = _empty_result(a, b)
    _naive_product(a, b, out)
    return out


def _run_reordered(a, b):
    out = _empty_result(a, b)
    _reordered_product(a, b, out)
    return out


def _run_blocked(a, b, TILE):
    out = _empty_result(a, b)
    _blocked_product(a, b, out, TILE)
    return out


_threaded_lock = threading.Lock()


def _run_threaded(a, b, TILE):
    """One parallel product at a time: the work queue runs one parallel region per process (two at once would
    abort it), and one already takes every core."""
    out = _empty_result(a, b)
    with _threaded_lock:
        _threaded_product(a, b, out, TILE)
    return out


def _run_blas(a, b):
    return np.matmul(a, b)


def _apply_alpha_beta(product, c, alpha, beta):
    """Turn a@b into alpha*a@b + beta*c in place; c is read only if beta != 0."""
    scalar = product.dtype.type
    if alpha != 1:
        product *= scalar(alpha)
    if beta != 0:
        if c is None:
            raise ValueError("beta != 0 needs a C matrix, got c=None")
        product += scalar(beta) * c
    return product


# --------------------------------------------------------------------------
# The ladder.
# --------------------------------------------------------------------------


def _check_param(baseline: str, name: str, value: object) -> int:
    low, high = _PARAM_BOUNDS[name]
    if isinstance(value, str):  # e.g. "TILE=32" from a command line
        try:
            value = int(value)
        except ValueError:
            pass
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if low <= value <= high:
            return int(value)
    raise ValueError(
        f"{baseline}: parameter {name} must be an integer in {low}..{high} "
        f"(inclusive), got {value!r}"
    )


@dataclass(frozen=True)
class CpuBaseline:
    """One rung of the CPU ladder; see the module docstring for semantics."""

    name: str
    rung: int
    idea: str
    params: Mapping[str, int]
    max_cube: int
    _product: Callable[..., np.ndarray] = field(repr=False, compare=False)

    def validate(self, params: Mapping[str, object]) -> dict[str, int]:
        """Return the defaults overridden by `params`, checked."""
        merged = dict(self.params)
        for name, value in params.items():
            if name not in self.params:
                allowed = ", ".join(self.params) or "none"
                raise ValueError(
                    f"{self.name}: unknown parameter {name!r}; "
                    f"allowed parameters: {allowed}"
                )
            merged[name] = _check_param(self.name, name, value)
        return merged

    def run(self, a, b, c, alpha: float, beta: float, **params) -> np.ndarray:
        """Return a new array alpha*a@b + beta*c of dtype a.dtype."""
        product = self._product(a, b, **self.validate(params))
        return _apply_alpha_beta(product, c, alpha, beta)


# max_cube: largest M=N=K that takes about 5 s on one core (measured float64,
# the slower dtype).  The threaded rung uses the same one-core rule as the
# blocked rung it parallelises, so sweeps stay bounded on small machines.
_LADDER = (
    CpuBaseline(
        name="cpu_naive",
        rung=1,
        idea="textbook i-j-k loop: a dot product per element of C, walking down "
        "columns of B (one cache line per multiply-add)",
        params={},
        max_cube=1024,
        _product=_run_naive,
    ),
    CpuBaseline(
        name="cpu_reordered",
        rung=2,
        idea="i-k-j loop order: the inner loop streams contiguous rows of B and C, "
        "so whole cache lines are used and it vectorises",
        params={},
        max_cube=2048,
        _product=_run_reordered,
    ),
    CpuBaseline(
        name="cpu_blocked",
        rung=3,
        idea="cache blocking: each TILE-row panel of B is reused by TILE rows of C "
        "while in cache, instead of being re-read from memory for every row",
        params={"TILE": 64},
        max_cube=3072,
        _product=_run_blocked,
    ),
    CpuBaseline(
        name="cpu_threaded",
        rung=4,
        idea="the blocked kernel with row blocks spread over all cores by numba "
        "prange (disjoint rows of C, no locking)",
        params={"TILE": 64},
        max_cube=3072,
        _product=_run_threaded,
    ),
    CpuBaseline(
        name="cpu_blas",
        rung=5,
        idea="numpy's @ (the linked BLAS): register-blocked, packed, FMA micro-kernels "
        "tuned per CPU: the reference for what a tuned library does",
        params={},
        max_cube=5120,
        _product=_run_blas,
    ),
)

BASELINES: dict[str, CpuBaseline] = {baseline.name: baseline for baseline in _LADDER}


def get(name: str) -> CpuBaseline:
    """Return the baseline called `name`; ValueError lists the known names."""
    try:
        return BASELINES[name]
    except KeyError:
        known = ", ".join(BASELINES)
        raise ValueError(f"unknown CPU baseline {name!r}; known: {known}") from None
