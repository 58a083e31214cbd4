from ..spec import KernelSpec
from ._tiling import block_tile_params, tile_constraints, tile_geometry, tile_traffic


def _constraints(p: dict[str, int]) -> list[str]:
    return tile_constraints(p, smem_floats=p["BK"] * (p["BM"] + 4 + p["BN"]))


SPEC = KernelSpec(
    name="conflict_free",
    rung=7,
    source="07_conflict_free.cu",
    template="conflict_free_gemm",
    idea="thread tiles spread in 4x4 groups and a padded A tile: no shared-memory bank conflicts",
    params=block_tile_params(),
    constraints=_constraints,
    geometry=tile_geometry,
    outputs_per_thread=lambda p: p["TM"] * p["TN"],
    traffic_model=tile_traffic,
)
