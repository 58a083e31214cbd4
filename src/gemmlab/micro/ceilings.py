"""Ceilings: the rates the models divide by, measured (microbenchmarks) or from the datasheet.

`Ceilings` is plain data, usable without a GPU: `Ceilings.datasheet(dev)` for the model-only path,
`Ceilings.from_results(results, dev)` from `micro.bench.run_micro`. Measured ceilings are kept per
device in the cache directory (`save` / `load_cached`), so `explain` and `roofline` reuse them.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..files import atomic_write
from ..runtime.device import DeviceInfo
from . import datasheet

FORMAT = 1


@dataclass
class MicroResult:
    """One microbenchmark: the rate it reached, beside its datasheet figure and the clock it ran at."""

    name: str                      # fp32_fma, tensor_bf16, dram_copy, l2_read, ...
    value: float                   # FLOP/s or B/s
    unit: str
    median_ms: float
    iqr_ms: float
    samples: int
    sm_clock_mhz: float | None     # during the timed launches: counted in the kernel, or NVML's median (clock_basis)
    mem_clock_mhz: float | None
    datasheet: float | None        # at the device's boost clock
    datasheet_at_clock: float | None  # at the measured SM clock (same as datasheet for DRAM)
    basis: str                     # how the datasheet figure is derived
    detail: str                    # what the kernel did
    published: bool = True
    clock_basis: str = "NVML"      # "counted in the kernel" (the SMs' cycles over their ns), or "NVML"
    # Compute peaks: the work over the SMs' own cycles (one launch) against the datasheet's per clock, in %:
    # at most 100 by construction. None for the memory benchmarks and results saved before it existed.
    pct_per_cycle: float | None = None

    @property
    def pct_datasheet(self) -> float | None:
        return 100.0 * self.value / self.datasheet if self.datasheet else None

    @property
    def pct_at_clock(self) -> float | None:
        """Of the datasheet at the clock the run had: counted per SM-cycle for the compute peaks, else the rate
        over the datasheet at the clock read."""
        if self.pct_per_cycle is not None:
            return self.pct_per_cycle
        return 100.0 * self.value / self.datasheet_at_clock if self.datasheet_at_clock else None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Ceilings:
    """Rates per second for the whole GPU. `source` is "measured" or "datasheet"."""

    device: str
    source: str
    fp32_flops: float
    dram_bps: float                # streaming read: what GEMM operands cost
    l2_bps: float
    smem_bps: float
    l1_bps: float
    sm_clock_mhz: float | None = None
    # Measured: the faster of the dtype's mma.sync and wgmma benchmarks (`tensor_source` names it).
    tensor_fp16_flops: float | None = None
    tensor_bf16_flops: float | None = None
    dram_write_bps: float | None = None
    dram_copy_bps: float | None = None
    memcpy_bps: float | None = None
    results: list[MicroResult] = field(default_factory=list)

    # ------------------------------------------------------------------ construction

    @classmethod
    def datasheet(cls, dev: DeviceInfo, clock_mhz: float | None = None) -> "Ceilings":
        t16 = datasheet.tensor(dev, "float16", clock_mhz)
        tb16 = datasheet.tensor(dev, "bfloat16", clock_mhz)
        d = datasheet.dram(dev).value
        return cls(
            device=dev.name, source="datasheet",
            fp32_flops=datasheet.fp32_fma(dev, clock_mhz).value,
            dram_bps=d, l2_bps=datasheet.l2(dev, clock_mhz).value,
            smem_bps=datasheet.smem(dev, clock_mhz).value, l1_bps=datasheet.l1(dev, clock_mhz).value,
            sm_clock_mhz=clock_mhz or dev.sm_clock_khz / 1e3,
            tensor_fp16_flops=t16.value if t16 else None, tensor_bf16_flops=tb16.value if tb16 else None,
            dram_write_bps=d, dram_copy_bps=d,
        )

    @classmethod
    def from_results(cls, results: list[MicroResult], dev: DeviceInfo) -> "Ceilings":
        """Measured ceilings; a benchmark that did not run falls back to its datasheet figure."""
        by = {r.name: r for r in results}
        sheet = cls.datasheet(dev)

        def pick(name: str, fallback):
            r = by.get(name)
            return r.value if r is not None and r.value > 0 else fallback

        def best(*names: str):
            # One ceiling, several kernels that reach for it (mma.sync everywhere from sm_80, wgmma on
            # sm_90a, which alone reaches the datasheet rate there): the fastest one is the measured peak.
            return max((v for v in (pick(n, None) for n in names) if v is not None), default=None)

        clocks = [r.sm_clock_mhz for r in results if r.sm_clock_mhz]
        return cls(
            device=dev.name, source="measured",
            fp32_flops=pick("fp32_fma", sheet.fp32_flops),
            dram_bps=pick("dram_read", sheet.dram_bps),
            l2_bps=pick("l2_read", sheet.l2_bps),
            smem_bps=pick("smem_read", sheet.smem_bps),
            l1_bps=pick("l1_read", sheet.l1_bps),
            sm_clock_mhz=by["fp32_fma"].sm_clock_mhz if "fp32_fma" in by else (clocks[0] if clocks else None),
            tensor_fp16_flops=best("tensor_fp16", "tensor_fp16_wgmma"),
            tensor_bf16_flops=best("tensor_bf16", "tensor_bf16_wgmma"),
            dram_write_bps=pick("dram_write", None),
            dram_copy_bps=pick("dram_copy", None),
            memcpy_bps=pick("memcpy_d2d", None),
            results=list(results),
        )

    def tensor_source(self, dtype: str) -> str | None:
        """The microbenchmark that gave the tensor ceiling of `dtype` ("float16" or "bfloat16"): the faster of
        its mma.sync and wgmma runs; None where no tensor benchmark of that dtype ran (datasheet ceilings)."""
        short = {"float16": "fp16", "bfloat16": "bf16"}[dtype]
        runs = [r for r in self.results if r.name in (f"tensor_{short}", f"tensor_{short}_wgmma") and r.value > 0]
        return max(runs, key=lambda r: r.value).name if runs else None

    # ------------------------------------------------------------------ persistence

    def as_dict(self) -> dict:
        d = asdict(self)
        d["format"] = FORMAT
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Ceilings":
        d = dict(d)
        d.pop("format", None)
        d["results"] = [MicroResult(**r) for r in d.get("results", [])]
        return cls(**d)

    def save(self, path: str | Path) -> Path:
        return atomic_write(path, json.dumps(self.as_dict(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "Ceilings":
        d = json.loads(Path(path).read_text())
        if d.get("format") != FORMAT:
            raise ValueError(f"{path}: not a gemmlab ceilings file of format {FORMAT}")
        return cls.from_dict(d)


def cache_path(dev: DeviceInfo) -> Path:
    """Where measured ceilings of this device are kept (beside the kernel cache)."""
    from ..runtime.compiler import cache_dir

    slug = re.sub(r"[^A-Za-z0-9]+", "-", dev.name).strip("-").lower() or "gpu"
    return cache_dir().parent / "ceilings" / f"{slug}-sm{dev.sm_count}.json"


def load_cached(dev: DeviceInfo) -> Ceilings | None:
    try:
        return Ceilings.load(cache_path(dev))
    except (OSError, ValueError, TypeError, KeyError):
        return None
