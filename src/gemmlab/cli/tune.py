"""gemmlab tune: search tile parameters on this GPU and remember the winners for kernel="auto"."""

from __future__ import annotations

import re
from typing import Optional

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from ..kernels import registry
from ..runtime import device
from ..runtime.errors import GemmlabError
from ._app import app, console, fail

DEFAULT_SHAPES = ("1024x1024x1024", "2048x2048x2048", "4096x4096x4096")


def parse_shape(text: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*[xX,]\s*(\d+)\s*[xX,]\s*(\d+)\s*", text)
    if not m:
        fail(f"a shape is MxNxK (e.g. 4096x4096x1024), got {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


@app.command()
def tune(
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="rungs to tune (default: the auto kernel)"),
    shape: Optional[list[str]] = typer.Option(None, "--shape", help="MxNxK problems whose shape classes to tune"),
    budget_s: float = typer.Option(60.0, help="search time per kernel and shape class, seconds"),
    dry_run: bool = typer.Option(False, help="search and report, but do not store the winners"),
    gpus: int = typer.Option(1, "--gpus", help="spread the searches (kernel x shape) over this many GPUs of the host, "
                                               "one process each; the winners go to one store"),
) -> None:
    """Search each rung's parameter space on this GPU (verified, timed) and store the winners per
    (device, kernel, shape class); `gemmlab.matmul` then uses them when no parameters are given."""
    from .. import api
    from ..tuned import shape_class
    from ..tune.search import tune as run_search, tune_jobs

    try:
        info = device.device_info()
    except GemmlabError as exc:
        fail(str(exc))
    specs = [registry.get(k) for k in kernel] if kernel else [api.choose_kernel()]
    shapes = [parse_shape(s) for s in (shape or DEFAULT_SHAPES)]
    if gpus < 1:
        fail(f"--gpus must be >= 1, got {gpus}")
    spread = {}
    if gpus > 1:
        import torch

        if torch.cuda.device_count() < gpus:
            fail(f"--gpus {gpus}: this host has {torch.cuda.device_count()} GPUs")
        jobs = [(spec.name, s) for spec in specs for s in shapes]
        timings: list = []
        with console.status(f"{len(jobs)} searches over {gpus} GPUs, {budget_s:.0f} s each"):
            try:
                spread = dict(zip(jobs, tune_jobs(jobs, budget_s, gpus, timings=timings)))
            except ValueError as exc:
                fail(str(exc))
        if timings:
            from ..bench.spread import times_note

            console.print(times_note(timings), highlight=False, soft_wrap=True)
    cache = api.tuned_cache(info)
    table = Table(title=f"tuned on {info.name} ({info.arch}, {info.sm_count} SMs)")
    for col in ("kernel", "shape class", "tuned on", "tried", "default TFLOP/s", "best TFLOP/s", "best parameters"):
        table.add_column(col)
    for spec in specs:
        for m, n, k in shapes:
            res = spread.get((spec.name, (m, n, k))) or _search_one(run_search, spec, (m, n, k), budget_s)
            timed = sum(1 for _, r, _ in res.tried if r is not None)
            if res.best is None:
                table.add_row(spec.name, res.shape_class, f"{m}x{n}x{k}", str(len(res.tried)), "-", "-", "no candidate passed")
                continue
            if not dry_run:
                cache.store(spec.name, res.shape_class, res.best, res.best_tflops, shape=[m, n, k])
            table.add_row(spec.name, shape_class(m, n, k), f"{m}x{n}x{k}", f"{timed} timed / {len(res.tried)}",
                          f"{res.default_tflops:.2f}" if res.default_tflops else "-", f"{res.best_tflops:.2f}",
                          " ".join(f"{k}={v}" for k, v in res.best.items()))
    if not dry_run:
        try:
            cache.save()
        except GemmlabError as exc:
            console.print(table)
            fail(str(exc))
        console.print(f"stored in {cache.path}")
    console.print(table)


def _search_one(run_search, spec, shape, budget_s: float):
    """One search on this GPU, with a progress bar over its budget."""
    import time

    m, n, k = shape
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:.0f}/{task.total:.0f} s"),
                  TimeRemainingColumn(), console=console, transient=True) as prog:
        task = prog.add_task(f"{spec.name} {m}x{n}x{k}", total=budget_s)
        t0 = time.perf_counter()
        return run_search(spec, shape, budget_s=budget_s,
                          on_step=lambda c, rate, note: prog.update(task, completed=min(budget_s, time.perf_counter() - t0)))


@app.command()
def ablation(
    size: int = typer.Option(4096, "--size", "-s", help="M = N = K"),
    dtype: str = typer.Option("float32", "--dtype", help="float32 (the FP32 ladder), bfloat16 or float16 (the "
                                                         "tensor-core rungs: mma_sync, then the Hopper steps)"),
    budget_ms: float = typer.Option(200.0, help="timing budget per kernel, ms"),
    skip: Optional[list[str]] = typer.Option(None, "--skip", help="rungs to leave out (e.g. naive at large sizes)"),
) -> None:
    """Each rung against the one before it on this GPU, at its default (or tuned) parameters, beside what it
    was predicted to buy: does every idea on the ladder pay here?"""
    from ..bench.measure import measure
    from ..formats import number_format

    try:
        fmt = number_format(dtype)
        info = device.device_info()
    except (ValueError, GemmlabError) as exc:
        fail(str(exc))
    ladder = [s for s in registry.specs_for_dtype(fmt.dtype) if s.name not in (skip or [])]
    runnable = [s for s in ladder if registry.cc_problem(s, info.compute_capability) is None]
    left_out = [f"{s.name} ({registry.cc_problem(s, info.compute_capability)})" for s in ladder if s not in runnable]
    with Progress(TextColumn("{task.description}"), BarColumn(), console=console, transient=True) as prog:
        task = prog.add_task("ablation", total=len(runnable) + 1)
        try:
            results = measure(["cublas", *(s.name for s in runnable)], (size, size, size), fmt=fmt.name,
                              budget_ms=budget_ms, on_record=lambda r: prog.update(task, advance=1, description=r.kernel))
        except GemmlabError as exc:
            fail(str(exc))
    by_name = {r.kernel: r for r in results}
    cublas = by_name.get("cublas")
    t = Table(title=f"ablation, {fmt.dtype} at {size}^3 on {info.name}: each rung against the previous one")
    for col in ("rung", "kernel", "TFLOP/s", "x previous", "predicted", "% cuBLAS", "verdict"):
        t.add_column(col)
    prev = None
    for spec in runnable:
        r = by_name.get(spec.name)
        if r is None:
            continue
        gain = spec.expected_gain
        predicted = f"{gain[0]:.2f}-{gain[1]:.2f}x" if gain else "-"
        if not r.ok:
            t.add_row(f"{spec.rung:02d}", spec.name, "-", "-", predicted, "-",
                      f"[red]failed verification ({r.rel_error:.1e})[/red]")
            continue
        ratio = r.tflops / prev.tflops if prev and prev.ok and prev.tflops else None
        verdict = "" if ratio is None else ("helps" if ratio > 1.02 else "hurts" if ratio < 0.98 else "no change")
        if ratio is not None and gain:
            verdict += " (as predicted)" if gain[0] <= ratio <= gain[1] else \
                " (above the prediction)" if ratio > gain[1] else " (below the prediction)"
        t.add_row(f"{spec.rung:02d}", spec.name, f"{r.tflops:.2f}", f"{ratio:.2f}x" if ratio else "-", predicted,
                  f"{100 * r.tflops / cublas.tflops:.0f}%" if cublas and cublas.ok else "-", verdict)
        prev = r
    console.print(t)
    if left_out:
        console.print("not on this GPU: " + "; ".join(left_out))
