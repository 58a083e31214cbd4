"""Shared-memory banks: the wavefront rule on hand-made warps, the figures of rungs 06 and 07 at their default
parameters against the CUDA index expressions, and the `--banks` view on the command line."""

from __future__ import annotations

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gemmlab.cli import app
from gemmlab.kernels import get
from gemmlab.viz import banks
from gemmlab.viz.banks import bank_map
from gemmlab.viz.terminal import bank_view as render

runner = CliRunner()


# ------------------------------------------------------------------------------------------ the rule


def test_one_word_for_the_whole_warp_is_a_broadcast():
    m = bank_map([256] * 32, 16)
    assert m.phase_wavefronts() == [1, 1, 1, 1] and m.wavefronts == m.ideal == 4 and m.verdict() == "conflict-free"
    m = bank_map([0] * 32, 4)
    assert m.phase_wavefronts() == [1] and m.wavefronts == 1


def test_a_column_of_a_128_byte_wide_array_is_a_32_way_conflict():
    """32 lanes, 4-byte loads 128 bytes apart: one bank, 32 words, one phase."""
    m = bank_map([128 * lane for lane in range(32)], 4)
    assert m.degree == 32 and m.wavefronts == 32 and m.verdict() == "32-way conflict"
    assert {b for lane in range(32) for b in m.banks(lane)} == {0}


def test_16_byte_accesses_go_in_four_phases_of_eight_lanes():
    """Lanes 32 bytes apart: in each phase of 8 lanes, lanes l and l + 4 meet in banks 0-3 (2 words): 2-way.
    16 bytes apart: the 8 lanes of a phase cover the 32 banks once."""
    apart32 = bank_map([32 * lane for lane in range(32)], 16)
    assert apart32.lanes_per_phase == 8 and apart32.phase_wavefronts() == [2, 2, 2, 2]
    assert apart32.banks(0) == apart32.banks(4) == [0, 1, 2, 3]
    assert apart32.bank_words(0)[0] == {0: [0], 32: [4]}
    apart16 = bank_map([16 * lane for lane in range(32)], 16)
    assert apart16.phase_wavefronts() == [1, 1, 1, 1]
    # 8-byte accesses: 2 phases of 16 lanes; lanes 16 bytes apart cover banks 0, 1, 4, 5, ...: one word each
    m = bank_map([16 * lane for lane in range(32)], 8)
    assert m.lanes_per_phase == 16 and m.phase_wavefronts() == [2, 2]
    assert bank_map([8 * lane for lane in range(32)], 8).phase_wavefronts() == [1, 1]


def test_idle_lanes_and_bad_accesses():
    m = bank_map([0, 4], 4)                      # two lanes take part
    assert m.wavefronts == 1 and m.words(5) == []
    assert bank_map([None] * 8 + [0] * 8, 16).phase_wavefronts() == [0, 1, 0, 0]
    with pytest.raises(ValueError, match="aligned"):
        bank_map([4], 16)
    with pytest.raises(ValueError, match="4, 8 or 16"):
        bank_map([0], 12)


# ------------------------------------------------------------------------------------------ rungs 06 and 07


@pytest.fixture(scope="module")
def cf_view():
    return banks.bank_view("conflict_free")


def test_the_view_is_at_the_kernels_default_parameters(cf_view):
    view, before = cf_view
    assert view.params == get("conflict_free").defaults == before.params
    assert (view.kernel, before.kernel) == ("conflict_free", "vectorized")


def test_rung_06_layout_is_2_way_and_rung_07_takes_one_wavefront_per_phase(cf_view):
    """At BM = BN = 128, BK = 8, TM = TN = 8: rung 06's contiguous 8-wide thread tiles put the 8 lanes of a
    phase 32 bytes apart in Bs (2-way, 8 wavefronts per LDS.128); its unpadded transposed A stores send lanes
    2r and 2r + 1 (k and k + 4 of row r) to one bank (2-way). Rung 07: the minimum everywhere."""
    view, before = cf_view
    old = {(a.array, a.op, a.index): a.map for a in before.accesses}
    new = {(a.array, a.op, a.index): a.map for a in view.accesses}
    assert old.keys() == new.keys()
    # per thread and step: 1 float4 of A (4 scalar stores) and 1 of B; per k, 2 LDS.128 of As and 2 of Bs
    assert sorted(old) == sorted([("As", "store", i) for i in range(4)] + [("Bs", "store", 0)]
                                 + [("As", "load", i) for i in range(2)] + [("Bs", "load", i) for i in range(2)])
    for i in range(2):
        assert old["Bs", "load", i].phase_wavefronts() == [2, 2, 2, 2] and old["Bs", "load", i].wavefronts == 8
        assert old["As", "load", i].wavefronts == 4                    # lanes 0-15 share a word: broadcasts
    for i in range(4):
        assert old["As", "store", i].width == 4 and old["As", "store", i].wavefronts == 2
    assert old["Bs", "store", 0].wavefronts == 4
    for key, m in new.items():
        assert m.degree == 1 and m.wavefronts == m.ideal == len(m.phases), key
    assert [a.name for _, a in banks.changed(view, before)] == ["As store 1, 4-byte", "Bs load 1, 16-byte"]


def test_the_traced_addresses_are_the_cuda_index_expressions(cf_view):
    """Rung 06's Bs[k * BN + tcol * TN + j] and rung 07's Bs[k * BN + g * 4 * TCOLS + tcol * 4] at k = 0, for
    lanes 0..31 of warp 0 (tcol = lane % 16); the stores As[(kq + j) * BMP + r], r = lane / 2, kq = 4 (lane % 2)."""
    view, before = cf_view
    TN, TCOLS = 8, 16
    old_b = before.find("Bs", "load", 1).map          # j = 4
    new_b = view.find("Bs", "load", 1).map            # g = 1
    assert list(old_b.addresses) == [4 * ((lane % TCOLS) * TN + 4) for lane in range(32)]
    assert list(new_b.addresses) == [4 * (1 * 4 * TCOLS + (lane % TCOLS) * 4) for lane in range(32)]
    for a, bmp in ((before.find("As", "store", 2), 128), (view.find("As", "store", 2), 132)):   # j = 2
        assert list(a.map.addresses) == [4 * ((4 * (lane % 2) + 2) * bmp + lane // 2) for lane in range(32)]


def test_warptile_and_pipelined_stay_conflict_free_and_rungs_without_shared_memory_are_refused():
    for kernel in ("warptile", "pipelined"):
        view, before = banks.bank_view(kernel)
        assert before is None and view.accesses
        assert all(a.map.wavefronts == a.map.ideal for a in view.accesses), kernel
    with pytest.raises(ValueError, match="no shared memory"):
        banks.bank_view("coalesced")


def test_other_warps_and_parameters():
    """Warp 3 (thread 100) conflicts as warp 0 does. With TN = 4 rung 06's thread tile is one 4 x 4 group
    already, so its B loads take the minimum (the 2-way conflict needs 8-wide thread tiles). With BK = 16
    four lanes store k, k + 4, k + 8, k + 12 of one row r of the A tile into one bank: 4-way in rung 06.
    Rung 07's 4 floats of padding put k-row k in bank 4k + r (mod 32), which parts k and k + 4 but brings
    k + 8 back to k: 2-way. The padding is sized for BK = 8, the default."""
    view, before = banks.bank_view("conflict_free", {"BN": 64, "BK": 16, "TN": 4}, thread=100)
    assert view.warp == before.warp == 3
    assert before.find("Bs", "load", 0).map.wavefronts == view.find("Bs", "load", 0).map.wavefronts == 4
    assert before.find("As", "store", 0).map.degree == 4 and view.find("As", "store", 0).map.degree == 2
    view, _ = banks.bank_view("vectorized", {"BM": 64, "BN": 64}, thread=33)    # TN = 8 again: 2-way
    assert view.warp == 1 and view.find("Bs", "load", 0).map.wavefronts == 8
    with pytest.raises(ValueError, match="256 threads"):
        banks.bank_view("vectorized", thread=256)


def test_terminal_bank_view(cf_view):
    console = Console(width=140, record=True, color_system=None)
    console.print(render(*cf_view))
    text = console.export_text()
    assert "vectorized (rung 06)" in text and "conflict_free (rung 07)" in text
    assert "Bs load 1-2, 16-byte" in text and "8 (2-way)" in text and "4 (conflict-free)" in text
    assert "Bs load 1: 8 wavefronts (2-way conflict) with rung 06's layout, 4 (conflict-free) with rung 07's" in text
    assert "0/4" in text            # lanes 0 and 4 need different words of banks 0-3


# ------------------------------------------------------------------------------------------ the command


def test_banks_from_the_command_line():
    r = runner.invoke(app, ["visualize", "conflict_free", "--banks"])
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())           # the console wraps at its width
    assert "BM=128 BN=128 BK=8 TM=8 TN=8" in out
    assert "As store 1: 2 wavefronts (2-way conflict) with rung 06's layout, 1 (conflict-free) with rung 07's" in out
    r = runner.invoke(app, ["visualize", "vectorized", "--banks", "-b", "64", "-p", "BK=16", "-t", "40"])
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "BM=64 BN=64 BK=16 TM=8 TN=8" in out and "warp 1 (threads 32-63" in out
    assert "As store 1-16, 4-byte 1 x 32 4 (4-way)" in out


@pytest.mark.parametrize("args,message", [
    (["naive", "--banks"], "no shared memory"),
    (["conflict_free", "--banks", "--n", "64"], "takes no --n"),
    (["conflict_free", "--banks", "--thread", "999"], "--thread 999"),
    (["conflict_free", "--banks", "-p", "TM=3"], "multiples of 4"),
])
def test_banks_refuses_with_one_clear_line(args, message):
    r = runner.invoke(app, ["visualize", *args])
    assert r.exit_code != 0
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], r.output
