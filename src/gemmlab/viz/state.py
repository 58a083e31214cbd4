"""What one frame looks like, as data: a state code per cell of each panel, and the counters.

The GIF/PNG renderer paints these states; the HTML page computes the same states in JavaScript from the
same events and the same palette (both tested against the model). Highlighting follows a *focus*: one
thread, its warp, or its block. The focus is drawn strong, the rest of its block light, other blocks pale.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import (A_LOAD, AS_READ, AS_WRITE, B_LOAD, BS_READ, BS_WRITE, C_STORE, FMA, GLOBAL_LOADS, OWN,
                    SMEM_READS, SMEM_WRITES, Trace)

# (state name, colour, legend text). The index is the state code; the order is also the legend's.
STATES: tuple[tuple[str, str, str], ...] = (
    ("empty", "#ffffff", ""),
    ("pad", "#d4d4d4", "outside the matrix (padding)"),
    ("read_other", "#fbe3d3", "read from global memory by other blocks"),
    ("read_block", "#f4a574", "read from global memory by the block"),
    ("read_focus", "#c2410c", "read from global memory by the focus"),
    ("held", "#dbeafe", "held in shared memory"),
    ("held_zero", "#b8c2cc", "zero written for padding"),
    ("write_block", "#93c5fd", "written to shared memory by the block"),
    ("write_focus", "#1d4ed8", "written to shared memory by the focus"),
    ("sread_block", "#86efac", "read from shared memory by the block"),
    ("sread_focus", "#15803d", "read from shared memory by the focus"),
    ("own_block", "#fdf6d8", "computed by the block"),
    ("own_focus", "#facc15", "computed by the focus"),
    ("acc_other", "#efe4fb", "accumulated by other blocks"),
    ("acc_block", "#d8b4fe", "accumulated by the block"),
    ("acc_focus", "#7e22ce", "accumulated by the focus"),
    ("stored", "#a7d7a9", "stored to C"),
    ("stored_focus", "#166534", "stored to C by the focus"),
)
CODE = {name: i for i, (name, _, _) in enumerate(STATES)}
SMEM_STATES = {"held", "held_zero", "write_block", "write_focus", "sread_block", "sread_focus"}
DARK = {"read_focus", "write_focus", "sread_focus", "acc_focus", "stored_focus"}  # white text on these

FOCUS_MODES = ("thread", "warp", "block")


def rgb(code: int) -> tuple[int, int, int]:
    h = STATES[code][1]
    return int(h[1:3], 16), int(h[3:5], 16), int(h[5:7], 16)


def palette_rgb() -> np.ndarray:
    return np.array([rgb(i) for i in range(len(STATES))], dtype=np.uint8)


def focus_threads(trace: Trace, thread: int, mode: str) -> range:
    """The global thread numbers in focus: the thread, its warp (32 consecutive threads of its block) or block."""
    if mode not in FOCUS_MODES:
        raise ValueError(f"focus must be one of {', '.join(FOCUS_MODES)}, got {mode!r}")
    tpb = trace.threads_per_block
    blk, tid = divmod(thread, tpb)
    if mode == "thread":
        return range(thread, thread + 1)
    if mode == "warp":
        first = blk * tpb + (tid // 32) * 32
        return range(first, min(first + 32, (blk + 1) * tpb))
    return range(blk * tpb, (blk + 1) * tpb)


@dataclass(frozen=True)
class Layout:
    """Where each panel sits, in cell units (x to the right, y down): B above C, A left of C, tiles right."""

    shapes: dict[str, tuple[int, int]]        # panel -> (rows, cols)
    origin: dict[str, tuple[float, float]]    # panel -> (x, y) of its top-left corner
    width: float
    height: float

    @property
    def cell_px(self) -> float:
        """Pixels per cell: the longer side of the matrices about 600 px, cells between 3 and 44 px."""
        return float(np.clip(600 / max(self.width, self.height), 3, 44))

    @property
    def shows_values(self) -> bool:
        """Cells of 22 px or more print their numbers."""
        return self.cell_px >= 22


def layout(trace: Trace) -> Layout:
    mp, np_, kp = trace.padded_shape()
    gap = max(1.0, 0.08 * max(mp, np_, kp))
    shapes = {"A": (mp, kp), "B": (kp, np_), "C": (mp, np_)}
    origin = {"A": (0.0, kp + gap), "B": (kp + gap, 0.0), "C": (kp + gap, kp + gap)}
    if trace.smem_shapes:
        x0 = kp + gap + np_ + gap
        shapes["Bs"] = trace.smem_shapes["Bs"]
        shapes["As"] = trace.smem_shapes["As"]
        origin["Bs"] = (x0, 0.0)
        # level with A, or below Bs where Bs is taller than B (rung 09's two buffers on a short K)
        origin["As"] = (x0, max(kp, shapes["Bs"][0]) + gap)
    width = max(ox + shapes[p][1] for p, (ox, _) in origin.items())
    height = max(oy + shapes[p][0] for p, (_, oy) in origin.items())
    return Layout(shapes, origin, width, height)


@dataclass
class FrameState:
    panels: dict[str, np.ndarray]        # "A", "B", "C", and "As", "Bs" where the rung has them: state codes
    values: dict[str, np.ndarray]        # the number shown in each cell (NaN: none)
    tiles: dict[str, tuple[int, int, int, int] | None]  # "A", "B": (row, col, rows, cols) staged in shared memory


class Frames:
    """Per-frame states and counters of one trace, for one focus (thread, warp or block)."""

    def __init__(self, trace: Trace, thread: int = 0, mode: str = "thread"):
        if not 0 <= thread < trace.threads:
            raise ValueError(f"thread {thread} does not exist: the launch has {trace.threads} threads "
                             f"({trace.blocks} blocks of {trace.threads_per_block})")
        self.trace, self.thread, self.mode = trace, thread, mode
        self.block = trace.block_of(thread)
        e = trace.events
        self.e = e
        nf = len(trace.frames)
        # Events are recorded in frame order: frame f's events are the slice off[f]:off[f + 1].
        self.off = np.searchsorted(e["frame"], np.arange(nf + 1), side="left")
        fr = focus_threads(trace, thread, mode)
        self.focus = (e["thread"] >= fr.start) & (e["thread"] < fr.stop)
        self.in_block = e["block"] == self.block
        self.mp, self.np_, self.kp = trace.padded_shape()

    # ------------------------------------------------------------------ cells
    def _sl(self, f: int) -> slice:
        return slice(int(self.off[f]), int(self.off[f + 1]))

    def state(self, f: int) -> FrameState:
        t, e = self.trace, self.e
        M, N, mp, np_, kp = t.m, t.n, self.mp, self.np_, self.kp
        now = self._sl(f)
        upto = slice(0, int(self.off[f + 1]))
        kind, r, c = e["kind"], e["r"], e["c"]
        panels, values = {}, {}

        def paint(grid, kinds, sl, levels):
            # A cell takes the highest state any event gives it: within a panel, codes rise with priority.
            ks = kind[sl]
            base = np.isin(ks, kinds)
            for code, extra in levels:
                sel = base & extra[sl] if extra is not None else base
                np.maximum.at(grid, (r[sl][sel], c[sl][sel]), CODE[code])

        other = ~self.in_block
        for name, rows, cols, ld_kind, mat in (("A", mp, kp, A_LOAD, t.a), ("B", kp, np_, B_LOAD, t.b)):
            g = np.zeros((rows, cols), dtype=np.int64)
            g[mat.shape[0]:, :] = CODE["pad"]
            g[:, mat.shape[1]:] = CODE["pad"]
            paint(g, [ld_kind], now, (("read_other", other), ("read_block", self.in_block), ("read_focus", self.focus)))
            panels[name] = g
            v = np.full((rows, cols), np.nan)
            v[: mat.shape[0], : mat.shape[1]] = mat
            values[name] = v

        for name, wk, rk in (("As", AS_WRITE, AS_READ), ("Bs", BS_WRITE, BS_READ)):
            if name not in t.smem_shapes:
                continue
            shape = t.smem_shapes[name]
            g = np.zeros(shape, dtype=np.int64)
            v = np.full(shape, np.nan)
            sel = (kind[upto] == wk) & self.in_block[upto]
            # the last write of each cell so far is what it holds (writes are in execution order)
            for rr, cc, val, pad in zip(r[upto][sel].tolist(), c[upto][sel].tolist(),
                                        e["value"][upto][sel].tolist(), e["aux"][upto][sel].tolist()):
                g[rr, cc] = CODE["held_zero"] if pad else CODE["held"]
                v[rr, cc] = val
            paint(g, [wk], now, (("write_block", self.in_block), ("write_focus", self.focus & self.in_block)))
            paint(g, [rk], now, (("sread_block", self.in_block), ("sread_focus", self.focus & self.in_block)))
            panels[name] = g
            values[name] = v

        g = np.zeros((mp, np_), dtype=np.int64)
        g[M:, :] = CODE["pad"]
        g[:, N:] = CODE["pad"]
        every = slice(0, len(kind))
        paint(g, [OWN], every, (("own_block", self.in_block), ("own_focus", self.focus)))
        paint(g, [FMA], now, (("acc_other", other), ("acc_block", self.in_block), ("acc_focus", self.focus)))
        paint(g, [C_STORE], upto, (("stored", None), ("stored_focus", self.focus)))
        panels["C"] = g
        v = np.full((mp, np_), np.nan)
        sel = kind[upto] == FMA
        for rr, cc, val in zip(r[upto][sel].tolist(), c[upto][sel].tolist(), e["value"][upto][sel].tolist()):
            v[rr, cc] = val       # the running sum: the latest multiply-add so far
        values["C"] = v

        return FrameState(panels, values, self._staged(f))

    def _staged(self, f: int) -> dict[str, tuple[int, int, int, int] | None]:
        """The part of A and B the focus block holds in shared memory during frame f's K step."""
        t = self.trace
        out: dict[str, tuple[int, int, int, int] | None] = {"A": None, "B": None}
        if not t.smem_shapes:
            return out
        step = t.frames[f].step
        if step < 0:
            return out
        # From the block tile and the step depth, not from the shapes of As and Bs: from rung 06 on, As
        # holds its tile transposed (and padded, and twice over in rung 09).
        (bm, bn), bk = t.block_tile(), t.k_tile()
        row0, col0 = self._block_origin()
        k0 = step * bk
        out["A"] = (row0, k0, bm, bk)
        out["B"] = (k0, col0, bk, bn)
        return out

    def _block_origin(self) -> tuple[int, int]:
        e = self.e
        sel = (e["kind"] == OWN) & self.in_block
        return int(e["r"][sel].min()), int(e["c"][sel].min())

    # ------------------------------------------------------------------ counters
    def counters(self, f: int) -> list[tuple[str, int, int, int, int, int, int]]:
        """Rows (what, focus this frame, focus so far, block this frame, block so far, all this frame, all so far)."""
        e = self.e
        now, upto = self._sl(f), slice(0, int(self.off[f + 1]))
        kind = e["kind"]
        rows = []
        for label, kinds in (("global loads (A + B)", GLOBAL_LOADS), ("shared-memory loads", SMEM_READS),
                             ("shared-memory stores", SMEM_WRITES), ("multiply-adds", (FMA,))):
            m = np.isin(kind, kinds)
            row = [label]
            for who in (self.focus, self.in_block, None):
                for sl in (now, upto):
                    sel = m[sl] if who is None else (m[sl] & who[sl])
                    row.append(int(sel.sum()))
            rows.append(tuple(row))
        return rows

    def comparison(self, f: int) -> dict[str, float]:
        """Global loads per element of C so far, this rung against the naive rung at the same K progress."""
        t = self.trace
        k_done = t.frames[f].k_done
        loads = self.counters(f)[0]
        results = max(1, t.m * t.n)
        own = (self.e["kind"] == OWN) & self.focus
        focus_results = len({(r, c) for r, c in zip(self.e["r"][own].tolist(), self.e["c"][own].tolist())
                             if r < t.m and c < t.n})
        return {
            "k_done": k_done,
            "naive_per_result": 2.0 * k_done,
            "all_per_result": loads[6] / results,
            "focus_loads": loads[2],
            "focus_results": focus_results,
            "naive_focus_loads": 2.0 * k_done * focus_results,
        }
