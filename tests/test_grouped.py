"""Grouped products without a GPU: the checks name the argument at fault before anything runs on the GPU, the
rung's parameter rules for BATCHED 2, and the harness's problems (group sizes, sampled rows)."""

import numpy as np
import pytest

import gemmlab
from gemmlab.bench import grouped as gp
from gemmlab.kernels import get


def _ops(t=100, k=64, n=128, g=4, dtype=np.float16):
    return np.zeros((t, k), dtype), np.zeros((g, k, n), dtype)


def test_exactly_one_of_offsets_and_counts():
    a, b = _ops()
    with pytest.raises(ValueError, match="exactly one of offsets"):
        gemmlab.grouped_matmul(a, b)
    with pytest.raises(ValueError, match="exactly one of offsets"):
        gemmlab.grouped_matmul(a, b, [25, 50, 75, 100], counts=[1, 2, 3, 4])


@pytest.mark.parametrize("args,kw,match", [
    ((np.zeros((100, 64), np.float16), np.zeros((64, 128), np.float16), [100]), {}, "B must be G x K x N"),
    ((np.zeros((100, 64), np.float16), np.zeros((4, 65, 128), np.float16), [1, 2, 3, 4]), {}, "inner dimensions"),
    ((np.zeros((4, 10, 64), np.float16), np.zeros((4, 64, 128), np.float16), [1, 2, 3, 4]), {}, "A must be T x K"),
    ((np.zeros((100, 64), np.float16), np.zeros((4, 64, 128), np.float16), None), {"counts": [1, 2, 3, 4]},
     "A must be G x R x K"),
    ((np.zeros((3, 10, 64), np.float16), np.zeros((4, 64, 128), np.float16), None), {"counts": [1, 2, 3, 4]},
     "A holds 3 groups, B 4"),
    ((np.zeros((100, 64), np.float16), np.zeros((4, 64, 128), np.float16), [10, 20, 30]), {}, "one integer per group"),
    ((np.zeros((100, 64), np.float16), np.zeros((4, 64, 128), np.float16), [10, 5, 30, 40]), {}, "must not decrease"),
    ((np.zeros((100, 64), np.float16), np.zeros((4, 64, 128), np.float16), [10, 20, 30, 101]), {}, r"\[0, 100\]"),
    ((np.zeros((4, 10, 64), np.float16), np.zeros((4, 64, 128), np.float16), None), {"counts": [1, 2, 11, 0]},
     r"counts must lie in \[0, 10\]"),
    ((np.zeros((100, 64), np.float16), np.zeros((4, 64, 128), np.float16), [1.5, 2, 3, 4]), {}, "integers"),
    ((np.zeros((100, 64), np.float16), np.zeros((0, 64, 128), np.float16), []), {}, "no groups"),
    ((np.zeros((100, 64), np.float32), np.zeros((4, 64, 128), np.float32), [1, 2, 3, 4]), {}, "float16, bfloat16 or 8-bit"),
    ((np.zeros((100, 64), np.float16), np.zeros((4, 64, 128), np.float32), [1, 2, 3, 4]), {}, "one dtype"),
    ((np.zeros((100, 64), np.float16), np.zeros((4, 64, 128), np.float16), [1, 2, 3, 4]), {"scale_a": 2.0},
     "8-bit inputs"),
    ((np.zeros((100, 64), np.float16), np.zeros((4, 64, 128), np.float16), [1, 2, 3, 4]), {},
     "run on the GPU"),
])
def test_bad_calls_name_the_argument(args, kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        gemmlab.grouped_matmul(*args, **kw)


def test_named_kernel_must_run_groups():
    a, b = _ops()
    with pytest.raises(ValueError, match="runs no grouped products"):
        gemmlab.grouped_matmul(a, b, [25, 50, 75, 100], kernel="sgemm")


def test_the_rung_takes_groups_with_8_bit_inputs_but_not_the_swapped_path():
    spec = get("wgmma")
    assert spec.grouped
    assert not spec.problems({**spec.defaults, "BATCHED": 2, "A_TYPE": 5, "C_TYPE": 3, "B_LAYOUT": 2})
    assert spec.problems({**spec.defaults, "BATCHED": 1, "A_TYPE": 5, "C_TYPE": 3, "B_LAYOUT": 2})
    for bad in ({"A_TYPE": 3, "B_LAYOUT": 3}, {"STREAM_K": 1}, {"SPLIT_K": 2, "BM": 64, "BN": 128, "SCHEDULE": 2}):
        assert any("BATCHED = 2" in p for p in spec.problems({**spec.defaults, "BATCHED": 2, **bad})), bad


@pytest.mark.parametrize("groups,tokens", [(8, 2048), (64, 512), (128, 512), (8, 128), (3, 7), (1, 100)])
def test_skewed_sizes_keep_the_rows_and_empty_some_groups(groups, tokens):
    p = gp.Problem(groups, tokens, 256, 256, spread="skewed")
    sizes = p.sizes()
    assert len(sizes) == groups and sum(sizes) == groups * tokens and min(sizes) >= 0
    if groups > 1:
        assert 0 in sizes and max(sizes) > tokens
    assert sizes == p.sizes()  # seeded
    assert gp.Problem(groups, tokens, 256, 256).sizes() == [tokens] * groups


def test_sampled_rows_take_each_groups_first_and_last():
    sizes = [0, 1, 5, 200, 0, 3]
    rows = gp.sample_rows(sizes, per_group=10)
    starts = np.cumsum([0] + sizes[:-1])
    for s, r0 in zip(sizes, starts):
        if s:
            assert r0 in rows and r0 + s - 1 in rows
    assert len(rows) == len(set(rows.tolist())) and rows.max() < sum(sizes)
    assert sum(1 for r in rows if starts[3] <= r < starts[3] + 200) == 10


def test_problem_checks_name_the_parameter():
    for kw, match in (({"groups": 0}, "at least one group"), ({"dtype": "float32"}, "--dtype"),
                      ({"spread": "zipf"}, "--spread")):
        with pytest.raises(ValueError, match=match):
            gp.Problem(**{"groups": 4, "tokens": 8, "n": 8, "k": 8, **kw}).check()


def test_autograd_is_refused_by_name():
    torch = pytest.importorskip("torch")
    a = torch.zeros(10, 8, dtype=torch.bfloat16, requires_grad=True)
    b = torch.zeros(2, 8, 4, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="no autograd; A require grad"):
        gemmlab.grouped_matmul(a, b, [5, 10])
    with torch.no_grad(), pytest.raises(TypeError, match="run on the GPU"):  # (then the call's own checks)
        gemmlab.grouped_matmul(a, b, [5, 10])


def test_groups_of_few_rows_run_without_clusters():
    from types import SimpleNamespace

    from gemmlab.api import dispatch
    from gemmlab.kernels.rungs import wgmma

    info = SimpleNamespace(sm_count=132, compute_capability=(9, 0), name="H100 (what-if)")
    spec = get("wgmma")

    def params(rows, groups, n=1408, k=2048):
        p, _, why = dispatch.full_params(spec, rows * groups, n, k, info, "bfloat16", "bfloat16", None, None, True,
                                         batch=groups, grouped=True)
        return p, why

    few, why = params(512, 64)
    assert few["BATCHED"] == 2 and few["CLUSTER"] == 1 and few["STREAM_K"] == 0 and few["SPLIT_K"] == 1, few
    assert "for groups" in why
    many, _ = params(4096, 8, n=14336, k=4096)
    assert many["BATCHED"] == 2 and many["CLUSTER"] == wgmma.SPEC.defaults["CLUSTER"], many
    assert wgmma.group_params(wgmma.GROUP_CLUSTER_ROWS + 1, 1408, 2048, {"CLUSTER": 2}) == {}
    # 64-column tiles chosen for all groups' rows as one small product go back to 64 x 128 ping-pong tiles
    narrow = wgmma.SPEC.heuristic(128, 4096, 4096, 132, "bfloat16", True)
    assert narrow["BN"] == 64 and wgmma.group_params(16, 4096, 4096, narrow) == wgmma.PINGPONG_64x128
    decode, _ = params(16, 8, n=4096, k=4096)  # 8 experts of 16 rows: 128 rows in all
    assert (decode["BM"], decode["BN"], decode["SCHEDULE"]) == (64, 128, wgmma.PINGPONG), decode
    # named 64-column tiles are the caller's: only the parameters not named take the groups' rule
    p, _, _ = dispatch.full_params(spec, 128, 4096, 4096, info, "bfloat16", "bfloat16", dict(BM=128, BN=64, CLUSTER=2),
                                   None, True, batch=8, grouped=True)
    assert (p["BM"], p["BN"], p["SCHEDULE"], p["CLUSTER"]) == (128, 64, wgmma.COOPERATIVE, 2), p


def test_a_masked_output_must_hold_its_groups_rows_one_after_another():
    from gemmlab.api.grouped import _rows_view

    ok = np.zeros((4, 8, 16), np.float16)
    assert _rows_view(ok, 32, 16).shape == (32, 16)
    strided = np.zeros((4, 10, 16), np.float16)[:, :8]  # 10 rows of room each, 8 used: not one matrix
    with pytest.raises(ValueError, match="one after another"):
        _rows_view(strided, 32, 16)


def test_the_tiling_model_of_grouped_products():
    from gemmlab.kernels.rungs import wgmma

    p = {"BM": 128, "BN": 256, "CLUSTER": 1}
    # 64 experts of 512 rows at N = 1408: 4 x 6 tiles each, the last column 128 of 256 wide
    w = wgmma.grouped_work([512] * 64, 1408, p, 132)
    assert (w.cluster_tiles, w.rounds) == (1536, 12) and w.output_share == pytest.approx(1408 / 1536)
    assert w.last_round == pytest.approx((1536 - 11 * 132) / 132)
    assert w.efficiency == pytest.approx(1408 / 1536 * 1536 / (12 * 132))
    # groups that end inside a tile, an empty one, and clusters of two (a second block below a group computes)
    w2 = wgmma.grouped_work([130, 0, 1], 256, {"BM": 128, "BN": 256, "CLUSTER": 2}, 132)
    assert w2.cluster_tiles == 2 and w2.clusters == 66 and w2.output_share == pytest.approx(131 / (2 * 2 * 128))
    assert wgmma.grouped_work([0, 0], 256, p, 132).efficiency == 1.0


def test_the_bench_states_the_models_of_its_problem():
    from types import SimpleNamespace

    info = SimpleNamespace(sm_count=132, compute_capability=(9, 0), name="H100 (what-if)", peak_dram_gbps=3352.0)
    m = gp.model(gp.Problem(64, 512, 1408, 2048), info)
    assert m["tile"] == "128 x 256" and m["cluster"] == 1 and m["cluster_tiles"] == 1536 and m["rounds"] == 12
    assert m["least_bytes"] == (64 * 512 * 2048 + 64 * 2048 * 1408) * 2 + 64 * 512 * 1408 * 2
    assert m["dram_ms"] == pytest.approx(m["least_bytes"] / 3352e9 * 1e3)
    fp8 = gp.model(gp.Problem(8, 128, 14336, 4096, dtype="float8_e4m3fn"), info)
    assert fp8["least_bytes"] == (1024 * 4096 + 8 * 4096 * 14336) + 1024 * 14336 * 2  # 8-bit in, bf16 out
