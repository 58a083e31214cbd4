"""Measurements the models are checked against: kernel times with the SM clock they ran at (GPU only).

Every figure here comes from the harness's one measuring function (`bench.measure`): verified against a
float64 product, timed with CUDA events and the L2 flushed before every sample (a cold L2, as the models
assume), the SM clock read during the kept batches. The results are the harness's `Record`s, which
`report.analysis_section` reads like any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from .. import api
from ..bench.measure import measure_one
from ..bench.records import Record
from ..formats import format_named
from ..kernels import registry
from ..kernels.spec import KernelSpec
from ..runtime.device import DeviceInfo, device_info


def resolve_params(spec: KernelSpec, m: int, n: int, k: int, given: dict | None,
                   device: DeviceInfo | None = None, element: str = "float32") -> dict[str, int]:
    """The parameters a call on `element` operands ("float32", "tf32", "float16", "bfloat16") runs with: the
    given ones, else what `gemmlab.matmul` would pick (tuned entry or heuristic), else the defaults; always
    the full validated set (type parameters at their defaults: `bench.measure.callable_params` strips them
    for a call, and the model sets them from the format)."""
    if given:
        return spec.validate(given)
    if device is not None and device.index >= 0:
        try:
            return spec.validate(api.default_params(spec, m, n, k, device, element=element))
        except Exception:
            pass
    if spec.heuristic is not None and device is not None:
        return spec.validate(spec.heuristic(m, n, k, device.sm_count, element))
    return spec.validate({})


def sweep(kernel: str, shapes: Sequence[tuple[int, int, int]], params: dict | None = None, *,
          budget_ms: float = 60.0, on_result: Callable[[Record], None] | None = None,
          fmt: str = "fp32") -> list[Record]:
    """Time one kernel over many shapes with fixed parameters (the defaults when none are given) in number
    format `fmt`, each shape verified and timed by `bench.measure`."""
    spec = registry.get(kernel)
    p = spec.validate(params or {})
    out = []
    for m, n, k in shapes:
        r = measure_one(kernel, m, n, k, p, budget_ms=budget_ms, fmt=fmt)
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
    one_per_sm: Record | None
    full: Record | None
    note: str = ""


def calibrate_single_block_speed(kernel: str, params: dict | None = None, k: int = 4096, *,
                                 budget_ms: float = 100.0, fmt: str = "fp32") -> Calibration:
    """Time a grid of exactly one tile per SM and one of blocks-per-SM tiles per SM, same tile work.

    An SM that one block fills (s1 = 1) takes b times as long for b blocks; one that needs all b to stay
    busy (s1 = 1/b) takes the same time. s1 = t_full / (b x t_one), clamped to [1/b, 1].
    """
    from .models import model_kernel

    dev = device_info()
    spec = registry.get(kernel)
    p = spec.validate(params or {})
    nf = format_named(fmt)
    mdl = model_kernel(spec, 4096, 4096, k, p, dev, dtype=nf.dtype, precision=nf.precision)
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
    r1 = measure_one(kernel, *one, p, budget_ms=budget_ms, fmt=fmt)
    rb = measure_one(kernel, *full, p, budget_ms=budget_ms, fmt=fmt)
    if not (r1.ok and rb.ok):
        return Calibration(kernel, p, b, 1.0, r1, rb, "a calibration grid failed verification: not calibrated")
    s1 = rb.seconds / (b * r1.seconds) if r1.seconds > 0 else 1.0
    s1 = min(1.0, max(1.0 / b, s1))
    return Calibration(kernel, p, b, s1, r1, rb,
                       f"{S} tiles: {r1.median_ms:.3f} ms; {S * b} tiles: {rb.median_ms:.3f} ms")
