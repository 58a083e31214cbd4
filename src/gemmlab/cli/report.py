"""gemmlab report: the Markdown and self-contained HTML report from saved results."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ._app import app, console, fail


@app.command()
def report(
    results: list[Path] = typer.Argument(..., help="results files (.json, .csv) or directories; merged"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="report directory (default: the first "
                                                                 "results directory, or gemmlab-report)"),
    at: Optional[int] = typer.Option(None, help="the size the tables use (default: the largest with cuBLAS)"),
    title: str = typer.Option("gemmlab benchmark report"),
) -> None:
    """Merge results (runs, devices) and write report.md, figures/*.png and report.html."""
    from ..bench.records import load
    from ..report import write_report

    try:
        merged = load(results)
    except (OSError, ValueError) as exc:
        fail(str(exc))
    if not merged.records:
        fail("the results hold no records")
    first = results[0]
    target = out or (first if first.is_dir() else (first.parent if str(first.parent) not in ("", ".") else Path("gemmlab-report")))
    paths = write_report(merged, target, at=at, title=title)
    console.print(f"{len(merged)} records from {len(merged.runs) or 'unknown'} run(s)", highlight=False)
    console.print(f"report: {paths['html']} (self-contained) and {paths['markdown']}", highlight=False)
