"""The facts every record carries: the GPU (when there is one), the processor and the software versions.

Versions of optional packages come from their installed metadata, so nothing heavy (torch, triton) is
imported just to be named. The git revision is read from the checkout's files, not by running git.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from .._version import __version__
from ..runtime import compiler, device


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}" if v else ""


@functools.lru_cache(maxsize=1)
def processor_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def git_revision(start: Path | None = None) -> str:
    """The commit of the checkout gemmlab runs from (short hash, '+' if unknown state), or ''."""
    here = (start or Path(__file__)).resolve()
    for d in [here, *here.parents]:
        git = d / ".git"
        if git.is_file():  # a worktree: "gitdir: PATH"
            try:
                git = Path(git.read_text().split(":", 1)[1].strip())
            except (OSError, IndexError):
                return ""
        if git.is_dir():
            return _read_head(git)
    return ""


def _read_head(git: Path) -> str:
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head[:12]
        ref = head.split(":", 1)[1].strip()
        common = git
        if (git / "commondir").exists():
            common = (git / (git / "commondir").read_text().strip()).resolve()
        for base in (git, common):
            f = base / ref
            if f.exists():
                return f.read_text().strip()[:12]
        packed = common / "packed-refs"
        if packed.exists():
            for line in packed.read_text().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0][:12]
    except OSError:
        pass
    return ""


def software() -> dict[str, Any]:
    try:
        nvrtc = ".".join(map(str, compiler.nvrtc_version()))
    except Exception:
        nvrtc = ""
    return {
        "nvrtc": nvrtc,
        "cupy": next((v for v in (_version(d) for d in ("cupy-cuda13x", "cupy-cuda12x", "cupy")) if v), ""),
        "torch": _version("torch"),
        "triton": _version("triton"),
        "numpy": _version("numpy"),
        "numba": _version("numba"),
        "python": sys.version.split()[0],
        "processor": processor_name(),
        "cpu_count": os.cpu_count(),
        "gemmlab_version": __version__,
        "git_revision": git_revision(),
    }


def gpu_facts() -> dict[str, Any]:
    """Record fields describing the current GPU; {} without one."""
    if not device.gpu_available():
        return {}
    d = device.device_info()
    return {
        "gpu": d.name,
        "gpu_index": d.index,
        "cc": f"{d.compute_capability[0]}.{d.compute_capability[1]}",
        "sm_count": d.sm_count,
        "l2_bytes": d.l2_bytes,
        "sm_clock_max_mhz": d.sm_clock_khz / 1e3,
        "mem_clock_mhz": d.mem_clock_khz / 1e3,
        "peak_fp32_tflops": d.peak_fp32_tflops,
        "peak_dram_gbps": d.peak_dram_gbps,
        "driver": _cuda_version(d.driver_version),
        "cuda_runtime": _cuda_version(d.runtime_version),
    }


def record_fields() -> dict[str, Any]:
    """Everything a Record takes from the machine, in one dict."""
    return {**software(), **gpu_facts()}
