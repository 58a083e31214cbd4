"""gemmlab bench: the ladder and its peers, timed side by side."""

from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table

from ..kernels import registry
from ..runtime import device
from ._app import app, console, fail
from .core import _gpu_or_fail


# ------------------------------------------------------------------------------------------- bench


@app.command()
def bench(
    sizes: str = typer.Option("1024,2048,4096", help="comma-separated square sizes"),
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="rungs to run (default: all)"),
    budget_ms: float = typer.Option(300.0, help="timing budget per kernel and size, ms"),
) -> None:
    """The ladder and cuBLAS (strict fp32) at a few sizes: ms, TFLOP/s, % of cuBLAS, error."""
    _gpu_or_fail()
    from rich.progress import Progress

    from ..bench.ladder import run_ladder

    try:
        size_list = [int(s) for s in sizes.split(",") if s.strip()]
    except ValueError:
        fail(f"--sizes must be comma-separated integers, got {sizes!r}")
    names = kernel or [s.name for s in registry.all_specs()]
    for nm in names:
        try:
            registry.get(nm)
        except ValueError as exc:
            fail(str(exc))
    total = len(size_list) * (len(names) + 1)
    results = []
    with Progress(console=console, transient=True) as prog:
        task = prog.add_task("benchmarking", total=total)
        try:
            for r in run_ladder(size_list, names, budget_ms=budget_ms,
                                on_result=lambda r: prog.update(task, advance=1, description=f"{r.kernel} {r.m}")):
                results.append(r)
        except KeyboardInterrupt:
            console.print("[yellow]interrupted: showing what was measured[/yellow]")
    cublas = {r.m: r for r in results if r.kernel == "cublas" and r.timing}
    t = Table(title=f"gemmlab bench on {device.device_info().name} (fp32, L2 flushed, medians)")
    for col in ("kernel", "size", "ms", "TFLOP/s", "% cuBLAS", "rel. error"):
        t.add_column(col, justify="right" if col != "kernel" else "left")
    for r in results:
        if not r.ok:
            t.add_row(r.kernel, str(r.m), "-", "-", "-", f"[red]FAILED {r.rel_error:.1e}[/red]")
            continue
        ref = cublas.get(r.m)
        pct = f"{100 * r.tflops / ref.tflops:.0f}%" if ref else "-"
        t.add_row(r.kernel, str(r.m), f"{r.timing.median_ms:.3f}", f"{r.tflops:.2f}", pct, f"{r.rel_error:.1e}")
    console.print(t)
    if any(not r.ok for r in results):
        raise typer.Exit(1)
