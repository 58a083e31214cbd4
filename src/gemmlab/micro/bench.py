"""Run the microbenchmarks on the current GPU: each kernel timed, beside its datasheet figure and clock.

Every benchmark is a small kernel of this package (`micro/cuda/*.cu`), compiled by the same NVRTC runtime
as the ladder and timed by the harness's `time_gpu` (CUDA events, median of many launches; the L2 is not
flushed, since the cache benchmarks need a warm cache and the DRAM buffers are 16x the L2). The SM clock
is sampled through NVML while the timed launches run. Grids are sized from the occupancy the driver
reports for the compiled kernel, in whole waves, so no SM idles at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from ..runtime import compiler, launch
from ..runtime.device import DeviceInfo, device_info, require_cupy
from . import datasheet
from .ceilings import MicroResult
from ..runtime.clocks import ClockSampler, sm_spans

CUDA_DIR = Path(__file__).with_name("cuda")
THREADS = 256

# name -> (what it measures, unit); run order.
BENCHMARKS: dict[str, tuple[str, str]] = {
    "fp32_fma": ("peak fp32 FMA rate: 8 independent chains per thread", "FLOP/s"),
    "tensor_fp16": ("tensor cores, mma.sync m16n8k16 fp16 -> fp32", "FLOP/s"),
    "tensor_bf16": ("tensor cores, mma.sync m16n8k16 bf16 -> fp32", "FLOP/s"),
    "tensor_fp16_wgmma": ("tensor cores, wgmma m64n256k16 fp16 -> fp32 (sm_90a)", "FLOP/s"),
    "tensor_bf16_wgmma": ("tensor cores, wgmma m64n256k16 bf16 -> fp32 (sm_90a)", "FLOP/s"),
    "dram_read": ("DRAM streaming read", "B/s"),
    "dram_write": ("DRAM streaming write", "B/s"),
    "dram_copy": ("DRAM streaming copy (bytes read + written)", "B/s"),
    "memcpy_d2d": ("cudaMemcpy device to device (bytes read + written), the reference copy", "B/s"),
    "l2_read": ("L2 read, working set a quarter of the L2, L1 bypassed", "B/s"),
    "smem_read": ("shared-memory read, conflict-free 16-byte loads", "B/s"),
    "l1_read": ("L1 hits, 16 KiB working set, 16-byte global loads", "B/s"),
}

FMA_CHAINS, FMA_UNROLL = 8, 32
MMA_CHAINS = 8
# wgmma: 128-thread blocks (one warpgroup each). At 154 registers a thread three of them fit on an SM, three
# independent accumulator chains; 256-thread blocks would fit one (two chains).
WGMMA_WARPGROUPS = 1
WGMMA_PER_TRIP = 4  # m64n256k16 per warpgroup and trip: one commit group, KSTEPS in wgmma.cu
CACHE_U = 8   # loads per trip in the shared-memory and L1 kernels
L2_U = 4
TARGET_S = 2e-3  # aim each launch at ~2 ms: long against launch gaps, short against the budget


@dataclass
class _Prepared:
    fn: Callable[[], Any]
    amount: float        # FLOPs or bytes per call
    detail: str
    keep: tuple = ()     # device buffers that must outlive the timing
    clocks: Any = None   # per-block SM, cycles and ns of the last launch (block_clock.cuh): the compute peaks


def _kernel(file: str, expr: str, dev: DeviceInfo, arch: str | None = None) -> launch.LoadedKernel:
    module = compiler.compile_file(CUDA_DIR / file, [expr], arch or dev.arch)
    return launch.load(module, expr)


def _blocks_per_sm(k: launch.LoadedKernel, threads: int, dev: DeviceInfo, smem: int = 0) -> int:
    cp = require_cupy()
    try:
        n = int(cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(k.function.kernel.ptr, threads, smem))
        if n > 0:
            return n
    except Exception:
        pass
    return max(1, dev.max_threads_per_sm // threads)


def _fma(dev: DeviceInfo) -> _Prepared:
    cp = require_cupy()
    k = _kernel("fma.cu", f"fma_peak<{FMA_CHAINS}, {FMA_UNROLL}>", dev)
    occ = _blocks_per_sm(k, THREADS, dev)
    grid = dev.sm_count * occ * 4
    per_trip = 2.0 * FMA_CHAINS * FMA_UNROLL * grid * THREADS
    trips = max(1, int(TARGET_S * datasheet.fp32_fma(dev).value / per_trip))
    sink = cp.zeros(grid * THREADS, dtype=cp.float32)
    clocks = cp.zeros(5 * grid, dtype=cp.uint64)
    args = (sink, np.int32(trips), np.float32(0.999), np.float32(0.001), clocks)
    return _Prepared(lambda: k((grid, 1, 1), (THREADS, 1, 1), args), per_trip * trips,
                     f"{FMA_CHAINS} chains x {FMA_UNROLL} unrolled x {trips} trips; {grid} blocks of {THREADS} "
                     f"({occ} per SM, 4 waves)", (sink, clocks), clocks)


def _tensor_peak(k: launch.LoadedKernel, dev: DeviceInfo, bf16: bool, grid: int, threads: int, per_trip: float,
                 fallback_rate: float, detail: str) -> _Prepared:
    """A tensor-core peak kernel (sink, trips) launched on `grid` blocks, with as many trips as last about
    TARGET_S at the datasheet rate (`fallback_rate` where there is none); `detail` names them as {trips}."""
    cp = require_cupy()
    sheet = datasheet.tensor(dev, "bfloat16" if bf16 else "float16")
    trips = max(1, int(TARGET_S * (sheet.value if sheet else fallback_rate) / per_trip))
    sink = cp.zeros(grid * threads, dtype=cp.float32)
    clocks = cp.zeros(5 * grid, dtype=cp.uint64)
    args = (sink, np.int32(trips), clocks)
    return _Prepared(lambda: k((grid, 1, 1), (threads, 1, 1), args), per_trip * trips, detail.format(trips=trips),
                     (sink, clocks), clocks)


def _mma(dev: DeviceInfo, bf16: bool) -> _Prepared | None:
    if dev.compute_capability < (8, 0):
        return None
    k = _kernel("mma.cu", f"mma_peak<{int(bf16)}, {MMA_CHAINS}>", dev)
    occ = _blocks_per_sm(k, THREADS, dev)
    grid = dev.sm_count * occ * 2
    per_trip = 2.0 * 16 * 8 * 16 * MMA_CHAINS * (grid * THREADS // 32)
    return _tensor_peak(k, dev, bf16, grid, THREADS, per_trip, 100e12,
                        f"{MMA_CHAINS} accumulator tiles per warp x {{trips}} trips; {grid} blocks of {THREADS} "
                        f"({occ} per SM, 2 waves)")


def _wgmma(dev: DeviceInfo, bf16: bool) -> _Prepared | None:
    # wgmma exists only on sm_90a, so only a compute capability 9.0 device can run the kernel.
    if tuple(dev.compute_capability) != (9, 0):
        return None
    k = _kernel("wgmma.cu", f"wgmma_peak<{int(bf16)}, {WGMMA_WARPGROUPS}>", dev, "sm_90a")
    threads = 128 * WGMMA_WARPGROUPS
    occ = _blocks_per_sm(k, threads, dev)
    grid = dev.sm_count * occ * 2
    per_trip = 2.0 * 64 * 256 * 16 * WGMMA_PER_TRIP * WGMMA_WARPGROUPS * grid
    return _tensor_peak(k, dev, bf16, grid, threads, per_trip, 1000e12,
                        f"{WGMMA_PER_TRIP} wgmma per commit group, at most 2 groups in flight, x {{trips}} trips; "
                        f"{grid} blocks of {threads} ({occ} per SM, 2 waves)")


def _stream_bytes(dev: DeviceInfo) -> int:
    cp = require_cupy()
    free, _ = cp.cuda.runtime.memGetInfo()
    want = max(16 * dev.l2_bytes, 256 << 20)
    nbytes = min(want, free // 4)
    return max(1 << 20, nbytes // (16 * 1024) * (16 * 1024))


def _stream(dev: DeviceInfo, which: str, buffers: dict) -> _Prepared:
    cp = require_cupy()
    nbytes = buffers.setdefault("nbytes", _stream_bytes(dev))
    n4 = nbytes // 16
    if "src" not in buffers:
        buffers["src"] = cp.ones(nbytes // 4, dtype=cp.float32)
        buffers["dst"] = cp.empty(nbytes // 4, dtype=cp.float32)
    src, dst = buffers["src"], buffers["dst"]
    grid = -(-n4 // (THREADS * 4))
    mib = nbytes / 2**20
    if which == "memcpy_d2d":
        stream = cp.cuda.get_current_stream()
        return _Prepared(lambda: dst.data.copy_from_device_async(src.data, nbytes, stream), 2.0 * nbytes,
                         f"cudaMemcpyAsync of {mib:.0f} MiB", (src, dst))
    k = _kernel("stream.cu", f"stream_{which.split('_')[1]}", dev)
    if which == "dram_read":
        sink = cp.zeros(1, dtype=cp.float32)
        args: tuple = (src, np.int64(n4), sink)
        amount, keep = float(nbytes), (src, sink)
    elif which == "dram_write":
        args, amount, keep = (dst, np.int64(n4), np.float32(1.0)), float(nbytes), (dst,)
    else:
        args, amount, keep = (src, dst, np.int64(n4)), 2.0 * nbytes, (src, dst)
    return _Prepared(lambda: k((grid, 1, 1), (THREADS, 1, 1), args), amount,
                     f"{mib:.0f} MiB buffer ({nbytes / dev.l2_bytes:.0f}x the L2), {grid} blocks of {THREADS}, "
                     "4 float4 per thread", keep)


def _l2(dev: DeviceInfo) -> _Prepared:
    cp = require_cupy()
    k = _kernel("l2.cu", f"l2_read<{L2_U}>", dev)
    nbytes = 1 << max(16, int(np.floor(np.log2(max(dev.l2_bytes // 4, 1 << 16)))))
    buf = cp.ones(nbytes // 4, dtype=cp.float32)
    n4 = nbytes // 16
    occ = _blocks_per_sm(k, THREADS, dev)
    grid = dev.sm_count * occ
    per_trip = grid * THREADS * L2_U * 16.0
    trips = max(1, int(TARGET_S * datasheet.l2(dev).value / per_trip))
    sink = cp.zeros(1, dtype=cp.float32)
    args = (buf, np.uint32(n4 - 1), np.int32(trips), sink)
    return _Prepared(lambda: k((grid, 1, 1), (THREADS, 1, 1), args), per_trip * trips,
                     f"{nbytes / 2**20:.0f} MiB working set ({100 * nbytes / dev.l2_bytes:.0f}% of L2), "
                     f"{grid} blocks x {trips} trips x {L2_U} float4, ld.global.cg", (buf, sink))


def _cache(dev: DeviceInfo, which: str) -> _Prepared:
    cp = require_cupy()
    sink = cp.zeros(dev.sm_count * 32 * THREADS, dtype=cp.float32)
    if which == "smem_read":
        k = _kernel("smem.cu", f"smem_read<{CACHE_U}>", dev)
        occ = _blocks_per_sm(k, THREADS, dev)
        grid = dev.sm_count * occ
        per_trip = grid * THREADS * CACHE_U * 16.0
        trips = max(1, int(TARGET_S * datasheet.smem(dev).value / per_trip))
        args: tuple = (np.int32(trips), sink)
        keep: tuple = (sink,)
        what = "32 KiB of shared memory per block"
    else:
        k = _kernel("l1.cu", f"l1_read<{CACHE_U}>", dev)
        buf = cp.ones(1024 * 4, dtype=cp.float32)
        occ = _blocks_per_sm(k, THREADS, dev)
        grid = dev.sm_count * occ
        per_trip = grid * THREADS * CACHE_U * 16.0
        trips = max(1, int(TARGET_S * datasheet.l1(dev).value / per_trip))
        args, keep = (buf, np.int32(trips), sink), (buf, sink)
        what = "16 KiB global buffer, ld.global.ca"
    return _Prepared(lambda: k((grid, 1, 1), (THREADS, 1, 1), args), per_trip * trips,
                     f"{what}; {grid} blocks ({occ} per SM) x {trips} trips x {CACHE_U} float4", keep)


def _prepare(name: str, dev: DeviceInfo, buffers: dict) -> _Prepared | None:
    if name == "fp32_fma":
        return _fma(dev)
    if name in ("tensor_fp16", "tensor_bf16"):
        return _mma(dev, bf16=name.endswith("bf16"))
    if name in ("tensor_fp16_wgmma", "tensor_bf16_wgmma"):
        return _wgmma(dev, bf16=name.startswith("tensor_bf16"))
    if name in ("dram_read", "dram_write", "dram_copy", "memcpy_d2d"):
        return _stream(dev, name, buffers)
    if name == "l2_read":
        return _l2(dev)
    if name in ("smem_read", "l1_read"):
        return _cache(dev, name)
    raise ValueError(f"unknown microbenchmark {name!r}; known: {', '.join(BENCHMARKS)}")


def run_one(name: str, dev: DeviceInfo | None = None, *, budget_ms: float = 150.0,
            buffers: dict | None = None) -> MicroResult | None:
    """Time one microbenchmark; None where it cannot run on this device (e.g. mma.sync before sm_80, wgmma
    off sm_90)."""
    from ..bench.timing import time_gpu

    dev = dev or device_info()
    prepared = _prepare(name, dev, {} if buffers is None else buffers)
    if prepared is None:
        return None
    with ClockSampler(dev.index) as clocks:
        timing = time_gpu(prepared.fn, budget_ms=budget_ms, warmup_ms=20.0, flush_l2=False, noise_target=0.005)
    value = prepared.amount / (timing.median_ms * 1e-3)
    sheet = datasheet.for_benchmark(name, dev)
    # The compute peaks count what each SM did in its own cycles (the last launch; block_clock.cuh): the share
    # of the peak per clock is the work over the SMs' cycles, which no clock reading can push past 100 %. The
    # clock shown is the one at which the measured rate is that share of the datasheet (rate / share / the
    # datasheet per MHz), so the columns agree. The others (memory) keep NVML's reading.
    mhz, basis, per_cycle = clocks.sm_mhz, "NVML", None
    if prepared.clocks is not None:
        cycles, ns = sm_spans(prepared.clocks.get().reshape(-1, 5).tolist())
        one = datasheet.for_benchmark(name, dev, 1.0)  # the datasheet's work per MHz: per cycle x SMs x 1e6
        if cycles and ns and one is not None:
            per_cycle = 100.0 * prepared.amount / (cycles * one.value / 1e6 / dev.sm_count)
            mhz, basis = value / (per_cycle / 100.0) / one.value, "from the work per SM-cycle counted in the kernel"
    at_clock = datasheet.for_benchmark(name, dev, mhz) if mhz else None
    return MicroResult(
        name=name, value=value, unit=BENCHMARKS[name][1], median_ms=timing.median_ms, iqr_ms=timing.iqr_ms,
        samples=timing.samples, sm_clock_mhz=mhz, mem_clock_mhz=clocks.mem_mhz,
        datasheet=sheet.value if sheet else None,
        datasheet_at_clock=(at_clock.value if at_clock else None) if sheet else None,
        basis=sheet.basis if sheet else "", detail=prepared.detail,
        published=sheet.published if sheet else True, clock_basis=basis, pct_per_cycle=per_cycle,
    )


def run_micro(which: Iterable[str] | None = None, *, budget_ms: float = 150.0,
              on_result: Callable[[MicroResult], None] | None = None) -> list[MicroResult]:
    """Run the named microbenchmarks (default: all) on the current device, in `BENCHMARKS` order."""
    names = list(which) if which else list(BENCHMARKS)
    for n in names:
        if n not in BENCHMARKS:
            raise ValueError(f"unknown microbenchmark {n!r}; known: {', '.join(BENCHMARKS)}")
    dev = device_info()
    buffers: dict = {}
    out: list[MicroResult] = []
    try:
        for name in [n for n in BENCHMARKS if n in names]:
            r = run_one(name, dev, budget_ms=budget_ms, buffers=buffers)
            if r is None:
                continue
            out.append(r)
            if on_result:
                on_result(r)
    finally:
        buffers.clear()  # the DRAM buffers are large: free them before returning
    return out
