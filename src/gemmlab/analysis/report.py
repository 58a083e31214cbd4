"""The analysis section of the report: the analysis tables and figures, from measurements and device facts.

    section = analysis_section(records, device, ceilings)
    section.markdown          # Markdown, referring to figures as ![...](<figure_prefix><name>.png)
    section.figures           # {name: matplotlib Figure}: the caller saves each as <name>.png

Table 2 (the machine): peak compute, cache bandwidths and sequential (DRAM) bandwidth, measured beside
the datasheet, with the SM clock each ran at. Table 1 (the kernels): time, GFLOP/s, bandwidth, % of peak
compute and % of peak bandwidth, and the limiter the model names. Then the roofline, the
efficiency bars, and one paragraph per kernel at the chosen size.

`records` are the harness's or this package's measurements: objects or mappings with `kernel`, `m`,
`n`, `k`, optionally `params`, `ok`, `sm_clock_mhz`, and the median time as `median_ms` or
`timing.median_ms` (a `Timing` or a dict). Records of kernels outside the fp32 ladder (cuBLAS,
other precisions) appear in Table 1 without a model. Nothing here needs a GPU.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..kernels import registry
from ..micro.ceilings import Ceilings
from ..runtime.device import DeviceInfo
from . import facts
from .bounds import predict, verdict
from .explain import explain
from .figures import RooflinePoint, efficiency_figure, roofline_figure
from .models import is_fp32, model_kernel


@dataclass
class Section:
    markdown: str
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Rec:
    kernel: str
    params: dict
    m: int
    n: int
    k: int
    seconds: float
    clock_mhz: float | None
    dtype: str = "float32"


def _field(rec: Any, name: str, default: Any = None) -> Any:
    if isinstance(rec, Mapping):
        return rec.get(name, default)
    return getattr(rec, name, default)


def normalise(rec: Any) -> _Rec | None:
    """A measurement record of any of the accepted shapes, or None if it has no usable time (or is not a
    kernel-only GPU measurement: end-to-end and CPU records are left to the harness's own tables)."""
    if _field(rec, "ok", True) is False:
        return None
    if _field(rec, "mode", "compute") not in ("compute", None) or _field(rec, "family", "gpu") == "cpu":
        return None
    ms = _field(rec, "median_ms")
    if ms is None:
        t = _field(rec, "timing")
        ms = _field(t, "median_ms") if t is not None else None
    if not ms or ms <= 0:
        return None
    clock = _field(rec, "sm_clock_mhz")
    if clock is None:
        lo, hi = _field(rec, "sm_mhz_min"), _field(rec, "sm_mhz_max")
        if lo or hi:
            clock = ((lo or hi) + (hi or lo)) / 2
    if clock is None:
        clocks = _field(rec, "clocks")
        clock = _field(clocks, "sm_clock_mhz") if clocks is not None else None
    return _Rec(str(_field(rec, "kernel")), dict(_field(rec, "params", {}) or {}), int(_field(rec, "m")),
                int(_field(rec, "n")), int(_field(rec, "k")), float(ms) * 1e-3, clock,
                str(_field(rec, "dtype", "float32") or "float32"))


def _pct(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.1f}%"


def _rate(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "FLOP/s":
        return f"{v / 1e12:.1f} TFLOP/s"
    return f"{v / 1e9:,.0f} GB/s"


def wavefront_bps(device: DeviceInfo, ceilings: Ceilings) -> float:
    """The L1 / shared data stage in bytes per second: 128 bytes per cycle per SM at the ceilings' clock."""
    mhz = ceilings.sm_clock_mhz or device.sm_clock_khz / 1e3
    return device.sm_count * 128 * mhz * 1e6


def table2(ceilings: Ceilings, device: DeviceInfo) -> str:
    """Table 2: peak compute, cache bandwidth, sequential bandwidth, against the datasheet."""
    from ..micro.bench import BENCHMARKS

    lines = ["| what | measured | datasheet | % of datasheet | SM clock during | how |",
             "|---|---|---|---|---|---|"]
    if ceilings.results:
        for r in ceilings.results:
            sheet = r.datasheet_at_clock or r.datasheet
            note = "" if r.published else " (nominal)"
            lines.append(f"| {BENCHMARKS.get(r.name, (r.name,))[0]} | {_rate(r.value, r.unit)} | "
                         f"{_rate(sheet, r.unit)}{note} | {_pct(100 * r.value / sheet if sheet else None)} | "
                         f"{f'{r.sm_clock_mhz:.0f} MHz' if r.sm_clock_mhz else '-'} | {r.detail} |")
    else:
        sheet = Ceilings.datasheet(device)
        for what, v, u in (("peak fp32 FMA", sheet.fp32_flops, "FLOP/s"), ("L1 hits", sheet.l1_bps, "B/s"),
                           ("shared memory", sheet.smem_bps, "B/s"), ("L2", sheet.l2_bps, "B/s"),
                           ("DRAM", sheet.dram_bps, "B/s")):
            lines.append(f"| {what} | not measured | {_rate(v, u)} | - | - | datasheet only |")
    return "\n".join(lines)


def device_from_records(records: list[Any]) -> DeviceInfo | None:
    """Device facts rebuilt from the harness's records (GPU name, CC, SMs, L2, clocks, DRAM peak), on top of
    the H100 preset for what records do not carry (per-SM limits); None if no record names a GPU."""
    for r in records:
        sms, l2 = _field(r, "sm_count"), _field(r, "l2_bytes")
        if not (_field(r, "gpu") and sms and l2):
            continue
        cc = str(_field(r, "cc", "") or "9.0").replace("sm_", "")
        major, _, minor = cc.partition(".") if "." in cc else (cc[:-1], "", cc[-1:])
        d = dataclasses.replace(facts.H100_SXM, index=-1, name=str(_field(r, "gpu")),
                                compute_capability=(int(major), int(minor or 0)), sm_count=int(sms), l2_bytes=int(l2))
        if _field(r, "sm_clock_max_mhz"):
            d = dataclasses.replace(d, sm_clock_khz=int(float(_field(r, "sm_clock_max_mhz")) * 1e3))
        mem, peak = _field(r, "mem_clock_mhz"), _field(r, "peak_dram_gbps")
        if mem and peak:
            bits = int(round(float(peak) * 1e9 * 8 / (float(mem) * 1e6 * 2)))
            d = dataclasses.replace(d, mem_clock_khz=int(float(mem) * 1e3), mem_bus_bits=bits)
        return d
    return None


def analysis_section(records: Iterable[Any], device: DeviceInfo | None = None, ceilings: Ceilings | None = None, *,
                     size: tuple[int, int, int] | int | None = None,
                     title: str = "What limits each kernel", figure_prefix: str = "") -> Section:
    """Markdown and figures for the report; see the module docstring for the record shapes.

    `device` None: the facts are rebuilt from the records (`device_from_records`), else the H100 preset.
    `figure_prefix` is put before each figure's file name in the Markdown (e.g. "figures/").
    """
    records = list(records)
    device = device or device_from_records(records) or facts.H100_SXM
    ceil = ceilings or Ceilings.datasheet(device)
    recs = [r for r in (normalise(x) for x in records) if r is not None]
    shapes = sorted({(r.m, r.n, r.k) for r in recs}, key=lambda s: s[0] * s[1] * s[2])
    if isinstance(size, int):
        size = (size, size, size)
    chosen = size if size is not None else (shapes[-1] if shapes else None)
    md = [f"## {title}", "",
          f"Device: {device.name}, {device.sm_count} SMs, L2 {device.l2_bytes / 2**20:.0f} MiB. "
          f"Ceilings: {ceil.source}" + (f", FMA ceiling at {ceil.sm_clock_mhz:.0f} MHz" if ceil.sm_clock_mhz else "")
          + ".", "", "### Table 2: the machine (peak compute, cache and sequential bandwidth)", "",
          table2(ceil, device), ""]

    md += ["### Table 1: the kernels", "",
           "GFLOP/s counts 2MNK. *Requested BW* is the global traffic the kernel asks for (spec model) per "
           "second; *DRAM BW* is the traffic that reaches DRAM (cache model) per second. % peak compute is at "
           "the SM clock measured during the kernel.", "",
           "| kernel | M x N x K | time (ms) | GFLOP/s | % FP32 peak | requested BW (GB/s) | DRAM BW (GB/s) | "
           "% DRAM peak | limiter (model) | SM MHz |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    figs: dict[str, Any] = {}
    points, eff_rows, paragraphs = [], [], []
    models: dict[tuple, Any] = {}
    for r in recs:
        gflops = 2.0 * r.m * r.n * r.k / r.seconds / 1e9
        clk_scale = (r.clock_mhz / ceil.sm_clock_mhz) if r.clock_mhz and ceil.sm_clock_mhz else 1.0
        pct_fp32 = 100 * gflops * 1e9 / (ceil.fp32_flops * clk_scale)
        spec = registry.REGISTRY.get(r.kernel)
        if spec is not None and is_fp32(spec) and r.dtype == "float32":
            key = (r.kernel, tuple(sorted(r.params.items())), r.m, r.n, r.k)
            mdl = models.get(key)
            if mdl is None:
                mdl = model_kernel(r.kernel, r.m, r.n, r.k, r.params or None, device)
                models[key] = mdl
            pred = predict(mdl, ceil, r.clock_mhz)
            req_bw = mdl.requested_bytes / r.seconds / 1e9
            dram_bw = mdl.cache.dram_bytes / r.seconds / 1e9
            limiter = verdict(pred, r.seconds)
            dram_pct = 100 * dram_bw * 1e9 / ceil.dram_bps
            md.append(f"| {r.kernel} | {r.m}x{r.n}x{r.k} | {r.seconds * 1e3:.3f} | {gflops:,.0f} | {pct_fp32:.1f}% | "
                      f"{req_bw:,.0f} | {dram_bw:,.0f} | {dram_pct:.1f}% | {limiter} | "
                      f"{f'{r.clock_mhz:.0f}' if r.clock_mhz else '-'} |")
            if (r.m, r.n, r.k) == chosen:
                points.append(RooflinePoint(r.kernel, 2.0 * r.m * r.n * r.k / r.seconds,
                                            {"DRAM": mdl.dram_intensity, "L2": mdl.l2_intensity, "L1": mdl.l1_intensity},
                                            True, r.clock_mhz))
                eff_rows.append((r.kernel, pct_fp32, dram_pct))
                e = explain(r.kernel, r.m, r.n, r.k, r.params or None, device, ceil, r.seconds, r.clock_mhz)
                paragraphs.append(f"- **{r.kernel}**: {e.paragraph}")
        else:
            md.append(f"| {r.kernel} | {r.m}x{r.n}x{r.k} | {r.seconds * 1e3:.3f} | {gflops:,.0f} | {pct_fp32:.1f}% | "
                      f"- | - | - | (no model) | {f'{r.clock_mhz:.0f}' if r.clock_mhz else '-'} |")
    md.append("")
    if chosen and points:
        shape = f"{chosen[0]}x{chosen[1]}x{chosen[2]}"
        figs["analysis_roofline"] = roofline_figure(ceil, points, f"Roofline at {shape}, {device.name}",
                                                    Ceilings.datasheet(device) if ceil.source == "measured" else None,
                                                    wavefront_bps(device, ceil))
        figs["analysis_efficiency"] = efficiency_figure(eff_rows, f"Share of peak compute and DRAM bandwidth at {shape}")
        md += [f"### Roofline at {shape}", "",
               "Each kernel appears three times at one height (its measured FLOP/s): at its intensity with respect "
               "to DRAM bytes (circle), L1 <-> L2 bytes (square) and L1 / shared-memory wavefronts x 128 bytes "
               "(triangle). The lowest roof above its markers is the level that limits it.", "",
               f"![roofline]({figure_prefix}analysis_roofline.png)", "",
               f"![efficiency]({figure_prefix}analysis_efficiency.png)", "",
               f"### What limits each kernel at {shape}", ""] + paragraphs + [""]
    return Section("\n".join(md), figs)
