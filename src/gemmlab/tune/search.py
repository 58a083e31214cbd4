"""The search: every valid parameter set that compiles cleanly, timed on this GPU within a budget.

Pruning happens before anything is launched: the spec's validate() (threads, tile divisibility, shared
memory, a register estimate), then the compiler's own report for this architecture (no stack frame or
spills, registers x threads within the SM's file, shared memory within the device's opt-in limit). So
no candidate that reaches the GPU can fail to launch; every one is still verified against a float64
product before it is timed, and one that fails verification is reported, never chosen.
"""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..kernels import KernelSpec, registry
from ..runtime import compiler
from ..runtime.compiler import Resources

REGISTERS_PER_SM = 65536


@dataclass
class Candidate:
    params: dict[str, int]
    resources: Resources | None = None
    rejected: str | None = None  # why it was pruned, or None


@dataclass
class TuneResult:
    kernel: str
    shape_class: str
    shape: tuple[int, int, int]
    best: dict[str, int] | None
    best_tflops: float
    default_tflops: float | None
    tried: list[tuple[dict[str, int], float | None, str]] = field(default_factory=list)  # params, TFLOP/s, note


def _prune_by_compiler(spec: KernelSpec, p: dict[str, int], arch: str, smem_limit: int) -> Candidate:
    try:
        r = registry.resources(spec, p, arch)
    except compiler.CompileError as exc:
        return Candidate(p, None, f"does not compile: {str(exc).splitlines()[0]}")
    threads = spec.launch(1024, 1024, 1024, p).threads_per_block
    smem = spec.launch(1024, 1024, 1024, p).smem + r.smem_static
    if r.uses_local_memory:
        return Candidate(p, r, f"uses local memory ({r.stack_frame} B stack, {r.spill_stores} B spilled)")
    if r.registers * threads > REGISTERS_PER_SM:
        return Candidate(p, r, f"{r.registers} registers x {threads} threads exceed the register file")
    if smem > smem_limit:
        return Candidate(p, r, f"{smem} bytes of shared memory exceed the device's {smem_limit}")
    return Candidate(p, r)


# A space whose product of searched choices is at most this is enumerated whole; a larger one is sampled:
# rung 10's product holds 540,672 valid sets, which took 35 s to enumerate (and a quadratic de-duplication
# after it never finished), while a budget of minutes measures a few hundred.
MAX_ENUMERATED = 20_000
MAX_SAMPLED = 4096        # sets drawn from a sampled space
SAMPLE_TRIES = 50         # draws per set kept before a sparse space is given up on


def _searched(spec: KernelSpec) -> list:
    """The parameters a search varies: those marked searched, except the type parameters (a call sets those
    from its arrays; the tuner measures one format at their defaults)."""
    return [p for p in spec.params if p.searched and p.name not in spec.type_params]


def search_order(spec: KernelSpec, first: Iterable[dict[str, int]] = (), seed: int = 0,
                 shape: tuple[int, int, int] | None = None) -> list[dict[str, int]]:
    """Valid parameter sets, each once: the `first` ones (e.g. defaults, heuristic), then the space in a seeded
    random order, with the type parameters at their defaults. A space of more than MAX_ENUMERATED combinations
    is sampled (up to MAX_SAMPLED valid sets, seeded) instead of enumerated. With a `shape`, what follows from
    it (spec.follows: B's and C's alignment) is set in every set, so that each is timed as it would run."""
    rng = random.Random(seed)
    searched = _searched(spec)
    fixed = {p.name: p.default for p in spec.params if p not in searched}
    combos = 1
    for p in searched:
        combos *= len(p.choices)
    if combos <= MAX_ENUMERATED:
        names = [p.name for p in searched]
        space = [dict(fixed, **dict(zip(names, values)))
                 for values in itertools.product(*(p.choices for p in searched))]
        space = [d for d in space if not spec.constraints(d)]
        rng.shuffle(space)
    else:
        space, seen = [], set()
        for _ in range(MAX_SAMPLED * SAMPLE_TRIES):
            if len(space) >= MAX_SAMPLED:
                break
            d = dict(fixed, **{p.name: rng.choice(p.choices) for p in searched})
            key = tuple(d[p.name] for p in searched)
            if key in seen:
                continue
            seen.add(key)
            if not spec.constraints(d):
                space.append(d)
    ordered: list[dict[str, int]] = []
    keys: set[tuple] = set()
    for p in [*first, *space]:
        full = spec.validate(p)
        if shape is not None and spec.follows is not None:
            full = spec.validate({**full, **spec.follows(*shape, full)})
        key = tuple(sorted(full.items()))
        if key not in keys:
            keys.add(key)
            ordered.append(full)
    return ordered


def _compile_one(args: tuple[str, dict[str, int], str]) -> None:
    name, p, arch = args
    try:
        registry.compile_spec(registry.get(name), p, arch)
    except compiler.CompileError:
        pass  # reported by the pruning pass, which compiles again from the cache or fails the same way


def _workers(workers: int | None) -> int:
    """The compile processes to use: as asked, else one per core up to 16."""
    import os

    return workers or max(1, min(16, (os.cpu_count() or 2)))


def _pool(workers: int | None):
    """A process pool for NVRTC (CPU-bound), or None when one worker is all there is."""
    import concurrent.futures as cf
    import multiprocessing as mp

    workers = _workers(workers)
    if workers == 1:
        return None
    return cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"))


def precompile(spec: KernelSpec, params: list[dict[str, int]], arch: str, workers: int | None = None,
               pool=None) -> None:
    """Fill the disk cache for many parameter sets, in parallel processes when there are several cores."""
    own = pool is None and len(params) > 1
    pool = _pool(workers) if own else pool
    try:
        if pool is None:
            for p in params:
                _compile_one((spec.name, p, arch))
        else:
            list(pool.map(_compile_one, [(spec.name, p, arch) for p in params]))
    finally:
        if own and pool is not None:
            pool.shutdown()


def candidates(spec: KernelSpec, arch: str, smem_limit: int = 227 * 1024, limit: int | None = None,
               seed: int = 0, first: Iterable[dict[str, int]] = (), workers: int | None = 1) -> list[Candidate]:
    """Valid parameter sets in search order, each with the compiler's verdict; `limit` caps how many."""
    ordered = search_order(spec, first, seed)[:limit]
    precompile(spec, ordered, arch, workers)
    return [_prune_by_compiler(spec, p, arch, smem_limit) for p in ordered]


def tune(
    spec: KernelSpec,
    shape: tuple[int, int, int],
    *,
    budget_s: float = 60.0,
    per_candidate_ms: float = 60.0,
    seed: int = 0,
    workers: int | None = None,
    on_step: Callable[[Candidate, float | None, str], None] | None = None,
) -> TuneResult:
    """Search `spec`'s parameters for problems like `shape` on the current GPU, within `budget_s`."""
    if "float32" not in spec.dtypes:  # the search below times fp32 data
        raise ValueError(f"the tuner runs float32 problems; kernel {spec.name} takes {' or '.join(spec.dtypes)}")
    from ..runtime import device
    from ..tuned import shape_class

    m, n, k = shape
    info = device.device_info()
    start = time.perf_counter()
    first = [spec.defaults]
    if spec.heuristic is not None:
        first.insert(0, spec.heuristic(m, n, k, info.sm_count, "float32"))
    order = search_order(spec, first, seed, shape=(m, n, k))
    result = TuneResult(spec.name, shape_class(m, n, k), shape, None, 0.0, None)
    pool = _pool(workers)
    # Compiled together in the pool, one candidate per worker (a batch of rung 10 takes half a minute or more
    # to compile, before the budget is first looked at), then measured MEASURED_TOGETHER at a time.
    batch = max(MEASURED_TOGETHER, _workers(workers))
    def spent() -> bool:
        """The budget is spent: past it with a best found, or past GIVE_UP_AFTER budgets without one."""
        elapsed = time.perf_counter() - start
        return elapsed > budget_s and (result.best is not None or elapsed > GIVE_UP_AFTER * budget_s)

    try:
        for lo in range(0, len(order), batch):
            if spent():
                break
            chunk = order[lo:lo + batch]
            precompile(spec, chunk, info.arch, pool=pool)
            for at in range(0, len(chunk), MEASURED_TOGETHER):
                if spent():
                    break
                _try_candidates(spec, chunk[at:at + MEASURED_TOGETHER], info, shape, per_candidate_ms, seed,
                                result, on_step)
    finally:
        if pool is not None:
            pool.shutdown()
    return result


MEASURED_TOGETHER = 8  # candidates verified, then timed interleaved, in one measurement
GIVE_UP_AFTER = 3      # budgets spent with no candidate passing: the search stops and says none did


def _try_candidates(spec, params, info, shape, per_candidate_ms, seed, result, on_step) -> None:
    """Prune by the compiler's report, then measure the rest together (bench.measure: each verified against a
    float64 product, those that pass timed interleaved); record each outcome in `result`."""
    from ..bench.measure import measure

    kept = []
    for p in params:
        cand = _prune_by_compiler(spec, p, info.arch, info.smem_per_block_optin)
        if cand.rejected:
            result.tried.append((p, None, cand.rejected))
            if on_step:
                on_step(cand, None, cand.rejected)
        else:
            kept.append(cand)
    if not kept:
        return
    records = measure([(spec.name, c.params) for c in kept], shape, budget_ms=per_candidate_ms, seed=seed)
    defaults = spec.validate(spec.defaults)
    for cand, rec in zip(kept, records):
        if not rec.ok:
            note = (f"FAILED verification (rel. error {rec.rel_error:.1e})" if rec.rel_error is not None
                    else rec.note or rec.status)
            result.tried.append((cand.params, None, note))
            if on_step:
                on_step(cand, None, note)
            continue
        rate = rec.tflops
        result.tried.append((cand.params, rate, "ok"))
        if cand.params == defaults:
            result.default_tflops = rate
        if rate > result.best_tflops:
            result.best, result.best_tflops = cand.params, rate
        if on_step:
            on_step(cand, rate, "ok")


# ------------------------------------------------------------------------------------------ over several GPUs

def _tune_share(share: list[tuple[str, tuple[int, int, int]]], budget_s: float) -> list[tuple[str, TuneResult]]:
    """One GPU's share of a spread search (bench.spread): each (kernel, shape) searched on this process's GPU,
    with the GPU's name (its results go to the store of that device)."""
    from ..runtime import device

    name = device.device_info().name
    return [(name, tune(registry.get(kernel), tuple(shape), budget_s=budget_s)) for kernel, shape in share]


def tune_jobs(jobs: list[tuple[str, tuple[int, int, int]]], budget_s: float, gpus: int = 1,
              timings: list | None = None) -> list[TuneResult]:
    """Every (kernel name, shape) searched within `budget_s` each, in `jobs` order: on this GPU one after the
    other, or spread over `gpus` GPUs of the host, one process each, every search's candidates timed side by
    side on one GPU (so no comparison crosses GPUs). ValueError where the GPUs differ: the store keeps one
    device's winners. `timings` (a list): filled with each process's `bench.spread.ProcessTimes` where spread."""
    if gpus <= 1 or len(jobs) <= 1:
        return [tune(registry.get(kernel), shape, budget_s=budget_s) for kernel, shape in jobs]
    from ..bench import spread

    parts = spread.run_spread(_tune_share, list(jobs), [1.0] * len(jobs), gpus, budget_s, timings=timings)
    names = {name for _, results in parts for name, _ in results}
    if len(names) > 1:
        raise ValueError(f"the GPUs differ ({', '.join(sorted(names))}): tune them one at a time")
    out: list[TuneResult | None] = [None] * len(jobs)
    for share, results in parts:
        for i, (_, res) in zip(share, results):
            out[i] = res
    return out

