"""A quick look in the terminal: rich renderables (the CLI prints them; nothing here prints).

One thread followed frame by frame (what it reads from global memory, writes to and reads from shared
memory, accumulates), a map of C showing which block computes what and which cells the thread owns, and
the counts against the spec's analytic model.
"""

from __future__ import annotations

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .frames import describe_thread, launch_text, params_text, size_text
from .model import A_LOAD, AS_READ, AS_WRITE, B_LOAD, BS_READ, BS_WRITE, C_STORE, FMA, GLOBAL_LOADS, OWN, Trace
from .rungs import model_for

MAX_LISTED = 6       # accesses listed per cell of the step table before "+N more"
MAX_MAP_COLS = 48    # C is drawn as a map up to this many columns


def _accesses(trace: Trace, frame: int, thread: int, kind: int, name: str, shared: bool = False) -> str:
    sel = trace.select(kind, frame=frame, thread=thread)
    e = trace.events
    items = []
    for r, c, aux, v in zip(e["r"][sel].tolist(), e["c"][sel].tolist(), e["aux"][sel].tolist(), e["value"][sel].tolist()):
        if kind == FMA:
            items.append(f"{name}[{r},{c}]={v:g}")
        elif shared:
            items.append(f"{name}[{r}][{c}]" + ("=0 pad" if kind in (AS_WRITE, BS_WRITE) and aux else ""))
        else:
            items.append(f"{name}[{r},{c}]")
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
    return Group(*parts)
