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
    once over all processes); `taken` lists the indices it got, in the order it got them."""

    def __init__(self, queue, items: list):
        self.queue, self.items, self.taken = queue, items, []

    def __iter__(self):
        while True:
            i = self.queue.get()
            if i is None:
                return
            self.taken.append(i)
            yield self.items[i]


def _visible(gpu: int, fn: Callable, pull: Pull, args: tuple, results) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    try:
        value = fn(pull, *args)
        results.put((gpu, pull.taken, value, None))
    except BaseException as exc:  # noqa: BLE001 - the parent reports it with the GPU's number
        results.put((gpu, pull.taken, None, f"{type(exc).__name__}: {exc}"))


def run_spread(fn: Callable[..., Any], items: Sequence, costs: Sequence[float], gpus: int, *args) -> list[tuple[list[int], Any]]:
    """`fn(share, *args)` in one process per GPU (spawned; `fn` a module-level function that iterates `share`
    once, in order, and may return one result per item taken), the items pulled from one queue, the costliest
    first; [(indices each process took, in the order it took them; what fn returned)] in GPU order, for the
    GPUs that ran. RuntimeError naming the GPU where one failed."""
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
    for p in procs:
        p.start()
    got = {}
    for _ in procs:
        gpu, taken, value, err = results.get()
        if err:
            for p in procs:
                p.terminate()
            raise RuntimeError(f"GPU {gpu}'s share failed: {err}")
        got[gpu] = (taken, value)
    for p in procs:
        p.join()
    return [got[g] for g in range(procs_n)]


def merge(parts: Sequence[Results], order: Callable[[Any], Any] | None = None) -> Results:
    """One Results of several processes' (every run kept); records sorted by `order` where given."""
    records = [r for p in parts for r in p.records]
    if order is not None:
        records.sort(key=order)
    return Results(records, [run for p in parts for run in p.runs])
