"""gemmlab sweep: chosen kernels over chosen sizes or shapes, saved as result records."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ._app import app, console
from . import _measure


@app.command()
def sweep(
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k",
                                               help="rungs, peers (cublas, torch, triton) or CPU baselines, "
                                                    "repeatable or comma-separated; default: all"),
    sizes: Optional[str] = typer.Option(None, help="square sizes, e.g. 512,1000 or 256..4096 (powers of two)"),
    shape: Optional[list[str]] = typer.Option(None, "--shape", help="an M x N x K problem, e.g. 4096x1024x512 (repeatable)"),
    neighbours: bool = typer.Option(False, help="add 2^k-1 and 2^k+1 beside every power of two in --sizes"),
    reps: Optional[int] = typer.Option(None, help="exactly this many timed repetitions (default: until the "
                                                  "median's error is under 0.5% or the budget is spent)"),
    budget_ms: Optional[float] = typer.Option(None, help="time budget per kernel and size, ms (default 150)"),
    modes: Optional[str] = typer.Option(None, help="compute, end_to_end (e2e) or both (default both)"),
    warm_l2: bool = typer.Option(False, help="leave the L2 warm (default: flushed before every call)"),
    pinned: bool = typer.Option(False, help="pinned host memory for the end-to-end timings"),
    alpha: float = typer.Option(1.0),
    beta: float = typer.Option(0.0, help="non-zero: C is read, and restored before every timed call"),
    seed: int = typer.Option(0),
    no_peers: bool = typer.Option(False, "--no-peers", help="leave out cuBLAS, torch and Triton"),
    no_cpu: bool = typer.Option(False, "--no-cpu", help="leave out the CPU baselines"),
    cpu_scale: Optional[float] = typer.Option(None, help="CPU baselines run up to max_cube x this (default 0.25)"),
    dtype: str = typer.Option("float32", "--dtype", help="operands and output: float32 (the whole ladder), float16 or "
                                                        "bfloat16 (the tensor-core rungs, fp32 accumulation; bfloat16 "
                                                        "needs torch)"),
    precision: Optional[str] = typer.Option(None, "--precision", help="tf32: float32 operands on the tensor cores "
                                                                      "(the rungs and peers that offer it)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="a directory (results.json + results.csv) or a "
                                                                 ".json / .csv file (default gemmlab-results/<run id>)"),
    report: bool = typer.Option(False, help="also write the report beside the results"),
) -> None:
    """Measure chosen kernels over sizes or shapes and save the records (JSON, CSV)."""
    plan = _measure.build_plan(sizes=sizes, shapes=shape, kernels=kernel, neighbours=neighbours, no_peers=no_peers,
                               no_cpu=no_cpu, budget_ms=budget_ms, reps=reps, modes=modes, warm_l2=warm_l2,
                               pinned=pinned, alpha=alpha, beta=beta, seed=seed, cpu_scale=cpu_scale,
                               dtype=dtype, precision=precision)
    results, interrupted, sw = _measure.run(plan, command=" ".join(["gemmlab", *sys.argv[1:]]))
    if not interrupted:
        _measure.nothing_measured(results, sw)
    target = out or _measure.default_out(sw)
    paths = _measure.write_outputs(results, target, report=report, at=None)
    _measure.summary(results, None)
    console.print("written: " + ", ".join(str(p) for k, p in paths.items() if k != "figures"), highlight=False)
    if interrupted:
        console.print(f"[yellow]interrupted: kept {len(results)} measurements[/yellow]")
        raise typer.Exit(130)
    if any(not r.ok for r in results.records):
        raise typer.Exit(1)
