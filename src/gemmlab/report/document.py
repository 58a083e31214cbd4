"""The report as data: sections made of paragraphs, bullet lists, tables and figures.

Section builders produce these blocks; `render` turns them into Markdown or HTML. Keeping the content
apart from the format means one builder serves both, and tests can inspect a table's cells or a
figure's plotted lines directly.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, Union


@dataclass
class Paragraph:
    text: str  # plain text; `code` and **bold** are rendered in both formats


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""
    align: list[str] | None = None  # "l" or "r" per column; default: first left, others right

    def column(self, header: str) -> list[str]:
        i = self.headers.index(header)
        return [row[i] for row in self.rows]

    def alignment(self) -> list[str]:
        return self.align or ["l"] + ["r"] * (len(self.headers) - 1)


@dataclass
class Figure:
    name: str            # file stem: figures/<name>.png
    figure: Any          # a matplotlib.figure.Figure
    caption: str
    _png: bytes | None = field(default=None, repr=False)

    def png(self) -> bytes:
        if self._png is None:
            from .figures import no_tex  # tick labels are made at drawing time: LaTeX off there too

            buf = io.BytesIO()
            with no_tex():
                self.figure.savefig(buf, format="png", dpi=110, bbox_inches="tight")
            self._png = buf.getvalue()
        return self._png


Block = Union[Paragraph, Bullets, Table, Figure]


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
    name: str = ""       # the builder's name (set by the registry)
    level: int = 2

    def figures(self) -> list[Figure]:
        return [b for b in self.blocks if isinstance(b, Figure)]

    def tables(self) -> list[Table]:
        return [b for b in self.blocks if isinstance(b, Table)]
