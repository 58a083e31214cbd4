"""Figures: the roofline with measured ceilings, the quantization sawtooth, the L2 cliff, a kernel's timeline.

Each function returns a matplotlib Figure (the Agg backend: no display needed); callers save it. The
SM clock the ceilings and the kernels ran at is written on every figure that shows a % of peak.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

from ..micro.ceilings import Ceilings


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


@dataclass
class RooflinePoint:
    label: str
    flops_per_s: float                 # achieved (measured) or attainable (model)
    intensities: dict[str, float]      # level ("DRAM", "L2", "L1") -> FLOP per byte at that level
    measured: bool
    sm_clock_mhz: float | None = None


LEVEL_MARKERS = {"DRAM": "o", "L2": "s", "L1": "^"}
LEVEL_NAMES = {"DRAM": "DRAM bytes", "L2": "L1<->L2 bytes", "L1": "L1/shared wavefronts x 128 B"}


def roofline_figure(ceilings: Ceilings, points: list[RooflinePoint], title: str = "",
                    datasheet: Ceilings | None = None, wavefront_bps: float | None = None,
                    peak: tuple[str, float] | None = None):
    """Log-log roofline: the compute peak (`peak`: its label and FLOP/s, e.g. the tensor cores' in bf16; the
    FP32 peak by default), DRAM, L2 and L1/shared slopes; each kernel at three intensities.

    A kernel's three markers share one height (its FLOP/s) and sit at its intensity with respect to DRAM
    bytes, L1 <-> L2 bytes and L1 / shared-memory wavefronts (x 128 bytes): the roof above each marker
    is what that level allows, and the lowest roof over the three is the level that limits it. The
    L1/shared roof is the hardware's one wavefront per cycle per SM (x 128 bytes) at the FMA ceiling's
    clock; the measured L1-hit and shared-memory rates are drawn thin beside it.
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 6))
    xs = [10 ** (e / 20) for e in range(-50, 81)]  # 10^-2.5 .. 10^4 FLOP/B
    label, peak = peak or (f"FP32 peak {ceilings.fp32_flops / 1e12:.1f} TFLOP/s ({ceilings.source})",
                           ceilings.fp32_flops)
    fp32_roof = peak == ceilings.fp32_flops
    slopes = [("DRAM", ceilings.dram_bps, "tab:red", 1.5), ("L2", ceilings.l2_bps, "tab:orange", 1.5),
              ("L1 hits", ceilings.l1_bps, "tab:green", 0.7), ("shared", ceilings.smem_bps, "tab:olive", 0.7)]
    ax.plot([xs[0], xs[-1]], [peak / 1e12] * 2, color="black", lw=2, label=label)
    for name, bw, col, lw in slopes:
        ax.plot(xs, [min(peak, bw * x) / 1e12 for x in xs], color=col, lw=lw,
                label=f"{name} {bw / 1e9:,.0f} GB/s ({ceilings.source})")
    if wavefront_bps:
        ax.plot(xs, [min(peak, wavefront_bps * x) / 1e12 for x in xs], color="tab:green", lw=2, ls="-.",
                label=f"L1/shared data stage, 128 B/cycle/SM: {wavefront_bps / 1e9:,.0f} GB/s")
    if datasheet is not None:
        sheet_peak = datasheet.fp32_flops if fp32_roof else peak
        if fp32_roof:
            ax.plot([xs[0], xs[-1]], [datasheet.fp32_flops / 1e12] * 2, color="black", lw=1, ls="--",
                    label=f"FP32 datasheet {datasheet.fp32_flops / 1e12:.1f} TFLOP/s")
        ax.plot(xs, [min(sheet_peak, datasheet.dram_bps * x) / 1e12 for x in xs], color="tab:red",
                lw=1, ls="--", label=f"DRAM datasheet {datasheet.dram_bps / 1e9:,.0f} GB/s")
    cmap = plt.get_cmap("tab10")
    for i, p in enumerate(points):
        col = cmap(i % 10)
        y = p.flops_per_s / 1e12
        pts = [(lvl, x) for lvl, x in p.intensities.items() if x and math.isfinite(x) and x > 0]
        if not pts or y <= 0:
            continue
        ax.plot([x for _, x in pts], [y] * len(pts), color=col, lw=0.8, alpha=0.6)
        for j, (lvl, x) in enumerate(pts):
            ax.scatter([x], [y], color=col, marker=LEVEL_MARKERS.get(lvl, "o"), s=45,
                       facecolors=col if p.measured else "none", zorder=3,
                       label=(f"{p.label}" + ("" if p.measured else " (model)")) if j == 0 else None)
    for lvl, mk in LEVEL_MARKERS.items():
        ax.scatter([], [], marker=mk, color="gray", label=f"intensity vs {LEVEL_NAMES[lvl]}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte at that level)")
    ax.set_ylabel("TFLOP/s")
    clk = f"; FMA ceiling at {ceilings.sm_clock_mhz:.0f} MHz" if ceilings.sm_clock_mhz else ""
    ax.set_title((title or "Roofline") + clk, fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    fig.tight_layout()
    return fig


def sawtooth_figure(ns: list[int], predicted: list[float], measured: list[float] | None = None,
                    rel_errors: list[float] | None = None, title: str = "", tile_n: int | None = None,
                    model_label: str = "quantization model", ylabel: str = "TFLOP/s"):
    """Measured rate over the sweep with the quantization model overlaid; relative error below."""
    plt = _plt()
    if rel_errors:
        fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    else:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        ax2 = None
    if measured:
        ax.plot(ns, measured, "o-", ms=3, lw=1, label="measured")
    ax.plot(ns, predicted, "-", lw=1.5, label=model_label)
    if tile_n:
        for x in range((ns[0] // tile_n + 1) * tile_n, ns[-1] + 1, tile_n):
            for a in (ax, ax2):
                if a is not None:
                    a.axvline(x, color="gray", lw=0.5, alpha=0.5)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    if ax2 is not None:
        ax2.plot(ns, [100 * e for e in rel_errors], ".-", ms=3, lw=0.8, color="tab:red")
        ax2.axhline(10, color="gray", ls="--", lw=0.8)
        ax2.axhline(-10, color="gray", ls="--", lw=0.8)
        ax2.set_ylabel("model error %")
        ax2.set_xlabel("N")
        ax2.grid(True, alpha=0.3)
    else:
        ax.set_xlabel("N")
    fig.tight_layout()
    return fig


def cliff_figure(cliff, measured: dict[int, float] | None = None, title: str = ""):
    """Predicted (and measured) TFLOP/s of a kernel over N, with the DRAM re-read factor and the cliff."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    ns = [p.n for p in cliff.points]
    ax.plot(ns, [p.predicted_tflops for p in cliff.points], "-", label="model: attainable (longest bound)")
    dram = [p.model.flops / p.prediction.bound("DRAM").seconds / 1e12 for p in cliff.points]
    ax.plot(ns, dram, "--", color="tab:red", label="model: what DRAM alone would allow")
    ax.set_yscale("log")
    if measured:
        xs = sorted(measured)
        ax.plot(xs, [measured[x] for x in xs], "o-", ms=4, label="measured")
    ax.axvline(cliff.n_all_fit, color="tab:red", ls=":", lw=1,
               label=f"A+B+C = L2 at N = {cliff.n_all_fit}")
    ax.set_xlabel("N (square)")
    ax.set_ylabel("TFLOP/s")
    ax2 = ax.twinx()
    ax2.plot(ns, [p.dram_reread for p in cliff.points], ":", color="gray", label="model: DRAM reads / compulsory")
    ax2.set_ylabel("DRAM reads / compulsory")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="best")
    ax.set_title(title or f"L2 cliff: {cliff.kernel}", fontsize=10)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def efficiency_figure(rows: list[tuple[str, float, float]], title: str = ""):
    """Figure 2: per kernel, % of peak compute and % of peak DRAM bandwidth, side by side."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    names = [r[0] for r in rows]
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r[1] for r in rows], width=0.4, label="% of FP32 peak")
    ax.bar([x + 0.2 for x in xs], [r[2] for r in rows], width=0.4, label="% of DRAM bandwidth (modelled bytes)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("%")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


TIMELINE_COLOURS = {"wait": "#c8c8c8", "main": "#3b75af", "epilogue": "#ef8636"}


def timeline_figure(segments: list[dict], title: str = "", consumer: int = 0):
    """One row per SM, time in microseconds across: each work unit of `consumer` as its wait for data (grey),
    main loop (blue) and epilogue (orange). segments: analysis.timeline.segments."""
    plt = _plt()
    rows = sorted({s["sm"] for s in segments})
    y_of = {sm: i for i, sm in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(11, max(3.0, 0.035 * len(rows) + 1.5)))
    bars: dict[str, list[tuple[float, float]]] = {k: [] for k in TIMELINE_COLOURS}
    ys: dict[str, list[int]] = {k: [] for k in TIMELINE_COLOURS}
    for s in segments:
        if s["consumer"] != consumer:
            continue
        y = y_of[s["sm"]]
        for name, a, b in (("wait", s["begin"], s["data"]), ("main", s["data"], s["main_end"]),
                           ("epilogue", s["main_end"], s["epilogue_end"])):
            bars[name].append((a, b - a))
            ys[name].append(y)
    for name, colour in TIMELINE_COLOURS.items():
        if bars[name]:
            ax.barh(ys[name], [w for _, w in bars[name]], left=[a for a, _ in bars[name]], height=0.9,
                    color=colour, label=name, linewidth=0)
    ax.set_xlabel("time from the first block's start (us)")
    ax.set_ylabel("SM")
    ax.set_ylim(-1, len(rows))
    ax.set_yticks([])
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize=8, frameon=False)
    ax.set_title(textwrap.fill(title, 120), fontsize=9)  # (a rung's parameters make long titles)
    fig.tight_layout()
    return fig
