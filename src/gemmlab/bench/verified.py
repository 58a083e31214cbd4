"""Verify, then time: the one step every measurement in gemmlab goes through (a sweep's rungs and peers, the
shape suite, fused layers, batches; `bench.measure` on top for a kernel at a shape).

Each `Check` runs its call once and returns its relative error against a float64 reference; a call that
raises gets an "error" record, one off by more than the tolerance a "failed" record, and neither is timed.
The calls that pass are timed together, interleaved (`timing.time_interleaved`), and each gets a record
with its timing. The caller builds the records (`record(subject, status=, err=, note=, t=)`), so each
record type keeps the fields of what it measured while the verifying and the timing are the same for all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .records import ERROR, FAILED
from .timing import TimedCall, TimingOptions, balanced_orders, time_interleaved


@dataclass
class Check:
    label: str                      # unique among the checks of one measurement
    verify: Callable[[], float]     # runs the call once; its relative error against float64
    timed: Callable[[], TimedCall]  # what to time, built once the call passed
    subject: Any = None             # handed back to `record`


@dataclass
class TorchCall:
    """One torch-level call of a measurement (bench.batched, bench.fp8, bench.grouped): what `record` reads
    (kernel, label, family, idea, rung, params), the call, its output after a call, and, where the call has one
    of its own, its float64 reference; `with_params` (gemmlab's calls, where given): the same call with a named
    rung's parameters."""

    kernel: str
    label: str
    family: str                       # "gpu" (gemmlab) or "gpu_peer"
    idea: str
    fn: Callable[[], object]
    output: Callable[[], Any]
    reference: Any = None
    rung: int | None = None
    params: dict = field(default_factory=dict)
    with_params: Callable[..., Callable[[], object]] | None = None


def rel_error64(torch, got, ref) -> float:
    """||got - ref|| / ||ref|| in float64; inf where got holds a NaN or an infinity."""
    g = got.double()
    if not bool(torch.isfinite(g).all()):
        return float("inf")
    return float(torch.linalg.vector_norm(g - ref) / torch.linalg.vector_norm(ref))


def one_line(exc: BaseException) -> str:
    """An exception as one line of a record's note: its type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def verify(checks: Sequence[Check], tol: float, record: Callable[..., Any],
           on_progress: Callable[[str], None] | None = None) -> tuple[list, list[tuple[Check, float, TimedCall]]]:
    """Run each check once: (the records of those that raised or missed `tol`, never timed; the others with
    their error and what to time)."""
    records: list = []
    passed: list[tuple[Check, float, TimedCall]] = []
    for c in checks:
        if on_progress:
            on_progress(f"verifying {c.label}")
        try:
            err = c.verify()
            timed = c.timed() if err < tol else None
        except Exception as exc:  # a call that cannot run here: reported, never fatal
            records.append(record(c.subject, status=ERROR, note=one_line(exc)))
            continue
        if timed is None:
            records.append(record(c.subject, status=FAILED, err=err,
                                  note=f"verification failed: relative error {err:.2e} (tolerance {tol:.0e})"))
            continue
        passed.append((c, err, timed))
    return records, passed


def time_verified(passed: Sequence[tuple[Check, float, TimedCall]], record: Callable[..., Any], opts: TimingOptions,
                  on_round: Callable[[str], None] | None = None) -> list:
    """Time the calls that passed `verify` together, interleaved; a record each, in timing order."""
    if not passed:
        return []
    by_label = {c.label: (c, err) for c, err, _ in passed}
    timings = time_interleaved({c.label: timed for c, _, timed in passed}, opts, on_round=on_round)
    return [record(by_label[label][0].subject, err=by_label[label][1], t=t) for label, t in timings.items()]


def verify_then_time(checks: Sequence[Check], tol: float, record: Callable[..., Any], opts: TimingOptions, *,
                     on_progress: Callable[[str], None] | None = None,
                     on_round: Callable[[str], None] | None = None,
                     before_timing: Callable[[], None] | None = None) -> list:
    """`verify`, then `time_verified`: the errors and failed verifications first (untimed), then the timed
    records. `before_timing` runs between the two (to free the references)."""
    records, passed = verify(checks, tol, record, on_progress)
    if before_timing:
        before_timing()
    if on_round is None and on_progress is not None:
        on_round = lambda name: on_progress(f"timing {name}")  # noqa: E731
    return records + time_verified(passed, record, opts, on_round)


def balanced(opts: TimingOptions, calls: int) -> TimingOptions:
    """`opts` with at least a whole cycle of balanced orders (`timing.balanced_orders`) for `calls` calls, so
    that every call follows every other equally often: at the power limit, what ran just before a batch moves
    it by several per cent."""
    return opts.with_(rounds=max(opts.rounds, len(balanced_orders(calls))))


def torch_checks(calls: Sequence[Any], reference: Callable[[Any], Any]) -> list[Check]:
    """Checks of torch-level calls (each with .label, .fn, .output): the output after one call against
    `reference(call)`, float64; timed as a torch user calls them (a new output each call, on the current
    stream, the L2 flushed, never captured in a graph)."""
    import torch

    def error(c) -> float:
        c.fn()
        torch.cuda.synchronize()
        return rel_error64(torch, c.output(), reference(c))

    return [Check(c.label, lambda c=c: error(c), lambda c=c: TimedCall(c.fn, flush_l2=True, graph=False), c)
            for c in calls]


def verify_then_time_torch(calls: Sequence[Any], reference: Callable[[Any], Any], tol: float,
                           record: Callable[..., Any], budget_ms: float,
                           on_progress: Callable[[str], None] | None = None,
                           before_timing: Callable[[], None] | None = None) -> list:
    """verify_then_time for torch-level calls (`torch_checks`) with `budget_ms` per call and a balanced cycle
    of orders; the memory torch cached for the references is returned before the timings."""
    import torch

    def free() -> None:
        if before_timing:
            before_timing()
        torch.cuda.empty_cache()

    checks = torch_checks(calls, reference)
    opts = balanced(TimingOptions(budget_ms=budget_ms), len(checks))
    return verify_then_time(checks, tol, record, opts, on_progress=on_progress, before_timing=free)


def torch_call_run(command: str, about: tuple[str, dict], *, dtype: str, m: int, n: int, k: int, fmt,
                   peak: float | None, batch: int = 1):
    """A run of torch-level calls at one problem (bench.batched, bench.fp8): the run's metadata (`about` =
    (key, what was measured) kept under that key) and the `record` that `verify_then_time` calls for each
    subject (with .kernel, .label, .family, .rung, .idea, .params), the problem's fields filled in."""
    import secrets
    from datetime import datetime, timezone

    from . import environment
    from .records import COMPUTE, OK, Record, derive

    now = lambda: datetime.now(timezone.utc).isoformat(timespec="seconds")  # noqa: E731
    run_id = datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)
    env = environment.record_fields()
    run = {"run_id": run_id, "started_at": now(), "finished_at": None, "interrupted": False, "command": command,
           about[0]: about[1], "notes": [], "environment": env}
    fields = set(Record.__dataclass_fields__)

    def record(c, *, status=OK, err=None, note="", t=None) -> Record:
        td = t.as_dict() if t is not None else {}
        rec = Record(kernel=c.kernel, label=c.label, family=c.family, rung=c.rung, idea=c.idea, params=dict(c.params),
                     dtype=dtype, m=m, n=n, k=k, alpha=1.0, beta=0.0, mode=COMPUTE, l2=td.get("l2", "cold"),
                     pinned=None, precision=fmt.name, batch=batch, status=status, rel_error=err,
                     verify_tol=fmt.verify_tol, note=note, peak_tflops=peak, run_id=run_id, measured_at=now(),
                     **{key: v for key, v in td.items() if key in fields and key != "l2"},
                     **{key: v for key, v in env.items() if key in fields})
        return derive(rec)

    def finish() -> None:
        run["finished_at"] = now()

    return run, record, finish
