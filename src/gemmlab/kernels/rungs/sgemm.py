from ..spec import KernelSpec, Launch, Param, cdiv, pow2_choices
from ._tiling import DYNAMIC_SMEM_LIMIT, block_threads, tile_constraints, tile_traffic


def smem_bytes(p: dict[str, int]) -> int:
    return 4 * 2 * p["BK"] * (p["BM"] + 4 + p["BN"])


def _constraints(p: dict[str, int]) -> list[str]:
    errs = tile_constraints(p, smem_floats=smem_bytes(p) // 4, fragment_sets=2, smem_limit=DYNAMIC_SMEM_LIMIT)
    if p["GROUP_M"] < 1:
        errs.append(f"GROUP_M = {p['GROUP_M']} must be at least 1")
    return errs


def _geometry(m: int, n: int, k: int, p: dict[str, int]) -> Launch:
    blocks = cdiv(m, p["BM"]) * cdiv(n, p["BN"])
    return Launch((blocks, 1, 1), (block_threads(p), 1, 1), smem=smem_bytes(p))


# Tile shapes per shape class, largest first: the heuristic takes the first that gives at least one block
# per SM, so small and skinny problems get smaller tiles and still fill the GPU.
SHAPE_CLASSES = (
    dict(BM=256, BN=128, BK=8, WM=128, WN=32, TM=16, TN=8, GROUP_M=8),
    dict(BM=128, BN=128, BK=16, WM=64, WN=32, TM=8, TN=8, GROUP_M=8),
    dict(BM=128, BN=64, BK=16, WM=64, WN=32, TM=8, TN=8, GROUP_M=8),
    dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, GROUP_M=8),
)


def _heuristic(m: int, n: int, k: int, sms: int) -> dict[str, int]:
    for cfg in SHAPE_CLASSES:
        if cdiv(m, cfg["BM"]) * cdiv(n, cfg["BN"]) >= sms:
            return dict(cfg)
    return dict(SHAPE_CLASSES[-1])


SPEC = KernelSpec(
    name="sgemm",
    rung=10,
    source="10_sgemm.cu",
    template="sgemm_gemm",
    idea="the production FP32 kernel: rung 09's pipeline, tiles per shape class, L2-grouped block order",
    params=(
        Param("BM", 256, pow2_choices(32, 256), "rows of C per block"),
        Param("BN", 128, pow2_choices(32, 256), "columns of C per block"),
        Param("BK", 8, (4, 8, 16, 32), "depth of one shared-memory step"),
        Param("WM", 128, pow2_choices(16, 128), "rows of C per warp"),
        Param("WN", 32, pow2_choices(16, 128), "columns of C per warp"),
        Param("TM", 16, (4, 8, 16), "rows of C per thread"),
        Param("TN", 8, (4, 8, 16), "columns of C per thread"),
        Param("GROUP_M", 8, (1, 4, 8, 16), "block rows per group of the L2-friendly block order"),
    ),
    constraints=_constraints,
    geometry=_geometry,
    outputs_per_thread=lambda p: p["TM"] * p["TN"],
    traffic_model=tile_traffic,
    heuristic=_heuristic,
)
