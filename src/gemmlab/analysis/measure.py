"""Measurements the models are checked against: kernel times with the SM clock they ran at (GPU only).

Timing goes through the harness's `time_gpu` (CUDA events, median, L2 flushed before every sample: a
cold L2, as the models assume). The SM clock is sampled through NVML while the samples run. Results are
`Measurement` records; `report.analysis_section` also accepts the harness's own records.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Sequence

from .. import api
from ..formats import FP32
from ..kernels import registry
from ..kernels.spec import KernelSpec
from ..runtime.clocks import ClockSampler
from ..runtime.device import DeviceInfo, device_info, require_cupy

VERIFY_TOL = FP32.verify_tol


@dataclass
class Measurement:
    kernel: str
    params: dict
    m: int
    n: int
    k: int
    median_ms: float
    iqr_ms: float
    samples: int
    sm_clock_mhz: float | None
    rel_error: float | None = None   # None: not verified at this shape
    ok: bool = True
    l2: str = "cold"
    extra: dict = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.median_ms * 1e-3

    @property
    def tflops(self) -> float:
        return 2.0 * self.m * self.n * self.k / self.seconds / 1e12 if self.median_ms > 0 else 0.0

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Measurement":
        return cls(**d)


def resolve_params(spec: KernelSpec, m: int, n: int, k: int, given: dict | None,
                   device: DeviceInfo | None = None) -> dict[str, int]:
    """The parameters a call runs with: the given ones, else what `gemmlab.matmul` would pick (tuned entry
    or heuristic), else the defaults; always the full validated set."""
    if given:
        return spec.validate(given)
    if device is not None and device.index >= 0:
        try:
            return spec.validate(api.default_params(spec, m, n, k, device))
        except Exception:
            pass
    if spec.heuristic is not None and device is not None:
        return spec.validate(spec.heuristic(m, n, k, device.sm_count, "float32"))  # fp32 operands
    return spec.validate({})


class _Operands:
    """Flat device buffers reused across shapes (views of their first elements are C-contiguous)."""

    def __init__(self, seed: int = 0):
        self.cp = require_cupy()
        self.rng = self.cp.random.default_rng(seed)
        self.bufs: dict[str, object] = {}

    def get(self, name: str, rows: int, cols: int):
        cp = self.cp
        need = rows * cols
        buf = self.bufs.get(name)
        if buf is None or buf.size < need:
            buf = self.rng.uniform(-1, 1, max(need, 1), dtype=cp.float32)
            self.bufs[name] = buf
        return buf[:need].reshape(rows, cols)


def _rel_error(c, a, b) -> float:
    """||C - A B|| / ||A B|| with a float64 reference on the GPU; inf if C holds a NaN or an infinity."""
    from ..bench.ladder import rel_error

    cp = require_cupy()
    return rel_error(c, a.astype(cp.float64) @ b.astype(cp.float64))


def _time(fn: Callable[[], object], budget_ms: float, index: int):
    from ..bench.timing import time_gpu

    with ClockSampler(index) as clocks:
        timing = time_gpu(fn, budget_ms=budget_ms)
    return timing, clocks.sm_mhz


def measure(kernel: str, m: int, n: int, k: int, params: dict | None = None, *, budget_ms: float = 200.0,
            verify: bool = True, operands: _Operands | None = None) -> Measurement:
    """Verify (optionally) and time one kernel at one shape; a kernel that fails verification is not timed."""
    cp = require_cupy()
    dev = device_info()
    ops = operands or _Operands()
    a, b, c = ops.get("A", m, k), ops.get("B", k, n), ops.get("C", m, n)
    if kernel == "cublas":
        from ..bench.peers import cublas_sgemm

        p: dict = {}
        fn: Callable[[], object] = lambda: cublas_sgemm(a, b, c)
    else:
        spec = registry.get(kernel)
        p = resolve_params(spec, m, n, k, params, dev)
        fn = lambda: api.matmul(a, b, c, kernel=kernel, **p)
    err = None
    if verify:
        c.fill(float("nan"))
        fn()
        err = _rel_error(c, a, b)
        if not err < VERIFY_TOL:
            return Measurement(kernel, p, m, n, k, 0.0, 0.0, 0, None, err, ok=False)
    timing, mhz = _time(fn, budget_ms, dev.index)
    cp.cuda.get_current_stream().synchronize()
    return Measurement(kernel, p, m, n, k, timing.median_ms, timing.iqr_ms, timing.samples, mhz, err)


def sweep(kernel: str, shapes: Sequence[tuple[int, int, int]], params: dict | None = None, *,
          budget_ms: float = 60.0, verify_every: int = 0,
          on_result: Callable[[Measurement], None] | None = None) -> list[Measurement]:
    """Time one kernel over many shapes with fixed parameters (the defaults when none are given).

    The first and last shapes are verified, and every `verify_every`-th one when it is positive.
    """
    spec = registry.get(kernel)
    p = spec.validate(params or {})
    ops = _Operands()
    out = []
    for i, (m, n, k) in enumerate(shapes):
        check = i in (0, len(shapes) - 1) or (verify_every > 0 and i % verify_every == 0)
        r = measure(kernel, m, n, k, p, budget_ms=budget_ms, verify=check, operands=ops)
        out.append(r)
        if on_result:
            on_result(r)
    return out


def measure_many(entries: Iterable[tuple[str, int, int, int, dict | None]], *, budget_ms: float = 200.0,
                 on_result: Callable[[Measurement], None] | None = None) -> list[Measurement]:
    ops = _Operands()
    out = []
    for name, m, n, k, p in entries:
        r = measure(name, m, n, k, p, budget_ms=budget_ms, operands=ops)
        out.append(r)
        if on_result:
            on_result(r)
    return out


@dataclass
class Calibration:
    """One block alone on each SM against a full SM: the single-block speed s1 of the wave model."""

    kernel: str
    params: dict
    blocks_per_sm: int
    single_block_speed: float
    one_per_sm: Measurement | None
    full: Measurement | None
    note: str = ""


def calibrate_single_block_speed(kernel: str, params: dict | None = None, k: int = 4096, *,
                                 budget_ms: float = 100.0) -> Calibration:
    """Time a grid of exactly one tile per SM and one of blocks-per-SM tiles per SM, same tile work.

    An SM that one block fills (s1 = 1) takes b times as long for b blocks; one that needs all b to stay
    busy (s1 = 1/b) takes the same time. s1 = t_full / (b x t_one), clamped to [1/b, 1].
    """
    from .models import model_kernel

    dev = device_info()
    spec = registry.get(kernel)
    p = spec.validate(params or {})
    mdl = model_kernel(spec, 4096, 4096, k, p, dev)
    b = max(1, mdl.occupancy.blocks_per_sm)
    if b == 1:
        return Calibration(kernel, p, 1, 1.0, None, None, "one block per SM: the wave model needs no calibration")
    g = mdl.geometry
    S = dev.sm_count
    # Lay the SMs' tiles along the dimension blockIdx.x does *not* walk, so that round-robin hands each
    # SM one tile (and, for the full grid, b tiles).
    if g.x_walks == "n":
        one, full = (g.tile_m * S, g.tile_n, k), (g.tile_m * S, g.tile_n * b, k)
    else:
        one, full = (g.tile_m, g.tile_n * S, k), (g.tile_m * b, g.tile_n * S, k)
    ops = _Operands()
    r1 = measure(kernel, *one, p, budget_ms=budget_ms, verify=False, operands=ops)
    rb = measure(kernel, *full, p, budget_ms=budget_ms, verify=False, operands=ops)
    s1 = rb.seconds / (b * r1.seconds) if r1.seconds > 0 else 1.0
    s1 = min(1.0, max(1.0 / b, s1))
    return Calibration(kernel, p, b, s1, r1, rb,
                       f"{S} tiles: {r1.median_ms:.3f} ms; {S * b} tiles: {rb.median_ms:.3f} ms")
