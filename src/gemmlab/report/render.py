"""Sections to files: Markdown with PNG figures beside it, and one self-contained HTML page.

The HTML page embeds its figures as base64 PNG and its style sheet inline, so it can be mailed or
archived as one file and opened anywhere without a network.
"""

from __future__ import annotations

import base64
import html
import re
from importlib import resources
from pathlib import Path

from ..files import atomic_write
from .document import Bullets, Figure, Paragraph, Section, Table

_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")


# ------------------------------------------------------------------------------------------ Markdown


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(sections: list[Section], figure_dir: str = "figures") -> str:
    out: list[str] = []
    for s in sections:
        out.append(f"{'#' * s.level} {s.title}\n")
        for b in s.blocks:
            if isinstance(b, Paragraph):
                out.append(b.text + "\n")
            elif isinstance(b, Bullets):
                out.append("\n".join(f"- {item}" for item in b.items) + "\n")
            elif isinstance(b, Table):
                out.append("| " + " | ".join(_md_cell(h) for h in b.headers) + " |")
                out.append("|" + "|".join("---:" if a == "r" else "---" for a in b.alignment()) + "|")
                out.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows)
                out.append("")
                if b.caption:
                    out.append(f"*{b.caption}*\n")
            elif isinstance(b, Figure):
                out.append(f"![{b.caption}]({figure_dir}/{b.name}.png)\n")
                out.append(f"*{b.caption}*\n")
    return "\n".join(out).rstrip() + "\n"


# ------------------------------------------------------------------------------------------ HTML


def _inline(text: str) -> str:
    t = html.escape(text, quote=False)
    t = _CODE.sub(r"<code>\1</code>", t)
    return _BOLD.sub(r"<strong>\1</strong>", t)


def _style() -> str:
    return resources.files(__package__).joinpath("style.css").read_text()


def html_page(sections: list[Section], title: str) -> str:
    body: list[str] = []
    for s in sections:
        level = min(max(s.level, 1), 6)
        body.append(f"<h{level}>{_inline(s.title)}</h{level}>")
        for b in s.blocks:
            if isinstance(b, Paragraph):
                body.append(f"<p>{_inline(b.text)}</p>")
            elif isinstance(b, Bullets):
                body.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items) + "</ul>")
            elif isinstance(b, Table):
                al = b.alignment()
                rows = ["<tr>" + "".join(f'<th class="{a}">{_inline(h)}</th>' for h, a in zip(b.headers, al)) + "</tr>"]
                rows += ["<tr>" + "".join(f'<td class="{a}">{_inline(str(c))}</td>' for c, a in zip(row, al)) + "</tr>"
                         for row in b.rows]
                cap = f"<caption>{_inline(b.caption)}</caption>" if b.caption else ""
                body.append(f"<table>{cap}{''.join(rows)}</table>")
            elif isinstance(b, Figure):
                data = base64.b64encode(b.png()).decode("ascii")
                body.append(f'<figure><img alt="{html.escape(b.caption)}" src="data:image/png;base64,{data}">'
                            f"<figcaption>{_inline(b.caption)}</figcaption></figure>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>\n{_style()}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


# ------------------------------------------------------------------------------------------ files


def write(sections: list[Section], out_dir: str | Path, title: str, stem: str = "report") -> dict[str, Path]:
    """Write <stem>.md (+ figures/*.png) and <stem>.html into out_dir; return their paths."""
    out = Path(out_dir)
    figs = out / "figures"
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    all_figs = [f for s in sections for f in s.figures()]
    if all_figs:
        figs.mkdir(exist_ok=True)
    for f in all_figs:
        atomic_write(figs / f"{f.name}.png", f.png())
    paths["markdown"] = out / f"{stem}.md"
    atomic_write(paths["markdown"], markdown(sections))
    paths["html"] = out / f"{stem}.html"
    atomic_write(paths["html"], html_page(sections, title))
    paths["figures"] = figs
    return paths
