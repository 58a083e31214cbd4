"""A sweep spread over the GPUs of one host: one process per GPU (CUDA_VISIBLE_DEVICES set before it imports
anything that touches CUDA), each measuring its share of the items with the same function a single-GPU run
calls, its peers beside it on its own GPU (so every ratio stays side by side), the records merged into one
`Results`, in the items' order, every process's run kept (its device and environment).

The items are handed out as the processes ask for them (`Pull`: one shared queue, the costliest first), so
that a process whose items took longer than their cost said takes fewer: the processes end within about one
item of each other, and the sweep takes about 1 / GPUs of one GPU's measuring time plus one process's start
(importing, starting CUDA, recording the environment). `deal` is the static split by cost, for callers that
want one known in advance.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .records import Results


def deal(costs: Sequence[float], parts: int) -> list[list[int]]:
    """Indices of `costs` in `parts` shares of near-equal total cost (largest first, to the lightest share;
    ties to the lower share), each share in index order."""
    if parts < 1:
        raise ValueError(f"the number of GPUs must be >= 1, got {parts}")
    shares: list[list[int]] = [[] for _ in range(parts)]
    load = [0.0] * parts
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        j = min(range(parts), key=lambda j: (load[j], j))
        shares[j].append(i)
        load[j] += costs[i]
    return [sorted(s) for s in shares]


class Pull:
    """A process's share of the items, taken from the shared queue one at a time as it iterates (each item
    once over all processes); `taken` lists the indices it got, in the order it got them; `first` and `last`
    the wall-clock times (time.time()) at which it asked for its first item and found the queue empty."""

    def __init__(self, queue, items: list):
        self.queue, self.items, self.taken = queue, items, []
        self.first = self.last = None

    def __iter__(self):
        while True:
            if self.first is None:
                self.first = time.time()
            i = self.queue.get()
            if i is None:
                self.last = time.time()
                return
            self.taken.append(i)
            yield self.items[i]


@dataclass(frozen=True)
class ProcessTimes:
    """Where one process's wall time went, in seconds from the parent's start of the processes: `started` when
    its function began (the interpreter and the modules it was spawned with loaded), `first` when it asked for
    its first item (its own imports and setup done), `last` when it found the queue empty (each None where the
    process never got there), `done` when its result or its error was put back."""

    gpu: int
    started: float
    first: float | None
    last: float | None
    done: float


def _visible(gpu: int, fn: Callable, pull: Pull, args: tuple, results) -> None:
    started = time.time()
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    try:
        value = fn(pull, *args)
        results.put((gpu, pull.taken, value, None, (started, pull.first, pull.last, time.time())))
    except BaseException as exc:  # noqa: BLE001 - the parent reports it with the GPU's number
        results.put((gpu, pull.taken, None, f"{type(exc).__name__}: {exc}", (started, pull.first, pull.last,
                                                                             time.time())))


def run_spread(fn: Callable[..., Any], items: Sequence, costs: Sequence[float], gpus: int, *args,
               timings: list | None = None) -> list[tuple[list[int], Any]]:
    """`fn(share, *args)` in one process per GPU (spawned; `fn` a module-level function that iterates `share`
    once, in order, and may return one result per item taken), the items pulled from one queue, the costliest
    first; [(indices each process took, in the order it took them; what fn returned)] in GPU order, for the
    GPUs that ran. RuntimeError naming the GPU where one failed. `timings` (a list): filled with each
    process's `ProcessTimes`, in GPU order."""
    import multiprocessing as mp

    if len(costs) != len(items):
        raise ValueError(f"{len(items)} items but {len(costs)} costs")
    if gpus < 1:
        raise ValueError(f"the number of GPUs must be >= 1, got {gpus}")
    procs_n = min(gpus, len(items))
    ctx = mp.get_context("spawn")
    work, results = ctx.Queue(), ctx.Queue()
    for i in sorted(range(len(items)), key=lambda i: (-costs[i], i)):
        work.put(i)
    for _ in range(procs_n):
        work.put(None)  # one end mark per process
    items = list(items)
    procs = [ctx.Process(target=_visible, args=(g, fn, Pull(work, items), args, results)) for g in range(procs_n)]
    t0 = time.time()
    for p in procs:
        p.start()
    got, when = {}, {}
    for _ in procs:
        gpu, taken, value, err, stamps = results.get()
        if err:
            for p in procs:
                p.terminate()
            raise RuntimeError(f"GPU {gpu}'s share failed: {err}")
        got[gpu] = (taken, value)
        when[gpu] = ProcessTimes(gpu, *(None if v is None else v - t0 for v in stamps))
    for p in procs:
        p.join()
    if timings is not None:
        timings.extend(when[g] for g in range(procs_n))
    return [got[g] for g in range(procs_n)]


def times_note(timings: Sequence[ProcessTimes]) -> str:
    """One line on where a spread run's wall time went: each process's start (to its first item), its
    measuring (first item to an empty queue), and the whole (to the last result back)."""
    if not timings:
        return ""
    start = [t.first for t in timings if t.first is not None]
    work = [t.last - t.first for t in timings if t.first is not None and t.last is not None]

    def span(v):
        return f"{min(v):.1f}-{max(v):.1f} s" if v else "-"
    return (f"{len(timings)} processes: start to the first item {span(start)}, measuring {span(work)}, the last "
            f"result back at {max(t.done for t in timings):.1f} s")


def merge(parts: Sequence[Results], order: Callable[[Any], Any] | None = None) -> Results:
    """One Results of several processes' (every run kept); records sorted by `order` where given."""
    records = [r for p in parts for r in p.records]
    if order is not None:
        records.sort(key=order)
    return Results(records, [run for p in parts for run in p.runs])
