"""The `gemmlab` command: thin, parses and prints; the work lives in the library.

Each command group is its own module registering on `app`; this file only assembles them.
"""

from __future__ import annotations

import sys

from ._app import app, console, fail  # noqa: F401
from . import analysis, bench, core, report, sweep, tune, viz  # noqa: F401  (each module registers its commands on app)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]")
        sys.exit(130)
