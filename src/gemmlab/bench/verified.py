"""Verify, then time: the measurement of a set of calls that do the same work (a gemmlab call and its torch
peers), used by `bench.fused` and `bench.batched`.

Each call runs once and its output is checked against a float64 reference (`rel_error64`); a call that
raises gets an "error" record, one off by more than the tolerance a "failed" record, and neither is timed.
The calls that pass are timed interleaved with the L2 flushed, in a whole cycle of balanced orders
(`timing.balanced_orders`), on the current stream (torch work is not captured in graphs).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence


def rel_error64(torch, got, ref) -> float:
    """||got - ref|| / ||ref|| in float64; inf where got holds a NaN or an infinity."""
    g = got.double()
    if not bool(torch.isfinite(g).all()):
        return float("inf")
    return float(torch.linalg.vector_norm(g - ref) / torch.linalg.vector_norm(ref))


def verify_then_time(calls: Sequence[Any], reference: Callable[[Any], Any], tol: float, record: Callable[..., Any],
                     budget_ms: float, on_progress: Callable[[str], None] | None = None,
                     before_timing: Callable[[], None] | None = None) -> list:
    """Records of `calls` (each with .label, .fn, .output): `record(call, status=, err=, note=, t=)` builds one.
    `reference(call)` is the float64 result a call's output is checked against; `before_timing` runs between
    the checks and the timings (to free the references)."""
    import torch

    from .records import ERROR, FAILED
    from .timing import TimedCall, TimingOptions, balanced_orders, time_interleaved

    records: list = []
    timed: dict[str, TimedCall] = {}
    by_label: dict[str, tuple[Any, float]] = {}
    for c in calls:
        if on_progress:
            on_progress(f"verifying {c.label}")
        try:
            c.fn()
            torch.cuda.synchronize()
            err = rel_error64(torch, c.output(), reference(c))
        except Exception as exc:  # a call that cannot run here: reported, never fatal
            lines = str(exc).strip().splitlines()
            records.append(record(c, status=ERROR, note=f"{type(exc).__name__}: {lines[0] if lines else ''}"))
            continue
        if not err < tol:
            records.append(record(c, status=FAILED, err=err, note=f"verification failed: relative error {err:.2e}"))
            continue
        timed[c.label] = TimedCall(c.fn, flush_l2=True, graph=False)
        by_label[c.label] = (c, err)
    if before_timing:
        before_timing()
    torch.cuda.empty_cache()
    opts = TimingOptions(budget_ms=budget_ms)
    opts = opts.with_(rounds=max(opts.rounds, len(balanced_orders(len(timed)))))
    timings = time_interleaved(timed, opts, on_round=(lambda name: on_progress(f"timing {name}"))
                               if on_progress else None) if timed else {}
    for label, t in timings.items():
        c, err = by_label[label]
        records.append(record(c, err=err, t=t))
    return records
