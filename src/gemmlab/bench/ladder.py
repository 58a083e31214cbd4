"""The first benchmark: every rung and cuBLAS at a few sizes, verified, timed side by side.

Each size gets fresh random inputs in [-1, 1) (never zeros). Every kernel's output is checked against a
float64 product computed on the GPU before the kernel is timed; a kernel that fails the check is
reported as failed and not timed. cuBLAS (strict fp32) is timed in the same run, so the percentages are
ratios measured side by side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from .. import api
from ..formats import FP32
from ..kernels import registry
from ..runtime.device import device_info, require_cupy
from . import peers
from .timing import Timing, time_gpu, tflops

VERIFY_TOL = FP32.verify_tol  # ||C - ref|| / ||ref|| for fp32 accumulation up to K ~ 16k


@dataclass
class LadderResult:
    kernel: str
    m: int
    n: int
    k: int
    params: dict
    rel_error: float
    ok: bool
    timing: Timing | None

    @property
    def tflops(self) -> float:
        return tflops(self.m, self.n, self.k, self.timing.median_ms) if self.timing else 0.0


def rel_error(c, ref) -> float:
    """||C - ref|| / ||ref|| in float64; inf if C has a NaN or an infinity."""
    cp = require_cupy()
    c64 = c.astype(cp.float64)
    if not bool(cp.isfinite(c64).all()):
        return float("inf")
    den = float(cp.linalg.norm(ref))
    num = float(cp.linalg.norm(c64 - ref))
    return num / den if den else num


def run_ladder(
    sizes: Iterable[int | tuple[int, int, int]],
    kernels: Sequence[str | tuple[str, dict]] | None = None,
    *,
    budget_ms: float = 300.0,
    include_cublas: bool = True,
    seed: int = 0,
    on_result: Callable[[LadderResult], None] | None = None,
) -> list[LadderResult]:
    cp = require_cupy()
    entries = [(k, {}) if isinstance(k, str) else (k[0], dict(k[1])) for k in (kernels or [s.name for s in registry.specs_for_dtype("float32")])]
    out: list[LadderResult] = []
    rng = cp.random.default_rng(seed)
    for size in sizes:
        m, n, k = (size, size, size) if isinstance(size, int) else size
        a = rng.uniform(-1, 1, (m, k), dtype=cp.float32)
        b = rng.uniform(-1, 1, (k, n), dtype=cp.float32)
        ref = a.astype(cp.float64) @ b.astype(cp.float64)
        c = cp.empty((m, n), dtype=cp.float32)
        runners: list[tuple[str, dict, Callable[[], object]]] = []
        if include_cublas:
            runners.append(("cublas", {}, lambda: peers.cublas_sgemm(a, b, c)))
        for name, given in entries:
            spec = registry.get(name)
            chosen = given or api.default_params(spec, m, n, k, device_info())  # what matmul will run
            prepared = api.prepare(spec, chosen)
            runners.append((name, prepared.params,
                            lambda name=name, chosen=chosen: api.matmul(a, b, c, kernel=name, **chosen)))
        for name, params, fn in runners:
            c.fill(float("nan"))  # poison: an element the kernel does not write fails the check
            fn()
            err = rel_error(c, ref)
            ok = err < VERIFY_TOL
            timing = time_gpu(fn, budget_ms=budget_ms) if ok else None
            res = LadderResult(name, m, n, k, params, err, ok, timing)
            out.append(res)
            if on_result:
                on_result(res)
        del a, b, c, ref
    return out
