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
    tiles = cdiv(m, p["BM"]) * cdiv(n, p["BN"])
    return Launch((tiles, p["SPLIT_K"], 1), (block_threads(p), 1, 1), smem=smem_bytes(p))


def _workspace(m: int, n: int, k: int, p: dict[str, int]) -> tuple[int, int]:
    """Split-K needs a partial-sum slab per slice and a counter per tile of C."""
    if p["SPLIT_K"] == 1:
        return 0, 0
    return p["SPLIT_K"] * m * n, cdiv(m, p["BM"]) * cdiv(n, p["BN"])


# Tile shapes per shape class, largest first: the heuristic takes the first that gives at least one block
# per SM, so small and skinny problems get smaller tiles and still fill the GPU.
SHAPE_CLASSES = (
    dict(BM=256, BN=128, BK=16, WM=128, WN=32, TM=16, TN=8, GROUP_M=8),
    dict(BM=128, BN=128, BK=16, WM=64, WN=32, TM=8, TN=8, GROUP_M=8),
    dict(BM=128, BN=64, BK=16, WM=64, WN=32, TM=8, TN=8, GROUP_M=8),
    dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, GROUP_M=8),
)


MIN_K_PER_SPLIT = 512  # a slice shorter than this spends more on the reduction than it saves


def _heuristic(m: int, n: int, k: int, sms: int) -> dict[str, int]:
    for cfg in SHAPE_CLASSES:
        if cdiv(m, cfg["BM"]) * cdiv(n, cfg["BN"]) >= sms:
            return dict(cfg, SPLIT_K=1)
    cfg = dict(SHAPE_CLASSES[-1])
    tiles = cdiv(m, cfg["BM"]) * cdiv(n, cfg["BN"])
    split = 1
    while split < 32 and tiles * split * 2 <= 2 * sms and k // (split * 2) >= MIN_K_PER_SPLIT:
        split *= 2
    return dict(cfg, SPLIT_K=split)


SPEC = KernelSpec(
    name="sgemm",
    rung=10,
    source="10_sgemm.cu",
    template="sgemm_gemm",
    idea="the production FP32 kernel: rung 09's pipeline, tiles per shape class, grouped block order, split-K",
    params=(
        Param("BM", 256, pow2_choices(32, 256), "rows of C per block"),
        Param("BN", 128, pow2_choices(32, 256), "columns of C per block"),
        Param("BK", 16, (4, 8, 16, 32), "depth of one shared-memory step"),
        Param("WM", 128, pow2_choices(16, 128), "rows of C per warp"),
        Param("WN", 32, pow2_choices(16, 128), "columns of C per warp"),
        Param("TM", 16, (4, 8, 16), "rows of C per thread"),
        Param("TN", 8, (4, 8, 16), "columns of C per thread"),
        Param("GROUP_M", 8, (1, 4, 8, 16), "block rows per group of the L2-friendly block order"),
        Param("SPLIT_K", 1, (1, 2, 4, 8, 16, 32), "blocks sharing one tile of C along K (1: no split)"),
    ),
    constraints=_constraints,
    geometry=_geometry,
    outputs_per_thread=lambda p: p["TM"] * p["TN"],
    traffic_model=tile_traffic,
    heuristic=_heuristic,
    workspace=_workspace,
)
