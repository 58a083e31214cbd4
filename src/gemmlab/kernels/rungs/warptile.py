from ..spec import KernelSpec
from ._tiling import tile_constraints, tile_geometry, tile_traffic, warp_tile_params


def _constraints(p: dict[str, int]) -> list[str]:
    return tile_constraints(p, smem_floats=p["BK"] * (p["BM"] + 4 + p["BN"]))


SPEC = KernelSpec(
    name="warptile",
    rung=8,
    source="08_warptile.cu",
    template="warptile_gemm",
    idea="block tile -> warp tiles -> thread tiles: a warp reads few distinct words, the rest broadcast",
    params=warp_tile_params(),
    constraints=_constraints,
    geometry=tile_geometry,
    outputs_per_thread=lambda p: p["TM"] * p["TN"],
    traffic_model=tile_traffic,
)
