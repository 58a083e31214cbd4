from ..spec import KernelSpec, Launch, Param, Traffic, cdiv


def _constraints(p: dict[str, int]) -> list[str]:
    bd = p["BLOCK_DIM"]
    errs = []
    if p["GROUP_M"] < 1:
        errs.append(f"GROUP_M = {p['GROUP_M']} must be at least 1")
    if not 2 <= bd <= 32:
        errs.append(f"BLOCK_DIM = {bd} must be 2..32 (BLOCK_DIM^2 = {bd * bd} threads, at most 1024)")
    return errs


def grouped_tile(block_x: int, block_y: int, tiles_m: int, tiles_n: int, group: int) -> tuple[int, int]:
    """The (tile row, tile column) block (x, y) computes: common.cuh's grouped_tile, for models and tests."""
    block_id = block_y * tiles_n + block_x
    group = max(1, min(group, tiles_m))
    per_group = group * tiles_n
    first = (block_id // per_group) * group
    rows = min(tiles_m - first, group)
    return first + (block_id % per_group) % rows, (block_id % per_group) // rows


def _geometry(m: int, n: int, k: int, p: dict[str, int]) -> Launch:
    bd = p["BLOCK_DIM"]
    return Launch((cdiv(n, bd), cdiv(m, bd), 1), (bd, bd, 1))


def _traffic(m: int, n: int, k: int, p: dict[str, int]) -> Traffic:
    bd = p["BLOCK_DIM"]
    # Each A tile is loaded once per block column, each B tile once per block row.
    threads = cdiv(m, bd) * cdiv(n, bd) * bd * bd
    return Traffic(
        a_loads=m * k * cdiv(n, bd),
        b_loads=k * n * cdiv(m, bd),
        c_loads=0,
        c_stores=m * n,
        smem_loads=threads * cdiv(k, bd) * bd * 2,
    )


SPEC = KernelSpec(
    name="smem_tiled",
    rung=3,
    source="03_smem_tiled.cu",
    template="smem_tiled_gemm",
    idea="BLOCK_DIM x BLOCK_DIM tiles of A and B staged in shared memory, two barriers per step",
    params=(
        Param("BLOCK_DIM", 32, tuple(range(2, 33)), "tile edge; the block has BLOCK_DIM^2 threads"),
        Param("GROUP_M", 32, (1, 2, 4, 8, 16, 32, 64), "tile rows per group of the block order (1: row-major)"),
    ),
    constraints=_constraints,
    geometry=_geometry,
    traffic_model=_traffic,
    # Shared-memory wavefronts (the header's count): per 32 FMAs a warp issues 32 scalar loads of Bs and
    # 8 four-wide broadcast loads of As, 40 in all, i.e. 5/4 per FMA step of every warp.
    smem_wavefronts=(lambda m, n, k, p: cdiv(m, p["BLOCK_DIM"]) * cdiv(n, p["BLOCK_DIM"])
           * cdiv(p["BLOCK_DIM"] ** 2, 32) * cdiv(k, p["BLOCK_DIM"]) * p["BLOCK_DIM"] * 5 / 4),
)
