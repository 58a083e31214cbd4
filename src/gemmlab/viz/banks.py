"""Shared-memory banks: which of the 32 banks each lane of a warp hits in one shared-memory instruction, and
how many wavefronts the instruction takes.

Shared memory is 32 banks of 4-byte words: the word at byte address a lies in bank (a / 4) mod 32. A warp's
instruction is served in phases: all 32 lanes at once for 4-byte accesses, 2 phases of 16 lanes for
8-byte ones, 4 phases of 8 lanes for 16-byte ones (each phase moves at most 128 bytes). In one phase,
lanes that read the same word share it (a broadcast); lanes that need different words of one bank are
served one after another. So a phase takes as many wavefronts (128-byte requests) as the most distinct
words any one bank must give, and the instruction takes the sum over its phases. One wavefront per phase
is the minimum: conflict-free. "2-way" means some phase needs 2.

The addresses come from the execution model: a trace records each lane's shared-memory accesses as (row,
column) of an array whose row stride is its declared width (padding included), so the byte address is
4 * (row * columns + column) from the array's start. Arrays start 16-byte aligned; where exactly only turns
every bank number by the same amount, which changes no wavefront count.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..kernels import registry
from .model import AS_READ, AS_WRITE, BS_READ, BS_WRITE, Trace, instruction_order
from .rungs import model_for, resolve, run

BANKS = 32
WORD = 4                    # bytes per bank word
PHASE_BYTES = 128           # what one phase moves: 32 banks x 4 bytes
SMEM_KINDS = {AS_WRITE: ("As", "store"), BS_WRITE: ("Bs", "store"), AS_READ: ("As", "load"), BS_READ: ("Bs", "load")}


@dataclass(frozen=True)
class BankMap:
    """One shared-memory instruction of one warp: each lane's byte address (None: the lane takes no part)."""

    addresses: tuple[int | None, ...]   # by lane, 32 entries
    width: int                          # bytes each lane moves: 4, 8 or 16

    def __post_init__(self):
        if self.width not in (4, 8, 16):
            raise ValueError(f"a shared-memory access is 4, 8 or 16 bytes wide, not {self.width}")
        if len(self.addresses) != BANKS:
            raise ValueError(f"a warp has 32 lanes, got {len(self.addresses)} addresses")
        bad = [a for a in self.addresses if a is not None and a % self.width]
        if bad:
            raise ValueError(f"{self.width}-byte accesses must be {self.width}-byte aligned, got address {bad[0]}")

    @property
    def lanes_per_phase(self) -> int:
        return PHASE_BYTES // self.width

    @property
    def phases(self) -> list[range]:
        n = self.lanes_per_phase
        return [range(p, p + n) for p in range(0, BANKS, n)]

    def words(self, lane: int) -> list[int]:
        """The 4-byte words (address / 4) the lane's access touches."""
        a = self.addresses[lane]
        return [] if a is None else [a // WORD + i for i in range(self.width // WORD)]

    def banks(self, lane: int) -> list[int]:
        return [w % BANKS for w in self.words(lane)]

    def bank_words(self, phase: int) -> list[dict[int, list[int]]]:
        """For each of the 32 banks, in one phase: word -> the lanes that access it."""
        out: list[dict[int, list[int]]] = [{} for _ in range(BANKS)]
        for lane in self.phases[phase]:
            for w in self.words(lane):
                out[w % BANKS].setdefault(w, []).append(lane)
        return out

    def phase_wavefronts(self) -> list[int]:
        """Per phase: the most distinct words one bank must give (0 for a phase with no lane taking part)."""
        return [max(len(words) for words in self.bank_words(p)) for p in range(len(self.phases))]

    @property
    def wavefronts(self) -> int:
        return sum(self.phase_wavefronts())

    @property
    def ideal(self) -> int:
        """One wavefront per phase that has a lane taking part: what a conflict-free access takes."""
        return sum(1 for w in self.phase_wavefronts() if w)

    @property
    def degree(self) -> int:
        """The worst phase's wavefronts: 1 conflict-free, 2 for a 2-way conflict, and so on."""
        return max(self.phase_wavefronts(), default=0)

    def verdict(self) -> str:
        return "conflict-free" if self.degree <= 1 else f"{self.degree}-way conflict"


def bank_map(addresses, width: int) -> BankMap:
    """The bank map of one warp instruction from each lane's byte address (None for lanes taking no part)."""
    addrs = list(addresses) + [None] * (BANKS - len(addresses))
    return BankMap(tuple(None if a is None else int(a) for a in addrs), width)


@dataclass(frozen=True)
class Access:
    """One shared-memory instruction of one warp in one frame of a trace."""

    frame: int
    array: str          # "As" or "Bs"
    op: str             # "load" or "store"
    index: int          # each lane's index-th access of this array and op in the frame
    cells: tuple[tuple[int, int] | None, ...]   # per lane, the (row, column) of the first element it touches
    map: BankMap

    @property
    def name(self) -> str:
        return f"{self.array} {self.op} {self.index + 1}, {self.map.width}-byte"


def warp_accesses(trace: Trace, frame: int, thread: int) -> list[Access]:
    """The shared-memory instructions the warp holding `thread` issues in `frame`: per array and direction,
    a lane's i-th access is its part of the warp's i-th instruction (a 16-byte access is one, over four
    consecutive words)."""
    tpb = trace.threads_per_block
    blk, tid = divmod(thread, tpb)
    first = blk * tpb + (tid // 32) * 32
    e = trace.events
    out: list[Access] = []
    for kind, (array, op) in SMEM_KINDS.items():
        sel = (e["frame"] == frame) & (e["kind"] == kind) & (e["thread"] >= first) & (e["thread"] < first + 32)
        if not sel.any():
            continue
        th, r, c, w = e["thread"][sel], e["r"][sel], e["c"][sel], e["width"][sel]
        order = instruction_order(th, w)
        cols = trace.smem_shapes[array][1]
        for i in range(int(order.max()) + 1):
            addrs: list[int | None] = [None] * BANKS
            cells: list[tuple[int, int] | None] = [None] * BANKS
            widths = set()
            for lane_t, rr, cc, ww in zip(th[order == i].tolist(), r[order == i].tolist(), c[order == i].tolist(),
                                          w[order == i].tolist()):
                lane = lane_t - first
                widths.add(ww)
                if addrs[lane] is None:          # the first of a 16-byte access's four words
                    addrs[lane] = WORD * (rr * cols + cc)
                    cells[lane] = (rr, cc)
            if len(widths) != 1:
                raise ValueError(f"the lanes of {array} {op} {i + 1} in frame {frame} differ in width {sorted(widths)}")
            out.append(Access(frame, array, op, i, tuple(cells), bank_map(addrs, WORD * widths.pop())))
    return out


# ----------------------------------------------------------------------------------------------- a rung's view


@dataclass(frozen=True)
class BankView:
    """A rung's shared-memory instructions for one warp in its first K step: the stores of the first load
    frame and the loads of the first compute frame, with a bank map each."""

    kernel: str
    rung: int
    params: dict[str, int]
    thread: int                 # a thread of the warp, numbered within its block
    accesses: list[Access]

    @property
    def warp(self) -> int:
        return self.thread // 32

    def find(self, array: str, op: str, index: int) -> Access | None:
        return next((a for a in self.accesses if (a.array, a.op, a.index) == (array, op, index)), None)


def view_of_trace(trace: Trace, thread: int = 0) -> BankView:
    """The bank view of `trace`'s first K step, for the warp holding `thread`."""
    if not trace.smem_shapes:
        raise ValueError(f"{trace.spec.name} uses no shared memory: there are no banks to show")
    frames = trace.frames
    load = next(i for i, mk in enumerate(frames) if mk.phase == "load")
    compute = next(i for i, mk in enumerate(frames) if mk.phase == "compute" and i > load)
    accesses = [a for a in warp_accesses(trace, load, thread) if a.op == "store"]
    accesses += [a for a in warp_accesses(trace, compute, thread) if a.op == "load"]
    return BankView(trace.spec.name, trace.spec.rung, dict(trace.params), thread % trace.threads_per_block, accesses)


def one_step(kernel: str, params: dict[str, int] | None = None, block: int | None = None,
             teaching: bool = False) -> Trace:
    """A trace of one block and one K step: all the bank view needs. Parameters start from the spec's
    defaults (the kernel as it runs) unless `teaching`, then `block`, then `params`."""
    spec, model, p = resolve(kernel, params, block, teaching=teaching)
    if not model.smem(p):
        raise ValueError(f"{spec.name} uses no shared memory: there are no banks to show")
    bm, bn = model.tile(p)
    k_step = p["BK"] if "BK" in p else p["BLOCK_DIM"]      # the tiled rungs' step depth: smem_tiled's is its tile
    return run(kernel, bm, bn, k_step, params=p)


def bank_view(kernel: str, params: dict[str, int] | None = None, block: int | None = None, thread: int = 0,
              teaching: bool = False) -> tuple[BankView, BankView | None]:
    """The rung's bank view and, where the rung changes an earlier rung's shared-memory layout
    (`RungModel.banks_before`), that rung's at the same parameters: (view, before or None)."""
    spec, model, p = resolve(kernel, params, block, teaching=teaching)
    tpb = spec.launch(*model.tile(p), 1, p).threads_per_block
    if not 0 <= thread < tpb:
        raise ValueError(f"--thread {thread}: one block has {tpb} threads, numbered from 0")
    trace = one_step(kernel, params, block, teaching)
    view = view_of_trace(trace, thread)
    before_name = model_for(registry.get(kernel)).banks_before
    before = None
    if before_name is not None:
        before = view_of_trace(run(before_name, trace.m, trace.n, trace.k, params=trace.params), thread)
    return view, before


def changed(view: BankView, before: BankView | None) -> list[tuple[Access | None, Access]]:
    """(before, after) pairs of the instructions whose wavefronts differ, or, without a before, the
    instructions that conflict; the first of each array and direction."""
    out: list[tuple[Access | None, Access]] = []
    seen = set()
    for a in view.accesses:
        key = (a.array, a.op)
        if key in seen:
            continue
        old = before.find(a.array, a.op, a.index) if before is not None else None
        if (old is not None and old.map.wavefronts != a.map.wavefronts) or (before is None and a.map.degree > 1):
            out.append((old, a))
            seen.add(key)
    return out


# ----------------------------------------------------------------------------------------------- as tables
# Cells are (text, state): state None for plain text, False for a conflict-free figure, True for a conflict.
# The terminal and the HTML page both draw these.

Cell = tuple[str, bool | None]
BAND = 8      # bank columns per row of a map: a 16-byte map is one band of 8 columns of 4 banks


def waves_text(n: int) -> str:
    return f"{n} wavefront" + ("" if n == 1 else "s")


def _figure(a: Access | None) -> Cell:
    if a is None:
        return ("-", None)
    verdict = "conflict-free" if a.map.degree <= 1 else f"{a.map.degree}-way"
    return (f"{a.map.wavefronts} ({verdict})", a.map.degree > 1)


def summary_rows(view: BankView, before: BankView | None = None) -> tuple[list[str], list[list[Cell]]]:
    """One row per run of instructions of one array, direction and width with the same figures: the header
    and the rows (instruction, phases x lanes, [before's wavefronts], wavefronts, each with its conflict)."""
    header = ["instruction", "phases x lanes"]
    if before is not None:
        header.append(f"rung {before.rung:02d}")
    header.append(f"rung {view.rung:02d}")
    runs: list[tuple[list[Access], Access | None]] = []
    for a in view.accesses:
        old = before.find(a.array, a.op, a.index) if before is not None else None
        if runs:
            last, last_old = runs[-1][0][-1], runs[-1][1]
            if ((last.array, last.op, last.map.width, last.map.wavefronts) == (a.array, a.op, a.map.width, a.map.wavefronts)
                    and (last_old is None) == (old is None)
                    and (old is None or last_old.map.wavefronts == old.map.wavefronts)):
                runs[-1][0].append(a)
                continue
        runs.append(([a], old))
    rows = []
    for group, old in runs:
        a = group[0]
        which = f"{a.index + 1}" if len(group) == 1 else f"{a.index + 1}-{group[-1].index + 1}"
        row: list[Cell] = [(f"{a.array} {a.op} {which}, {a.map.width}-byte", None),
                           (f"{len(a.map.phases)} x {a.map.lanes_per_phase}", None)]
        if before is not None:
            row.append(_figure(old))
        row.append(_figure(a))
        rows.append(row)
    return header, rows


def map_title(a: Access, who: str) -> str:
    where = f"; lane 0 at {a.array}[{a.cells[0][0]}][{a.cells[0][1]}]" if a.cells[0] is not None else ""
    return f"{who}: {a.name} ({waves_text(a.map.wavefronts)}, {a.map.verdict()}){where}"


def map_rows(a: Access) -> tuple[list[str], list[list[Cell]]]:
    """Which lanes hit which bank, phase by phase, with the phase's wavefronts ("waves"). A column per
    lane's worth of banks (4 for 16-byte accesses), at most BAND columns a row (a 4-byte map takes four
    rows per phase, a band of 8 banks each). A cell lists the lanes per word: lanes that share a word are
    joined (a broadcast), lanes that need different words of the bank are separated by '/' (a conflict)."""
    m = a.map
    group = m.width // WORD
    ncols = BANKS // group
    band = min(ncols, BAND)
    banded = ncols > band
    header = ["phase", "lanes", "waves"] + (["banks"] if banded else [])
    header += [f"+{i}" if banded else f"b{i * group}" + (f"-{i * group + group - 1}" if group > 1 else "")
               for i in range(band)]
    rows: list[list[Cell]] = []
    for p, waves in enumerate(m.phase_wavefronts()):
        words = m.bank_words(p)
        cells: list[Cell] = []
        for g in range(ncols):
            by_word = [lanes for _, lanes in sorted(words[g * group].items())]
            cells.append(("/".join(lanes_text(ls) for ls in by_word) or ".", True if len(by_word) > 1 else None))
        lanes = m.phases[p]
        for b0 in range(0, ncols, band):
            head: list[Cell] = ([(str(p), None), (f"{lanes.start}-{lanes.stop - 1}", None), (str(waves), waves > 1)]
                                if b0 == 0 else [("", None)] * 3)
            if banded:
                head.append((f"{b0 * group}-{(b0 + band) * group - 1}", None))
            rows.append(head + cells[b0:b0 + band])
    return header, rows


def lanes_text(lanes: list[int]) -> str:
    """Lanes as short ranges: [0, 1, 2, 5] -> '0-2,5'."""
    xs = sorted(lanes)
    parts, start = [], 0
    for i in range(1, len(xs) + 1):
        if i == len(xs) or xs[i] != xs[i - 1] + 1:
            parts.append(str(xs[start]) if i - start == 1 else f"{xs[start]}-{xs[i - 1]}")
            start = i
    return ",".join(parts)


def page_data(view: BankView, before: BankView | None = None) -> dict:
    """The bank view as the HTML page draws it: the summary and the maps of `changed`, as tables of cells."""
    header, rows = summary_rows(view, before)
    maps = []
    for old, new in changed(view, before):
        for a, v in ((old, before), (new, view)):
            if a is not None:
                h, r = map_rows(a)
                maps.append({"title": map_title(a, f"{v.kernel} (rung {v.rung:02d})"), "header": h, "rows": r})
    title = (f"shared-memory banks: warp {view.warp} of a block in K step 1, "
             + " ".join(f"{k}={v}" for k, v in view.params.items()))
    if before is not None:
        title += f"; against {before.kernel} (rung {before.rung:02d}), whose layout rung {view.rung:02d} changes"
    return {"title": title, "summary": {"header": header, "rows": rows}, "maps": maps}
