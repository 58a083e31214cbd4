"""gemmlab report: the Markdown and self-contained HTML report from saved results."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from ._app import app, console, err_console, fail


@app.command()
def report(
    results: list[Path] = typer.Argument(..., help="results files (.json, .csv) or directories; merged"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="report directory (default: the first "
                                                                 "results directory, or gemmlab-report)"),
    at: Optional[int] = typer.Option(None, help="the size N (M = N = K) the tables use; it must be a size with "
                                                "timed results, else the command stops and names those sizes "
                                                "(default: the largest with cuBLAS)"),
    title: str = typer.Option("gemmlab benchmark report"),
) -> None:
    """Merge results (runs, devices) and write report.md, figures/*.png and report.html. In a directory, files
    that are not readable results, and invalid records in a file, are skipped with one warning line each."""
    from ..bench.records import load
    from ..report import size_problem, write_report

    try:
        merged = load(results, warn=warn)
    except (OSError, ValueError) as exc:
        fail(str(exc))
    if not merged.records:
        fail("the results hold no records")
    problem = size_problem(merged, at)
    if problem:
        fail(f"--at {at}: {problem}")
    first = results[0]
    target = out or (first if first.is_dir() else (first.parent if str(first.parent) not in ("", ".") else Path("gemmlab-report")))
    paths = write_report(merged, target, at=at, title=title)
    console.print(f"{len(merged)} records from {len(merged.runs) or 'unknown'} run(s)", highlight=False)
    console.print(f"report: {paths['html']} (self-contained) and {paths['markdown']}", highlight=False)


def warn(message: str) -> None:
    """One yellow line on stderr: what was skipped and why."""
    err_console.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False, soft_wrap=True)
