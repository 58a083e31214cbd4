from ..spec import KernelSpec, Param, pow2_choices
from ._tiling import tile_constraints, tile_geometry, tile_traffic


def _constraints(p: dict[str, int]) -> list[str]:
    return tile_constraints(p, smem_floats=p["BK"] * (p["BM"] + p["BN"]))


SPEC = KernelSpec(
    name="vectorized",
    rung=6,
    source="06_vectorized.cu",
    template="vectorized_gemm",
    idea="16-byte global and shared accesses; A stored transposed so its fragments load as float4",
    params=(
        Param("BM", 128, pow2_choices(32, 256), "rows of C per block"),
        Param("BN", 128, pow2_choices(32, 256), "columns of C per block"),
        Param("BK", 8, (4, 8, 16, 32), "depth of one shared-memory step"),
        Param("TM", 8, (4, 8, 16), "rows of C per thread"),
        Param("TN", 8, (4, 8, 16), "columns of C per thread"),
    ),
    constraints=_constraints,
    geometry=tile_geometry,
    outputs_per_thread=lambda p: p["TM"] * p["TN"],
    traffic_model=tile_traffic,
)
