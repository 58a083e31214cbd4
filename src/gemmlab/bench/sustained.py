"""Calls run back to back at the power limit: time, clock, power and energy per call.

The interleaved harness (`timing.time_interleaved`) flushes L2 before every sample, and the flush's memset
lowers the board's power between calls. A large GEMM run back to back instead sits at the board's power limit
(700 W on an H100 SXM), where the SM clock settles wherever the power drawn meets it: time per call is then
energy per call over the limit, and a kernel that takes fewer cycles but spends more energy per cycle is not
faster. `time_sustained` measures that state: every call runs back to back for `seconds` per turn, turns
alternate in order (as in the interleaved harness), the first turn comes after `warmup_s` of the first call
(so no call is measured on a cool GPU), and NVML's SM clock and board power are sampled meanwhile
(`runtime.clocks.ClockSampler`). Per call: milliseconds (CUDA events around the turn / calls), the median SM
clock, the median power, and from them cycles (time x clock) and joules (power x time). Operands stay in
L2 where they fit: this is the steady state of a layer run again and again, not a cold call.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from ..runtime.device import require_cupy


@dataclass
class Turn:
    """One turn of one call: milliseconds per call, median SM MHz and board watts while it ran (None where NVML
    gave none), the calls made, NVML's throttle-reason bit masks seen, and the SM clock measured on the GPU
    between the calls (runtime.clocks.ClockProbe; None without probes)."""

    ms: float
    sm_mhz: float | None
    watts: float | None
    calls: int
    reasons: tuple[int, ...] = ()
    probe_mhz: float | None = None


@dataclass
class Sustained:
    """The median over a call's turns."""

    name: str
    turns: list[Turn] = field(default_factory=list)

    @property
    def ms(self) -> float:
        return statistics.median(t.ms for t in self.turns)

    def _median(self, attr: str) -> float | None:
        xs = [getattr(t, attr) for t in self.turns if getattr(t, attr) is not None]
        return statistics.median(xs) if xs else None

    @property
    def sm_mhz(self) -> float | None:
        return self._median("sm_mhz")

    @property
    def watts(self) -> float | None:
        return self._median("watts")

    @property
    def probe_mhz(self) -> float | None:
        """The SM clock counted on the GPU between calls (cycles over global-timer nanoseconds)."""
        return self._median("probe_mhz")

    @property
    def kcycles(self) -> float | None:
        """SM cycles per call, in thousands (time x the median clock)."""
        return self.ms * self.sm_mhz if self.sm_mhz else None

    @property
    def joules(self) -> float | None:
        """Board energy per call (median power x time)."""
        return self.watts * self.ms * 1e-3 if self.watts else None

    @property
    def power_limited(self) -> bool:
        """NVML reported the software power cap (bit 0x4) in every turn."""
        return bool(self.turns) and all(any(r & 0x4 for r in t.reasons) for t in self.turns)


def rounds(names: Sequence[str], turns: int, take: Callable[[str], Turn]) -> dict[str, Sustained]:
    """`turns` rounds over `names`, forward then backward (no call always follows the same one); `take(name)`
    runs one turn. The pure part of `time_sustained`."""
    if turns < 1:
        raise ValueError(f"turns must be at least 1, got {turns}")
    out = {n: Sustained(n) for n in names}
    for r in range(turns):
        for name in (names if r % 2 == 0 else list(reversed(names))):
            out[name].turns.append(take(name))
    return out


def time_sustained(calls: Mapping[str, Callable[[], object]], seconds: float = 1.0, turns: int = 2,
                   warmup_s: float = 2.0, settle_calls: int = 20, device_index: int | None = None,
                   probe_every: int = 0) -> dict[str, Sustained]:
    """Each call run back to back for `seconds` per turn, `turns` turns in alternating order (module
    docstring). GPU only; the calls run on the current stream. `probe_every` > 0: a clock probe
    (runtime.clocks.ClockProbe, 20 us) after every that many calls, its time taken out of the call's."""
    from ..runtime.clocks import ClockProbe, ClockSampler

    if not calls:
        raise ValueError("time_sustained needs at least one call")
    if seconds <= 0 or warmup_s < 0:
        raise ValueError(f"seconds must be positive and warmup_s non-negative, got {seconds} and {warmup_s}")
    cp = require_cupy()
    dev = cp.cuda.Device().id if device_index is None else device_index
    names = list(calls)
    for fn in calls.values():  # compile, load, and check that every call runs before any turn
        fn()
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    first = calls[names[0]]
    while time.perf_counter() - t0 < warmup_s:
        for _ in range(10):
            first()
        cp.cuda.Device().synchronize()

    def take(name: str) -> Turn:
        fn = calls[name]
        for _ in range(settle_calls):
            fn()
        cp.cuda.Device().synchronize()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        n = 0
        probe = ClockProbe() if probe_every > 0 else None
        with ClockSampler(dev, interval_s=0.005) as cs:
            start.record()
            t = time.perf_counter()
            while time.perf_counter() - t < seconds:
                for _ in range(10):
                    fn()
                    n += 1
                    if probe is not None and n % probe_every == 0:
                        probe.record()
                if n % 200 == 0:  # keep the host within a few hundred calls of the GPU
                    cp.cuda.Device().synchronize()
            stop.record()
            stop.synchronize()
        elapsed_ms = cp.cuda.get_elapsed_time(start, stop) - (probe.probe_ns * 1e-6 if probe else 0.0)
        return Turn(elapsed_ms / n, cs.sm_mhz, cs.watts, n, tuple(sorted(cs.throttle)),
                    probe.mhz if probe else None)

    return rounds(names, turns, take)


def sustained_call(kernel: str, m: int, n: int, k: int, params: Mapping[str, int] | None = None, *,
                   fmt: str = "fp32", seconds: float = 1.0, turns: int = 1, warmup_s: float = 1.0) -> Sustained:
    """One rung at M x N x K in number format `fmt` ("fp32", "tf32", "fp16", "bf16"), run back to back
    (time_sustained): random operands in [-1, 1), C of the format's dtype; bfloat16 operands are torch tensors
    (CuPy has none), the others CuPy arrays. `params` as a call takes them (no type parameters)."""
    from .. import api
    from ..formats import format_named

    nf = format_named(fmt)
    cp = require_cupy()
    rng = cp.random.default_rng(0)
    a = rng.uniform(-1, 1, (m, k), dtype=cp.float32)
    b = rng.uniform(-1, 1, (k, n), dtype=cp.float32)
    if nf.dtype == "bfloat16":
        import torch

        a, b = (torch.from_dlpack(x).to(torch.bfloat16) for x in (a, b))
        c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    else:
        a, b = a.astype(nf.dtype), b.astype(nf.dtype)
        c = cp.empty((m, n), dtype=nf.dtype)
    p = dict(params or {})

    def call() -> None:
        api.matmul(a, b, c, kernel=kernel, precision=nf.precision, **p)

    return time_sustained({kernel: call}, seconds=seconds, turns=turns, warmup_s=warmup_s, probe_every=5)[kernel]
