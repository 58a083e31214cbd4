
from ..spec import KernelSpec, Launch, Param, cdiv, pow2_choices
from ._tiling import DYNAMIC_SMEM_LIMIT, block_threads, tile_constraints, tile_traffic, warp_tile_params


def smem_bytes(p: dict[str, int]) -> int:
    """STAGES x (the k-major A tile BK x (BM + 4), rows padded by 16 bytes, + the B tile BK x BN) floats."""
    return 4 * p["STAGES"] * (p["BK"] * (p["BM"] + 4) + p["BK"] * p["BN"])


def _constraints(p: dict[str, int]) -> list[str]:
    # Fragments: TM + TN values of two k (double-buffered); tiles arrive by cp.async.
    errs = tile_constraints(p, smem_floats=smem_bytes(p) // 4, smem_limit=DYNAMIC_SMEM_LIMIT,
                            fragment_regs=2 * (p["TM"] + p["TN"]), staged_loads=False)
    if p["STAGES"] < 3:
        errs.append(f"STAGES = {p['STAGES']}: the cp.async ring needs at least 3 (two steps in flight while "
                    "one is read)")
    if p["GROUP_M"] < 1:
        errs.append(f"GROUP_M = {p['GROUP_M']} must be at least 1")
    if not errs:
        threads, blocks = block_threads(p), p["MIN_BLOCKS"]
        if threads % p["BK"]:
            errs.append(f"{threads} threads do not split the A tile by k: BK = {p['BK']} must divide them")
        elif threads * blocks > 2048 or smem_bytes(p) * blocks > DYNAMIC_SMEM_LIMIT:
            errs.append(f"MIN_BLOCKS = {blocks} blocks of {threads} threads and {smem_bytes(p)} bytes of shared "
                        "memory do not fit on one SM")
        elif 65536 // (threads * blocks) < p["TM"] * p["TN"] + 2 * (p["TM"] + p["TN"]) + 32:  # accumulators, fragments, state
            errs.append(f"MIN_BLOCKS = {blocks} leaves {65536 // (threads * blocks)} registers per thread, too few "
                        f"for a {p['TM']} x {p['TN']} thread tile")
    return errs


def _geometry(m: int, n: int, k: int, p: dict[str, int]) -> Launch:
    tiles = cdiv(m, p["BM"]) * cdiv(n, p["BN"])
    return Launch((tiles, p["SPLIT_K"], 1), (block_threads(p), 1, 1), smem=smem_bytes(p))


def _workspace(m: int, n: int, k: int, p: dict[str, int]) -> tuple[int, int]:
    """Split-K needs a partial-sum slab per slice and a counter per tile of C."""
    if p["SPLIT_K"] == 1:
        return 0, 0
    return p["SPLIT_K"] * m * n, cdiv(m, p["BM"]) * cdiv(n, p["BN"])


# Tile shapes per shape class, with what the heuristic needs to know about each on the reference H100:
# its full-wave speed relative to the largest tile (measured at 8192^3: 51.7, 51.6, 46.6, 40.5 TFLOP/s),
# and how many of its blocks an SM holds (from the compiler's register report: 199, 126, 136 and 88
# registers per thread). The heuristic picks the tile with the least predicted time (see predicted_time:
# a tile and wave quantization model). ORDER is the FFMA order that measured fastest for each tile.
SHAPE_CLASSES = (
    (dict(BM=128, BN=256, BK=8, WM=128, WN=32, TM=16, TN=8, GROUP_M=8, ORDER=4), 1.00, 1),
    (dict(BM=128, BN=128, BK=16, WM=64, WN=32, TM=8, TN=8, GROUP_M=8, ORDER=6), 1.00, 2),
    (dict(BM=128, BN=64, BK=16, WM=64, WN=32, TM=8, TN=8, GROUP_M=8, ORDER=6), 0.90, 3),
    (dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, GROUP_M=8, ORDER=4), 0.78, 5),
)
MIN_K_PER_SPLIT = 512  # a slice shorter than this spends more on the reduction than it saves
REDUCE_COST = 6


def _split_for(tiles: int, slots: int, k: int) -> int:
    """Too few tiles to fill the GPU even once, and a long K: share each tile among several blocks."""
    split = 1
    while split < 32 and tiles * split * 2 <= slots and k // (split * 2) >= MIN_K_PER_SPLIT:
        split *= 2
    return split


def predicted_time(m: int, n: int, k: int, sms: int, cfg: dict[str, int], speed: float, per_sm: int) -> tuple[float, int]:
    """(time in arbitrary units, split) of one tile shape. Blocks (tiles x split) are dealt to the SMs;
    an SM with j of them resident (at most `per_sm`) runs at `speed` x j / per_sm of its best: a block
    runs at its share of a full SM whether or not the other slots are filled (measured: a lone 128 x 64
    block, one warp per scheduler, ran at 0.36 of a full SM's speed, two 64 x 64 blocks of five at 0.58;
    a square-root law, the earlier model, picked the larger tile for 1000^3 and lost 36%).
    Each block does its padded tile's work (tile quantization) over its slice of K; an SM runs
    ceil(its blocks / j) rounds (wave quantization)."""
    tiles = cdiv(m, cfg["BM"]) * cdiv(n, cfg["BN"])
    if tiles == 0:
        return 0.0, 1  # an empty C: nothing to launch
    split = _split_for(tiles, sms * per_sm, k)
    per_sm_blocks = cdiv(tiles * split, sms)
    resident = min(per_sm_blocks, per_sm)
    rounds = cdiv(per_sm_blocks, resident)
    block_work = cfg["BM"] * cfg["BN"] * cdiv(cdiv(k, split), cfg["BK"]) * cfg["BK"]
    # The last block of a split tile reads every slice's partial tile back: about REDUCE_COST
    # multiply-adds' worth of time per element read (L2 bandwidth against FMA rate).
    reduce_work = REDUCE_COST * split * cfg["BM"] * cfg["BN"] if split > 1 else 0
    return (rounds * block_work * resident / (speed * resident / per_sm) + reduce_work), split


def _heuristic(m: int, n: int, k: int, sms: int) -> dict[str, int]:
    scored = [(predicted_time(m, n, k, sms, cfg, speed, per_sm), cfg) for cfg, speed, per_sm in SHAPE_CLASSES]
    (_, split), cfg = min(scored, key=lambda t: t[0][0])
    return dict(cfg, SPLIT_K=split)


SPEC = KernelSpec(
    name="sgemm",
    rung=10,
    source="10_sgemm.cu",
    template="sgemm_gemm",
    idea="the production FP32 kernel: a cp.async ring with k-major A, fragments double-buffered across steps, "
         "tiles per shape class, grouped block order, split-K",
    params=(
        *warp_tile_params(bm=128, bn=256, bk=8, wm=128, wn=32, tm=16, tn=8),
        Param("GROUP_M", 8, (1, 4, 8, 16), "block rows per group of the L2-friendly block order"),
        Param("SPLIT_K", 1, (1, 2, 4, 8, 16, 32), "blocks sharing one tile of C along K (1: no split)"),
        Param("MIN_BLOCKS", 1, (1, 2, 3, 4), "resident blocks per SM the register budget must allow"),
        Param("STAGES", 3, (3, 4), "tiles in the cp.async ring: steps in flight + 1 (more may be asked for)"),
        Param("ORDER", 4, (1, 2, 3, 4, 5, 6), "order of one k's FFMAs (which operands the reuse cache can serve)"),
    ),
    constraints=_constraints,
    geometry=_geometry,
    outputs_per_thread=lambda p: p["TM"] * p["TN"],
    traffic_model=tile_traffic,
    heuristic=_heuristic,
    workspace=_workspace,
    # The fused epilogue of epilogue.cuh (bias, activation, residual; fp32 out), applied once after any
    # split-K reduction; its four arguments follow the workspace ones.
    extra={"epilogue": True},
)
