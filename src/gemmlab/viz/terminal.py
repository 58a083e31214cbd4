"""A quick look in the terminal: rich renderables (the CLI prints them; nothing here prints).

One thread followed frame by frame (what it reads from global memory, writes to and reads from shared
memory, accumulates), a map of C showing which block computes what and which cells the thread owns, and
the counts against the spec's analytic model. Separately, `bank_view`: one warp's shared-memory
instructions with the bank each lane hits and the wavefronts each takes.
"""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .banks import Access, BankView, Cell, changed, map_rows, map_title, summary_rows, waves_text
from .frames import describe_thread, launch_text, params_text, size_text
from .model import (A_LOAD, AS_READ, AS_WRITE, B_LOAD, BS_READ, BS_WRITE, C_STORE, FMA, GLOBAL_LOADS, OWN, SMEM_READS,
                    SMEM_WRITES, VEC, Trace)
from .rungs import model_for

MAX_LISTED = 6       # accesses listed per cell of the step table before "+N more"
MAX_MAP_COLS = 48    # C is drawn as a map up to this many columns


def _accesses(trace: Trace, frame: int, thread: int, kind: int, name: str, shared: bool = False) -> str:
    """The thread's accesses of `kind` in `frame`; a 16-byte access shows as one item over its four columns."""
    sel = trace.select(kind, frame=frame, thread=thread)
    e = trace.events
    items = []
    rows = list(zip(e["r"][sel].tolist(), e["c"][sel].tolist(), e["aux"][sel].tolist(), e["value"][sel].tolist(),
                    e["width"][sel].tolist()))
    i = 0
    while i < len(rows):
        r, c, aux, v, w = rows[i]
        group = rows[i:i + VEC] if w == VEC else rows[i:i + 1]
        i += len(group)
        cols = f"{c}..{group[-1][1]}" if len(group) > 1 else f"{c}"
        pads = sum(g[2] for g in group)
        if kind == FMA:
            items.append(f"{name}[{r},{c}]={v:g}")
        elif shared:
            pad = ""
            if kind in (AS_WRITE, BS_WRITE) and pads:
                pad = "=0 pad" if pads == len(group) else f" ({pads} pad)"
            items.append(f"{name}[{r}][{cols}]" + pad)
        else:
            items.append(f"{name}[{r},{cols}]")
    if len(items) > MAX_LISTED:
        items = items[:MAX_LISTED] + [f"+{len(items) - MAX_LISTED} more"]
    return " ".join(items)


def step_table(trace: Trace, thread: int) -> Table:
    t = Table(title=f"{describe_thread(trace, thread)}, frame by frame", title_justify="left", expand=False)
    for col, just in (("frame", "right"), ("what", "left"), ("reads global", "left"), ("writes shared", "left"),
                      ("reads shared", "left"), ("accumulates", "left"), ("global loads\nthread/block/all", "right")):
        t.add_column(col, justify=just, overflow="fold")
    blk = trace.block_of(thread)
    per_thread = trace.per_frame(GLOBAL_LOADS, thread=thread).cumsum()
    per_block = trace.per_frame(GLOBAL_LOADS, block=blk).cumsum()
    per_all = trace.per_frame(GLOBAL_LOADS).cumsum()
    for f, mk in enumerate(trace.frames):
        what = mk.phase
        if mk.phase == "load":
            what = f"load step {mk.step + 1}"
        elif mk.phase == "compute":
            what = f"k = {mk.k}" + (" pad" if mk.k >= trace.k else "")
        if mk.sync:
            what += ", sync"
        glob = " ".join(x for x in (_accesses(trace, f, thread, A_LOAD, "A"), _accesses(trace, f, thread, B_LOAD, "B")) if x)
        wsh = " ".join(x for x in (_accesses(trace, f, thread, AS_WRITE, "As", True),
                                   _accesses(trace, f, thread, BS_WRITE, "Bs", True)) if x)
        rsh = " ".join(x for x in (_accesses(trace, f, thread, AS_READ, "As", True),
                                   _accesses(trace, f, thread, BS_READ, "Bs", True)) if x)
        acc = _accesses(trace, f, thread, FMA, "C")
        store = _accesses(trace, f, thread, C_STORE, "C")
        if store:
            acc = (acc + " " if acc else "") + "store " + store
        t.add_row(str(f + 1), what, glob or "-", wsh or "-", rsh or "-", acc or "-",
                  f"{per_thread[f]}/{per_block[f]}/{per_all[f]}")
    return t


def c_map(trace: Trace, thread: int) -> Text | None:
    """C as a character map: each cell shows its block's number, the followed thread's cells highlighted."""
    mp, np_, _ = trace.padded_shape()
    if np_ > MAX_MAP_COLS:
        return None
    owner: dict[tuple[int, int], int] = {}
    e = trace.events
    sel = trace.select(OWN)
    for r, c, th in zip(e["r"][sel].tolist(), e["c"][sel].tolist(), e["thread"][sel].tolist()):
        owner[(r, c)] = th
    mine = set(trace.owned(thread))
    width = len(str(trace.blocks - 1))
    out = Text()
    out.append(f"C by block (the cells of thread {thread} highlighted; '.' is padding, '-' computed by nobody)\n",
               style="bold")
    shades = ("on grey23", "on grey35")
    gx = trace.launch.grid[0]
    for r in range(mp):
        for c in range(np_):
            th = owner.get((r, c))
            if th is None:
                out.append(" " + "-".rjust(width), style="dim")
                continue
            blk = trace.block_of(th)
            if (r, c) in mine:
                style = "bold black on yellow"
            else:
                style = shades[(blk % gx + blk // gx) % 2]
            label = ".".rjust(width) if (r >= trace.m or c >= trace.n) else str(blk).rjust(width)
            out.append(" " + label, style=style)
        out.append("\n")
    return out


def counts_table(trace: Trace) -> Table:
    t = Table(title="the whole run: model against the spec's analytic model", title_justify="left")
    for col in ("count", "model", "spec", ""):
        t.add_column(col, justify="left" if not col or col == "count" else "right")
    for q, a, b in trace.agreement():
        ok = abs(a - b) <= 1e-9 * max(1.0, abs(b))
        t.add_row(q, f"{a:g}", f"{b:g}", "[green]equal[/green]" if ok else "[bold red]DIFFERENT[/bold red]")
    return t


def comparison(trace: Trace) -> str:
    loads = trace.count(GLOBAL_LOADS)
    per_c = loads / (trace.m * trace.n)
    naive = 2 * trace.k
    ratio = naive / per_c if per_c else float("inf")
    return (f"global loads per element of C: {per_c:.4g} here, {naive} for the naive rung "
            f"(each result reads a row of A and a column of B): {ratio:.3g}x fewer")


def instructions_text(trace: Trace) -> str | None:
    """Access instructions against elements, where some accesses are 16 bytes wide (None where none are)."""
    if not (trace.events["width"] == VEC).any():
        return None
    parts = []
    for label, kinds in (("global loads", GLOBAL_LOADS), ("shared loads", SMEM_READS), ("shared stores", SMEM_WRITES),
                         ("C stores", (C_STORE,))):
        parts.append(f"{label} {trace.instructions(kinds):,} for {trace.count(kinds):,} elements")
    return "access instructions (a 16-byte one moves 4 elements): " + "; ".join(parts)


def view(trace: Trace, thread: int = 0) -> Group:
    head = Text()
    head.append(f"{trace.spec.name} (rung {trace.spec.rung:02d})  {params_text(trace)}\n", style="bold")
    head.append(f"{size_text(trace)}: {launch_text(trace)}\n")
    head.append(f"watch: {model_for(trace.spec).watch}")
    parts = [Panel(head, expand=False), step_table(trace, thread)]
    cm = c_map(trace, thread)
    if cm is not None:
        parts.append(cm)
    parts += [counts_table(trace), Text(comparison(trace))]
    instr = instructions_text(trace)
    if instr:
        parts.append(Text(instr))
    return Group(*parts)


# ----------------------------------------------------------------------------------------------- banks


def _cell(cell: Cell) -> str:
    text, state = cell
    text = escape(text)
    if state is None:
        return text
    return f"[bold red]{text}[/bold red]" if state else f"[green]{text}[/green]"


def _table(title: str, header: list[str], rows: list[list[Cell]], labels: int) -> Table:
    """`labels` leading columns that keep to one line; the others fold rather than lose lanes to an ellipsis
    on a narrow terminal."""
    t = Table(title=title, title_justify="left", pad_edge=False, padding=(0, 0), box=box.SIMPLE_HEAD)
    for i, h in enumerate(header):
        if i < labels:
            t.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
        else:
            t.add_column(h, justify="right" if labels == 2 else "center", overflow="fold")
    for row in rows:
        t.add_row(*(_cell(c) for c in row))
    return t


def bank_summary(view: BankView, before: BankView | None = None) -> Table:
    header, rows = summary_rows(view, before)
    return _table(f"shared-memory instructions of warp {view.warp} in K step 1: wavefronts of each (1 per phase is "
                  f"the minimum)", header, rows, labels=2)


def bank_table(a: Access, who: str) -> Table:
    """Which lanes hit which bank, phase by phase (`banks.map_rows`): '/' separates lanes that need
    different words of one bank (a conflict, in red)."""
    header, rows = map_rows(a)
    labels = 4 if "banks" in header else 3
    return _table(map_title(a, who), header, rows, labels)


def bank_view(view: BankView, before: BankView | None = None) -> Group:
    """The bank view of a rung (and of the rung whose layout it changes): a summary of every instruction of
    the warp in the first K step, then the bank maps of the instructions whose wavefronts differ (or, alone,
    that conflict)."""
    head = Text()
    shown = " ".join(f"{k}={v}" for k, v in view.params.items())
    head.append(f"{view.kernel} (rung {view.rung:02d})  {shown}: shared-memory banks\n", style="bold")
    head.append(f"warp {view.warp} (threads {view.warp * 32}-{view.warp * 32 + 31} of block (0, 0)), the stores of "
                f"its first load frame and the loads of its first compute frame")
    if before is not None:
        head.append(f"\nagainst {before.kernel} (rung {before.rung:02d}) at the same parameters: the shared-memory "
                    f"layout that rung {view.rung:02d} changes")
    parts = [Panel(head, expand=False), bank_summary(view, before)]
    pairs = changed(view, before)
    for old, new in pairs:
        if old is not None:
            parts.append(bank_table(old, f"{before.kernel} (rung {before.rung:02d})"))
        parts.append(bank_table(new, f"{view.kernel} (rung {view.rung:02d})"))
        if old is not None:
            parts.append(Text(f"{new.array} {new.op} {new.index + 1}: {waves_text(old.map.wavefronts)} "
                              f"({old.map.verdict()}) with rung {before.rung:02d}'s layout, {new.map.wavefronts} "
                              f"({new.map.verdict()}) with rung {view.rung:02d}'s", style="bold"))
    if not pairs:
        parts.append(Text("no instruction of this warp conflicts" if before is None else
                          f"every instruction takes the same wavefronts as in rung {before.rung:02d}"))
    parts.append(Text("A bank is 4 bytes wide; word w lies in bank w mod 32. A 4-byte access is served in 1 phase "
                      "of 32 lanes, an 8-byte one in 2 of 16, a 16-byte one in 4 of 8. In a phase, lanes reading "
                      "one word share it (a broadcast); lanes needing different words of one bank wait for each "
                      "other: the phase takes as many wavefronts as the most words any bank gives.", style="dim"))
    return Group(*parts)
