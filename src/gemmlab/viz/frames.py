"""Frames as images (matplotlib, Agg): one PNG, or every frame as an animated GIF (pillow writer).

One picture per frame: B above C, A to its left (so a row of A and a column of B meet at their element of
C), the focus block's shared-memory tiles on the right, and a text panel with the frame's description,
the counters and the comparison with the naive rung. Cells are coloured by `state.STATES`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from matplotlib.animation import PillowWriter
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .model import Trace
from .rungs import MODELS
from .state import CODE, DARK, SMEM_STATES, STATES, Frames, layout, palette_rgb

TEXT_PX = 520          # width of the text panel
MIN_H_PX = 680        # the caption (about 22 lines) and the legend (up to 17) need this much


def _fmt(v: float) -> str:
    return "" if np.isnan(v) else (f"{int(v)}" if float(v).is_integer() else f"{v:.3g}")


def describe_thread(trace: Trace, thread: int) -> str:
    own = trace.owned(thread)
    inside = [(r, c) for r, c in own if r < trace.m and c < trace.n]
    if not own:
        return f"{trace.thread_name(thread)}: computes nothing"
    if len(own) == 1:
        r, c = own[0]
        where = f"C[{r}, {c}]" + ("" if inside else " (outside C: padding)")
    else:
        rows = sorted({r for r, _ in own})
        cols = sorted({c for _, c in own})
        where = f"{len(own)} results, rows {_span(rows)} x columns {_span(cols)}"
        if len(inside) < len(own):
            where += f" ({len(own) - len(inside)} in the padding)"
    return f"{trace.thread_name(thread)}: computes {where}"


def _span(xs: list[int]) -> str:
    if len(xs) > 1 and all(b - a == xs[1] - xs[0] for a, b in zip(xs, xs[1:])):
        step = xs[1] - xs[0]
        return f"{xs[0]}..{xs[-1]}" if step == 1 else f"{xs[0]}..{xs[-1]} step {step}"
    return ", ".join(map(str, xs))


def params_text(trace: Trace) -> str:
    return " ".join(f"{k}={v}" for k, v in trace.params.items())


def launch_text(trace: Trace) -> str:
    g, b = trace.launch.grid, trace.launch.block
    blocks = f"{g[0]} x {g[1]}" if g[1] > 1 else f"{g[0]}"
    threads = f"{b[0]} x {b[1]}" if b[1] > 1 else f"{b[0]}"
    return f"grid of {blocks} blocks of {threads} threads ({trace.threads} threads)"


def size_text(trace: Trace) -> str:
    if trace.m == trace.n == trace.k:
        return f"M = N = K = {trace.m}"
    return f"M = {trace.m}, N = {trace.n}, K = {trace.k}"


class Picture:
    """The figure for one trace and focus; `draw(f)` renders frame f and returns it as an RGBA array."""

    def __init__(self, trace: Trace, thread: int = 0, mode: str = "thread", dpi: int = 100):
        self.trace = trace
        self.fr = Frames(trace, thread, mode)
        self.thread, self.mode = thread, mode
        lay = layout(trace)
        self.shapes, self.origin, width, height = lay.shapes, lay.origin, lay.width, lay.height
        self.cell_px = lay.cell_px
        top = 22 / self.cell_px          # room for the panel titles, in cell units
        blk, gx = trace.block_of(thread), trace.launch.grid[0]
        owner = f"shared, block ({blk % gx}, {blk // gx})"
        named = MODELS[trace.spec.name].smem_titles if trace.spec.name in MODELS else {}
        titles = {"A": f"A ({trace.m} x {trace.k})", "B": f"B ({trace.k} x {trace.n})", "C": f"C ({trace.m} x {trace.n})",
                  "As": f"{named.get('As', 'As')} ({owner})", "Bs": f"{named.get('Bs', 'Bs')} ({owner})"}
        title_px = max(self.origin[p][0] * self.cell_px + 6.5 * len(titles[p]) for p in self.origin)
        main_w = max(width * self.cell_px, title_px) + 20
        width = (main_w - 20) / self.cell_px
        main_h = (height + top) * self.cell_px + 20
        fig_w, fig_h = main_w + TEXT_PX, max(main_h, MIN_H_PX)
        self.fig = Figure(figsize=(fig_w / dpi, fig_h / dpi), dpi=dpi, facecolor="white")
        self.canvas = FigureCanvasAgg(self.fig)
        self.ax = self.fig.add_axes((10 / fig_w, 1 - (main_h - 10) / fig_h, (main_w - 20) / fig_w, (main_h - 20) / fig_h))
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(height, -top)
        self.ax.set_aspect("equal")
        self.ax.axis("off")
        self.palette = palette_rgb()
        self.images, self.texts = {}, {}
        show_values = lay.shows_values
        for name, (rows, cols) in self.shapes.items():
            ox, oy = self.origin[name]
            self.images[name] = self.ax.imshow(np.zeros((rows, cols, 3), dtype=np.uint8), extent=(ox, ox + cols, oy + rows, oy),
                                               origin="upper", interpolation="nearest", zorder=1)
            self._grid(name, rows, cols)
            self.ax.text(ox, oy - 4 / self.cell_px, titles[name], fontsize=9, ha="left", va="bottom", zorder=5)
            if show_values:
                self.texts[name] = [[self.ax.text(ox + c + 0.5, oy + r + 0.5, "", ha="center", va="center",
                                                  fontsize=min(11, self.cell_px / 3.2), zorder=4)
                                     for c in range(cols)] for r in range(rows)]
        self.staged = {}
        for name in ("A", "B"):
            rect = Rectangle((0, 0), 1, 1, fill=False, edgecolor="#1d4ed8", linewidth=2.2, linestyle="--", zorder=6)
            rect.set_visible(False)
            self.ax.add_patch(rect)
            self.staged[name] = rect
        self.text = self.fig.text((main_w + 8) / fig_w, 1 - 12 / fig_h, "", fontsize=8.5, family="monospace",
                                  va="top", ha="left", linespacing=1.35)
        self._legend(main_w, fig_w, fig_h)

    def _grid(self, name: str, rows: int, cols: int) -> None:
        ox, oy = self.origin[name]
        ax = self.ax
        if self.cell_px >= 6:
            ax.vlines([ox + c for c in range(cols + 1)], oy, oy + rows, colors="#bbbbbb", linewidth=0.5, zorder=2)
            ax.hlines([oy + r for r in range(rows + 1)], ox, ox + cols, colors="#bbbbbb", linewidth=0.5, zorder=2)
        bm, bn = self.trace.block_tile()
        kt = self.trace.k_tile()
        step_r, step_c = {"A": (bm, kt), "B": (kt, bn), "C": (bm, bn)}.get(name, (rows, cols))
        # thick lines between block tiles and K steps (none inside a K step of 1: the naive rungs have no tiles in K)
        step_c = step_c if step_c > 1 or name == "C" else cols
        step_r = step_r if step_r > 1 or name == "C" else rows
        ax.vlines([ox + c for c in range(0, cols + 1, step_c)] + [ox + cols], oy, oy + rows, colors="#333333", linewidth=1.2, zorder=3)
        ax.hlines([oy + r for r in range(0, rows + 1, step_r)] + [oy + rows], ox, ox + cols, colors="#333333", linewidth=1.2, zorder=3)

    def _legend(self, main_w: float, fig_w: float, fig_h: float) -> None:
        names = [n for n, _, text in STATES if text]
        if not self.trace.smem_shapes:
            names = [n for n in names if n not in SMEM_STATES]
        x = (main_w + 8) / fig_w
        line = 15 / fig_h
        y0 = 12 / fig_h + line * (len(names) - 1)
        for i, name in enumerate(names):
            y = y0 - i * line
            self.fig.patches.append(Rectangle((x, y), 10 / fig_w, 10 / fig_h, transform=self.fig.transFigure,
                                              facecolor=STATES[CODE[name]][1], edgecolor="#888", linewidth=0.5))
            self.fig.text(x + 16 / fig_w, y + 5 / fig_h, STATES[CODE[name]][2], fontsize=7.5, va="center")

    # ------------------------------------------------------------------ one frame
    def caption(self, f: int) -> str:
        t, fr = self.trace, self.fr
        mk = t.frames[f]
        rows = fr.counters(f)
        cmp = fr.comparison(f)
        focus = {"thread": "thread", "warp": "warp", "block": "block"}[self.mode]
        lines = [
            f"{t.spec.name} (rung {t.spec.rung:02d})  {params_text(t)}",
            f"{size_text(t)}: {launch_text(t)}",
            *textwrap.wrap(describe_thread(t, self.thread), 66),
            "",
            f"frame {f + 1} of {len(t.frames)}  [{mk.phase}]" + (f"  K step {mk.step + 1}" if mk.step >= 0 else ""),
            *textwrap.wrap(mk.label, 66),
            "",
            f"{'':21}{focus:>13}{'block':>13}{'all':>13}",
            f"{'':21}" + f"{'now':>6}{'total':>7}" * 3,
        ]
        for label, *counts in rows:
            lines.append(f"{label:21}" + "".join(f"{v:>6}" if i % 2 == 0 else f"{v:>7}" for i, v in enumerate(counts)))
        lines += [
            "",
            f"global loads per element of C so far: {cmp['all_per_result']:.3g}",
            f"  (the naive rung at k = {cmp['k_done']}: {cmp['naive_per_result']:g})",
        ]
        if self.mode == "thread" and cmp["focus_results"]:
            lines.append(f"this thread: {cmp['focus_loads']} loads for {cmp['focus_results']} result(s); "
                         f"naive: {cmp['naive_focus_loads']:g}")
        if f == len(t.frames) - 1:
            spec_lpt = t.spec.loads_per_thread(t.m, t.n, t.k, t.params)
            lines.append(f"loads per thread: {t.loads_per_thread():.4g} (spec model: {spec_lpt:.4g})")
        return "\n".join(lines)

    def draw(self, f: int) -> np.ndarray:
        self._update(f)
        self.canvas.draw()
        return np.asarray(self.canvas.buffer_rgba()).copy()

    def _update(self, f: int) -> None:
        """Set every artist to frame f (drawing is left to the caller: canvas.draw or a writer's grab)."""
        st = self.fr.state(f)
        for name, img in self.images.items():
            img.set_data(self.palette[st.panels[name]])
            if name in self.texts:
                codes, vals = st.panels[name], st.values[name]
                for r, row in enumerate(self.texts[name]):
                    for c, txt in enumerate(row):
                        txt.set_text(_fmt(vals[r, c]))
                        txt.set_color("white" if STATES[codes[r, c]][0] in DARK else "black")
        for name, rect in self.staged.items():
            box = st.tiles.get(name)
            rect.set_visible(box is not None)
            if box is not None:
                r0, c0, rows, cols = box
                ox, oy = self.origin[name]
                rect.set_bounds(ox + c0, oy + r0, cols, rows)
        self.text.set_text(self.caption(f))

    @property
    def shows_values(self) -> bool:
        return bool(self.texts)

    def cell_pixel(self, panel: str, r: int, c: int, fx: float = 0.5, fy: float = 0.5) -> tuple[int, int]:
        """(x, y) of the point (fx, fy) of cell (r, c) of `panel` (0.5, 0.5: its centre) in the image `draw`
        returns, y counted from the top."""
        ox, oy = self.origin[panel]
        x, y = self.ax.transData.transform((ox + c + fx, oy + r + fy))
        height = self.canvas.get_width_height()[1]
        return int(round(x)), int(round(height - y))

    # ------------------------------------------------------------------ files
    def save_png(self, f: int, path: Path) -> Path:
        self._update(f)
        self.fig.savefig(path, dpi=self.fig.dpi, facecolor="white")
        return path

    def save_gif(self, path: Path, fps: float = 1.5) -> Path:
        writer = PillowWriter(fps=fps)
        with writer.saving(self.fig, str(path), dpi=self.fig.dpi):
            for f in range(len(self.trace.frames)):
                self._update(f)
                writer.grab_frame(facecolor="white")
        return path
