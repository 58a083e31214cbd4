"""analysis.timeline: the phase accounting on made-up records (CPU), and the traced build of rung 15 against
the normal one (GPU)."""

import numpy as np
import pytest

from gemmlab.analysis import timeline
from gemmlab.kernels import registry


def _made_up(blocks=3, units=4, ghz=2.0, skew_ns=(0, 10, 20), main=1000, epi=100, wait=30, gap=5, fill=400,
             end=50, k_steps=16):
    """Records as the kernel would write them: every block starts skew_ns late; per unit: `wait` cycles to
    data (the first: `fill` from entry), `main`, `epi`, then `gap` to the next unit."""
    B = np.zeros((8, 8), np.uint64)
    U = np.zeros((8, 2, 16, 8), np.uint64)
    for b in range(blocks):
        gt_in, clk_in = 1_000_000 + skew_ns[b], 5_000 + 777 * b
        B[b, 0], B[b, 1], B[b, 2] = gt_in, clk_in, 10 + b
        for cw in range(2):
            c = clk_in
            for u in range(units):
                begin = c + (fill - wait if u == 0 else gap)
                data = begin + wait
                U[b, cw, u] = (0, begin, data, data + main, data + main + epi, b + 3 * u, 0, k_steps)
                c = data + main + epi
            out = c + end
            B[b, 3 + 2 * cw] = gt_in + round((out - clk_in) / ghz)
            B[b, 4 + 2 * cw] = out
    return timeline.Timeline("wgmma", 256, 256, 1024, {"BM": 128, "BN": 256}, B, U, extra={"k_step": 64})


def test_phases_add_up_to_the_duration():
    tl = _made_up()
    s = timeline.summarise(tl, flop_per_clock=4096.0)
    ph = s["phases_cycles"]
    assert s["blocks"] == 3 and s["tiles"] == 12 and s["units"] == 24
    assert s["clock_ghz"] == pytest.approx(2.0, rel=1e-3)
    assert ph["main"] == pytest.approx(4 * 1000)
    assert ph["epilogue"] == pytest.approx(4 * 100)
    assert ph["wait"] == pytest.approx(3 * 30)
    assert ph["between"] == pytest.approx(3 * 5)
    assert ph["fill"] == pytest.approx(400)
    assert ph["end"] == pytest.approx(50)
    # the last block entered 20 ns late and ends last; the others idle at the end for what they started early
    assert ph["start"] == pytest.approx((0 + 10 + 20) / 3 * 2.0, rel=1e-3)
    assert ph["tail"] == pytest.approx((20 + 10 + 0) / 3 * 2.0, abs=2.0)
    assert s["accounted"] == pytest.approx(1.0, abs=2e-3)
    assert s["main_cycles_per_kstep"] == pytest.approx(1000 / 16)
    assert s["ideal_cycles_per_kstep"] == pytest.approx(2 * 128 * 256 * 64 / 4096)


def _with_epilogue(tl, deferred):
    """Epilogue records inside each unit's epilogue (which _made_up gives 100 cycles): the bias loaded after 10,
    then either four boxes of compute 5, wait 2, store 13 (ending 90 cycles in), or (deferred) the packing, 60."""
    E = np.zeros(tl.units.shape[:3] + (16,), np.uint64)
    for b in range(tl.units.shape[0]):
        for cw in range(tl.units.shape[1]):
            for u in range(tl.unit_count(b, cw)):
                t = int(tl.units[b, cw, u, 3]) + 10
                E[b, cw, u, 0] = t
                if deferred:
                    E[b, cw, u, 1] = t + 60
                    continue
                for cb in range(4):
                    E[b, cw, u, 1 + 3 * cb: 4 + 3 * cb] = (t + 5, t + 7, t + 20)
                    t += 20
    tl.epilogue = E
    return tl


def test_epilogue_detail_boxes_and_the_deferred_packing():
    d = timeline.epilogue_detail(_with_epilogue(_made_up(), deferred=False))
    assert d["prologue"] == 10 and d["after"] == 10
    assert [d[f"compute_{cb}"] for cb in range(4)] == [5] * 4
    assert [d[f"wait_{cb}"] for cb in range(4)] == [2] * 4
    assert [d[f"store_{cb}"] for cb in range(4)] == [13] * 4
    assert "pack" not in d
    d = timeline.epilogue_detail(_with_epilogue(_made_up(), deferred=True))
    assert d == {"prologue": 10, "pack": 60, "after": 30}
    assert timeline.epilogue_detail(_made_up()) == {}


def test_segments_place_units_in_time():
    tl = _made_up()
    seg = timeline.segments(tl)
    assert len(seg) == 24
    first = [x for x in seg if x["block"] == 0 and x["consumer"] == 0]
    assert [x["unit"] for x in first] == [0, 1, 2, 3]
    assert first[0]["data"] == pytest.approx(400 / 2.0 / 1e3, rel=1e-3)
    for x in seg:
        assert x["begin"] <= x["data"] <= x["main_end"] <= x["epilogue_end"]
    late = [x for x in seg if x["block"] == 2 and x["unit"] == 0][0]
    assert late["data"] == pytest.approx((20 + 400 / 2.0) / 1e3, rel=1e-3)


def test_unrecorded_exit_is_an_error():
    tl = _made_up()
    tl.blocks[1, 3] = 0
    with pytest.raises(ValueError, match="exit was not recorded"):
        timeline.summarise(tl)


def test_kernels_with_a_traced_build_name_their_switch():
    named = [s for s in registry.all_specs() if s.trace is not None]
    assert [s.name for s in named] == ["wgmma"]
    for s in named:
        src = s.source_path.read_text()
        assert f"#ifdef {s.trace.define}" in src
        assert s.trace.k_step(s.validate({})) == 64


def test_record_refuses_a_kernel_without_a_trace():
    with pytest.raises(ValueError, match="no traced build"):
        timeline.record(np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32), kernel="naive")


def test_timeline_figure_draws_every_phase(tmp_path):
    from gemmlab.analysis.figures import timeline_figure

    seg = timeline.segments(_made_up())
    fig = timeline_figure(seg, "made up")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["wait", "main", "epilogue"]
    assert len(ax.patches) == 3 * 12  # three bars for each of consumer 0's 12 units
    fig.savefig(tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 1000


def test_full_record_tables_are_reported_as_truncated():
    tl = _made_up()
    assert tl.truncated() == "" and timeline.summarise(tl)["truncated"] == ""
    small = timeline.Timeline("wgmma", 1, 1, 1, tl.params, tl.blocks[:3], tl.units[:3, :, :4], extra=tl.extra)
    why = small.truncated()
    assert "all 3 block records used" in why and "6 consumer(s) filled all 4 unit records" in why
