"""Sweeps: many shapes x (rungs, peers, CPU baselines) x (compute-only, end to end), as records.

A sweep measures one number format (`formats`: fp32 by default; tf32, fp16 or bf16 for the tensor-core
rungs and the same peers in that format). For each shape, on the GPU:
1. Random inputs in [-1, 1) (never zeros), rounded to the format's dtype, and a float64 reference of
   the rounded values computed on the GPU.
2. Every runner is verified before it is timed (`verified.verify`, the step every measurement shares): C is
   poisoned with NaN (or set to C0 when beta != 0), the runner computes once, and a relative error above the
   format's tolerance makes a "failed" record, never timed. An exception (e.g. a kernel that does not
   compile) makes an "error" record.
3. Compute-only: all verified runners are timed *interleaved* (`verified.time_verified`), cold L2:
   the L2 is flushed before every sample, and for problems smaller than the L2 the operands are also
   rotated among enough copies that a CUDA-graph replay stays cold.
4. End to end: copy A, B and C from host memory (pageable, or pinned with `pinned=True`), compute,
   copy C back; interleaved likewise, and the host result verified again afterwards (bf16 travels as its
   16-bit patterns: numpy has no bfloat16).
Then the CPU baselines (fp32 only) whose `max_cube` (scaled by `cpu_scale`) allows the shape, timed by wall clock.

`Sweep` is an iterator of records, so a caller keeps every record made before a Ctrl-C.
"""

from __future__ import annotations

import math
import secrets
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..runtime import device
from . import environment, peers
from .formats import FORMATS, FP32, NumberFormat, format_named
from .records import COMPUTE, CPU, END_TO_END, ERROR, FAILED, OK, Record, Results, derive
from .runners import PEER_NAMES, CpuRunner, GpuRunner, Unavailable, all_cpu, all_gpu_rungs, cpu_runner, kind_of
from .runners import peer_runner, rung_runner
from .timing import COLD, WARM, TimedCall, Timing, TimingOptions, rotation_count, throttle_names, time_cpu
from .timing import time_interleaved
from .verified import Check, balanced, one_line, time_verified, verify

VERIFY_TOL = FP32.verify_tol  # ||C - ref|| / ||ref|| for fp32 accumulation up to K ~ 16k

Shape = tuple[int, int, int]

# The default GPU sweep: powers of two, the neighbours 1023 and 1025 (partial tiles), and sizes that
# are powers of neither. Sized for under 3 minutes on an H100 with every rung and peer, both modes (naive
# at 4096 is ~0.3 s a call, so it gets its minimum of samples and no more).
DEFAULT_GPU_SIZES = (128, 256, 512, 768, 1023, 1024, 1025, 1536, 2048, 3072, 4096)
# The tensor-core formats: a few rungs and peers, so up to 8192, where the tensor cores are measured.
DEFAULT_TENSOR_SIZES = (256, 512, 1023, 1024, 1025, 2048, 4096, 8192)
# Without a GPU: the CPU ladder at small sizes (each baseline further bounded by its max_cube).
DEFAULT_CPU_SIZES = (64, 128, 256, 512)


# ------------------------------------------------------------------------------------------ sizes


def powers_of_two(lo: int, hi: int) -> list[int]:
    out, v = [], 1
    while v <= hi:
        if v >= lo:
            out.append(v)
        v *= 2
    return out


def with_neighbours(sizes: Sequence[int]) -> list[int]:
    """Add 2^k - 1 and 2^k + 1 beside every power of two 2^k >= 4."""
    out = set(sizes)
    for s in sizes:
        if s >= 4 and s & (s - 1) == 0:
            out.update((s - 1, s + 1))
    return sorted(out)


def parse_sizes(text: str) -> list[int]:
    """'128,1000,256..4096': integers, and LO..HI for the powers of two between them (inclusive)."""
    out: list[int] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        try:
            if ".." in item:
                lo, hi = (int(x) for x in item.split("..", 1))
                found = powers_of_two(lo, hi)
                if not found:
                    raise ValueError
                out.extend(found)
            else:
                out.append(int(item))
        except ValueError:
            raise ValueError(f"size {item!r} is neither an integer nor LO..HI (powers of two)") from None
    if not out or any(s < 1 for s in out):
        raise ValueError(f"sizes must be positive integers, got {text!r}")
    return sorted(set(out))


def parse_shape(text: str) -> Shape:
    """'4096x1024x512' -> (M, N, K)."""
    parts = text.lower().replace("*", "x").split("x")
    try:
        m, n, k = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"shape {text!r} is not MxNxK (e.g. 4096x1024x512)") from None
    if min(m, n, k) < 1:
        raise ValueError(f"shape {text!r}: M, N and K must be positive")
    return (m, n, k)


# ------------------------------------------------------------------------------------------ plan


@dataclass
class Plan:
    """What a sweep measures, and how carefully."""

    shapes: list[Shape]
    gpu: list[tuple[str, dict]] = field(default_factory=list)      # rungs, with parameters
    peers: list[str] = field(default_factory=list)                 # cublas, torch, triton
    cpu: list[tuple[str, dict]] = field(default_factory=list)      # CPU baselines
    cpu_shapes: list[Shape] | None = None                          # None: the GPU shapes
    cpu_scale: float = 0.25    # a baseline runs where (M*N*K)^(1/3) <= max_cube * cpu_scale
    # Pause before each CPU measurement: worker threads of the previous library (numba's OpenMP pool,
    # the BLAS pool) spin for a while after their last call and would steal cores (on 2 cores we saw a
    # 100x slowdown of the next baseline without it, none after a 50 ms pause).
    cpu_settle_s: float = 0.1
    modes: tuple[str, ...] = (COMPUTE, END_TO_END)
    l2: str = COLD
    pinned: bool = False
    alpha: float = 1.0
    beta: float = 0.0
    seed: int = 0
    fmt: str = "fp32"          # number format: fp32, tf32, fp16, bf16 (formats.FORMATS)
    verify_tol: float | None = None   # None: the format's tolerance
    timing: TimingOptions = field(default_factory=lambda: TimingOptions(budget_ms=150, warmup_ms=20, min_samples=5))
    e2e_timing: TimingOptions = field(default_factory=lambda: TimingOptions(budget_ms=60, warmup_ms=10, min_samples=5))
    cpu_timing: TimingOptions = field(default_factory=lambda: TimingOptions(budget_ms=200, min_samples=3,
                                                                              noise_target=0.01))

    @property
    def number_format(self) -> NumberFormat:
        return FORMATS[self.fmt]

    @property
    def tolerance(self) -> float:
        return self.number_format.verify_tol if self.verify_tol is None else self.verify_tol

    def cpu_fits(self, runner: CpuRunner, shape: Shape) -> bool:
        m, n, k = shape
        return (m * n * k) ** (1 / 3) <= runner.max_cube * self.cpu_scale + 1e-9

    def describe(self) -> dict[str, Any]:
        d = asdict(self)
        d["shapes"] = [list(s) for s in self.shapes]
        return d


def default_plan(gpu: bool | None = None, fmt: str = "fp32") -> Plan:
    """`gemmlab bench` with no arguments: the whole ladder, the peers and the CPU baselines; for another
    number format (`fmt`), the rungs that run it and the peers in it (the CPU baselines are fp32 only)."""
    gpu = device.gpu_available() if gpu is None else gpu
    nf = format_named(fmt)
    cpu = [(name, {}) for name in all_cpu()] if nf.is_fp32 else []
    if not gpu:
        return Plan(shapes=[], cpu=cpu, cpu_shapes=[(s, s, s) for s in DEFAULT_CPU_SIZES], fmt=fmt)
    sizes = DEFAULT_GPU_SIZES if nf.is_fp32 else DEFAULT_TENSOR_SIZES
    return Plan(shapes=[(s, s, s) for s in sizes], gpu=[(n, {}) for n in all_gpu_rungs(nf)],
                peers=list(PEER_NAMES), cpu=cpu, fmt=fmt)


def split_names(names: Sequence[str], params: dict | None = None) -> tuple[list, list, list]:
    """Sort user-given kernel names into (rungs, peers, cpu); ValueError names an unknown one."""
    gpu, peers, cpu = [], [], []
    for name in names:
        kind = kind_of(name)
        if kind == CPU:
            cpu.append((name, dict(params or {})))
        elif kind == "gpu_peer":
            peers.append(name)
        else:
            gpu.append((name, dict(params or {})))
    return gpu, peers, cpu


# ------------------------------------------------------------------------------------------ sweep


def rel_error(c, ref) -> float:
    """||C - ref|| / ||ref|| in float64 on the GPU (CuPy arrays); inf if C has a NaN or an infinity."""
    cp = device.require_cupy()
    c64 = c.astype(cp.float64)
    if not bool(cp.isfinite(c64).all()):
        return float("inf")
    den = float(cp.linalg.norm(ref))
    num = float(cp.linalg.norm(c64 - ref))
    return num / den if den else num


def host_rel_error(c: np.ndarray, ref: np.ndarray) -> float:
    """||C - ref|| / ||ref|| in float64; inf if C has a NaN or an infinity."""
    if not np.isfinite(c).all():
        return math.inf
    den = float(np.linalg.norm(ref))
    num = float(np.linalg.norm(c.astype(np.float64) - ref))
    return num / den if den else num


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Sweep:
    """Iterate to measure; each record is yielded as soon as it exists. Call `finish()` at the end.

    on_progress(work, description) reports progress in units of `total_work`.
    """

    def __init__(self, plan: Plan, on_progress: Callable[[float, str], None] | None = None, command: str = ""):
        self.plan = plan
        self.on_progress = on_progress or (lambda work, text: None)
        self.run_id = datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)
        self.gpu_reason = device.gpu_unavailable_reason() if (plan.gpu or plan.peers) else None
        self.notes: list[str] = []
        if self.gpu_reason:
            self.notes.append(f"GPU part skipped: {self.gpu_reason}")
        self.env = environment.record_fields()
        self.fmt = plan.number_format
        self.peak_tflops = self._peak_tflops()
        self.run: dict[str, Any] = {
            "run_id": self.run_id, "started_at": _now(), "finished_at": None, "interrupted": False,
            "command": command or " ".join(sys.argv), "plan": plan.describe(), "notes": self.notes,
            "environment": self.env, "clocks_start": self._clocks(), "clocks_end": None,
        }
        self.records: list[Record] = []
        self._closers: list[Callable[[], None]] = []

    # ---------------------------------------------------------------- bookkeeping

    def _peak_tflops(self) -> float | None:
        """The peak of the plan's number format on this GPU (fp32: the recorded fp32 peak)."""
        if self.fmt.is_fp32:
            return self.env.get("peak_fp32_tflops")
        if not device.gpu_available():
            return None
        return device.device_info().peak_tensor_tflops(self.fmt.dtype, self.fmt.precision)

    def _clocks(self) -> dict[str, Any]:
        if not device.gpu_available():
            return {}
        c = device.clocks_now(device.device_info().index)
        if "throttle_reasons" in c:
            c["throttle_reason_names"] = throttle_names(c["throttle_reasons"])
        return c

    def _gpu_units(self) -> list[tuple[Shape, float]]:
        if self.gpu_reason or not (self.plan.gpu or self.plan.peers):
            return []
        per_runner = len(self.plan.gpu) + len(self.plan.peers)
        return [(s, per_runner * len(self.plan.modes) * self._weight(s)) for s in self.plan.shapes]

    def _cpu_shapes(self) -> list[Shape]:
        return self.plan.cpu_shapes if self.plan.cpu_shapes is not None else self.plan.shapes

    @staticmethod
    def _weight(shape: Shape) -> float:
        m, n, k = shape
        return 1.0 + 2 * m * n * k / 2e11  # rough: a unit of set-up plus the work (ETA only)

    @property
    def total_work(self) -> float:
        cpu_units = sum(self._weight(s) for s in self._cpu_shapes()) * len(self.plan.cpu)
        return sum(w for _, w in self._gpu_units()) + cpu_units or 1.0

    def results(self) -> Results:
        return Results(list(self.records), [self.run])

    def finish(self, interrupted: bool = False) -> Results:
        for close in self._closers:
            close()
        self._closers.clear()
        self.run.update(finished_at=_now(), interrupted=interrupted, clocks_end=self._clocks())
        if interrupted:
            self.notes.append(f"interrupted: {len(self.records)} measurements kept")
        return self.results()

    def _emit(self, rec: Record) -> Record:
        self.records.append(rec)
        return rec

    def _record(self, runner, shape: Shape, mode: str, *, timing: Timing | None = None, status: str = OK,
                rel_error: float | None = None, note: str = "", pinned: bool | None = None, l2: str = "") -> Record:
        m, n, k = shape
        t = asdict(timing) if timing else {}
        fmt = self.fmt if runner.family != CPU else FP32
        rec = Record(
            kernel=runner.kernel, label=runner.label, family=runner.family, rung=runner.rung, idea=runner.idea,
            params=dict(runner.params), dtype=fmt.dtype, m=m, n=n, k=k, alpha=self.plan.alpha,
            beta=self.plan.beta, mode=mode, l2=t.get("l2", l2), pinned=pinned, precision=fmt.name, status=status,
            rel_error=rel_error, verify_tol=self.plan.tolerance, note=note, method=t.get("method", ""),
            samples=t.get("samples", 0),
            calls_per_sample=t.get("calls_per_sample", 1), discarded=t.get("discarded", 0),
            median_ms=t.get("median_ms"), min_ms=t.get("min_ms"), max_ms=t.get("max_ms"),
            q1_ms=t.get("q1_ms"), q3_ms=t.get("q3_ms"), sm_mhz_min=t.get("sm_mhz_min"),
            sm_mhz_max=t.get("sm_mhz_max"), run_id=self.run_id, measured_at=_now(),
            peak_tflops=self.peak_tflops if runner.family != CPU else None,
            **{k2: v for k2, v in self.env.items() if k2 in _ENV_FIELDS},
        )
        return derive(rec)

    # ---------------------------------------------------------------- iteration

    def __iter__(self) -> Iterator[Record]:
        gpu_runners = self._gpu_runners() if self._gpu_units() else []
        for shape, weight in self._gpu_units():
            if gpu_runners:
                yield from self._gpu_shape(shape, gpu_runners, weight)
        # One baseline over all its shapes, then the next: each switch between thread pools (numba's,
        # the BLAS library's) costs a settling pause, so switches are kept few.
        for r in (cpu_runner(name, params) for name, params in self.plan.cpu):
            for shape in self._cpu_shapes():
                if self.plan.cpu_fits(r, shape):
                    yield self._emit(self._cpu_one(r, shape))
                self.on_progress(self._weight(shape), f"{r.label} {_fmt(shape)}")

    def _gpu_runners(self) -> list[GpuRunner]:
        runners: list[GpuRunner] = []
        if self.fmt.needs_torch:
            reason = peers.torch_unavailable_reason()
            if reason:
                self.notes.append(f"GPU part skipped: {self.fmt.name} operands are torch tensors, and {reason}")
                return []
        for name in self.plan.peers:
            try:
                r = peer_runner(name, self.fmt)
            except Unavailable as exc:
                self.notes.append(f"peer {name} skipped: {exc}")
                continue
            runners.append(r)
            self._closers.append(r.close)
        for name, params in self.plan.gpu:
            try:
                runners.append(rung_runner(name, params, self.fmt))
            except Unavailable as exc:
                self.notes.append(f"{exc}: skipped")
        return runners

    # ---------------------------------------------------------------- GPU

    def _gpu_shape(self, shape: Shape, runners: list[GpuRunner], weight: float) -> Iterator[Record]:
        cp = device.require_cupy()
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            try:
                yield from self._gpu_shape_on_stream(cp, stream, shape, runners, weight)
            finally:
                stream.synchronize()
                cp.get_default_memory_pool().free_all_blocks()

    def _gpu_shape_on_stream(self, cp, stream, shape, runners, weight) -> Iterator[Record]:
        plan = self.plan
        m, n, k = shape
        alpha, beta = plan.alpha, plan.beta
        unit = weight / (len(runners) * len(plan.modes))
        ops = _Operands(cp, self.fmt)
        g = cp.random.default_rng(plan.seed)
        a0, b0, c0 = (ops.cast(g.uniform(-1, 1, shp, dtype=cp.float32)) for shp in ((m, k), (k, n), (m, n)))
        ref = alpha * (ops.exact64(a0) @ ops.exact64(b0))
        if beta != 0:
            ref += beta * ops.exact64(c0)

        # Operand sets: one, or enough rotations that a graph of calls stays cold (see timing.py).
        l2 = device.device_info().l2_bytes
        rot = rotation_count(self.fmt.itemsize * (m * k + k * n + m * n), l2) if plan.l2 == COLD else 1
        a_all, b_all, c_all = ops.empty((rot, m, k)), ops.empty((rot, k, n)), ops.empty((rot, m, n))
        ops.assign(a_all, a0)
        ops.assign(b_all, b0)
        sets = [(a_all[i], b_all[i], c_all[i]) for i in range(rot)]
        a, b, c = sets[0]

        def reset():
            ops.assign(c_all, c0)

        def check(r: GpuRunner) -> Check:
            bound: list = []

            def error() -> float:
                bound.append(r.bind(a, b, c, alpha, beta))
                if beta != 0:
                    ops.assign(c, c0)
                else:
                    ops.fill_nan(c)  # poison: an element the kernel does not write fails the check
                bound[0]()
                return rel_error(ops.as_cupy(c), ref)

            def timed() -> TimedCall:
                rotations = [r.bind(*s, alpha, beta) for s in sets[1:]]
                return TimedCall(bound[0], reset=reset if beta != 0 else None, rotations=rotations,
                                 flush_l2=plan.l2 == COLD)

            return Check(r.label, error, timed, r)

        def record(r: GpuRunner, *, status=OK, err=None, note="", t=None) -> Record:
            return self._record(r, shape, COMPUTE, timing=t, status=status, rel_error=err, note=note, l2=plan.l2)

        # Compile errors, launch failures and wrong results are reported, never fatal to the sweep.
        failed, passed = verify([check(r) for r in runners], plan.tolerance, record)
        for rec in failed:
            yield self._emit(rec)
        del ref
        calls = {chk.label: timed for chk, _, timed in passed}
        by_label = {chk.label: chk.subject for chk, _, _ in passed}

        if COMPUTE in plan.modes and calls:
            opts = plan.timing
            if self.fmt.tensor_cores:
                # A whole cycle of balanced orders: the tensor-core calls run at the power limit. (The fp32
                # ladder keeps its least rounds: its slowest rungs take a third of a second per call.)
                opts = balanced(opts, len(calls))
            for rec in time_verified(passed, record, opts,
                                     on_round=lambda name: self.on_progress(unit / max(1, opts.rounds),
                                                                            f"{name} {_fmt(shape)}")):
                yield self._emit(rec)

        if END_TO_END in plan.modes and calls:
            yield from self._end_to_end(cp, stream, shape, by_label, calls, a, b, c, c0, unit, ops)
        skipped = len(runners) - len(calls)
        self.on_progress(unit * skipped * len(plan.modes), f"{_fmt(shape)}")

    def _end_to_end(self, cp, stream, shape, by_label, calls, a, b, c, c0, unit, ops) -> Iterator[Record]:
        plan = self.plan
        hosts = [self._host_array(ops, x) for x in (a, b, c0)]
        out = self._host_array(ops, c, fill=False)
        ha, hb, hc = hosts
        ref = plan.alpha * (ops.host64(ha) @ ops.host64(hb))
        if plan.beta != 0:
            ref += plan.beta * ops.host64(hc)
        to_device, to_host = cp.cuda.runtime.memcpyHostToDevice, cp.cuda.runtime.memcpyDeviceToHost
        d_a, d_b, d_c = (peers.device_pointer(x) for x in (a, b, c))

        def end_to_end(call):
            def run():
                s = cp.cuda.get_current_stream().ptr
                for dev_ptr, host_x in ((d_a, ha), (d_b, hb), (d_c, hc)):
                    cp.cuda.runtime.memcpyAsync(dev_ptr, host_x.ctypes.data, host_x.nbytes, to_device, s)
                call()
                cp.cuda.runtime.memcpyAsync(out.ctypes.data, d_c, out.nbytes, to_host, s)
            return run

        e2e = {label: TimedCall(end_to_end(tc.fn), flush_l2=plan.l2 == COLD, graph=False)
               for label, tc in calls.items()}
        timings = time_interleaved(e2e, plan.e2e_timing,
                                   on_round=lambda name: self.on_progress(unit / max(1, plan.e2e_timing.rounds),
                                                                          f"{name} {_fmt(shape)} end to end"))
        for label, t in timings.items():
            # The host result of the last sample is checked too: the copies must deliver the product.
            e2e_once = e2e[label].fn
            e2e_once()
            stream.synchronize()
            err = host_rel_error(ops.host64(out), ref)
            ok = err < plan.tolerance
            yield self._emit(self._record(by_label[label], shape, END_TO_END, timing=t if ok else None,
                                          status=OK if ok else FAILED, rel_error=err, pinned=plan.pinned,
                                          l2=t.l2, note="" if ok else f"end-to-end result wrong: {err:.2e}"))

    def _host_array(self, ops: "_Operands", x, fill: bool = True) -> np.ndarray:
        if self.plan.pinned:
            import cupyx

            h = cupyx.empty_pinned(x.shape, dtype=ops.host_dtype)
        else:
            h = np.empty(x.shape, dtype=ops.host_dtype)
        if fill:
            h[...] = ops.to_host(x)
        return h

    # ---------------------------------------------------------------- CPU

    def _cpu_one(self, r: CpuRunner, shape: Shape) -> Record:
        plan = self.plan
        m, n, k = shape
        rng = np.random.default_rng(plan.seed)
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        c = rng.uniform(-1, 1, (m, n)).astype(np.float32) if plan.beta != 0 else None
        ref = plan.alpha * (a.astype(np.float64) @ b.astype(np.float64))
        if c is not None:
            ref += plan.beta * c.astype(np.float64)
        time.sleep(plan.cpu_settle_s)
        try:
            err = host_rel_error(r.run(a, b, c, plan.alpha, plan.beta), ref)
        except Exception as exc:
            return self._record(r, shape, COMPUTE, status=ERROR, note=one_line(exc), l2=WARM)
        if not err < FP32.verify_tol:
            return self._record(r, shape, COMPUTE, status=FAILED, rel_error=err, l2=WARM,
                                note=f"verification failed: relative error {err:.2e}")
        t = time_cpu(lambda: r.run(a, b, c, plan.alpha, plan.beta), plan.cpu_timing)
        return self._record(r, shape, COMPUTE, timing=t, rel_error=err)


_ENV_FIELDS = {f for f in Record.__dataclass_fields__}


class _Operands:
    """Device arrays of one number format, behind one interface: CuPy arrays for fp32, tf32 and fp16,
    torch tensors for bf16 (CuPy has no bfloat16). Host copies of bf16 hold its 16-bit patterns.

    The sweep runs on a CuPy stream of its own, which does not wait for torch's default stream: every
    torch operation here is issued on the current CuPy stream, so it is ordered with the kernels and
    the copies around it."""

    def __init__(self, cp, fmt: NumberFormat):
        self.cp, self.fmt = cp, fmt
        self.torch = None
        if fmt.needs_torch:
            import torch

            self.torch = torch
            self.device = torch.device("cuda", cp.cuda.Device().id)
            self._on_stream = peers.torch_on_cupy_stream(self.device)
        self.host_dtype = np.dtype(np.uint16) if fmt.needs_torch else np.dtype(fmt.dtype)

    def empty(self, shape):
        if self.torch is not None:
            with self._on_stream():
                return self.torch.empty(shape, dtype=self.torch.bfloat16, device=self.device)
        return self.cp.empty(shape, dtype=self.fmt.dtype)

    def cast(self, x32):
        """A float32 CuPy array rounded to the format's dtype."""
        if self.torch is not None:
            with self._on_stream():
                return self.torch.from_dlpack(x32).to(self.torch.bfloat16)
        return x32.astype(self.fmt.dtype, copy=False)

    def as_cupy(self, x):
        """The values as a CuPy array (bf16 widened to float32, exactly)."""
        if self.torch is not None:
            with self._on_stream():
                return self.cp.from_dlpack(x.float())
        return x

    def exact64(self, x):
        return self.as_cupy(x).astype(self.cp.float64)

    def assign(self, dst, src) -> None:
        """dst[...] = src, broadcasting src over leading dimensions."""
        if self.torch is not None:
            with self._on_stream():
                dst.copy_(src.expand_as(dst))
        else:
            dst[...] = src

    def fill_nan(self, x) -> None:
        if self.torch is not None:
            with self._on_stream():
                x.fill_(float("nan"))
        else:
            x.fill(self.cp.nan)

    def to_host(self, x) -> np.ndarray:
        if self.torch is not None:
            with self._on_stream():
                return x.view(self.torch.int16).cpu().numpy().view(np.uint16)
        return x.get()

    def host64(self, h: np.ndarray) -> np.ndarray:
        """A host array's values in float64 (bf16 patterns widened: the high half of a float32)."""
        return bf16_bits_to_float64(h) if self.torch is not None else h.astype(np.float64)


def bf16_bits_to_float64(bits: np.ndarray) -> np.ndarray:
    """bfloat16 values held as their 16-bit patterns (uint16), in float64: a bfloat16 is the high half of
    a float32, so widening is a shift."""
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _fmt(shape: Shape) -> str:
    m, n, k = shape
    return str(m) if m == n == k else f"{m}x{n}x{k}"


def run_plan(plan: Plan, on_record: Callable[[Record], None] | None = None) -> Results:
    """Run a plan to the end (library use; the CLI drives `Sweep` itself for progress and Ctrl-C)."""
    sweep = Sweep(plan)
    try:
        for rec in sweep:
            if on_record:
                on_record(rec)
    except KeyboardInterrupt:
        return sweep.finish(interrupted=True)
    return sweep.finish()


__all__ = [
    "DEFAULT_CPU_SIZES", "DEFAULT_GPU_SIZES", "Plan", "Sweep", "default_plan", "host_rel_error", "parse_shape",
    "rel_error",
    "parse_sizes", "powers_of_two", "run_plan", "split_names", "with_neighbours",
]
