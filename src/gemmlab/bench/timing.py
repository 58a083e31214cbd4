"""Timing discipline for GPU work, in one place.

Method (after NVIDIA's nvbench, on CuPy streams):
- CUDA events around each launch: one event pair per sample, all recorded on the same stream, read
  only after the final synchronisation, so the host never stalls the queue between samples.
- Warm-up first (module load, first-touch and clock ramp stay out of the samples).
- A cold-L2 sample is preceded by a memset of a buffer twice the L2 size (allocated once), enqueued
  *before* the start event, so the flush is not timed and the kernel finds none of its operands in L2.
- `reset` (e.g. restoring C when beta != 0) is likewise enqueued before the start event.
- Samples are taken until the budget in milliseconds is spent or the relative noise of the median
  (IQR / median over the samples so far) falls under `noise_target`, with a floor and a ceiling on
  the count.
- The result is the median with its spread (min, max, quartiles), never a mean of one burst.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Callable

from ..runtime.device import device_info, require_cupy


@dataclass(frozen=True)
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    q1_ms: float
    q3_ms: float
    samples: int
    l2: str  # "cold" (flushed before every sample) or "warm"

    @property
    def iqr_ms(self) -> float:
        return self.q3_ms - self.q1_ms

    @property
    def rel_noise(self) -> float:
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else math.inf

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(samples_ms: list[float], l2: str) -> Timing:
    if not samples_ms:
        raise ValueError("no samples to summarize")
    s = sorted(samples_ms)
    if len(s) >= 4:
        q1, _, q3 = statistics.quantiles(s, n=4, method="inclusive")
    else:
        q1, q3 = s[0], s[-1]
    return Timing(statistics.median(s), s[0], s[-1], q1, q3, len(s), l2)


class L2Flusher:
    """Evicts the L2 by writing a buffer twice its size; allocated once per device."""

    _buffers: dict[int, object] = {}

    def __init__(self):
        cp = require_cupy()
        dev = cp.cuda.Device().id
        buf = self._buffers.get(dev)
        if buf is None:
            nbytes = max(2 * device_info(dev).l2_bytes, 8 << 20)
            buf = cp.empty(nbytes // 4, dtype=cp.int32)
            self._buffers[dev] = buf
        self.buf = buf

    def __call__(self) -> None:
        self.buf.fill(0)


def time_gpu(
    fn: Callable[[], object],
    *,
    budget_ms: float = 300.0,
    warmup_ms: float = 30.0,
    min_samples: int = 10,
    max_samples: int = 2000,
    noise_target: float = 0.01,
    flush_l2: bool = True,
    reset: Callable[[], object] | None = None,
) -> Timing:
    """Time `fn` (which enqueues GPU work on the current stream) and return the median with spread."""
    cp = require_cupy()
    stream = cp.cuda.get_current_stream()
    flush = L2Flusher() if flush_l2 else None

    # Warm-up, also used to size the sampling: estimate one call's time.
    start, end = cp.cuda.Event(), cp.cuda.Event()
    if reset:
        reset()
    start.record(stream)
    fn()
    end.record(stream)
    end.synchronize()
    first_ms = max(cp.cuda.get_elapsed_time(start, end), 1e-3)
    n_warm = max(1, min(100, int(warmup_ms / first_ms)))
    for _ in range(n_warm):
        if reset:
            reset()
        fn()
    stream.synchronize()

    per_batch = max(min_samples, min(max_samples, int(budget_ms / max(first_ms, 1e-3) / 4) or 1))
    samples: list[float] = []
    spent = 0.0
    while True:
        batch = min(per_batch, max_samples - len(samples))
        pairs = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(batch)]
        for s, e in pairs:
            if flush:
                flush()
            if reset:
                reset()
            s.record(stream)
            fn()
            e.record(stream)
        pairs[-1][1].synchronize()
        new = [cp.cuda.get_elapsed_time(s, e) for s, e in pairs]
        samples.extend(new)
        spent += sum(new)
        if len(samples) >= max_samples or spent >= budget_ms:
            break
        if len(samples) >= min_samples and summarize(samples, "").rel_noise <= noise_target:
            break
    return summarize(samples, "cold" if flush_l2 else "warm")


def tflops(m: int, n: int, k: int, ms: float) -> float:
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12 if ms > 0 else 0.0
