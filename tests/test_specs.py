"""The registry and the analytic models, checked on hand-worked cases (no GPU needed)."""

import pytest

from gemmlab.kernels import REGISTRY, all_specs, cdiv, get
from gemmlab.kernels.spec import CUDA_DIR

LADDER = ["naive", "coalesced", "smem_tiled", "blocktile_1d", "blocktile_2d"]


def test_the_ladder_is_in_rung_order_with_one_source_per_rung():
    names = [s.name for s in all_specs()]
    assert names[: len(LADDER)] == LADDER
    rungs = [s.rung for s in all_specs()]
    assert rungs == sorted(rungs) and len(set(rungs)) == len(rungs)
    sources = sorted(p.name for p in CUDA_DIR.glob("[0-9][0-9]_*.cu"))
    assert sources == sorted(s.source for s in all_specs()), "every .cu rung has exactly one spec"


def test_every_source_opens_with_a_header_naming_its_rung():
    for s in all_specs():
        head = s.source_path.read_text().splitlines()[0]
        assert head.startswith(f"// Rung {s.rung:02d} - {s.name}:"), head


def test_unknown_kernel_lists_the_known_ones():
    with pytest.raises(ValueError, match="smem_tiled"):
        get("no_such_kernel")


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.name)
def test_defaults_validate_and_search_space_is_runnable(spec):
    assert spec.validate({}) == spec.defaults
    space = spec.search_space()
    assert space, "a tuner must have something to try"
    assert spec.defaults in space
    for p in space:
        assert spec.problems(p) == []
        launch = spec.launch(100, 100, 100, p)
        assert 1 <= launch.threads_per_block <= 1024


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.name)
def test_validate_names_the_parameter_at_fault(spec):
    with pytest.raises(ValueError, match="NOPE"):
        spec.validate({"NOPE": 3})
    first = spec.params[0].name
    with pytest.raises(ValueError, match=first):
        spec.validate({first: 0})
    with pytest.raises(ValueError, match=first):
        spec.validate({first: "big"})


def test_smem_tiled_rejects_more_than_1024_threads():
    with pytest.raises(ValueError, match=r"BLOCK_DIM = 33"):
        get("smem_tiled").validate({"BLOCK_DIM": 33})


def test_blocktile_constraints_are_explained():
    with pytest.raises(ValueError, match="TM = 3 must divide BM = 128"):
        get("blocktile_1d").validate({"TM": 3})
    with pytest.raises(ValueError, match="48 KiB"):
        get("blocktile_2d").validate({"BM": 256, "BN": 256, "BK": 64, "TM": 16, "TN": 16})
    with pytest.raises(ValueError, match="threads per block"):
        get("blocktile_2d").validate({"BM": 16, "BN": 16, "TM": 8, "TN": 8})


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.name)
@pytest.mark.parametrize("mnk", [(1, 1, 1), (17, 33, 65), (1000, 7, 129), (4096, 4096, 4096)])
def test_launch_covers_every_element_of_c(spec, mnk):
    m, n, k = mnk
    for p in [spec.defaults] + spec.search_space()[:: max(1, len(spec.search_space()) // 5)]:
        g = spec.launch(m, n, k, p)
        assert g.grid[1] <= 65535 and g.grid[2] <= 65535
        if spec.walks(p) and g.grid[1:] == (1, 1) and g.grid[0] >= 1:
            continue  # a persistent grid: its blocks walk the work
        covered = g.blocks * g.threads_per_block * spec.outputs_per_thread(p)
        assert covered >= m * n
        assert g.grid[1] <= 65535 and g.grid[2] <= 65535


# ---- a 4 x 4 product by 2 x 2 blocks: 8 global reads per thread without tiling, 4 with.


def test_seed_001_global_accesses_per_thread():
    assert get("naive").loads_per_thread(4, 4, 4, {"BX": 2, "BY": 2}) == 8
    assert get("coalesced").loads_per_thread(4, 4, 4, {"BX": 2, "BY": 2}) == 8
    assert get("smem_tiled").loads_per_thread(4, 4, 4, {"BLOCK_DIM": 2}) == 4


# ---- the naive kernel does 2N FLOPs per 8N bytes (1/4 FLOP/byte); tiling multiplies by BLOCK_DIM.


@pytest.mark.parametrize("n", [64, 1000, 4096])
def test_seed_000_intensities(n):
    naive = get("naive").intensity(n, n, n, get("naive").defaults)
    # 2N^3 FLOPs over 4 bytes x (2N^3 loads + N^2 stores): 1/4 FLOP/byte up to the stores.
    assert naive == pytest.approx(2 * n**3 / (4 * (2 * n**3 + n * n)))
    assert naive == pytest.approx(0.25, rel=1 / n)
    for bd in (2, 8, 16, 32):
        tiled = get("smem_tiled").intensity(n, n, n, {"BLOCK_DIM": bd})
        if n % bd == 0:
            assert tiled / naive == pytest.approx(bd, rel=2 * bd / n)


def test_tiled_traffic_counts_only_real_elements():
    # 5 x 3 times 3 x 7 with 4 x 4 tiles: A (15 elements) is read by 2 block columns, B (21) by 2 block rows.
    t = get("smem_tiled").traffic(5, 7, 3, {"BLOCK_DIM": 4})
    assert (t.a_loads, t.b_loads, t.c_loads, t.c_stores) == (30, 42, 0, 35)
    t = get("blocktile_2d").traffic(5, 7, 3, get("blocktile_2d").defaults, beta_nonzero=True)
    assert (t.a_loads, t.b_loads, t.c_loads, t.c_stores) == (15, 21, 35, 35)


def test_register_blocking_divides_shared_loads():
    p1 = get("blocktile_1d").defaults
    p2 = get("blocktile_2d").defaults
    n = 1024
    fma = n**3
    assert get("blocktile_1d").traffic(n, n, n, p1).smem_loads / fma == pytest.approx((1 + p1["TM"]) / p1["TM"])
    assert get("blocktile_2d").traffic(n, n, n, p2).smem_loads / fma == pytest.approx(
        (p2["TM"] + p2["TN"]) / (p2["TM"] * p2["TN"]))
    assert get("smem_tiled").traffic(n, n, n, {"BLOCK_DIM": 32}).smem_loads / fma == pytest.approx(2)


def test_cdiv():
    assert [cdiv(x, 4) for x in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]


def test_registry_is_the_single_list():
    assert list(REGISTRY) == [s.name for s in all_specs()]


@pytest.mark.parametrize("spec", [s for s in all_specs() if s.heuristic], ids=lambda s: s.name)
@pytest.mark.parametrize("mnk", [(0, 5, 7), (5, 0, 7), (5, 7, 0), (0, 0, 0), (1, 1, 1), (64, 64, 131072), (4096, 4096, 4096)])
def test_heuristics_give_valid_parameters_for_every_shape(spec, mnk):
    p = spec.heuristic(*mnk, 132)
    assert spec.problems(p) == []


@pytest.mark.parametrize("tiles", [(1, 1), (2, 3), (5, 7), (33, 4), (128, 128)])
@pytest.mark.parametrize("group", [1, 2, 8, 32, 64])
def test_grouped_block_order_is_a_permutation_of_the_tiles(tiles, group):
    from gemmlab.kernels.rungs.smem_tiled import grouped_tile

    tm, tn = tiles
    seen = {grouped_tile(x, y, tm, tn, group) for y in range(tm) for x in range(tn)}
    assert seen == {(r, c) for r in range(tm) for c in range(tn)}
    if group == 1:
        assert all(grouped_tile(x, y, tm, tn, 1) == (y, x) for y in range(tm) for x in range(tn))


def test_sgemm_ring_of_stages_sizes_shared_memory():
    """Rung 10 copies tiles with cp.async into a ring of STAGES slots of BK x (BM + 4) + BK x BN floats (A
    k-major, its rows padded by four floats)."""
    from gemmlab.kernels.rungs.sgemm import smem_bytes

    spec = get("sgemm")
    p = spec.validate({})
    assert p["STAGES"] == 3
    assert smem_bytes(p) == 4 * 3 * (p["BK"] * (256 + 4) + p["BK"] * 128)
    assert spec.launch(4096, 4096, 4096, p).smem == smem_bytes(p)
    assert spec.validate({"STAGES": 4})["STAGES"] == 4  # not searched by the tuner, but allowed
    with pytest.raises(ValueError, match="STAGES = 2"):
        spec.validate({"STAGES": 2})  # the ring needs two steps in flight while one is read
    with pytest.raises(ValueError, match="227 KiB"):
        spec.validate({"BK": 32, "STAGES": 5})  # 5 x 48.5 KiB
