from ..spec import KernelSpec, Launch, Param, cdiv
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


SPLIT_GROUP = 8  # slices per reduction group (G in 10_sgemm.cu)


def _workspace(m: int, n: int, k: int, p: dict[str, int]) -> tuple[int, int]:
    """Split-K needs a partial-sum slab per slice, and per tile of C a counter per group of slices and one
    for the tile."""
    if p["SPLIT_K"] == 1:
        return 0, 0
    groups = cdiv(p["SPLIT_K"], SPLIT_GROUP)
    return p["SPLIT_K"] * m * n, cdiv(m, p["BM"]) * cdiv(n, p["BN"]) * (groups + 1)


# Tile shapes per shape class, with what the heuristic needs to know about each on the reference H100:
# - its speed relative to the largest tile. The full-wave speeds measured at 8192^3 are 51.8, 49.0 (51.5
#   with ORDER 6), 47.5 and 40.5 TFLOP/s; the model's values, 1.00, 1.00, 0.90 and 0.78, are those whose
#   picks measured best over the shape suite (with 0.95 and 0.92 it moves 1024^3, 4097^3 and two split-K
#   shapes to tiles that were not measured better);
# - how many of its blocks an SM holds: MIN_BLOCKS, which caps the registers so that they fit, split-K
#   instantiations included (shared memory allows as many).
# The heuristic picks the tile with the least predicted time (predicted_time: a tile and wave quantization
# model). ORDER is the FFMA order that measured fastest for each tile where the heuristic uses it (128 x
# 128 runs split-K shapes: ORDER 4 there measured 0.85-0.87 of cuBLAS, ORDER 6 0.79-0.82, though ORDER 6
# is faster in full waves, 51.5 TFLOP/s). An order's worth belongs to one compiled kernel, not to the
# source: any change to 10_sgemm.cu can move it by several percent (ptxas schedules and allocates the
# whole kernel), so measure the orders again.
SHAPE_CLASSES = (
    (dict(BM=128, BN=256, BK=8, WM=128, WN=32, TM=16, TN=8, GROUP_M=8, ORDER=1, MIN_BLOCKS=1), 1.00, 1),
    (dict(BM=128, BN=128, BK=16, WM=64, WN=32, TM=8, TN=8, GROUP_M=8, ORDER=4, MIN_BLOCKS=2), 1.00, 2),
    (dict(BM=128, BN=64, BK=16, WM=64, WN=32, TM=8, TN=8, GROUP_M=8, ORDER=4, MIN_BLOCKS=3), 0.90, 3),
    (dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, GROUP_M=8, ORDER=4, MIN_BLOCKS=5), 0.78, 5),
)
# A slice shorter than this spends more on the reduction than it saves (512^3: split 2 measured 0.90 of
# cuBLAS, no split 0.73).
MIN_K_PER_SPLIT = 256
REDUCE_COST = 6
MAX_SPLIT = 128


def _split_for(tiles: int, slots: int, k: int) -> int:
    """Too few tiles to fill the GPU even once, and a long K: share each tile among several blocks."""
    split = 1
    while split < MAX_SPLIT and tiles * split * 2 <= slots and k // (split * 2) >= MIN_K_PER_SPLIT:
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
    # The last blocks of a split tile read the slices' partial tiles back, a group of up to SPLIT_GROUP at
    # a time and then the group sums: about REDUCE_COST multiply-adds' worth of time per element read (L2
    # bandwidth against FMA rate) along that chain.
    groups = cdiv(split, SPLIT_GROUP)
    chain = min(split, SPLIT_GROUP) + (groups if groups > 1 else 0)
    reduce_work = REDUCE_COST * chain * cfg["BM"] * cfg["BN"] if split > 1 else 0
    # j resident blocks share the SM's speed x j / per_sm: each runs at speed / per_sm.
    return rounds * block_work * per_sm / speed + reduce_work, split


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
        Param("SPLIT_K", 1, (1, 2, 4, 8, 16, 32, 64, 128), "blocks sharing one tile of C along K (1: no split)"),
        Param("MIN_BLOCKS", 1, (1, 2, 3, 4), "resident blocks per SM the register budget must allow"),
        Param("STAGES", 3, (3, 4), "tiles in the cp.async ring: steps in flight + 1 (more may be asked for)"),
        Param("ORDER", 1, (1, 2, 3, 4, 5, 6), "order of one k's FFMAs (which operands the reuse cache can serve)"),
    ),
    constraints=_constraints,
    geometry=_geometry,
    outputs_per_thread=lambda p: p["TM"] * p["TN"],
    traffic_model=tile_traffic,
    heuristic=_heuristic,
    workspace=_workspace,
    # The fused epilogue of epilogue.cuh (bias, activation, residual; fp32 out), applied once after any
    # split-K reduction; its four arguments follow the workspace ones.
    # B is read in 16-byte pieces by the unchecked loop; a B whose rows are not 16-byte aligned is copied
    # into padded rows (a K x N copy, about 1% of a large product) rather than run on the checked path,
    # for products of 2^30 multiply-adds or more (measured: 4097^3 0.71 -> 0.90 of cuBLAS, 2047 x 2049 x
    # 1023 0.58 -> 0.75; 333 x 777 x 999 0.36 -> 0.20, the copy's cost). A needs no alignment (four-byte copies).
    extra={"epilogue": True, "stage_operands": "B", "stage_min_macs": 1 << 30},
)
