"""gemmlab bench: the main job. The whole ladder, its peers and the CPU baselines, timed and reported."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ._app import app, console
from . import _measure


@app.command()
def bench(
    sizes: Optional[str] = typer.Option(None, help="square sizes, e.g. 512,1000 or 256..4096 (powers of two); "
                                                   "default: the standard sweep, 128 to 4096"),
    shape: Optional[list[str]] = typer.Option(None, "--shape", help="an M x N x K problem, e.g. 4096x1024x512 (repeatable)"),
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k",
                                               help="rungs, peers (cublas, torch, triton) or CPU baselines; default: all"),
    neighbours: bool = typer.Option(False, help="add 2^k-1 and 2^k+1 beside every power of two in --sizes"),
    budget_ms: Optional[float] = typer.Option(None, help="time budget per kernel and size, ms (default 150)"),
    pinned: bool = typer.Option(False, help="pinned host memory for the end-to-end timings"),
    no_peers: bool = typer.Option(False, "--no-peers", help="leave out cuBLAS, torch and Triton"),
    no_cpu: bool = typer.Option(False, "--no-cpu", help="leave out the CPU baselines"),
    cpu_scale: Optional[float] = typer.Option(None, help="CPU baselines run up to max_cube x this (default 0.25)"),
    dtype: str = typer.Option("float32", "--dtype", help="operands and output: float32 (the whole ladder), float16 or "
                                                        "bfloat16 (the tensor-core rungs, fp32 accumulation; bfloat16 "
                                                        "needs torch)"),
    precision: Optional[str] = typer.Option(None, "--precision", help="tf32: float32 operands on the tensor cores "
                                                                      "(the rungs and peers that offer it)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="results and report directory "
                                                                 "(default gemmlab-results/<run id>)"),
    at: Optional[int] = typer.Option(None, help="the size the report's tables use (default: the largest with cuBLAS)"),
) -> None:
    """Benchmark the ladder (compute only and end to end) against cuBLAS, torch, Triton and the CPU;
    write results (JSON, CSV) and the report (Markdown, HTML). Without a GPU: the CPU ladder only."""
    plan = _measure.build_plan(sizes=sizes, shapes=shape, kernels=kernel, neighbours=neighbours, no_peers=no_peers,
                               no_cpu=no_cpu, budget_ms=budget_ms, pinned=pinned, cpu_scale=cpu_scale,
                               dtype=dtype, precision=precision)
    results, interrupted, sweep = _measure.run(plan, command=" ".join(["gemmlab", *sys.argv[1:]]))
    target = out or _measure.default_out(sweep)
    paths = _measure.write_outputs(results, target, report=True, at=at)
    _measure.summary(results, at)
    console.print(f"results: {paths['json']} and {paths['csv']}", highlight=False)
    console.print(f"report:  {paths['html']} (self-contained) and {paths['markdown']}", highlight=False)
    if interrupted:
        console.print(f"[yellow]interrupted: kept {len(results)} measurements[/yellow]")
        raise typer.Exit(130)
    if any(not r.ok for r in results.records):
        raise typer.Exit(1)
