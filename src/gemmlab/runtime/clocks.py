"""The SM clock *during* a measurement, sampled through NVML from a background thread.

A percentage of a datasheet peak means little without the clock the chip ran at: an H100 under a long
FMA load may sit well below its 1980 MHz boost clock. `ClockSampler` polls NVML every `interval_s` while
GPU work runs (CUDA's synchronisation releases the interpreter, so the thread keeps sampling) and reports
the median. Without nvidia-ml-py or NVML it reports None and says so; it never changes a clock.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any


def _nvml():
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _handle(pynvml, index: int):
    """The NVML handle of CUDA device `index`, matched by PCI bus id (CUDA and NVML orders can differ)."""
    try:
        from .device import require_cupy

        cp = require_cupy()
        props = cp.cuda.runtime.getDeviceProperties(index)
        bus = f"{int(props['pciDomainID']):08X}:{int(props['pciBusID']):02X}:{int(props['pciDeviceID']):02X}.0"
    except Exception:
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    for arg in (bus.encode(), bus):  # nvidia-ml-py versions differ on bytes or str
        try:
            return pynvml.nvmlDeviceGetHandleByPciBusId(arg)
        except Exception:
            continue
    return pynvml.nvmlDeviceGetHandleByIndex(index)


class ClockSampler:
    """Context manager: `with ClockSampler(dev_index) as cs: ...`; then `cs.sm_mhz`, `cs.mem_mhz`."""

    def __init__(self, index: int = 0, interval_s: float = 0.01):
        self.index = index
        self.interval_s = interval_s
        self.sm: list[int] = []
        self.mem: list[int] = []
        self.power: list[float] = []  # board power, watts (where NVML reports it)
        self.throttle: set[int] = set()
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pynvml: Any = None
        self._h: Any = None

    def __enter__(self) -> "ClockSampler":
        pynvml = _nvml()
        if pynvml is None:
            self.reason = "nvidia-ml-py is not installed"
            return self
        try:
            pynvml.nvmlInit()
            self._h = _handle(pynvml, self.index)
        except Exception as exc:
            self.reason = f"NVML unavailable ({exc})"
            return self
        self._pynvml = pynvml
        self._thread = threading.Thread(target=self._run, name="gemmlab-clock-sampler", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        p, h = self._pynvml, self._h
        try:
            self.sm.append(int(p.nvmlDeviceGetClockInfo(h, p.NVML_CLOCK_SM)))
            self.mem.append(int(p.nvmlDeviceGetClockInfo(h, p.NVML_CLOCK_MEM)))
            try:
                self.power.append(p.nvmlDeviceGetPowerUsage(h) / 1000.0)
            except Exception:
                pass
            try:
                self.throttle.add(int(p.nvmlDeviceGetCurrentClocksEventReasons(h)))
            except Exception:
                pass
        except Exception as exc:  # a transient NVML error loses one sample, not the measurement
            self.reason = f"NVML sample failed ({exc})"

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=1.0)
            if not self.sm:
                self._sample()
        if self._pynvml is not None:
            try:
                self._pynvml.nvmlShutdown()
            except Exception:
                pass

    @property
    def sm_mhz(self) -> float | None:
        return float(statistics.median(self.sm)) if self.sm else None

    @property
    def sm_min_mhz(self) -> float | None:
        return float(min(self.sm)) if self.sm else None

    @property
    def watts(self) -> float | None:
        """Median board power while sampling (NVML's reading is itself averaged over a short window)."""
        return float(statistics.median(self.power)) if self.power else None

    @property
    def mem_mhz(self) -> float | None:
        return float(statistics.median(self.mem)) if self.mem else None


def sample_once(index: int = 0) -> float | None:
    """One reading of the SM clock in MHz, or None."""
    with ClockSampler(index) as cs:
        time.sleep(0.0)
    return cs.sm_mhz


def sm_spans(records) -> tuple[int, int]:
    """(SM cycles, nanoseconds) summed over the SMs of one launch, from per-block records (SM id, start cycle,
    end cycle, start ns, end ns; micro/cuda/block_clock.cuh): per SM, its first block's start to its last
    block's end, in that SM's cycles and in global-timer nanoseconds. Blocks that did not run (all zero) are
    left out."""
    first_c: dict[int, int] = {}
    last_c: dict[int, int] = {}
    first_t: dict[int, int] = {}
    last_t: dict[int, int] = {}
    for sm, c0, c1, t0, t1 in records:
        if t1 <= 0 or c1 <= c0:
            continue
        first_c[sm] = min(first_c.get(sm, c0), c0)
        last_c[sm] = max(last_c.get(sm, c1), c1)
        first_t[sm] = min(first_t.get(sm, t0), t0)
        last_t[sm] = max(last_t.get(sm, t1), t1)
    cycles = sum(last_c[s] - first_c[s] for s in first_c)
    ns = sum(last_t[s] - first_t[s] for s in first_t)
    return int(cycles), int(ns)


def cycles_per_ns_mhz(pairs) -> float | None:
    """The median clock in MHz of (cycles, nanoseconds) pairs, those with a positive duration; None if none.
    What an SM counted over what the global timer counted: the clock it ran at, by construction."""
    rates = [1e3 * float(c) / float(ns) for c, ns in pairs if ns > 0 and c > 0]
    return float(statistics.median(rates)) if rates else None


class ClockProbe:
    """The SM clock measured on the GPU: `record()` enqueues a one-thread kernel (cuda/clock_probe.cu) on the
    current stream that spins for `spin_us` of the global timer and counts the SM cycles meanwhile; `mhz` is
    the median over the probes recorded (after the stream has finished them), `probe_ns` their summed
    nanoseconds (to take out of a timing they sat in). At most `slots` probes are kept. GPU only."""

    SOURCE = "clock_probe.cu"

    def __init__(self, slots: int = 1024, spin_us: float = 20.0):
        from pathlib import Path

        import numpy as np

        from . import compiler, launch
        from .device import device_info, require_cupy

        cp = require_cupy()
        module = compiler.compile_file(Path(__file__).parent / "cuda" / self.SOURCE, ["clock_probe"],
                                       device_info().arch)
        self._kernel = launch.load(module, "clock_probe")
        self._buf = cp.zeros(2 * slots, dtype=cp.uint64)
        self._slots, self._n = slots, 0
        self._spin = np.int64(int(spin_us * 1e3))
        self._np = np

    def record(self) -> None:
        if self._n < self._slots:
            self._kernel((1, 1, 1), (1, 1, 1), (self._buf, self._np.int32(self._n), self._spin))
            self._n += 1

    def _pairs(self) -> list[tuple[int, int]]:
        data = self._buf[: 2 * self._n].get().reshape(-1, 2)
        return [(int(c), int(ns)) for c, ns in data]

    @property
    def mhz(self) -> float | None:
        return cycles_per_ns_mhz(self._pairs()) if self._n else None

    @property
    def probe_ns(self) -> int:
        return sum(ns for _, ns in self._pairs()) if self._n else 0
