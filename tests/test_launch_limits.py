"""Launch geometry against the device limits, for every rung, every parameter set a search can produce and
shapes up to the 32-bit limits: `KernelSpec.launch` either returns a launch every CUDA device can run, or
raises a ValueError naming the rung, the shape and the axis at fault; nothing else (no overflow, no
division by zero, no grid the driver would refuse)."""

import pytest

from gemmlab.kernels import registry
from gemmlab.kernels.rungs import smem_tiled
from gemmlab.kernels.spec import GRID_LIMITS, Launch, launch_problems

BIG = 2**31 - 1
SHAPES = [(1, 1, 1), (BIG, 1, 1), (1, BIG, 1), (1, 1, BIG), (BIG, BIG, 1), (65535 * 256 + 1, 64, 64),
          (64, 65535 * 256 + 1, 64), (1, 2**21, 1), (2**21, 1, 1), (8_960_000, 8, 8), (0, 5, 5), (4097, 4097, 4097)]
SAMPLES = 600  # parameter sets per rung, spread over its whole search space


@pytest.mark.parametrize("spec", registry.all_specs(), ids=lambda s: s.name)
def test_every_launch_is_runnable_or_refused_by_name(spec):
    space = spec.search_space()
    step = max(1, len(space) // SAMPLES)
    for p in space[::step]:
        for m, n, k in SHAPES:
            try:
                geo = spec.launch(m, n, k, p)
            except ValueError as exc:
                text = str(exc)
                assert spec.name in text and f"{m} x {n} x {k}" in text and "grid" in text, text
                continue
            assert not launch_problems(geo), (spec.name, p, (m, n, k), geo)


@pytest.mark.parametrize("kernel,shape,axis", [("naive", (1, 2**21, 1), "y = 131072"),
                                               ("smem_tiled", (2**21, 1, 1), "y = 65536"),
                                               ("mma_sync", (8_960_000, 64, 64), "y = 70000")])
def test_grids_beyond_65535_in_y_are_named(kernel, shape, axis):
    spec = registry.get(kernel)
    with pytest.raises(ValueError, match=f"{kernel} .* at M x N x K = .*: grid axis {axis} is beyond the device "
                                         "limit of 65535"):
        spec.launch(*shape, spec.validate({}))


def test_the_limits_themselves():
    assert launch_problems(Launch((GRID_LIMITS[0], 65535, 65535), (1024, 1, 1))) == [
        f"{GRID_LIMITS[0] * 65535 * 65535} blocks exceed the kernels' 32-bit block ids"]
    assert launch_problems(Launch((0, 1, 1), (32, 1, 1))) == []  # an empty C: no launch
    assert "block axis z = 65" in launch_problems(Launch((1, 1, 1), (1, 1, 65)))[0]
    assert "2048 threads per block" in launch_problems(Launch((1, 1, 1), (1024, 2, 1)))[0]


def test_a_group_taller_than_the_matrix_orders_tiles_as_the_whole_height():
    # (common.cuh clamps GROUP_M to the tile rows: group x tiles_n then never overflows 32 bits)
    tiles_m, tiles_n = 7, 5
    for bid in range(tiles_m * tiles_n):
        x, y = bid % tiles_n, bid // tiles_n
        assert smem_tiled.grouped_tile(x, y, tiles_m, tiles_n, 2**30) == smem_tiled.grouped_tile(x, y, tiles_m,
                                                                                                  tiles_n, tiles_m)
