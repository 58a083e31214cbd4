from __future__ import annotations

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
console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one line naming the cause and exit non-zero."""
    err_console.print(f"[bold red]error:[/bold red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)
