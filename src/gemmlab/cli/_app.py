from __future__ import annotations

import os
import sys
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(
    name="gemmlab",
    help="Make, measure and understand matrix multiplication (C = alpha*A@B + beta*C) on the GPU.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _width() -> int | None:
    """Rich's own width on a terminal or where COLUMNS says one; 160 columns for a file or a pipe, where rich
    would take 80 and cut the tables' columns to a few letters."""
    if os.environ.get("COLUMNS") or sys.stdout.isatty():
        return None
    return 160


console = Console(width=_width())
err_console = Console(stderr=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one line naming the cause and exit non-zero."""
    err_console.print(f"[bold red]error:[/bold red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)
