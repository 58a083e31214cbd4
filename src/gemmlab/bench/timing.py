"""Timing discipline for GPU (and CPU) work, in one place.

The method follows NVIDIA's nvbench, on CuPy streams (docs/harness.md says why not another tool):

- **Warm-up first.** Module load, first touch and the clock ramp stay out of the samples. The first
  call is timed on its own to size everything that follows.
- **One CUDA event pair per sample**, recorded on the measuring stream and read only after the batch
  has finished, so the host never stalls the queue between samples.
- **Cold L2**: a read of a buffer twice the L2 size (allocated once per device) is enqueued *before*
  the start event, so the flush is never timed and the kernel finds none of its operands in L2, nor dirty
  lines of anything else to write back (`L2Flusher`). It also keeps the GPU busy while the host enqueues
  the timed call, so no launch gap falls between the events.
- **`reset`** (restoring C when beta != 0) is likewise enqueued before the start event, and before
  the flush, so C is as cold as A and B.
- **CUDA-graph replay for small problems.** When one call takes less than `graph_below_ms`, launch
  gaps would dominate an event pair, so the calls are captured into a CUDA graph and one sample is one
  replay divided by the number of calls in it. Cold L2 is then kept by *rotating operands*: the graph
  cycles through enough copies of A, B and C (more than twice the L2 in all) that every call finds its
  operands evicted by the calls before it. Without rotations a cold request stays on event pairs.
- **Stop rule on noise**, not a fixed count: sampling stops once the relative standard error of the
  median falls under `noise_target` (after `min_samples`), or the budget of GPU time is spent, or
  `max_samples` is reached.
- **Clock guard**: after each batch the SM clock is read through NVML (where nvidia-ml-py is present);
  if it has dropped under `clock_drop` x the maximum SM clock, the batch is thrown away and the GPU is
  given a moment to recover, as nvbench does.
- **Interleaving**: `time_interleaved` samples several calls (a kernel and its peers) one batch each per
  round, rounds alternating in direction, until every call has met its stop rule; a call that settles
  early keeps its turns, so drift in clocks or temperature falls on all of them alike and their ratios
  stay fair.
- The result is the **median with its spread** (min, max, quartiles), labelled cold or warm L2.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, Mapping, Sequence

from ..runtime.device import device_info, require_cupy

COLD, WARM = "cold", "warm"
EVENTS, GRAPH, WALL = "events", "graph", "wall"

# A normal distribution's IQR is 1.349 sigma, and the standard error of a sample median is
# sqrt(pi/2) = 1.2533 times that of the mean. Used to turn the quartiles into an error of the median.
_IQR_PER_SIGMA = 1.349
_MEDIAN_SE_FACTOR = 1.2533
# After this many batches thrown away for a low clock, keep sampling anyway (the record shows the clock).
MAX_DISCARDED_BATCHES = 10


# ------------------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class Timing:
    """One measurement: the median time of one call with its spread, and how it was taken."""

    median_ms: float
    min_ms: float
    max_ms: float
    q1_ms: float
    q3_ms: float
    samples: int
    l2: str                        # "cold": L2 flushed or operands rotated before every call; "warm"
    method: str = EVENTS           # "events" (a pair per call), "graph" (per replay / calls), "wall" (host clock)
    calls_per_sample: int = 1      # calls inside one sample (graph replays)
    discarded: int = 0             # samples thrown away because the SM clock had dropped
    sm_mhz_min: float | None = None  # SM clock read after the batches that were kept
    sm_mhz_max: float | None = None

    @property
    def iqr_ms(self) -> float:
        return self.q3_ms - self.q1_ms

    @property
    def rel_noise(self) -> float:
        """Spread of the samples: IQR / median."""
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else math.inf

    @property
    def rel_se(self) -> float:
        """Relative standard error of the median (what the stop rule watches)."""
        return median_rel_se_from(self.iqr_ms, self.median_ms, self.samples)

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(samples_ms: Sequence[float], l2: str, **extra) -> Timing:
    """Median, extremes and quartiles of the samples (inclusive quartiles; both extremes for n < 4)."""
    if not samples_ms:
        raise ValueError("no samples to summarize")
    s = sorted(samples_ms)
    if len(s) >= 4:
        q1, _, q3 = statistics.quantiles(s, n=4, method="inclusive")
    else:
        q1, q3 = s[0], s[-1]
    return Timing(statistics.median(s), s[0], s[-1], q1, q3, len(s), l2, **extra)


def median_rel_se_from(iqr: float, median: float, n: int) -> float:
    if n < 2 or median <= 0:
        return math.inf
    sigma = iqr / _IQR_PER_SIGMA
    return _MEDIAN_SE_FACTOR * sigma / math.sqrt(n) / median


def median_rel_se(samples_ms: Sequence[float]) -> float:
    """Relative standard error of the median, from the quartiles (robust to the odd slow sample)."""
    if len(samples_ms) < 2:
        return math.inf
    t = summarize(samples_ms, "")
    return median_rel_se_from(t.iqr_ms, t.median_ms, t.samples)


def enough(samples_ms: Sequence[float], spent_ms: float, opts: "TimingOptions") -> bool:
    """The stop rule: a fixed count if one was asked for; else the noise target, the budget or the cap."""
    n = len(samples_ms)
    if opts.fixed_samples:
        return n >= opts.fixed_samples
    if n >= opts.max_samples:
        return True
    if n < opts.min_samples:
        return False
    return spent_ms >= opts.budget_ms or median_rel_se(samples_ms) <= opts.noise_target


def tflops(m: int, n: int, k: int, ms: float) -> float:
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12 if ms > 0 else 0.0


@dataclass(frozen=True)
class TimingOptions:
    """How long and how carefully to measure one call."""

    budget_ms: float = 300.0        # most GPU (or wall) time spent in samples
    warmup_ms: float = 30.0         # least time spent warming up (at least one call)
    min_samples: int = 10
    max_samples: int = 2000
    noise_target: float = 0.005     # stop when the median's relative standard error is under this
    fixed_samples: int | None = None  # exactly this many samples, no stop rule (e.g. `--reps`)
    graph_below_ms: float = 0.1     # replay a CUDA graph when one call is shorter than this
    graph_span_ms: float = 0.5      # length a replay aims at when calls repeat (warm L2)
    clock_drop: float = 0.75        # throw a batch away if the SM clock < clock_drop * its maximum
    batch_ms: float = 25.0          # GPU time per batch: the granularity of clock checks and stop rule
    rounds: int = 4                 # least rounds (one batch per call each) when calls are interleaved

    def with_(self, **changes) -> "TimingOptions":
        return replace(self, **changes)


# ------------------------------------------------------------------------------------------ clocks

# NVML's clocks-event (throttle) reason bits, nvmlClocksEventReason*.
THROTTLE_REASONS = {
    0x1: "idle",
    0x2: "application clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
}


def throttle_names(mask: int | None) -> list[str]:
    """Decode NVML's throttle-reason bit mask into words ('idle', 'software power cap', ...)."""
    if not mask:
        return []
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    rest = mask & ~sum(THROTTLE_REASONS)
    return names + ([f"other (0x{rest:x})"] if rest else [])


def clock_dropped(sm_mhz: float | None, max_mhz: float | None, threshold: float) -> bool:
    """True when a clock reading shows the SM clock under `threshold` x its maximum (unknown: False)."""
    if not sm_mhz or not max_mhz:
        return False
    return sm_mhz < threshold * max_mhz


class ClockMonitor:
    """Reads one GPU's SM clock through NVML, cheaply: NVML is initialised once per process.

    The GPU is found by PCI bus id, so CUDA_VISIBLE_DEVICES reordering cannot make it read another GPU.
    Without nvidia-ml-py (or NVML) it reads nothing and the clock guard is off.
    """

    _by_device: dict[int, "ClockMonitor"] = {}

    def __init__(self, nvml=None, handle=None):
        self._nvml = nvml
        self._handle = handle
        self.max_mhz: float | None = None
        if handle is not None:
            try:
                self.max_mhz = float(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))
            except Exception:
                self._handle = None

    @property
    def available(self) -> bool:
        return self._handle is not None

    @classmethod
    def for_device(cls, index: int) -> "ClockMonitor":
        hit = cls._by_device.get(index)
        if hit is None:
            hit = cls._by_device[index] = cls._open(index)
        return hit

    @classmethod
    def _open(cls, index: int) -> "ClockMonitor":
        try:
            import pynvml
        except ImportError:
            return cls()
        try:
            pynvml.nvmlInit()
            cp = require_cupy()
            try:
                handle = pynvml.nvmlDeviceGetHandleByPciBusId(cp.cuda.Device(index).pci_bus_id)
            except Exception:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            return cls(pynvml, handle)
        except Exception:
            return cls()

    def sm_mhz(self) -> float | None:
        if self._handle is None:
            return None
        try:
            return float(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
        except Exception:
            return None


# ------------------------------------------------------------------------------------------ L2


# Reads every 16 bytes of the buffer (all zero, so the sink is never written: the loads stay).
_EVICT_SRC = r"""
extern "C" __global__ void gemmlab_l2_evict(const uint4* __restrict__ p, long long n, unsigned* __restrict__ sink) {
    unsigned acc = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const uint4 v = p[i];
        acc |= v.x | v.y | v.z | v.w;
    }
    if (acc != 0u) sink[0] = acc;
}
"""


class L2Flusher:
    """Evicts the L2 by reading a buffer twice its size (allocated once per device, all zero). A read leaves
    the L2 holding clean lines: a flush by writing (a memset) left it full of dirty ones, and the timed
    kernel paid for writing them back to DRAM (up to the L2's size of extra DRAM traffic: at 3 TB/s about
    17 µs on the H100, a quarter of a 134 MB weight read). What the kernel wrote itself before (C of the
    previous call) is written back during the flush, outside the events."""

    _buffers: dict[int, object] = {}
    _kernels: dict[int, object] = {}

    def __init__(self):
        import numpy as np

        cp = require_cupy()
        dev = cp.cuda.Device().id
        buf = self._buffers.get(dev)
        if buf is None:
            nbytes = max(2 * device_info(dev).l2_bytes, 8 << 20) // 16 * 16
            buf = (cp.zeros(nbytes // 4, dtype=cp.int32), cp.zeros(1, dtype=cp.uint32))
            self._buffers[dev] = buf
        if dev not in self._kernels:
            self._kernels[dev] = cp.RawKernel(_EVICT_SRC, "gemmlab_l2_evict")
        self.buf, self.sink = buf
        self.kernel = self._kernels[dev]
        self.nbytes = self.buf.nbytes
        self.blocks = 8 * device_info(dev).sm_count
        self.args = (self.buf, np.int64(self.nbytes // 16), self.sink)

    def __call__(self) -> None:  # on the current stream
        self.kernel((self.blocks,), (256,), self.args)


def rotation_count(working_set_bytes: int, l2_bytes: int, limit: int = 1024) -> int:
    """How many operand copies a cold-L2 graph must cycle through: together more than twice the L2."""
    if working_set_bytes <= 0:
        return 1
    if working_set_bytes >= l2_bytes:
        return 1  # one call already streams more than the L2 holds; a flush per sample does the job
    return max(2, min(limit, math.ceil(2 * l2_bytes / working_set_bytes) + 1))


# ------------------------------------------------------------------------------------------ GPU sampling


@dataclass
class TimedCall:
    """What to time: `fn` enqueues the work on the current stream.

    rotations: calls doing the same work on other copies of the operands; a cold-L2 graph cycles
    through `[fn, *rotations]`. reset: enqueued before each sample (e.g. restore C when beta != 0).
    graph: True / False forces graph replay on or off; None decides from the first call's time.
    """

    fn: Callable[[], object]
    reset: Callable[[], object] | None = None
    rotations: Sequence[Callable[[], object]] = ()
    flush_l2: bool = True
    graph: bool | None = None


class _GpuSampler:
    def __init__(self, call: TimedCall, opts: TimingOptions, stream, monitor: ClockMonitor | None):
        self.cp = require_cupy()
        self.call = call
        self.opts = opts
        self.stream = stream
        self.monitor = monitor
        self.flush = L2Flusher() if call.flush_l2 else None
        self.samples: list[float] = []
        self.spent_ms = 0.0
        self.discarded = 0
        self.discarded_batches = 0
        self.clocks: list[float] = []
        self.method = EVENTS
        self.graph = None
        self.calls_per_sample = 1
        self.l2 = COLD if call.flush_l2 else WARM
        self.sample_ms = 0.0  # estimated time of one sample (GPU side)

    # -------------------------------------------------------------------- warm-up and method

    def warm_up(self) -> None:
        cp = self.cp
        call = self.call
        s, e = cp.cuda.Event(), cp.cuda.Event()
        if call.reset:
            call.reset()
        s.record(self.stream)
        call.fn()
        e.record(self.stream)
        e.synchronize()
        first_ms = max(cp.cuda.get_elapsed_time(s, e), 1e-4)
        for _ in range(max(1, min(100, int(self.opts.warmup_ms / first_ms)))):
            if call.reset:
                call.reset()
            call.fn()
        self.stream.synchronize()
        self.sample_ms = first_ms

        want_graph = call.graph if call.graph is not None else first_ms < self.opts.graph_below_ms
        if want_graph and call.flush_l2 and not call.rotations:
            want_graph = False  # cold was asked for and only rotations keep a graph cold
        if want_graph:
            self._capture(first_ms)

    def _capture(self, call_ms: float) -> None:
        cp = self.cp
        call = self.call
        if call.flush_l2:
            calls = [call.fn, *call.rotations]
        else:
            calls = [call.fn] * max(1, min(1000, math.ceil(self.opts.graph_span_ms / call_ms)))
        # The legacy and per-thread default streams (handles 0, 1, 2) cannot be captured: use a side stream.
        capture_stream = self.stream if self.stream.ptr not in (0, 1, 2) else cp.cuda.Stream(non_blocking=True)
        graph = None
        with capture_stream:
            capture_stream.begin_capture()
            try:
                for c in calls:
                    c()
            except Exception:
                pass  # e.g. a library that allocates or synchronises inside the call: not capturable
            else:
                graph = True
            try:
                captured = capture_stream.end_capture()
            except Exception:
                captured = None
            graph = captured if graph else None
        if graph is None:
            return  # the work could not be captured: stay on event pairs (the Timing says "events")
        graph.launch(self.stream)  # first replay uploads the graph; not timed
        self.stream.synchronize()
        self.graph = graph
        self.method = GRAPH
        self.calls_per_sample = len(calls)
        self.sample_ms = call_ms * len(calls)

    # -------------------------------------------------------------------- sampling

    def done(self) -> bool:
        return enough(self.samples, self.spent_ms, self.opts)

    def exhausted(self) -> bool:
        """No more samples allowed: the fixed count, the sample cap or the budget is reached."""
        opts = self.opts
        if opts.fixed_samples:
            return len(self.samples) >= opts.fixed_samples
        return len(self.samples) >= opts.max_samples or self.spent_ms >= opts.budget_ms

    def turn(self) -> None:
        """One batch (about `batch_ms` of GPU time), whether or not the stop rule is met yet."""
        self._batch()

    def run(self, ms: float) -> None:
        """Take samples for about `ms` of GPU time (at least one batch), or until done."""
        target = self.spent_ms + ms
        while not self.done():
            self._batch()
            if self.spent_ms >= target:
                break

    def _batch(self) -> None:
        cp = self.cp
        opts = self.opts
        remaining = (opts.fixed_samples or opts.max_samples) - len(self.samples)
        count = max(1, min(remaining, 512, int(opts.batch_ms / max(self.sample_ms, 1e-4))))
        pairs = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(count)]
        call = self.call
        for s, e in pairs:
            if call.reset:  # first, so that the flush evicts what the reset wrote
                call.reset()
            if self.flush is not None:
                self.flush()
            s.record(self.stream)
            if self.graph is not None:
                self.graph.launch(self.stream)
            else:
                call.fn()
            e.record(self.stream)
        pairs[-1][1].synchronize()
        per = self.calls_per_sample
        new = [cp.cuda.get_elapsed_time(s, e) / per for s, e in pairs]
        mhz = self.monitor.sm_mhz() if self.monitor else None
        if (self.monitor and clock_dropped(mhz, self.monitor.max_mhz, opts.clock_drop)
                and self.discarded_batches < MAX_DISCARDED_BATCHES):
            self.discarded += count
            self.discarded_batches += 1
            time.sleep(0.05)  # let the clock recover before the next batch
            return
        if mhz:
            self.clocks.append(mhz)
        self.samples.extend(new)
        self.spent_ms += sum(new) * per
        self.sample_ms = max(statistics.median(new) * per, 1e-4)

    def timing(self) -> Timing:
        return summarize(
            self.samples, self.l2, method=self.method, calls_per_sample=self.calls_per_sample,
            discarded=self.discarded, sm_mhz_min=min(self.clocks) if self.clocks else None,
            sm_mhz_max=max(self.clocks) if self.clocks else None,
        )


def _stream_and_monitor(cp):
    stream = cp.cuda.get_current_stream()
    return stream, ClockMonitor.for_device(cp.cuda.Device().id)


def balanced_orders(n: int) -> list[list[int]]:
    """Orders of n calls for successive rounds in which every call runs right after every other one equally
    often (a Williams design): n orders for even n, 2n for odd n, each a permutation of range(n).

    The first order is 0, 1, n-1, 2, n-2, ...; the others add 1, 2, ... (mod n) to it; for odd n the
    reverses of those follow. What the GPU did just before a call (a slow, cool kernel lets the clock rise)
    then weighs on every call alike, instead of always favouring the call placed after the slow one.
    """
    if n <= 1:
        return [list(range(n))]
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    orders = [[(x + k) % n for x in first] for k in range(n)]
    if n % 2:
        orders += [o[::-1] for o in orders]
    return orders


def interleave(samplers: Mapping[str, object], rounds: int,
               on_round: Callable[[str], None] | None = None) -> int:
    """Give every sampler one turn per round until all have met their stop rule; the number of rounds.

    Each round visits every sampler that may still take samples, also those whose stop rule is already
    met: a call that settles early keeps being sampled beside the others, so all of them see the same
    stretch of clock and temperature (under a power limit the SM clock of a long run moves by 10-20 %,
    and a call measured only at the start of a run would be measured on a cooler GPU than its peers).
    The rounds follow `balanced_orders`, so each call runs after each other call equally often over a
    cycle of rounds (with two calls: forward, backward). A fixed order, or forward and backward only,
    always put the same call after a slow neighbour: on an H100 at the power limit, bf16 rung 15 measured
    4-6 % faster against cuBLAS when it ran right after rung 11's slower batches. At least `rounds`
    rounds; `on_round(name)` is called after each turn of those first rounds only, exactly `rounds` times
    per sampler (progress bars).
    """
    names = list(samplers)
    orders = balanced_orders(len(names))
    done_rounds = 0
    while True:
        order = [names[i] for i in orders[done_rounds % len(orders)]]
        for name in order:
            sm = samplers[name]
            if not sm.exhausted():
                sm.turn()
            if on_round and done_rounds < rounds:
                on_round(name)
        done_rounds += 1
        if done_rounds < rounds:
            continue
        if all(sm.done() or sm.exhausted() for sm in samplers.values()):
            return done_rounds


def time_interleaved(
    calls: Mapping[str, TimedCall],
    opts: TimingOptions = TimingOptions(),
    on_round: Callable[[str], None] | None = None,
) -> dict[str, Timing]:
    """Time several calls in alternating rounds on the current stream; {name: Timing}.

    Every call is warmed up first; then `interleave` gives each call one batch of samples per round,
    round after round, until every call has met its stop rule (at least `opts.rounds` rounds). A kernel
    and its peers measured this way share the clock and thermal history of the run, so their ratio is
    fair. `on_round(name)` is called after each turn of the first `opts.rounds` rounds.
    """
    cp = require_cupy()
    stream, monitor = _stream_and_monitor(cp)
    samplers = {name: _GpuSampler(c, opts, stream, monitor) for name, c in calls.items()}
    for sm in samplers.values():
        sm.warm_up()
    interleave(samplers, max(1, opts.rounds), on_round)
    for sm in samplers.values():  # a call the budget cut short still gets its minimum
        while not sm.done() and len(sm.samples) < (opts.fixed_samples or opts.min_samples):
            sm.run(0.0)
    return {name: sm.timing() for name, sm in samplers.items()}


def time_gpu(
    fn: Callable[[], object],
    *,
    budget_ms: float = 300.0,
    warmup_ms: float = 30.0,
    min_samples: int = 10,
    max_samples: int = 2000,
    noise_target: float = 0.005,
    flush_l2: bool = True,
    reset: Callable[[], object] | None = None,
    rotations: Sequence[Callable[[], object]] = (),
    graph: bool | None = None,
    options: TimingOptions | None = None,
) -> Timing:
    """Time `fn` (which enqueues GPU work on the current stream): the median of one call, with spread."""
    opts = options or TimingOptions(budget_ms=budget_ms, warmup_ms=warmup_ms, min_samples=min_samples,
                                    max_samples=max_samples, noise_target=noise_target)
    call = TimedCall(fn, reset=reset, rotations=rotations, flush_l2=flush_l2, graph=graph)
    return time_interleaved({"call": call}, opts.with_(rounds=1))["call"]


# ------------------------------------------------------------------------------------------ CPU


def time_cpu(fn: Callable[[], object], opts: TimingOptions = TimingOptions()) -> Timing:
    """Time a host function with the host's monotonic clock: one warm-up call (JIT), then samples.

    CPU caches are not flushed (the label is "warm"); the budget counts wall time.
    """
    fn()  # compile (numba) and first touch
    samples: list[float] = []
    spent = 0.0
    while not enough(samples, spent, opts):
        t0 = time.perf_counter()
        fn()
        ms = (time.perf_counter() - t0) * 1e3
        samples.append(ms)
        spent += ms
    return summarize(samples, WARM, method=WALL)


__all__ = [
    "COLD", "WARM", "EVENTS", "GRAPH", "WALL", "ClockMonitor", "L2Flusher", "THROTTLE_REASONS", "TimedCall",
    "Timing", "TimingOptions", "clock_dropped", "enough", "median_rel_se", "rotation_count", "summarize",
    "interleave", "throttle_names", "tflops", "time_cpu", "time_gpu", "time_interleaved",
]
