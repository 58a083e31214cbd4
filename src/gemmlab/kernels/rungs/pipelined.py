from ..spec import KernelSpec, Param, pow2_choices
from ._tiling import tile_constraints, tile_geometry, tile_traffic


def _constraints(p: dict[str, int]) -> list[str]:
    return tile_constraints(p, smem_floats=2 * p["BK"] * (p["BM"] + 4 + p["BN"]), fragment_sets=2)


SPEC = KernelSpec(
    name="pipelined",
    rung=9,
    source="09_pipelined.cu",
    template="pipelined_gemm",
    idea="double-buffered tiles and fragments with register prefetch: loads of step k+1 overlap math of k",
    params=(
        Param("BM", 256, pow2_choices(32, 256), "rows of C per block"),
        Param("BN", 128, pow2_choices(32, 256), "columns of C per block"),
        Param("BK", 8, (4, 8, 16, 32), "depth of one shared-memory step"),
        Param("WM", 128, pow2_choices(16, 128), "rows of C per warp"),
        Param("WN", 32, pow2_choices(16, 128), "columns of C per warp"),
        Param("TM", 16, (4, 8, 16), "rows of C per thread"),
        Param("TN", 8, (4, 8, 16), "columns of C per thread"),
    ),
    constraints=_constraints,
    geometry=tile_geometry,
    outputs_per_thread=lambda p: p["TM"] * p["TN"],
    traffic_model=tile_traffic,
)
