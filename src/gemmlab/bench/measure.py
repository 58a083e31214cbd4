"""The one way gemmlab measures a GPU kernel: verify, then time, and return a `Record`.

`measure` runs rungs (with parameters) and peers (cublas, torch, triton) at one shape through a one-shape
`Sweep`: operands from a seeded generator, each call checked against a float64 product into a NaN-poisoned
C (a call that raises gets an "error" record, one off by more than the format's tolerance a "failed" record,
and neither is timed), then the calls that pass timed interleaved with the L2 flushed (CUDA events, medians,
the SM clock read during the kept batches). The harness's sweeps, the tuner, the ablation and the analysis's
checks against the models all measure through it, so every figure they print is one of these records.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from ..kernels import registry
from ..runtime.errors import GemmlabError
from .records import COMPUTE, GPU, GPU_PEER, Record
from .runners import kind_of, label_for
from .sweep import Plan, run_plan
from .timing import COLD

Entry = str | tuple[str, dict | None]


def callable_params(name: str, params: dict | None) -> dict:
    """`params` as a call takes them: without the rung's type parameters (A_TYPE, B_LAYOUT, BATCHED, ...),
    which a call sets from its arrays and refuses from the caller."""
    spec = registry.get(name)
    return {k: v for k, v in (params or {}).items() if k not in spec.type_params}


def measure(kernels: Iterable[Entry], shape: Sequence[int], *, fmt: str = "fp32", budget_ms: float = 200.0,
            l2: str = COLD, alpha: float = 1.0, beta: float = 0.0, seed: int = 0,
            on_record: Callable[[Record], None] | None = None) -> list[Record]:
    """A record per entry of `kernels` (a rung or peer name, or (rung, parameters)), in the order given,
    measured at `shape` (M, N, K) in number format `fmt` with `budget_ms` of timing per call. GemmlabError
    (one line: why) where this machine cannot run GPU work; ValueError for a name that is not a GPU kernel."""
    entries = [(e, {}) if isinstance(e, str) else (e[0], dict(e[1] or {})) for e in kernels]
    gpu, peers = [], []
    for name, params in entries:
        kind = kind_of(name)
        if kind == GPU:
            gpu.append((name, callable_params(name, params)))
        elif kind == GPU_PEER:
            peers.append(name)
        else:
            raise ValueError(f"{name} is a CPU baseline; measure() times GPU kernels (gemmlab bench times both)")
    plan = Plan(shapes=[tuple(int(v) for v in shape)], gpu=gpu, peers=list(dict.fromkeys(peers)),
                modes=(COMPUTE,), l2=l2, alpha=alpha, beta=beta, seed=seed, fmt=fmt)
    plan.timing = plan.timing.with_(budget_ms=budget_ms, warmup_ms=min(plan.timing.warmup_ms, budget_ms / 4))
    results = run_plan(plan, on_record)
    notes = [n for run in results.runs for n in run.get("notes", [])]
    records = list(results.records)
    if not records:
        raise GemmlabError("; ".join(notes) or "nothing was measured")
    return [_take(records, name, params, notes) for name, params in entries]


def _take(records: list[Record], name: str, params: dict, notes: list[str]) -> Record:
    """The record of entry (name, params): peers by name, rungs by their label (the parameters that differ
    from the defaults), the first left of several equal ones. GemmlabError with the sweep's notes (e.g. a rung
    this GPU cannot run) where there is none."""
    if kind_of(name) == GPU:
        _, full = _validated(name, params)
        want = label_for(name, full, registry.get(name).defaults)
    else:
        want = name
    for i, r in enumerate(records):
        if r.kernel == name and r.label == want:
            return records.pop(i)
    raise GemmlabError(f"{want} was not measured: {'; '.join(notes) or 'no record came back'}")


def _validated(name: str, params: dict) -> tuple:
    from ..api import validated_params

    return validated_params(registry.get(name), callable_params(name, params))


def measure_one(kernel: str, m: int, n: int, k: int, params: dict | None = None, **options) -> Record:
    """One kernel at one shape (`measure`'s options): its record, verified and, where it passed, timed."""
    return measure([(kernel, params)], (m, n, k), **options)[0]


__all__ = ["callable_params", "measure", "measure_one"]
