"""gemmlab visualize: watch a rung compute a small product, step by step (no GPU needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..files import atomic_write
from ._app import app, console, fail
from .core import parse_params

FORMATS = ("terminal", "gif", "html", "png")


@app.command()
def visualize(
    kernel: str = typer.Argument(..., help="a rung of the GPU ladder (gemmlab kernels lists them)"),
    n: Optional[int] = typer.Option(None, "--n", help="N, and M and K unless given (default: a 2 x 2 grid of blocks)"),
    m: Optional[int] = typer.Option(None, "--m", help="rows of A and C"),
    k: Optional[int] = typer.Option(None, "--k", help="columns of A, rows of B"),
    block: Optional[int] = typer.Option(None, "--block", "-b",
                                        help="block size: BLOCK_DIM for smem_tiled, BX = BY for naive and "
                                             "coalesced, BM = BN for the block tiles"),
    thread: int = typer.Option(0, "--thread", "-t", help="the thread to follow: blocks in order, threads in order within each"),
    focus: str = typer.Option("thread", "--focus", help="highlight the thread, its warp or its block"),
    param: Optional[list[str]] = typer.Option(None, "--param", "-p", help="template parameter NAME=VALUE (repeatable)"),
    out: Path = typer.Option(Path("gemmlab-viz"), "--out", "-o", help="directory for the GIF, HTML and PNG files"),
    formats: str = typer.Option("terminal,gif,html", "--format", "-f", help=f"comma-separated, of: {', '.join(FORMATS)}"),
    frame: Optional[int] = typer.Option(None, "--frame", help="the frame the PNG shows, from 1 (default: the middle one)"),
    fps: float = typer.Option(1.5, "--fps", help="GIF frames per second"),
    seed: int = typer.Option(0, "--seed", help="seed for the small integers in A and B"),
    banks: bool = typer.Option(False, "--banks",
                               help="instead: which shared-memory bank each lane of the warp of --thread hits in "
                                    "the first K step, and the wavefronts each instruction takes, at the kernel's "
                                    "own parameters (the spec's defaults, then --block and --param; one block, so no "
                                    "sizes); conflict_free is shown beside vectorized's layout"),
) -> None:
    """Simulate a rung thread by thread and show it: terminal summary, animated GIF, HTML page to step through.

    Every global load, shared-memory access and multiply-add is recorded and checked against the spec's model.

    A 4 x 4 example: gemmlab visualize smem_tiled --n 4 --block 2
    Bank conflicts, rung 06's layout against rung 07's: gemmlab visualize conflict_free --banks
    """
    from .. import viz
    from ..viz import html as viz_html
    from ..viz.frames import Picture
    from ..viz.state import FOCUS_MODES
    from ..viz.terminal import view

    if banks:
        _banks(kernel, n, m, k, block, thread, param)
        return

    wanted = [f.strip() for f in formats.split(",") if f.strip()]
    bad = [f for f in wanted if f not in FORMATS]
    if bad or not wanted:
        fail(f"--format takes a comma-separated list of {', '.join(FORMATS)}; got {formats!r}")
    if focus not in FOCUS_MODES:
        fail(f"--focus must be one of {', '.join(FOCUS_MODES)}, got {focus!r}")
    if not fps > 0:
        fail(f"--fps must be positive, got {fps}")
    params = parse_params(param)
    try:
        given = [v for v in (n, m, k) if v is not None]
        size = given[0] if given else viz.default_size(kernel, params, block)
        M, N, K = (v if v is not None else size for v in (m, n, k))
        trace = viz.run(kernel, M, N, K, params=params, block=block, seed=seed)
    except (ValueError, viz.NoModelError, viz.ModelError) as exc:
        fail(str(exc))
    if not 0 <= thread < trace.threads:
        fail(f"--thread {thread}: the launch has {trace.threads} threads ({trace.blocks} blocks of "
             f"{trace.threads_per_block}), numbered from 0")
    problems = trace.disagreements()

    if "terminal" in wanted:
        console.print(view(trace, thread))
    files = [f for f in wanted if f != "terminal"]
    page = None
    if "html" in files:     # before writing anything: a page can be refused for its size
        try:
            page = viz_html.render_html(trace, thread, focus)
        except ValueError as exc:
            fail(str(exc))
    if "png" in files and frame is not None and not 1 <= frame <= len(trace.frames):
        fail(f"--frame {frame}: there are {len(trace.frames)} frames, numbered from 1")
    if files:
        out.mkdir(parents=True, exist_ok=True)
        stem = f"{trace.spec.name}_{M}x{N}x{K}_" + "_".join(f"{p}{v}" for p, v in trace.params.items())
        picture = Picture(trace, thread, focus) if {"gif", "png"} & set(files) else None
        if "gif" in files:
            console.print(f"wrote {picture.save_gif(out / f'{stem}.gif', fps=fps)} ({len(trace.frames)} frames)")
        if "png" in files:
            f = frame if frame is not None else (len(trace.frames) + 1) // 2
            console.print(f"wrote {picture.save_png(f - 1, out / f'{stem}_frame{f}.png')}")
        if page is not None:
            path = out / f"{stem}.html"
            atomic_write(path, page)
            console.print(f"wrote {path}")
    if problems:
        fail("the model disagrees with the spec's analytic model: " + "; ".join(problems))


def _banks(kernel: str, n: int | None, m: int | None, k: int | None, block: int | None, thread: int,
           param: list[str] | None) -> None:
    """`visualize --banks`: the bank view of one block's first K step, printed."""
    from .. import viz
    from ..viz.banks import bank_view
    from ..viz.terminal import bank_view as render

    if any(v is not None for v in (n, m, k)):
        fail("--banks simulates one block for one K step at the kernel's parameters: it takes no --n, --m or --k")
    try:
        view, before = bank_view(kernel, parse_params(param), block, thread)
    except (ValueError, viz.NoModelError, viz.ModelError) as exc:
        fail(str(exc))
    console.print(render(view, before))
