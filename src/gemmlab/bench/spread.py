"""A sweep spread over the GPUs of one host: one process per GPU (CUDA_VISIBLE_DEVICES set before it imports
anything that touches CUDA), each measuring its share of the items with the same function a single-GPU run
calls, its peers beside it on its own GPU (so every ratio stays side by side), the records merged into one
`Results`, in the items' order, every process's run kept (its device and environment).

Shares are dealt by cost, largest first, each to the GPU with the least so far, so that the processes end
together: the sweep takes about 1 / GPUs of one GPU's time where the items are many against the GPUs.
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


def _visible(gpu: int, fn: Callable, items: list, args: tuple, queue) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    try:
        queue.put((gpu, fn(items, *args), None))
    except BaseException as exc:  # noqa: BLE001 - the parent reports it with the GPU's number
        queue.put((gpu, None, f"{type(exc).__name__}: {exc}"))


def run_spread(fn: Callable[..., Any], items: Sequence, costs: Sequence[float], gpus: int, *args) -> list[tuple[list[int], Any]]:
    """`fn(share, *args)` for each GPU's share of `items` in its own process (spawned; `fn` a module-level
    function); [(indices of the share, what fn returned)] in GPU order. RuntimeError naming the GPU where one
    failed."""
    import multiprocessing as mp

    if len(costs) != len(items):
        raise ValueError(f"{len(items)} items but {len(costs)} costs")
    shares = [s for s in deal(costs, gpus) if s]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_visible, args=(g, fn, [items[i] for i in s], args, queue))
             for g, s in enumerate(shares)]
    for p in procs:
        p.start()
    got = {}
    for _ in procs:
        gpu, value, err = queue.get()
        if err:
            for p in procs:
                p.terminate()
            raise RuntimeError(f"GPU {gpu}'s share failed: {err}")
        got[gpu] = value
    for p in procs:
        p.join()
    return [(shares[g], got[g]) for g in range(len(shares))]


def merge(parts: Sequence[Results], order: Callable[[Any], Any] | None = None) -> Results:
    """One Results of several processes' (every run kept); records sorted by `order` where given."""
    records = [r for p in parts for r in p.records]
    if order is not None:
        records.sort(key=order)
    return Results(records, [run for p in parts for run in p.runs])
