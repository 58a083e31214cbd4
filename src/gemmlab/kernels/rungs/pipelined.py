from ..spec import KernelSpec
from ._tiling import tile_constraints, tile_geometry, tile_traffic, warp_tile_params


def _constraints(p: dict[str, int]) -> list[str]:
    return tile_constraints(p, smem_floats=2 * p["BK"] * (p["BM"] + 4 + p["BN"]), fragment_sets=2)


SPEC = KernelSpec(
    name="pipelined",
    rung=9,
    source="09_pipelined.cu",
    template="pipelined_gemm",
    idea="double-buffered tiles and fragments with register prefetch: loads of step k+1 overlap math of k",
    params=warp_tile_params(bm=256, wm=128, tm=16),
    constraints=_constraints,
    geometry=tile_geometry,
    outputs_per_thread=lambda p: p["TM"] * p["TN"],
    traffic_model=tile_traffic,
)
