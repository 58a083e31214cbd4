"""Frames as images: every cell drawn in the colour its state says, the focus where the model puts it,
the GIF holding every frame, and the terminal view and command line around them."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from rich.console import Console
from typer.testing import CliRunner

from gemmlab import viz
from gemmlab.cli import app
from gemmlab.kernels import all_specs
from gemmlab.viz.frames import Picture
from gemmlab.viz.model import A_LOAD, AS_READ, B_LOAD, FMA
from gemmlab.viz.state import CODE, Frames, palette_rgb, rgb
from gemmlab.viz.terminal import view

runner = CliRunner()
PALETTE = palette_rgb()


def _sample(pic: Picture, panel: str, r: int, c: int) -> tuple[int, int]:
    f = 0.2 if pic.shows_values else 0.5      # away from the printed number where there is one
    return pic.cell_pixel(panel, r, c, f, f)


@pytest.mark.parametrize("kernel,size,thread,mode", [
    ("smem_tiled", 4, 5, "thread"),
    ("naive", 5, 7, "warp"),
    ("coalesced", 6, 3, "thread"),
    ("blocktile_1d", 19, 40, "block"),
    ("blocktile_2d", 21, 70, "thread"),
])
def test_every_cell_has_the_colour_of_its_state(kernel, size, thread, mode):
    _assert_cells_have_their_colours(viz.run(kernel, size), thread, mode)


@pytest.mark.parametrize("kernel,mnk,thread,mode", [
    ("conflict_free", (40, 32, 16), 40, "warp"),
    ("pipelined", (40, 32, 16), 70, "block"),
])
def test_every_cell_of_the_16_byte_rungs_has_the_colour_of_its_state(kernel, mnk, thread, mode):
    """One column of 32 x 32 block tiles, so that cells stay 6 px or more (the dashed outline of the staged
    tile would otherwise cover the centre of its edge cells)."""
    _assert_cells_have_their_colours(viz.run(kernel, *mnk), thread, mode)


def _assert_cells_have_their_colours(trace, thread, mode):
    pic = Picture(trace, thread, mode)
    fr = Frames(trace, thread, mode)
    frames = sorted({0, 1, 2, len(trace.frames) // 2, len(trace.frames) - 1})
    for f in frames:
        img = pic.draw(f)
        assert img.ndim == 3 and img.shape[2] == 4
        packed = (img[..., 0].astype(np.int32) << 16) | (img[..., 1].astype(np.int32) << 8) | img[..., 2]
        assert len(np.unique(packed)) > 8, "the frame is (nearly) blank"
        for panel, grid in fr.state(f).panels.items():
            for (r, c), code in np.ndenumerate(grid):
                x, y = _sample(pic, panel, r, c)
                assert tuple(img[y, x, :3]) == tuple(PALETTE[code]), (f, panel, r, c)


def test_the_focus_thread_is_highlighted_where_the_model_says():
    """The 4 x 4 example, thread 5 (C[0, 3]): at the first load it reads A[0, 1] and B[0, 3]; at the first compute
    frame it reads As[0][0] from shared memory and accumulates C[0, 3]."""
    trace = viz.run("smem_tiled", 4, block=2)
    pic = Picture(trace, 5)
    img = pic.draw(1)
    focus = np.array(rgb(CODE["read_focus"]))
    hot = {(p, r, c) for p in ("A", "B") for r in range(4) for c in range(4)
           if tuple(img[_sample(pic, p, r, c)[::-1]][:3]) == tuple(focus)}
    assert hot == {("A", 0, 1), ("B", 0, 3)}
    assert {("A",) + rc for rc in trace.cells(A_LOAD, frame=1, thread=5)} | \
           {("B",) + rc for rc in trace.cells(B_LOAD, frame=1, thread=5)} == hot
    img = pic.draw(2)
    assert tuple(img[_sample(pic, "As", 0, 0)[::-1]][:3]) == rgb(CODE["sread_focus"])
    assert trace.cells(AS_READ, frame=2, thread=5) == {(0, 0)}
    assert tuple(img[_sample(pic, "C", 0, 3)[::-1]][:3]) == rgb(CODE["acc_focus"])
    assert trace.cells(FMA, frame=2, thread=5) == {(0, 3)}
    # another thread of the same block is drawn lighter, one of another block lighter still
    assert tuple(img[_sample(pic, "C", 0, 2)[::-1]][:3]) == rgb(CODE["acc_block"])
    assert tuple(img[_sample(pic, "C", 0, 0)[::-1]][:3]) == rgb(CODE["acc_other"])


def test_gif_has_every_frame_and_png_is_one(tmp_path):
    trace = viz.run("smem_tiled", 4, block=2)
    pic = Picture(trace, 5)
    gif = pic.save_gif(tmp_path / "seed.gif", fps=4)
    with Image.open(gif) as im:
        assert im.n_frames == len(trace.frames)
        sizes = set()
        for i in range(im.n_frames):
            im.seek(i)
            sizes.add(im.size)
            if i == 1:
                x, y = pic.cell_pixel("A", 0, 1, 0.2, 0.2)
                got = np.array(im.convert("RGB").getpixel((x, y)), dtype=int)
                assert np.abs(got - rgb(CODE["read_focus"])).max() <= 12    # the GIF palette is quantised
        assert len(sizes) == 1
    png = pic.save_png(3, tmp_path / "frame.png")
    with Image.open(png) as im:
        assert im.size == next(iter(sizes))


def test_terminal_view_follows_the_thread_through_every_frame():
    trace = viz.run("smem_tiled", 4, block=2)
    console = Console(width=160, record=True, color_system=None)
    console.print(view(trace, 5))
    text = console.export_text()
    assert "thread 5 = block (1, 0) thread (1, 0): computes C[0, 3]" in text
    assert "A[0,1] B[0,3]" in text and "A[0,3] B[2,3]" in text        # its two loads, one per step
    assert "As[0][0] Bs[0][1]" in text
    assert "loads per thread" in text and "DIFFERENT" not in text
    assert "4 here, 8 for the naive rung" in text


def test_terminal_view_shows_a_16_byte_access_as_one():
    """Rung 06 at 32 x 32 x 32 (rows 16-byte aligned): thread 5 reads A[2, 4..7] in one load and writes it to
    As[4..7][2] in four stores; with K = 9 the same elements come float by float."""
    p = {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 8}
    console = Console(width=200, record=True, color_system=None)
    console.print(view(viz.run("vectorized", 32, 32, 32, params=p), 5))
    text = console.export_text()
    assert "A[2,4..7]" in text and "As[4][2]" in text and "Bs[0][8..11]" in text
    assert "access instructions (a 16-byte one moves 4 elements): global loads 512 for 2,048 elements" in text
    console = Console(width=200, record=True, color_system=None)
    console.print(view(viz.run("vectorized", 32, 32, 9, params=p), 5))
    text = console.export_text()
    assert "A[2,4]" in text and "A[2,4..7]" not in text


# ------------------------------------------------------------------------------------------ the command


def test_visualize_is_listed():
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0 and "visualize" in r.output


def test_seed_example_from_the_command_line(tmp_path):
    r = runner.invoke(app, ["visualize", "smem_tiled", "--n", "4", "--block", "2", "--thread", "5",
                            "--format", "terminal,gif,html,png", "--out", str(tmp_path), "--fps", "4"],
                      terminal_width=160)
    assert r.exit_code == 0, r.output
    assert "computes C[0, 3]" in r.output and "equal" in r.output
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["smem_tiled_4x4x4_BLOCK_DIM2_GROUP_M1.gif", "smem_tiled_4x4x4_BLOCK_DIM2_GROUP_M1.html",
                     "smem_tiled_4x4x4_BLOCK_DIM2_GROUP_M1_frame4.png"]
    with Image.open(tmp_path / names[0]) as im:
        assert im.n_frames == 8
    page = (tmp_path / names[1]).read_text()
    assert "<script src" not in page and "<link" not in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "").replace("http://www.w3.org/2000/svg", "")


@pytest.mark.parametrize("args,message", [
    (["no_such_rung"], "unknown GPU kernel"),
    (["smem_tiled", "--param", "BLOCK_DIM=99"], "BLOCK_DIM"),
    (["smem_tiled", "--n", "4", "--block", "2", "--thread", "16"], "--thread 16"),
    (["smem_tiled", "--format", "mp4"], "--format"),
    (["smem_tiled", "--focus", "grid"], "--focus"),
    (["smem_tiled", "--n", "0"], "at least 1"),
    (["smem_tiled", "--n", "4", "-f", "png", "--frame", "9"], "--frame 9"),
    (["blocktile_2d", "--block", "8"], "threads per block"),
])
def test_visualize_refuses_with_one_clear_line(args, message, tmp_path):
    r = runner.invoke(app, ["visualize", *args, "--out", str(tmp_path)])
    assert r.exit_code != 0
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], r.output


def test_a_new_rung_from_the_command_line(tmp_path):
    r = runner.invoke(app, ["visualize", "pipelined", "--m", "40", "--n", "32", "--k", "16", "--format", "terminal,png",
                            "--out", str(tmp_path), "-t", "70"], terminal_width=160)
    assert r.exit_code == 0, r.output
    assert "DIFFERENT" not in r.output and "equal" in r.output
    assert [p.name for p in tmp_path.iterdir()] == ["pipelined_40x32x16_BM32_BN32_BK8_WM32_WN16_TM4_TN4_frame10.png"]


def test_a_rung_without_a_model_is_named():
    missing = [s for s in all_specs() if s.name not in viz.MODELS]
    if not missing:
        pytest.skip("every rung has a model")
    s = missing[0]
    r = runner.invoke(app, ["visualize", s.name, "--format", "terminal"])
    assert r.exit_code != 0
    assert f"no execution model for rung {s.rung:02d} {s.name}" in r.output
