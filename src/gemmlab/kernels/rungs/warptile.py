from ..spec import KernelSpec, Param, pow2_choices
from ._tiling import tile_constraints, tile_geometry, tile_traffic


def _constraints(p: dict[str, int]) -> list[str]:
    return tile_constraints(p, smem_floats=p["BK"] * (p["BM"] + 4 + p["BN"]))


SPEC = KernelSpec(
    name="warptile",
    rung=8,
    source="08_warptile.cu",
    template="warptile_gemm",
    idea="block tile -> warp tiles -> thread tiles: a warp reads few distinct words, the rest broadcast",
    params=(
        Param("BM", 128, pow2_choices(32, 256), "rows of C per block"),
        Param("BN", 128, pow2_choices(32, 256), "columns of C per block"),
        Param("BK", 8, (4, 8, 16, 32), "depth of one shared-memory step"),
        Param("WM", 64, pow2_choices(16, 128), "rows of C per warp"),
        Param("WN", 32, pow2_choices(16, 128), "columns of C per warp"),
        Param("TM", 8, (4, 8, 16), "rows of C per thread"),
        Param("TN", 8, (4, 8, 16), "columns of C per thread"),
    ),
    constraints=_constraints,
    geometry=tile_geometry,
    outputs_per_thread=lambda p: p["TM"] * p["TN"],
    traffic_model=tile_traffic,
)
