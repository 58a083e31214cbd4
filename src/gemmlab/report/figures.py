"""The report's pictures, drawn with matplotlib's object API (no pyplot, no global state, no display).

Each function takes plain series ({label: [(N, value), ...]}) and returns a Figure, so a test can read
back exactly what was plotted: the lines' labels and data, the axes' labels and scales.

Text from the records (GPU names, kernel labels) is drawn as written: every function passes its titles
and labels through `plain`, which escapes the `$` that would start matplotlib's math mode (outside it,
backslashes, `_` and `^` are literal), and draws under `NO_TEX`, so a matplotlibrc asking for LaTeX
cannot make a GPU named `A_100` fail to render.
"""

from __future__ import annotations

from contextlib import contextmanager

from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

Series = dict[str, list[tuple[int, float]]]

REFERENCE_STYLE = {"color": "black", "linewidth": 2.6, "marker": "o", "markersize": 4, "zorder": 5}


def plain(text: str) -> str:
    """`text` as matplotlib draws it literally: `$` escaped, so data never enters math mode."""
    return str(text).replace("$", r"\$")


def _plain_series(series: Series) -> Series:
    return {plain(k): v for k, v in series.items()}


@contextmanager
def no_tex():
    """Drawing and saving with LaTeX off, whatever the user's matplotlibrc says."""
    with rc_context({"text.usetex": False}):
        yield


def _colours(labels: list[str]) -> dict[str, tuple]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(labels) <= 10 else "tab20"]
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def _size_axis(ax, sizes: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))
    # Neighbours of a size (2^k - 1, 2^k + 1) sit on top of it on a log axis: label only sizes at least
    # 5% apart, preferring powers of two.
    ticks.sort(key=lambda t: (t & (t - 1) != 0, t))
    kept: list[int] = []
    for t in ticks:
        if all(abs(t - u) > 0.05 * u for u in kept):
            kept.append(t)
    ticks = sorted(kept)
    if len(ticks) > 12:  # keep the labels readable: powers of two only
        ticks = [t for t in ticks if t & (t - 1) == 0] or ticks[:: max(1, len(ticks) // 10)]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(t) for t in ticks], rotation=45 if len(ticks) > 8 else 0)


def throughput_vs_size(series: Series, reference: str | None, title: str, ylabel: str = "TFLOP/s") -> Figure:
    """One line per kernel; the reference (cuBLAS) drawn as a heavy black line."""
    with no_tex():
        return _throughput_vs_size(_plain_series(series), plain(reference) if reference is not None else None,
                                   plain(title), plain(ylabel))


def _throughput_vs_size(series: Series, reference: str | None, title: str, ylabel: str) -> Figure:
    fig = Figure(figsize=(8.5, 5.2))
    ax = fig.subplots()
    colours = _colours([k for k in series if k != reference])
    sizes: list[int] = []
    for label, pts in series.items():
        if not pts:
            continue
        xs, ys = zip(*pts)
        sizes += xs
        style = REFERENCE_STYLE if label == reference else {"color": colours[label], "marker": "o", "markersize": 3.5}
        ax.plot(xs, ys, label=label, **style)
    _size_axis(ax, sizes)
    ax.set_xlabel("N (M = N = K)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return fig


def compute_vs_end_to_end(compute: Series, end_to_end: Series, title: str) -> Figure:
    """Solid: kernel only; dashed: with host<->device copies. One colour per kernel."""
    with no_tex():
        return _compute_vs_end_to_end(_plain_series(compute), _plain_series(end_to_end), plain(title))


def _compute_vs_end_to_end(compute: Series, end_to_end: Series, title: str) -> Figure:
    fig = Figure(figsize=(8.5, 5.2))
    ax = fig.subplots()
    labels = list(dict.fromkeys([*compute, *end_to_end]))
    colours = _colours(labels)
    sizes: list[int] = []
    for label in labels:
        for data, style, suffix in ((compute, "-", "compute only"), (end_to_end, "--", "end to end")):
            pts = data.get(label)
            if not pts:
                continue
            xs, ys = zip(*pts)
            sizes += xs
            ax.plot(xs, ys, style, color=colours[label], marker="o", markersize=3, label=f"{label} ({suffix})")
    _size_axis(ax, sizes)
    ax.set_xlabel("N (M = N = K)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    return fig


def percent_of_reference(items: list[tuple[str, float]], title: str, reference: str = "cuBLAS") -> Figure:
    """Horizontal bars: each kernel's throughput as a percentage of the reference's, with the value."""
    with no_tex():
        return _percent_of_reference([(plain(k), v) for k, v in items], plain(title), plain(reference))


def _percent_of_reference(items: list[tuple[str, float]], title: str, reference: str) -> Figure:
    fig = Figure(figsize=(8.5, 0.45 * len(items) + 1.6))
    ax = fig.subplots()
    labels = [k for k, _ in items]
    values = [v for _, v in items]
    bars = ax.barh(range(len(items)), values, color=[_colours(labels)[k] for k in labels])
    ax.set_yticks(range(len(items)), labels)
    ax.invert_yaxis()
    ax.axvline(100, color="black", linewidth=1.2)
    for bar, v in zip(bars, values):
        ax.text(bar.get_width() + 1, bar.get_y() + bar.get_height() / 2, f"{v:.1f}%", va="center", fontsize=8)
    ax.set_xlabel(f"% of {reference} (higher is better)")
    ax.set_xlim(0, max([110.0, *[v * 1.15 for v in values]]))
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def cpu_vs_gpu(gpu: Series, cpu: Series, title: str) -> Figure:
    """GFLOP/s on a log scale: GPU kernels solid, CPU baselines dashed (either may be empty)."""
    with no_tex():
        return _cpu_vs_gpu(_plain_series(gpu), _plain_series(cpu), plain(title))


def _cpu_vs_gpu(gpu: Series, cpu: Series, title: str) -> Figure:
    fig = Figure(figsize=(8.5, 5.2))
    ax = fig.subplots()
    colours = _colours([*gpu, *cpu])
    sizes: list[int] = []
    for data, style in ((gpu, "-"), (cpu, "--")):
        for label, pts in data.items():
            if not pts:
                continue
            xs, ys = zip(*pts)
            sizes += xs
            ax.plot(xs, ys, style, color=colours[label], marker="o", markersize=3, label=label)
    _size_axis(ax, sizes)
    ax.set_yscale("log")
    ax.set_xlabel("N (M = N = K)")
    ax.set_ylabel("GFLOP/s (log scale)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    return fig


def tensor_parallel(items: list[tuple[str, dict[str, float]]], title: str) -> Figure:
    """Per case (a label), horizontal bars of each call's speed against sequential (sequential time over its
    time), with a line at 1: gemmlab's call, torch's fused operator and the ideal bound, where measured."""
    with no_tex():
        return _tensor_parallel([(plain(k), v) for k, v in items], plain(title))


def _tensor_parallel(items: list[tuple[str, dict[str, float]]], title: str) -> Figure:
    names = [n for n in ("gemmlab", "torch fused", "ideal") if any(n in v for _, v in items)]
    colours = _colours(names)
    fig = Figure(figsize=(8.5, 0.3 * len(items) * max(1, len(names)) + 1.8))
    ax = fig.subplots()
    height = 0.8 / max(1, len(names))
    for j, name in enumerate(names):
        ys = [i + j * height for i, (_, v) in enumerate(items) if name in v]
        xs = [v[name] for _, v in items if name in v]
        ax.barh(ys, xs, height=height, color=colours[name], label=name)
    ax.set_yticks([i + height * (len(names) - 1) / 2 for i in range(len(items))], [k for k, _ in items])
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=1.2)
    ax.set_xlabel("x sequential (the collective, then the GEMM; higher is better)")
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return fig
