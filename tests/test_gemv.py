"""Rung 17 (gemv) without a GPU: its parameters, heuristic, workspace and traffic, where kernel="auto" takes it
(small M with B given transposed only), and how the launch path reads a B that is both layouts at once."""

import pytest

from gemmlab import api
from gemmlab.api import plan
from gemmlab.kernels import registry
from gemmlab.kernels.rungs import gemv

SPEC = registry.get("gemv")
H100 = (9, 0)


def test_heuristic_rows_warps_and_split():
    p1 = SPEC.heuristic(1, 8192, 8192, 132)
    assert (p1["MT"], p1["WARPS"], p1["UNROLL"], p1["SPLIT"]) == (8, 8, 2, 1)
    p16 = SPEC.heuristic(16, 14336, 4096, 132)
    assert (p16["MT"], p16["WARPS"], p16["UNROLL"], p16["SPLIT"]) == (16, 4, 2, 1)
    assert SPEC.heuristic(9, 4096, 4096, 132)["MT"] == 16
    # Tiles that fill the resident blocks: no split, whatever K; a few tiles on a long K: slices fill a wave.
    assert SPEC.heuristic(1, 14336, 131072, 132)["SPLIT"] == 1
    small = SPEC.heuristic(1, 64, 131072, 132)
    tiles = gemv.items(1, 64, small)
    assert small["SPLIT"] > 1 and tiles * small["SPLIT"] <= gemv.blocks_per_sm(small) * 132
    assert SPEC.heuristic(1, 64, 512, 132)["SPLIT"] == 1  # too short to cut: slices of two block steps at least


def test_the_other_warp_count_where_its_last_wave_is_fuller():
    # M = 16, 11008 x 4096: 688 tiles are 1.30 waves of four-warp blocks (528 slots) and 2.61 of eight (264)
    assert gemv.tail_fill(688, 528) == pytest.approx(688 / 1056)
    assert gemv.tail_fill(688, 264) == pytest.approx(688 / 792)
    assert SPEC.heuristic(16, 11008, 4096, 132)["WARPS"] == 8
    # 896 tiles fill both alike (1.70 and 3.39 waves): the default stays
    assert SPEC.heuristic(16, 14336, 4096, 132)["WARPS"] == 4 and SPEC.heuristic(1, 14336, 4096, 132)["WARPS"] == 8
    # M = 1, 5504 x 2048: 344 tiles, one partial wave of four-warp blocks (all stream at once) against 1.30 of eight
    assert gemv.tail_fill(344, 528) == 1.0 and SPEC.heuristic(1, 5504, 2048, 132)["WARPS"] == 4
    # where a split is taken the warp count is the default's (the split fills the wave)
    assert SPEC.heuristic(16, 4096, 4096, 132)["WARPS"] == 4 and SPEC.heuristic(16, 4096, 4096, 132)["SPLIT"] > 1
    # every choice fits the launch bounds' registers
    for m, n in ((1, 5504), (16, 11008), (16, 28672)):
        assert gemv.registers(SPEC.heuristic(m, n, 4096, 132)) <= 128


def test_every_heuristic_choice_validates():
    for m in (1, 3, 8, 9, 16):
        for n, k in ((1, 8), (64, 131072), (5504, 2048), (28672, 8192), (100, 0)):
            SPEC.validate({**SPEC.heuristic(m, n, k, 132), "A_TYPE": 2, "C_TYPE": 3})


def test_constraints_name_what_is_wrong():
    with pytest.raises(ValueError, match="registers"):
        SPEC.validate({"MT": 16, "UNROLL": 4, "WARPS": 8})
    with pytest.raises(ValueError, match="B_LAYOUT = 1.*transposed"):
        SPEC.validate({"B_LAYOUT": 1})
    with pytest.raises(ValueError, match="MT = 32"):
        SPEC.validate({"MT": 32})
    assert all(gemv.registers(p) <= 128 for p in SPEC.search_space())


def test_workspace_and_traffic():
    p = SPEC.validate({"MT": 8, "NT": 1, "SPLIT": 1})
    assert SPEC.workspace(4, 1000, 4096, p, 63) == SPEC.workspace(4, 1000, 4096, p, 63).__class__()
    p3 = SPEC.validate({"MT": 8, "NT": 1, "SPLIT": 3})
    ws = SPEC.workspace(4, 1000, 4096, p3, 63 * 3)
    assert ws.ints == 63 and ws.floats == 63 * 3 * 2 * 64  # a slot of 64 pairs per block, a counter per tile
    t = SPEC.traffic_model(20, 1000, 4096, p3)
    assert t.b_loads == 4096 * 1000 * 3  # B once per tile of MT = 8 rows of A: 3 tiles for 20 rows
    assert t.c_stores == 20 * 1000 and t.scratch > 0
    launch = SPEC.launch(20, 1000, 4096, p3)
    assert launch.grid == (63, 3, 3) and launch.block == (256, 1, 1)


def test_auto_takes_it_for_a_transposed_weight_at_small_m():
    for m in (1, 16):
        assert api.explain_choice("bfloat16", shape=(m, 8192, 8192), cc=H100, b_kmajor=True).spec.name == "gemv"
        assert api.explain_choice("float16", shape=(m, 28672, 8192), cc=H100, b_kmajor=True).spec.name == "gemv"
    row_major = api.explain_choice("bfloat16", shape=(1, 8192, 8192), cc=H100, b_kmajor=False)
    assert row_major.spec.name == "skinny"
    assert any(c.name == "gemv" and "transposed" in c.reason for c in row_major.candidates)
    assert api.explain_choice("float32", shape=(1, 8192, 8192), cc=H100, b_kmajor=True).spec.name == "skinny"
    assert api.explain_choice("bfloat16", shape=(17, 8192, 8192), cc=H100, b_kmajor=True).spec.name == "wgmma"
    assert api.explain_choice("bfloat16", shape=(1, 8192, 8192), cc=(8, 0), b_kmajor=True).spec.name == "gemv"


def test_a_b_of_one_column_or_nothing_reads_as_transposed():
    one_col = plan._as_kmajor((4096, 1), (1, 4096), 2)
    assert one_col is not None and one_col.transposed and (one_col.rows, one_col.cols) == (1, 4096)
    assert plan._as_kmajor((4096, 1), (2, 8192), 2) is None  # its column is not contiguous
    one_row = plan._as_kmajor((1, 300), (300, 1), 2)
    assert one_row is not None and (one_row.rows, one_row.cols, one_row.ld) == (300, 1, 1)
    empty = plan._as_kmajor((0, 64), (64, 1), 2)
    assert empty is not None and empty.transposed
    assert plan._as_kmajor((4096, 64), (64, 1), 2) is None  # row-major with several columns
    assert plan._as_kmajor((4096, 64), (1, 4096), 2).ld == 4096
    assert plan._reads_b_kmajor_only(SPEC, "bfloat16") and not plan._reads_b_kmajor_only(registry.get("skinny"), "bfloat16")
