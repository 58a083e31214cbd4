"""Reports: figures and the Markdown / HTML report, drawn from result records.

    from gemmlab.bench.records import load
    from gemmlab.report import write_report
    write_report(load(["results/"]), "report/")

The report is a list of sections (`report.sections.SECTIONS`); other modules add theirs with
`sections.register(builder, after="table1")`.
"""

from __future__ import annotations

from pathlib import Path

from ..bench.records import Results
from . import sections
from .context import ReportContext
from .document import Bullets, Figure, Paragraph, Section, Table


def size_problem(results: Results, at: int | None) -> str | None:
    """Why `at` cannot be the size the tables use (no timed square result at N = at), or None when it can."""
    if at is None:
        return None
    sizes = ReportContext(results).sizes()
    if at in sizes:
        return None
    have = ", ".join(map(str, sizes)) if sizes else "none"
    return f"no timed results at N = {at} (M = N = K); the sizes with results: {have}"


def build_report(results: Results, at: int | None = None, title: str = "gemmlab benchmark report") -> list[Section]:
    """The report's sections for these results (nothing written). ValueError when `at` is a size without
    timed results (`size_problem`): tables at another size than the one asked for would mislead."""
    problem = size_problem(results, at)
    if problem:
        raise ValueError(problem)
    return sections.build(ReportContext(results, at=at, title=title))


def write_report(results: Results, out_dir: str | Path, at: int | None = None,
                 title: str = "gemmlab benchmark report") -> dict[str, Path]:
    """Write report.md, report.html (self-contained) and figures/*.png into out_dir; return the paths."""
    from .render import write

    return write(build_report(results, at=at, title=title), out_dir, title)


__all__ = ["Bullets", "Figure", "Paragraph", "ReportContext", "Section", "Table", "build_report", "size_problem",
           "write_report"]
