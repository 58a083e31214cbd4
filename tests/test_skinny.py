"""Rung 16 (skinny) without a GPU: its parameters, shared memory and split rule, the dispatcher's choice by
shape, and that every instantiation the heuristic picks compiles without local memory."""

import pytest

from gemmlab import api
from gemmlab.kernels import registry
from gemmlab.kernels.rungs import skinny

SPEC = registry.get("skinny")
SHAPES = [(1, 8192, 8192), (3, 1000, 3001), (16, 28672, 8192), (64, 4096, 4096), (200, 5, 7), (1, 1, 1),
          (64, 64, 131072), (1, 14336, 4096)]


@pytest.mark.parametrize("mnk", SHAPES, ids=str)
def test_heuristic_is_valid_and_fills_the_waves(mnk):
    p = SPEC.heuristic(*mnk, 132)
    for layout in (1, 2):
        for a_type in (1, 2, 4):  # the heuristic knows no dtype: its choice fits every type
            full = SPEC.validate({**p, "B_LAYOUT": layout, "A_TYPE": a_type})
            assert skinny.smem_bytes(full) <= skinny.SMEM_LIMIT
    full = SPEC.validate({**p, "B_LAYOUT": 2})
    g = skinny._geometry(*mnk, full)
    slots = skinny.blocks_per_sm(full) * 132
    if p["SCHED"] == 1:  # persistent: one block per resident slot at most, never more than the work's units
        assert g.grid == (p["SPLIT"], 1, 1) and 1 <= p["SPLIT"] <= slots
        units = skinny.items(mnk[0], mnk[1], full) * -(-mnk[2] // skinny.group_k(full))
        assert p["SPLIT"] <= max(1, units)
        return
    assert g.grid[1] == p["SPLIT"] >= 1 and g.grid[2] == -(-mnk[0] // p["MT"])
    if mnk[2] >= 4096:  # enough K to split: the blocks fill one wave to 95 % (more waves: SCHED 1)
        assert g.blocks <= slots and g.blocks / slots >= 0.95


def test_best_split():
    assert skinny.best_split(112, 132, 64) == 7      # 784 blocks on 6 waves of 132
    assert skinny.best_split(32, 128, 64) == 4
    assert skinny.best_split(1000, 132, 1) == 1      # no room to split
    assert skinny.best_split(5, 132, 3) == 3         # the best filling where none reaches 95 %


def test_parameter_errors_name_the_parameter():
    errs = SPEC.problems({"MT": 12, "NT": 3, "STAGES": 1, "UNROLL": 16})
    text = " ".join(errs)
    for name in ("MT = 12", "NT = 3", "STAGES = 1", "UNROLL = 16"):
        assert name in text
    big = SPEC.problems({"WARPS": 8, "STAGES": 6, "NT": 4, "UNROLL": 4, "B_LAYOUT": 2})
    assert any("shared memory" in e for e in big)
    assert any("SPLIT = 70000" in e for e in SPEC.problems({"SPLIT": 70000}))


def test_split_is_a_launch_parameter():
    """One compiled kernel serves every split: SPLIT is not a template argument."""
    a = SPEC.name_expression(SPEC.validate({"SPLIT": 1}))
    b = SPEC.name_expression(SPEC.validate({"SPLIT": 9}))
    assert a == b and a.startswith("skinny_gemm<")


def test_auto_takes_it_by_shape_only():
    cc = (9, 0)
    assert api.explain_choice("bfloat16", shape=(1, 8192, 8192), cc=cc).spec.name == "skinny"
    assert api.explain_choice("float16", shape=(skinny.MAX_M, 4096, 11008), cc=cc).spec.name == "skinny"
    for shape in ((skinny.MAX_M + 1, 8192, 8192), (1, skinny.WIDE_N, 8192), (4096, 4096, 4096)):
        choice = api.explain_choice("bfloat16", shape=shape, cc=cc)
        assert choice.spec.name == "wgmma"
        assert any(c.name == "skinny" and not c.fits for c in choice.candidates)
    # long K on a tiny C above MAX_M rows: rung 15, which splits K there
    for shape in ((64, 64, 131072), (256, 256, 65536), (512, 64, 32768), (512, 512, 16384), (128, 1024, 65536)):
        choice = api.explain_choice("bfloat16", shape=shape, cc=cc, sm_count=132)
        assert choice.spec.name == "wgmma" and choice.params["SPLIT_K"] > 1, shape
    assert api.choose_kernel("bfloat16", cc).name == "wgmma"  # no shape: a rung built for some shapes is passed over
    assert api.explain_choice("float32", shape=(1, 8192, 8192), cc=cc).spec.name == "skinny"
    assert api.explain_choice("float32", shape=(1, 28672, 8192), cc=cc).spec.name == "skinny"
    assert api.explain_choice("float32", shape=(skinny.MAX_M_FP32 + 1, 8192, 8192), cc=cc).spec.name == "sgemm"
    assert api.explain_choice("float32", shape=(32, 4096, 4096), cc=cc).spec.name == "skinny"
    assert api.explain_choice("float32", shape=(32, 64, 131072), cc=cc).spec.name == "sgemm"  # (split-K)
    assert api.explain_choice("float32", shape=(16, 64, 131072), cc=cc).spec.name == "skinny"


def test_stream_model():
    p = SPEC.validate({**SPEC.heuristic(1, 8192, 8192, 132), "B_LAYOUT": 2, "A_TYPE": 2, "C_TYPE": 3})
    bytes_ = skinny.stream_bytes(1, 8192, 8192, p)
    assert bytes_ == 2 * (8192 * 8192 + 8192) + 2 * 8192
    assert skinny.stream_seconds(1, 8192, 8192, p, 3.35e12) == pytest.approx(bytes_ / 3.35e12)
    f32 = {**p, "A_TYPE": 4, "C_TYPE": 1}  # fp32 weights and output: twice the bytes
    assert skinny.stream_bytes(1, 8192, 8192, f32) == 4 * (8192 * 8192 + 8192) + 4 * 8192


@pytest.mark.slow
@pytest.mark.parametrize("m,a_type", [(1, 2), (16, 2), (1, 4), (64, 4)])
def test_heuristic_instantiations_compile_without_local_memory(m, a_type):
    p = SPEC.heuristic(m, 8192, 8192, 132)
    for layout in (1, 2):
        c_type = 3 if a_type == 2 else 1
        r = registry.resources(SPEC, {**p, "A_TYPE": a_type, "C_TYPE": c_type, "B_LAYOUT": layout}, "sm_90a")
        assert r.known and r.stack_frame == 0 and r.spill_stores == 0, r
