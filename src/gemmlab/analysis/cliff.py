"""The L2 cliff: the size at which the matrices stop fitting in L2, and what it predicts.

For square N x N fp32 matrices, A, B and C together take 12 N^2 bytes: they fit in an L2 of L bytes up
to N = sqrt(L / 12) (2090 on a 50 MiB H100). Past that, what a kernel re-reads from DRAM depends on what
the blocks that sweep K together touch (see `caching`): the naive rung's blocks run as a stream of
one-per-SM cohorts, two of which read all of A, so once A and their slice of B and C exceed the L2 nearly
every block reads its rows of A again from DRAM. Whether that *costs time* depends on
whether DRAM then becomes the longest bound; `l2_cliff` answers that per size with the full model.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from ..kernels.spec import KernelSpec
from ..micro.ceilings import Ceilings
from ..runtime.compiler import Resources
from ..runtime.device import DeviceInfo
from .bounds import Prediction, predict
from .models import KernelModel, model_kernel

ELEM = 4


def n_all_fit(l2_bytes: float) -> int:
    """Largest square N with A, B and C (3 N^2 floats) inside the L2."""
    return int(math.isqrt(int(l2_bytes // (3 * ELEM))))


def n_operands_fit(l2_bytes: float) -> int:
    """Largest square N with A and B (2 N^2 floats) inside the L2."""
    return int(math.isqrt(int(l2_bytes // (2 * ELEM))))


@dataclass
class CliffPoint:
    n: int
    model: KernelModel
    prediction: Prediction

    @property
    def dram_reread(self) -> float:
        """DRAM reads over the compulsory reads (1: every byte of A and B read once)."""
        c = self.model.cache
        return c.dram_read_bytes / c.compulsory_read_bytes if c.compulsory_read_bytes else 1.0

    @property
    def predicted_tflops(self) -> float:
        return self.prediction.attainable_flops / 1e12


@dataclass
class L2Cliff:
    kernel: str
    l2_bytes: float
    n_all_fit: int
    n_operands_fit: int
    points: list[CliffPoint] = field(default_factory=list)

    @property
    def n_reread(self) -> int | None:
        """First size in the sweep at which the model has DRAM re-reading operands (reads > 1.5x compulsory)."""
        for p in self.points:
            if p.dram_reread > 1.5:
                return p.n
        return None

    def predicted_falloff(self) -> float:
        """Predicted rate past the cliff over the rate below it (medians of the sweep's points)."""
        return falloff([p.n for p in self.points], [p.predicted_tflops for p in self.points], self.n_all_fit)


def falloff(sizes: list[int], rates: list[float], n_split: int) -> float:
    """Median rate of the sizes above `n_split` over the median of those at or below it (nan if a side is empty)."""
    below = [r for s, r in zip(sizes, rates) if s <= n_split]
    above = [r for s, r in zip(sizes, rates) if s > n_split]
    if not below or not above:
        return math.nan
    return statistics.median(above) / statistics.median(below)


def l2_cliff(spec: KernelSpec | str, sizes: list[int], params: dict | None, device: DeviceInfo,
             ceilings: Ceilings, resources: Resources | None = None, l2_fraction: float = 1.0) -> L2Cliff:
    pts = []
    name = spec if isinstance(spec, str) else spec.name
    for n in sizes:
        mdl = model_kernel(spec, n, n, n, params, device, resources, l2_fraction=l2_fraction)
        resources = mdl.resources
        pts.append(CliffPoint(n, mdl, predict(mdl, ceilings)))
    cap = device.l2_bytes * l2_fraction
    return L2Cliff(name, cap, n_all_fit(cap), n_operands_fit(cap), pts)
