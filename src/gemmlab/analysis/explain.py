"""`explain`: one kernel at one size, its numbers, the model beside the measurement, and a paragraph
naming what limits it and what the next rung of the registry changes.

Returns data (`Explanation`: rows of (quantity, model, measured) and the paragraph); the CLI prints it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..kernels import registry
from ..kernels.spec import KernelSpec
from ..micro.ceilings import Ceilings
from . import facts
from .bounds import Prediction, predict, verdict
from .models import KernelModel, model_format, model_kernel, next_rung

Row = tuple[str, str, str]


def fmt_bytes(b: float | None) -> str:
    if b is None or (isinstance(b, float) and math.isnan(b)):
        return "-"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(b) >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"


def fmt_s(s: float | None) -> str:
    if s is None or (isinstance(s, float) and (math.isnan(s) or math.isinf(s))):
        return "-"
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.3g} us"
    return f"{s * 1e9:.3g} ns"


def fmt_count(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g}"


def pct(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{100 * x:.0f}%"


@dataclass
class PowerState:
    """The kernel run back to back (bench.sustained): milliseconds per call, the median SM clock and board
    draw meanwhile, the board's enforced limit (None where NVML gave none), and whether NVML named the power
    cap as a clock-event reason in every turn."""

    ms: float
    sm_mhz: float | None
    watts: float | None
    limit_w: float | None
    power_limited: bool
    clock_basis: str = "NVML"   # where sm_mhz comes from: "counted on the SMs between calls", or NVML's reading

    @property
    def at_limit(self) -> bool:
        """At the power limit: NVML said so, or the draw is within 5 % of the limit."""
        return self.power_limited or bool(self.watts and self.limit_w and self.watts >= 0.95 * self.limit_w)


@dataclass
class Explanation:
    model: KernelModel
    prediction: Prediction
    ceilings: Ceilings
    measured_s: float | None
    measured_clock_mhz: float | None
    counters: object | None                 # analysis.ncu.Counters
    next_spec: KernelSpec | None
    next_model: KernelModel | None
    next_prediction: Prediction | None
    rows: list[Row]
    bound_rows: list[tuple[str, str, str, str]]   # resource, work, time, share of the limiter
    paragraph: str
    power: PowerState | None = None

    @property
    def limiter(self) -> str:
        """The model's verdict; "power" where the kernel, run back to back, sat at the board's power limit
        (its clock is then set by the draw, and a compute bound holds at that clock, not the boost clock)."""
        if self.power is not None and self.power.at_limit:
            return "power"
        return verdict(self.prediction, self.measured_s)


def _limiter_reason(mdl: KernelModel, pred: Prediction) -> str:
    lim = pred.limiter
    l1, c, q = mdl.l1, mdl.cache, mdl.quant
    warp_fma = mdl.flops / 2 / 32
    if lim.resource == "L1/shared":
        if l1.global_load_wavefronts >= l1.smem_load_wavefronts + l1.smem_store_wavefronts:
            return (f"the L1 data stage: {l1.per_warp_request}, so the warps need "
                    f"{l1.global_load_wavefronts / warp_fma:.2g} wavefronts per warp-wide FMA while an SM serves one "
                    f"wavefront per cycle and could retire four warp-FMAs")
        if mdl.fmt.tensor_cores:
            return (f"the L1 / shared-memory data stage: {fmt_count(l1.wavefronts)} wavefronts (global loads, shared "
                    f"stores and loads at 128 bytes each) at one per cycle per SM")
        return (f"shared-memory wavefronts: {fmt_count(l1.smem_load_wavefronts + l1.smem_store_wavefronts)} of them "
                f"({(l1.smem_load_wavefronts + l1.smem_store_wavefronts) / warp_fma:.2g} per warp-wide FMA; an SM serves "
                f"one per cycle and could retire four warp-FMAs)")
    if lim.resource == "tensor":
        return (f"the {mdl.fmt.unit} in {mdl.fmt.name}: {fmt_count(lim.amount)} FLOPs on the busiest SM's share at "
                f"{lim.rate / 1e12:.0f} TFLOP/s (tile efficiency {pct(q.tile_efficiency)}, "
                f"SM balance {pct(q.balance_efficiency)})")
    if lim.resource == "promotion":
        return (f"the {mdl.fmt.unit} and, after every k step of 128, the promotion of its partial sums into fp32 on "
                f"the CUDA cores ({fmt_count(lim.amount)} FLOPs at {lim.rate / 1e12:.0f} TFLOP/s), which the tensor "
                f"cores wait for: the two times add")
    if lim.resource == "FMA":
        return (f"the FP32 units: {fmt_count(lim.amount)} FLOPs on the busiest SM's share at "
                f"{lim.rate / 1e12:.1f} TFLOP/s (tile efficiency {pct(q.tile_efficiency)}, "
                f"SM balance {pct(q.balance_efficiency)})")
    if lim.resource == "DRAM":
        return (f"DRAM: {fmt_bytes(c.dram_bytes)} (reads {c.dram_read_bytes / max(c.compulsory_read_bytes, 1):.1f}x the "
                f"compulsory {fmt_bytes(c.compulsory_read_bytes)}: a wave touches {fmt_bytes(c.wave_footprint_bytes)} "
                f"against an L2 of {fmt_bytes(c.l2_capacity_bytes)})")
    if lim.resource == "L2":
        return f"L2 bandwidth: {fmt_bytes(c.l2_bytes)} between L1 and L2"
    return f"latency: {lim.note}"


def clock_source(mdl: KernelModel, clock: float | None) -> str:
    """Where the SM clock of the bounds comes from, in words."""
    if clock:
        return "measured during the timing"
    if mdl.device_is_preset:
        return "the preset's boost clock, no GPU to measure one"
    return "the device's boost clock, not measured"


POWER_NOTE = ("at the board's power limit (700 W on the H100) the clock of a sustained tensor-core GEMM drops "
              "to about 1.3-1.5 GHz, and a compute bound lengthens in proportion")


def _paragraph(e_model: KernelModel, pred: Prediction, measured_s: float | None, clock: float | None,
               nxt: KernelSpec | None, nmodel: KernelModel | None, npred: Prediction | None) -> str:
    mdl = e_model
    lim = pred.limiter
    parts = []
    where = f"{mdl.name} at {mdl.m}x{mdl.n}x{mdl.k} on {mdl.device.name}"
    longest = sorted(pred.bounds, key=lambda b: -b.seconds)
    runner = longest[1] if len(longest) > 1 else None
    if measured_s is None:
        parts.append(f"Model only: {where} is limited by {_limiter_reason(mdl, pred)}. "
                     f"That bounds it at {fmt_s(lim.seconds)} ({pred.attainable_flops / 1e12:.2f} TFLOP/s).")
    else:
        ratio = measured_s / lim.seconds if lim.seconds else math.inf
        clk = f" at {clock:.0f} MHz" if clock else ""
        if ratio < 0.9:
            nxt_bound = f"; the next bound is {runner.resource} at {fmt_s(runner.seconds)}" if runner else ""
            parts.append(f"{where} ran in {fmt_s(measured_s)}{clk}, faster than the model's {lim.resource} bound of "
                         f"{fmt_s(lim.seconds)}: the model overcounts that resource here ({lim.note}){nxt_bound}.")
        elif ratio <= 1.5:
            parts.append(f"{where} is limited by {_limiter_reason(mdl, pred)}. That bounds it at {fmt_s(lim.seconds)}; "
                         f"it measured {fmt_s(measured_s)}{clk}, {100 / ratio:.0f}% of the bound's speed.")
        else:
            occ = mdl.occupancy
            parts.append(f"{where} measured {fmt_s(measured_s)}{clk}, {ratio:.1f}x its longest throughput bound "
                         f"({lim.resource}, {fmt_s(lim.seconds)}): no ceiling explains the time, so it is limited by "
                         f"latency: {occ.warps_per_sm} warps per SM resident (occupancy {pct(occ.fraction)}, limited by "
                         f"{occ.limited_by}) do not hide the waits of its loads and barriers.")
    if lim.resource in ("FMA", "tensor", "promotion"):
        parts.append(f"The compute bound assumes the SM clock at {pred.sm_clock_mhz:.0f} MHz ({clock_source(mdl, clock)}), "
                     f"where the {pred.compute_unit} peak is {pred.compute_peak / 1e12:.1f} TFLOP/s"
                     + (f"; {POWER_NOTE}." if lim.resource != "FMA" and not clock else "."))
    if runner and runner.seconds > 0.5 * lim.seconds and measured_s is not None and measured_s >= 0.9 * lim.seconds:
        parts.append(f"{runner.resource} is close behind ({fmt_s(runner.seconds)}).")
    q = mdl.quant
    if q.tile_efficiency < 0.9 or q.balance_efficiency < 0.9:
        # Padding of edge tiles is arithmetic on zeros (padded elements are not loaded): it costs time where the
        # arithmetic is the limit, and only the SM balance otherwise.
        what = (f"{q.tiles} tiles of {q.tile_m}x{q.tile_n} ({pct(q.tile_efficiency)} useful) on {q.sm_count} SMs, "
                f"{q.busiest_sm_blocks:g} on the busiest"
                + (f", the last round's tiles in {q.last_parts} parts" if q.last_parts > 1 else ""))
        if lim.resource in ("FMA", "tensor", "promotion"):
            parts.append(f"Quantization costs {100 * (1 - q.tile_efficiency * q.balance_efficiency):.0f}% here: {what}.")
        else:
            parts.append(f"Tile padding and SM balance waste {100 * (1 - q.tile_efficiency * q.balance_efficiency):.0f}% "
                         f"of the arithmetic ({what}), which is not what limits it.")
    if nxt is None and mdl.spec.fits_shape is not None:
        parts.append("It is a rung for some shapes, beside the ladder (kernel=\"auto\" takes it where "
                     "spec.fits_shape says it is built for the shape).")
    elif nxt is None:
        parts.append("It is the top rung of the ladder.")
    elif nmodel is not None and npred is not None and lim.resource in {b.resource for b in npred.bounds}:
        same = npred.bound(lim.resource)
        parts.append(f"The next rung, {nxt.name}, changes this: {nxt.idea}. Its model at this size moves the "
                     f"{lim.resource} bound from {fmt_s(lim.seconds)} to {fmt_s(same.seconds)}; its own limiter is "
                     f"{npred.limiter.resource} at {fmt_s(npred.seconds)}, a predicted ceiling "
                     f"{lim.seconds / npred.seconds:.2g}x this rung's.")
    return " ".join(p for p in parts if p)


def explain(kernel: str | KernelSpec, m: int, n: int, k: int, params: dict | None = None, device=None,
            ceilings: Ceilings | None = None, measured_s: float | None = None,
            measured_clock_mhz: float | None = None, counters=None, *, dtype: str | None = None,
            precision: str | None = None, out_dtype: str | None = None,
            power: PowerState | None = None) -> Explanation:
    """`dtype`, `precision`, `out_dtype`: the format (models.model_format; default: the rung's own). `power`:
    the kernel run back to back (clock, draw, limit), which adds the power part to the rows and paragraph."""
    spec = registry.get(kernel) if isinstance(kernel, str) else kernel
    dev, _ = facts.resolve(device)
    if params is None and spec.heuristic is not None:  # what gemmlab.matmul runs when none are named
        params = spec.heuristic(m, n, k, dev.sm_count, model_format(spec, dtype, precision, out_dtype).element)
    mdl = model_kernel(spec, m, n, k, params, dev, dtype=dtype, precision=precision, out_dtype=out_dtype)
    ceil = ceilings or Ceilings.datasheet(mdl.device)
    pred = predict(mdl, ceil, measured_clock_mhz)
    nxt = next_rung(spec, mdl.fmt)
    nmodel = npred = None
    if nxt is not None:
        try:
            np_ = nxt.heuristic(m, n, k, mdl.device.sm_count, mdl.fmt.element) if nxt.heuristic else None
            nmodel = model_kernel(nxt, m, n, k, np_, mdl.device, dtype=mdl.fmt.dtype, precision=mdl.fmt.precision,
                                  out_dtype=mdl.fmt.out_dtype)
            npred = predict(nmodel, ceil, measured_clock_mhz)
        except ValueError:
            nmodel = npred = None
    rows = _rows(mdl, pred, ceil, measured_s, measured_clock_mhz, counters)
    lim = pred.limiter
    bound_rows = [(b.resource, f"{fmt_count(b.amount)} {b.unit}", fmt_s(b.seconds),
                   f"{100 * b.seconds / lim.seconds:.0f}%" if lim.seconds else "-") for b in pred.bounds]
    para = _paragraph(mdl, pred, measured_s, measured_clock_mhz, nxt, nmodel, npred)
    if power is not None:
        rows += _power_rows(mdl, pred, power)
        para = para + " " + _power_sentence(mdl, pred, power)
    return Explanation(mdl, pred, ceil, measured_s, measured_clock_mhz, counters, nxt, nmodel, npred, rows,
                       bound_rows, para, power)


def _peak_at(pred: Prediction, mhz: float | None) -> float | None:
    """The compute peak scaled to `mhz` (the bounds' peak is at pred.sm_clock_mhz)."""
    return pred.compute_peak * mhz / pred.sm_clock_mhz if mhz and pred.sm_clock_mhz else None


def _share(rate: float, peak: float | None) -> str | None:
    """The rate as a share of the peak at the clock measured, or None; over 100 % is impossible, so then the
    clock measured is not the clock the calls ran at, and that is said instead of a share."""
    if not peak:
        return None
    if rate > peak:
        return f"above the {peak / 1e12:.0f} TFLOP/s peak at that clock: the calls ran at a higher clock than measured"
    return f"{100 * rate / peak:.1f}% of the {peak / 1e12:.0f} TFLOP/s peak at that clock"


def _power_rows(mdl: KernelModel, pred: Prediction, pw: PowerState) -> list[Row]:
    peak = _peak_at(pred, pw.sm_mhz)
    rate = mdl.flops / (pw.ms * 1e-3)
    draw = f"{pw.watts:.0f} W" if pw.watts else "-"
    limit = f" of {pw.limit_w:.0f} W" if pw.limit_w else ""
    return [
        ("back to back: time per call", "", fmt_s(pw.ms * 1e-3)),
        ("  board draw (of the limit)", "", draw + limit + (" (at the limit)" if pw.at_limit else "")),
        ("  SM clock", "", f"{pw.sm_mhz:.0f} MHz ({pw.clock_basis})" if pw.sm_mhz else "-"),
        (f"  TFLOP/s, share of the {mdl.fmt.unit if mdl.fmt.tensor_cores else 'FP32'} peak at that clock", "",
         f"{rate / 1e12:.1f}, " + (_share(rate, peak) or "-")),
    ]


def _power_sentence(mdl: KernelModel, pred: Prediction, pw: PowerState) -> str:
    peak = _peak_at(pred, pw.sm_mhz)
    rate = mdl.flops / (pw.ms * 1e-3)
    clock = (f"the SM clock settled at {pw.sm_mhz:.0f} MHz ({pw.clock_basis})" if pw.sm_mhz else
             "no clock was measured")
    share = f"it reached {rate / 1e12:.0f} TFLOP/s" + (f", {_share(rate, peak)}" if peak else "")
    if pw.at_limit:
        limit = f" of its {pw.limit_w:.0f} W limit" if pw.limit_w else " at its power limit"
        return (f"Run back to back, it is limited by power: the board drew {pw.watts:.0f} W{limit}, {clock}, and "
                f"{share}; a faster kernel at this size must spend less energy per product, not fewer cycles.")
    draw = f"the board drew {pw.watts:.0f} W" + (f" of {pw.limit_w:.0f}" if pw.limit_w else "") if pw.watts else \
        "NVML gave no draw"
    return f"Run back to back, {draw} (below the limit), {clock}, and {share}."


def _rows(mdl: KernelModel, pred: Prediction, ceil: Ceilings, measured_s, clock, counters) -> list[Row]:
    t, c, l1, q, occ, w = mdl.traffic, mdl.cache, mdl.l1, mdl.quant, mdl.occupancy, mdl.work

    def cnt(key):
        return counters.get(key) if counters is not None else None

    e = mdl.fmt.elem
    rows: list[Row] = [
        ("format", f"{mdl.fmt.name} ({e}-byte A and B, {mdl.fmt.out_elem}-byte C), {mdl.fmt.unit}", ""),
        (f"compute peak at {pred.sm_clock_mhz:.0f} MHz", f"{pred.compute_peak / 1e12:.1f} TFLOP/s "
         f"({clock_source(mdl, clock)}; {pred.compute_basis})", ""),
        ("FLOPs (2MNK)", fmt_count(mdl.flops), fmt_count(2 * cnt("ffma_thread_inst")) if cnt("ffma_thread_inst") else "-"),
        ("work / span / parallelism",
         f"{fmt_count(w.work_fma)} FMA / {w.span_fma} / {fmt_count(w.parallelism)}", ""),
        ("  GPU needs in flight (SMs x lanes x latency)", fmt_count(w.machine_fmas_in_flight), ""),
        ("global loads A / B requested", f"{fmt_bytes(e * t.a_loads)} / {fmt_bytes(e * t.b_loads)}", ""),
        ("accesses per thread", f"{mdl.accesses_per_thread:.4g}", ""),
        ("intensity, operands", f"{mdl.operand_intensity:.3g} FLOP/B", ""),
        ("intensity, L2 / DRAM", f"{mdl.l2_intensity:.3g} / {mdl.dram_intensity:.3g} FLOP/B", ""),
        ("tile, grid", f"{mdl.geometry.tile_m}x{mdl.geometry.tile_n}, {mdl.geometry.blocks} blocks of "
                       f"{mdl.geometry.threads_per_block}"
                       + (f" (persistent: {mdl.resident} resident walk {q.tiles} tiles in {q.full_waves} rounds"
                          + (f", the last in {q.last_parts} parts along K" if q.last_parts > 1 else "") + ")"
                          if mdl.resident else ""), ""),
        ("registers, shared memory", f"{mdl.resources.registers if mdl.resources else '?'} / thread, "
                                     f"{(mdl.resources.smem_static if mdl.resources else 0) + mdl.geometry.smem_dynamic} B / block", ""),
        ("blocks per SM (limit)", f"{occ.blocks_per_sm} ({occ.limited_by})", ""),
        ("occupancy (theoretical / achieved)", pct(occ.fraction),
         f"{cnt('achieved_occupancy_pct'):.0f}%" if cnt("achieved_occupancy_pct") is not None else "-"),
        ("tile efficiency / waves / SM balance",
         f"{pct(q.tile_efficiency)} / {q.waves:.2f} / {pct(q.balance_efficiency)}", ""),
        ("L1 load sectors requested", fmt_bytes(c.l1_requested_bytes),
         fmt_bytes(32 * cnt("l1_global_load_sectors")) if cnt("l1_global_load_sectors") is not None else "-"),
        ("L1 hit rate", pct(c.l1_hit_rate),
         pct(cnt("l1_global_load_hit_sectors") / cnt("l1_global_load_sectors"))
         if cnt("l1_global_load_hit_sectors") is not None and cnt("l1_global_load_sectors") else "-"),
        ("L1 <-> L2 bytes", fmt_bytes(c.l2_bytes),
         fmt_bytes(counters.l2_compared_bytes[0]) if counters is not None else "-"),
        ("  all L2 traffic (lts__t_bytes)", "", fmt_bytes(cnt("l2_bytes"))),
        ("DRAM read", fmt_bytes(c.dram_read_bytes), fmt_bytes(cnt("dram_read_bytes"))),
        ("DRAM write", fmt_bytes(c.dram_write_bytes), fmt_bytes(cnt("dram_write_bytes"))),
        ("  compulsory reads / wave footprint / L2", f"{fmt_bytes(c.compulsory_read_bytes)} / "
         f"{fmt_bytes(c.wave_footprint_bytes)} / {fmt_bytes(c.l2_capacity_bytes)}", ""),
        ("shared-memory load wavefronts", fmt_count(l1.smem_load_wavefronts) if l1.smem_load_wavefronts else "0",
         fmt_count(cnt("smem_load_wavefronts"))),
        ("shared-memory bank conflicts (ld / st)", "0 (assumed)",
         f"{fmt_count(cnt('smem_load_bank_conflicts'))} / {fmt_count(cnt('smem_store_bank_conflicts'))}"
         if counters is not None else "-"),
    ]
    if measured_s is not None or counters is not None:
        dur = measured_s if measured_s is not None else cnt("duration_s")
        clk = clock or (counters.sm_clock_mhz if counters is not None else None)
        peak = pred.compute_peak * ((clk / pred.sm_clock_mhz) if clk and pred.sm_clock_mhz else 1.0)
        unit = "FP32" if mdl.fmt.name == "fp32" else mdl.fmt.unit
        rows += [
            ("time", fmt_s(pred.seconds) + " (bound)", fmt_s(dur)),
            ("TFLOP/s", f"{pred.attainable_flops / 1e12:.2f} (bound)", f"{mdl.flops / dur / 1e12:.2f}" if dur else "-"),
            ("SM clock", f"{pred.sm_clock_mhz:.0f} MHz" if pred.sm_clock_mhz else "-", f"{clk:.0f} MHz" if clk else "-"),
            (f"% of {unit} peak at that clock", "", f"{100 * mdl.flops / dur / peak:.1f}%" if dur else "-"),
        ]
    return rows
