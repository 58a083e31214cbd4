from ..spec import KernelSpec
from ._tiling import block_tile_params, tile_constraints, tile_geometry, tile_traffic


def _constraints(p: dict[str, int]) -> list[str]:
    return tile_constraints(p, smem_floats=p["BK"] * (p["BM"] + p["BN"]))


SPEC = KernelSpec(
    name="vectorized",
    rung=6,
    source="06_vectorized.cu",
    template="vectorized_gemm",
    idea="16-byte global and shared accesses; A stored transposed so its fragments load as float4",
    params=block_tile_params(),
    constraints=_constraints,
    geometry=tile_geometry,
    outputs_per_thread=lambda p: p["TM"] * p["TN"],
    traffic_model=tile_traffic,
)
