"""Device facts and the one gate every GPU feature goes through.

CuPy is imported lazily, so `import gemmlab` works on a machine with no GPU, no driver and no CuPy;
a GPU feature then raises `GPUUnavailableError` with one line naming the cause.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import asdict, dataclass
from typing import Any

from .errors import GPUUnavailableError


@functools.lru_cache(maxsize=1)
def libcuda() -> ctypes.CDLL | None:
    """The CUDA driver library through ctypes (for driver calls CuPy does not wrap), or None where none
    is loadable."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[Any, str | None]:
    """Import CuPy and touch the device once; return (cupy or None, reason it is unusable)."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install raising something else
        return None, f"CuPy is not importable ({type(exc).__name__}: {exc}); install gemmlab[cuda13] or gemmlab[cuda12]"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return None, f"no CUDA driver or device ({_one_line(exc)})"
    if count == 0:
        return None, "CuPy found no CUDA device"
    return cupy, None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def gpu_available() -> bool:
    return _probe()[0] is not None


def gpu_unavailable_reason() -> str | None:
    return _probe()[1]


def require_cupy():
    """Return the cupy module, or raise GPUUnavailableError with the reason on one line."""
    cupy, reason = _probe()
    if cupy is None:
        raise GPUUnavailableError(f"GPU unavailable: {reason}")
    return cupy


@dataclass(frozen=True)
class DeviceInfo:
    """What the kernels, the models and the reports need to know about one GPU."""

    index: int
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    l2_bytes: int
    global_mem_bytes: int
    smem_per_block: int          # without opt-in
    smem_per_block_optin: int    # the most a block may ask for after raising its limit
    smem_per_sm: int
    regs_per_block: int
    regs_per_sm: int
    max_threads_per_block: int
    max_threads_per_sm: int
    warp_size: int
    sm_clock_khz: int            # the device attribute: the boost (maximum) SM clock
    mem_clock_khz: int
    mem_bus_bits: int
    driver_version: int
    runtime_version: int

    @property
    def arch(self) -> str:
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @property
    def fp32_lanes_per_sm(self) -> int:
        return fp32_lanes_per_sm(self.compute_capability)

    @property
    def peak_fp32_tflops(self) -> float:
        """SMs × FP32 lanes × 2 (an FMA is two FLOPs) × the boost clock."""
        return self.sm_count * self.fp32_lanes_per_sm * 2 * self.sm_clock_khz * 1e3 / 1e12

    def peak_tensor_tflops(self, dtype: str, precision: str | None = None) -> float | None:
        """The dense tensor-core peak at the boost clock for `dtype` inputs with fp32 accumulation (fp16,
        bf16; float32 with precision "tf32": half the 16-bit rate, as on A100 and H100); None where the
        architecture has no such path or no published rate."""
        per = tensor_flop_per_clk_per_sm(self.compute_capability, dtype, precision)
        return None if per is None else self.sm_count * per * self.sm_clock_khz * 1e3 / 1e12

    @property
    def peak_dram_gbps(self) -> float:
        """Memory clock × 2 (double data rate) × bus width in bytes: the datasheet bandwidth."""
        return self.mem_clock_khz * 1e3 * 2 * (self.mem_bus_bits / 8) / 1e9

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(arch=self.arch, peak_fp32_tflops=self.peak_fp32_tflops, peak_dram_gbps=self.peak_dram_gbps)
        return d


# Dense tensor-core FLOPs per clock per SM with fp16 or bf16 inputs and fp32 accumulation, from NVIDIA's
# architecture whitepapers (V100: 8 tensor cores x 64 FMA x 2; A100: 1024 FMA; H100: 2048 FMA per clock
# and SM). GeForce parts of sm_86 / sm_89 run fp32 accumulation at half their fp16-accumulate rate; the
# figure below is the fp16-accumulate one, so it is an upper bound there. TF32 runs at half the rate.
TENSOR_FLOP_PER_CLK_PER_SM = {
    (7, 0): 1024, (7, 2): 1024, (7, 5): 1024,
    (8, 0): 2048, (8, 6): 1024, (8, 7): 1024, (8, 9): 1024,
    (9, 0): 4096,
}
BF16_MIN_CC = (8, 0)
TF32_MIN_CC = (8, 0)
FP8_MIN_CC = (8, 9)   # e4m3 / e5m2 tensor cores: Ada and Hopper on (gemmlab's 8-bit rung needs Hopper)


def tensor_flop_per_clk_per_sm(cc: tuple[int, int], dtype: str, precision: str | None = None) -> int | None:
    """Dense tensor-core FLOPs per clock and SM for `dtype` inputs with fp32 accumulation (float32 only at
    precision "tf32", half the 16-bit rate); None where the architecture has no such path or no known rate."""
    cc = tuple(cc)
    per = TENSOR_FLOP_PER_CLK_PER_SM.get(cc)
    if per is None:
        return None
    if dtype == "float32":
        return per // 2 if precision == "tf32" and cc >= TF32_MIN_CC else None
    if dtype == "bfloat16":
        return per if cc >= BF16_MIN_CC else None
    if dtype in ("float8_e4m3fn", "float8_e5m2"):  # twice the 16-bit rate, where the tensor cores take them
        return 2 * per if cc >= FP8_MIN_CC else None
    return per if dtype == "float16" else None


def fp32_lanes_per_sm(cc: tuple[int, int]) -> int:
    """FP32 FMA lanes per SM by architecture (from NVIDIA's arithmetic-throughput table)."""
    major, minor = cc
    if major >= 9 or (major == 8 and minor in (6, 7, 9)):
        return 128
    if major == 8:  # sm_80: 64 FP32 lanes per SM
        return 64
    if major == 7:
        return 64
    if major == 6:
        return 64 if minor == 0 else 128
    return 128


@functools.lru_cache(maxsize=None)
def device_info(index: int | None = None) -> DeviceInfo:
    cupy = require_cupy()
    rt = cupy.cuda.runtime
    if index is None:
        index = cupy.cuda.Device().id
    props = rt.getDeviceProperties(index)

    def attr(code: int) -> int:
        return int(rt.deviceGetAttribute(code, index))

    # cudaDeviceAttr codes: 13 ClockRate, 36 MemoryClockRate, 37 GlobalMemoryBusWidth (CUDA 13 keeps the
    # attributes but dropped the matching fields from cudaDeviceProp).
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    return DeviceInfo(
        index=index,
        name=name,
        compute_capability=(int(props["major"]), int(props["minor"])),
        sm_count=int(props["multiProcessorCount"]),
        l2_bytes=int(props["l2CacheSize"]),
        global_mem_bytes=int(props["totalGlobalMem"]),
        smem_per_block=int(props["sharedMemPerBlock"]),
        smem_per_block_optin=int(props["sharedMemPerBlockOptin"]),
        smem_per_sm=int(props["sharedMemPerMultiprocessor"]),
        regs_per_block=int(props["regsPerBlock"]),
        regs_per_sm=int(props["regsPerMultiprocessor"]),
        max_threads_per_block=int(props["maxThreadsPerBlock"]),
        max_threads_per_sm=int(props["maxThreadsPerMultiProcessor"]),
        warp_size=int(props["warpSize"]),
        sm_clock_khz=attr(13),
        mem_clock_khz=attr(36),
        mem_bus_bits=attr(37),
        driver_version=int(rt.driverGetVersion()),
        runtime_version=int(rt.runtimeGetVersion()),
    )


def current_arch() -> str:
    return device_info().arch


def clocks_now(index: int = 0) -> dict[str, Any]:
    """Current SM and memory clocks and throttle reasons through NVML, or {} where NVML is absent."""
    try:
        import pynvml
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
        try:
            try:  # CUDA and NVML number GPUs differently when CUDA_VISIBLE_DEVICES reorders them
                h = pynvml.nvmlDeviceGetHandleByPciBusId(require_cupy().cuda.Device(index).pci_bus_id)
            except Exception:
                h = pynvml.nvmlDeviceGetHandleByIndex(index)
            out = {
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                "sm_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                "temperature_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
            }
            try:  # the limit the board enforces now (the draw settles there under a sustained load)
                out["power_limit_w"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
            except Exception:
                pass
            try:
                out["throttle_reasons"] = int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))
            except Exception:
                out["throttle_reasons"] = int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))
            return out
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return {}


def stream_capturing(stream: int) -> bool:
    """Whether the stream with this raw handle is being captured into a CUDA graph."""
    cupy = require_cupy()
    return cupy.cuda.runtime.streamIsCapturing(int(stream)) != 0


def check_host_memory(need: int, what: str) -> None:
    """ValueError where `what` needs more than half of this machine's memory (`need` bytes): refused by size
    before anything is allocated, rather than a MemoryError or the system killing the process later."""
    have = host_memory_bytes()
    if have and need > have // 2:
        raise ValueError(f"{what} needs about {need / 2**30:.1f} GiB of host memory; this machine has "
                         f"{have / 2**30:.1f} GiB")


def host_memory_bytes() -> int:
    """Physical memory of this machine in bytes (0 where the system does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0
