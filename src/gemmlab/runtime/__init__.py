"""Compile (NVRTC), cache, load and launch (CuPy), and device facts. Knows no particular kernel."""

from .compiler import (
    CompiledModule,
    Resources,
    cache_dir,
    compile_file,
    normalise_arch,
    nvrtc_available,
    nvrtc_version,
    parse_ptxas_report,
)
from .device import (
    DeviceInfo,
    clocks_now,
    current_arch,
    device_info,
    gpu_available,
    gpu_unavailable_reason,
    require_cupy,
)
from .errors import CompileError, CompilerUnavailableError, GemmlabError, GPUUnavailableError
from .launch import LoadedKernel, load

__all__ = [
    "CompileError", "CompiledModule", "CompilerUnavailableError", "DeviceInfo", "GPUUnavailableError",
    "GemmlabError", "LoadedKernel", "Resources", "cache_dir", "clocks_now", "compile_file", "current_arch",
    "device_info", "gpu_available", "gpu_unavailable_reason", "load", "normalise_arch", "nvrtc_available",
    "nvrtc_version", "parse_ptxas_report", "require_cupy",
]
