from typing import NamedTuple

from ..spec import KernelSpec, Launch, Param, SecondKernel, Staging, Workspace, cdiv
from ._tiling import DYNAMIC_SMEM_LIMIT, block_threads, tile_constraints, tile_traffic, warp_tile_params


B_ROW_MAJOR, B_KMAJOR = 1, 2  # B_LAYOUT: B as given (K x N, row-major), or B^T given (N x K, K contiguous)


def smem_bytes(p: dict[str, int]) -> int:
    """STAGES x (the k-major A tile BK x (BM + 4), rows padded by 16 bytes, + the B tile BK x BN, its rows
    padded the same way when B^T is copied as A is) floats."""
    pad = 4 if p.get("B_LAYOUT", B_ROW_MAJOR) == B_KMAJOR else 0
    return 4 * p["STAGES"] * (p["BK"] * (p["BM"] + 4) + p["BK"] * (p["BN"] + pad))


def _constraints(p: dict[str, int]) -> list[str]:
    # Fragments: TM + TN values of two k (double-buffered); tiles arrive by cp.async.
    errs = tile_constraints(p, smem_floats=smem_bytes(p) // 4, smem_limit=DYNAMIC_SMEM_LIMIT,
                            fragment_regs=2 * (p["TM"] + p["TN"]), staged_loads=False)
    if p["STAGES"] < 3:
        errs.append(f"STAGES = {p['STAGES']}: the cp.async ring needs at least 3 (two steps in flight while "
                    "one is read)")
    if p["GROUP_M"] < 1:
        errs.append(f"GROUP_M = {p['GROUP_M']} must be at least 1")
    if p["REDUCE"] not in (1, 2):
        errs.append(f"REDUCE = {p['REDUCE']}: the slices are summed in the kernel (1) or by a second launch (2)")
    elif p["REDUCE"] == 2 and p["WAVE"] != 1:
        errs.append(f"REDUCE = 2 sums every tile's slices, so it needs WAVE = 1 (every tile split), not {p['WAVE']}")
    if p["BATCHED"] not in (0, 1):
        errs.append(f"BATCHED = {p['BATCHED']}: 0 (one product) or 1 (a batch, one product per grid.z)")
    elif p["BATCHED"] and p["SPLIT_K"] != 1:
        errs.append(f"BATCHED = 1 runs each product unsplit; SPLIT_K = {p['SPLIT_K']} has no batched form")
    if p["B_LAYOUT"] not in (B_ROW_MAJOR, B_KMAJOR):
        errs.append(f"B_LAYOUT = {p['B_LAYOUT']}: 1 (B row-major) or 2 (B^T given, read K-major)")
    if p["C_STAGE"] not in (0, 1):
        errs.append(f"C_STAGE = {p['C_STAGE']}: C written from the registers (0) or a row at a time through shared "
                    "memory (1)")
    elif p["C_STAGE"] and not errs and c_stage_floats(p) > smem_bytes(p) // 4:
        errs.append(f"C_STAGE = 1 stages {c_stage_floats(p)} floats of C in the ring's {smem_bytes(p) // 4}: too "
                    f"few for BM = {p['BM']}, BN = {p['BN']}, WN = {p['WN']} at STAGES = {p['STAGES']}")
    if p["B_COPY"] not in (4, 16):
        errs.append(f"B_COPY = {p['B_COPY']}: B is copied in pieces of 16 or 4 bytes")
    elif p["B_COPY"] == 4 and p["B_LAYOUT"] == B_ROW_MAJOR and not errs:
        threads = block_threads(p)
        if threads % p["BN"] and p["BN"] % threads:
            errs.append(f"B_COPY = 4 needs the {threads} threads and BN = {p['BN']} to divide one another")
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


def c_stage_floats(p: dict[str, int]) -> int:
    """C_STAGE = 1: each warp stages four rows of its lanes' results at a time, 4 (WM / TM) rows of WN + 4
    floats, in the ring's shared memory once the main loop is done."""
    warps = block_threads(p) // 32
    return warps * 4 * (p["WM"] // p["TM"]) * (p["WN"] + 4)


def split_tiles(tiles: int, p: dict[str, int]) -> int:
    """How many of `tiles` tiles of C are split SPLIT_K ways: all of them when WAVE == 1, else those past
    the last whole wave of WAVE tiles (the rest run whole)."""
    if p["SPLIT_K"] == 1:
        return 0
    return tiles if p["WAVE"] == 1 else tiles % p["WAVE"]


def _geometry(m: int, n: int, k: int, p: dict[str, int]) -> Launch:
    """A block per tile, times SPLIT_K along y when every tile is split; with a split tail, one dimension:
    the whole tiles, then SPLIT_K blocks per tail tile."""
    tiles = cdiv(m, p["BM"]) * cdiv(n, p["BN"])
    if p["SPLIT_K"] > 1 and p["WAVE"] == 1:
        return Launch((tiles, p["SPLIT_K"], 1), (block_threads(p), 1, 1), smem=smem_bytes(p))
    split = split_tiles(tiles, p)
    return Launch((tiles - split + split * p["SPLIT_K"], 1, 1), (block_threads(p), 1, 1), smem=smem_bytes(p))


SPLIT_GROUP = 8  # slices per reduction group (G in 10_sgemm.cu)
REDUCE_THREADS = 256  # sgemm_split_reduce's block (its __launch_bounds__)


def _after_geometry(m: int, n: int, k: int, p: dict[str, int]) -> Launch | None:
    """The second launch, sgemm_split_reduce, where REDUCE = 2 asks for it: a thread per 4 columns of a row."""
    if p["SPLIT_K"] == 1 or p["REDUCE"] != 2:
        return None
    return Launch((cdiv(m * cdiv(n, 4), REDUCE_THREADS), 1, 1), (REDUCE_THREADS, 1, 1))


def _workspace(m: int, n: int, k: int, p: dict[str, int], blocks: int = 0) -> Workspace:
    """Split-K needs a partial-sum slab per slice (M rows of N rounded up to a multiple of 4 floats), and
    per tile of C a counter per group of slices and one for the tile."""
    if p["SPLIT_K"] == 1:
        return Workspace()
    groups = cdiv(p["SPLIT_K"], SPLIT_GROUP)
    return Workspace(p["SPLIT_K"] * m * cdiv(n, 4) * 4, cdiv(m, p["BM"]) * cdiv(n, p["BN"]) * (groups + 1))


# Tile shapes per shape class, with what the heuristic needs to know about each on the reference H100:
# - its speed relative to the largest tile. The full-wave speeds measured at 8192^3 are 51.8, 49.0 (51.5
#   with ORDER 6), 47.5 and 40.5 TFLOP/s; the model uses 1.00, 0.95, 0.90 and 0.78 (0.95 for 128 x 128,
#   the measured ratio, once the split tail gave the model another way to fill the last wave: with 1.00,
#   16384 x 16384 x 256 moved to a split 128 x 128 tail and lost 12%);
# - how many of its blocks an SM holds: MIN_BLOCKS, which caps the registers so that they fit, split-K
#   instantiations included (shared memory allows as many);
# - whether the heuristic may split its last wave (WAVE; predicted_time). Only 128 x 128: the split
#   instantiation of 128 x 256 needs 205-211 registers and its split tails measured 0.44-0.99 of cuBLAS
#   where other choices gave 0.77-1.14 (2047 x 2049 x 1023, 3000^3, 4097^3, 16384 x 16384 x 256); the
#   128 x 64 tail lost on 2047 x 2049 x 1023 (0.69 against 0.77 for 64 x 64 tiles).
# The heuristic picks the tile with the least predicted time (predicted_time: a tile and wave quantization
# model). ORDER is the FFMA order that measured fastest for each tile where the heuristic uses it (128 x
# 256: ORDER 4 at 100.0% / 101.4% of cuBLAS at 4096^3 / 8192^3, ORDER 1 99.4% / 101.1%, the others 94-97%,
# with this kernel; 128 x 128 runs split-K shapes: ORDER 4 there measured 0.85-0.87 of cuBLAS, ORDER 6
# 0.79-0.82, though ORDER 6 is faster in full waves, 51.5 TFLOP/s). An order's worth belongs to one
# compiled kernel, not to the source: any change to 10_sgemm.cu can move it by several percent (ptxas
# schedules and allocates the whole kernel), so measure the orders again.
class ShapeClass(NamedTuple):
    cfg: dict            # the tile's parameters
    speed: float         # relative to the largest tile
    per_sm: int          # resident blocks per SM (MIN_BLOCKS)
    tail: bool           # may the heuristic split its last wave
    min_slice: int = 0   # shortest slice of K it may be split into (0: the general rule, _split_for)
    bt_speed: float = 1.0  # its speed reading B^T in place (B_LAYOUT 2) against a row-major B


SHAPE_CLASSES = (
    # 128 x 256 split only into long slices: with 250 k each (1000^3 and 1024^3, 4 slices) it measured 0.71
    # and 0.95 of cuBLAS against 0.86 and 0.98 for smaller tiles, about 20 us of fixed cost per block more
    # than the model charges; with 1024 k and more (the K >> M N shapes) it is the fastest.
    ShapeClass(dict(BM=128, BN=256, BK=8, WM=128, WN=32, TM=16, TN=8, GROUP_M=8, ORDER=4, MIN_BLOCKS=1), 1.00, 1,
               False, 1024, 0.875),
    ShapeClass(dict(BM=128, BN=128, BK=16, WM=64, WN=32, TM=8, TN=8, GROUP_M=8, ORDER=4, MIN_BLOCKS=2), 0.95, 2,
               True, 0, 0.96),
    ShapeClass(dict(BM=128, BN=64, BK=16, WM=64, WN=32, TM=8, TN=8, GROUP_M=8, ORDER=4, MIN_BLOCKS=3), 0.90, 3,
               False),
    ShapeClass(dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, GROUP_M=8, ORDER=4, MIN_BLOCKS=5), 0.78, 5,
               False),
)
# A slice shorter than this spends more on the reduction than it saves (512^3: split 2 measured 0.90 of
# cuBLAS, no split 0.73). Splits of 4 or more are summed by the second kernel (REDUCE = 2, see
# _reduce_for), which costs the same whatever the slices' length, so they may go down to
# MIN_K_PER_SLICE_AFTER (333 x 777 x 999: 8 slices of 125 k, summed by the second kernel, measured 0.79 of
# cuBLAS; 2 slices summed in the kernel 0.56).
MIN_K_PER_SPLIT = 256
MIN_K_PER_SLICE_AFTER = 96
# A split that fills the wave (_fill_split) is taken over the power of two only where its blocks fill at
# least FILL_MIN_SHARE of the slots and it is predicted at least 5% faster: the powers of two were measured
# on the long-K shapes (256 x 256 x 65536, 512^3) and a fill predicted within a few percent is noise.
FILL_MIN_SHARE, FILL_MIN_GAIN = 0.9, 0.95
# The split tail's slices may be shorter: without the split its blocks would leave most of the GPU idle
# for a whole tile's time.
MIN_K_PER_TAIL_SLICE = 128
# Products of at least this many multiply-adds with 16-byte B copies get a B whose rows are not 16-byte
# aligned copied into padded rows by the launch layer (the spec's Staging).
STAGE_MIN_MACS = 1 << 30
REDUCE_COST = 6
MAX_SPLIT = 128


def _split_for(tiles: int, slots: int, k: int, min_slice: int = 0) -> int:
    """Too few tiles to fill the GPU even once, and a long K: share each tile among several blocks."""
    split = 1
    while split < MAX_SPLIT and tiles * split * 2 <= slots and k // (split * 2) >= max(
            min_slice, MIN_K_PER_SPLIT if split == 1 else MIN_K_PER_SLICE_AFTER):
        split *= 2
    return split


def _fill_split(tiles: int, slots: int, k: int, min_slice: int = 0) -> int:
    """The split whose blocks fill one wave of slots most closely, of any count (not only the powers of two
    _split_for doubles through: 43 tiles of 128 x 256 on 132 SMs make 129 blocks split three ways, 86 split
    two), with slices no shorter than _split_for allows; 1 where none does."""
    split = min(MAX_SPLIT, slots // tiles) if tiles else 1
    while split > 1 and k // split < max(min_slice, MIN_K_PER_SPLIT if _reduce_for(split, 1) == 1
                                         else MIN_K_PER_SLICE_AFTER):
        split -= 1
    return max(split, 1)


def _reduce_for(split: int, wave: int) -> int:
    """Where the slices are summed: in the kernel by each tile's last blocks (REDUCE = 1) for 2 slices and for
    split tails, else by the second kernel over all of C (REDUCE = 2). Measured, second kernel against the
    kernel's own sum: 256 x 256 x 65536 (64 slices of 128 x 256) 0.98 against 0.84 of cuBLAS, 512 x 512 x
    16384 (16) 0.99 against 0.86, 128 x 4096 x 16384 (8) 0.97 against 0.90, 4096 x 128 x 4096 (8 of 128 x
    128) 0.96 against 0.89, 1024^3 (4) 1.02 against 0.98, 333 x 777 x 999 (4 of 64 x 64) 0.72 against
    0.63; 64 x 64 x 131072 (128) level; 512^3 (2) 0.68 against 0.92 (the second launch costs about as
    much as the in-kernel sum of two slabs saves). The in-kernel sum has one block read every slab of its
    tile, at about 25 us per megabyte of slabs; the second kernel spreads the reading over the GPU."""
    return 2 if split >= 4 and wave == 1 else 1


def predicted_time(m: int, n: int, k: int, sms: int, cfg: dict[str, int], speed: float,
                   per_sm: int, tail_split: bool = True, min_slice: int = 0) -> tuple[float, int, int]:
    """(time in arbitrary units, SPLIT_K, WAVE) of one tile shape. Blocks are dealt to the SMs; an SM with
    j of them resident (at most `per_sm`) runs at `speed` x j / per_sm of its best: a block runs at its
    share of a full SM whether or not the other slots are filled (measured: a lone 128 x 64 block, one warp
    per scheduler, ran at 0.36 of a full SM's speed, two 64 x 64 blocks of five at 0.58; a square-root law,
    the earlier model, picked the larger tile for 1000^3 and lost 36%). Each block does its padded tile's
    work (tile quantization) over its slice of K; an SM runs ceil(its blocks / j) rounds (wave quantization).
    Fewer tiles than a wave: every tile split, by the power of two _split_for reaches or by the count that
    fills the wave (_fill_split), whichever is predicted faster. More, with a partial last wave: also the
    choice of splitting only that wave's tiles (WAVE = the slots of a wave), so that its blocks, SPLIT_K
    times as many, share the GPU instead of leaving most of it idle for a whole tile's time."""
    tiles = cdiv(m, cfg["BM"]) * cdiv(n, cfg["BN"])
    if tiles == 0:
        return 0.0, 1, 1  # an empty C: nothing to launch
    slots = sms * per_sm

    def phase(blocks: int, split: int) -> float:
        """Time of `blocks` blocks, each over 1 / split of K."""
        if blocks == 0:
            return 0.0
        per_sm_blocks = cdiv(blocks, sms)
        resident = min(per_sm_blocks, per_sm)
        block_work = cfg["BM"] * cfg["BN"] * cdiv(cdiv(k, split), cfg["BK"]) * cfg["BK"]
        # j resident blocks share the SM's speed x j / per_sm: each runs at speed / per_sm.
        return cdiv(per_sm_blocks, resident) * block_work * per_sm / speed

    def reduce_work(split: int) -> float:
        # The last blocks of a split tile read the slices' partial tiles back, a group of up to SPLIT_GROUP
        # at a time and then the group sums: about REDUCE_COST multiply-adds' worth of time per element read
        # (L2 bandwidth against FMA rate) along that chain. Charged for every split, also where the second
        # kernel sums the slices (_reduce_for), which costs less for long chains: the picks this model
        # makes were measured with that charge (docs/journal.md, the shape suite's fourth round).
        if split == 1:
            return 0.0
        groups = cdiv(split, SPLIT_GROUP)
        return REDUCE_COST * (min(split, SPLIT_GROUP) + (groups if groups > 1 else 0)) * cfg["BM"] * cfg["BN"]

    split = _split_for(tiles, slots, k, min_slice)
    best = (phase(tiles * split, split) + reduce_work(split), split, 1)
    fill = _fill_split(tiles, slots, k, min_slice)
    if fill != split and tiles * fill >= FILL_MIN_SHARE * slots:
        t = phase(tiles * fill, fill) + reduce_work(fill)
        if t < FILL_MIN_GAIN * best[0]:
            best = (t, fill, 1)
    split = best[1]
    tail = tiles % slots
    if tail_split and split == 1 and tiles > slots and tail:
        whole = phase(tiles - tail, 1)
        s = 2
        while s <= MAX_SPLIT and k // s >= MIN_K_PER_TAIL_SLICE and tail * s <= slots:
            t = whole + phase(tail * s, s) + reduce_work(s)
            if t < best[0]:
                best = (t, s, slots)
            s *= 2
    return best


def _heuristic(m: int, n: int, k: int, sms: int, element: str | None = None,
               b_kmajor: bool = False) -> dict[str, int]:
    """The tile class with the least predicted time (with B^T read in place where `b_kmajor`: _bt_factor), its
    split (and tail), where the slices are summed and how B is copied."""
    (_, split, wave), cfg = _best(m, n, k, sms, b_kmajor)
    p = dict(cfg, SPLIT_K=split, WAVE=wave, REDUCE=_reduce_for(split, wave))
    return {**p, **_follows(m, n, k, p)}


def _follows(m: int, n: int, k: int, p: dict[str, int]) -> dict[str, int]:
    """What follows from B's and C's alignment (N a multiple of 4 or not): B_COPY (_b_copy) and C_STAGE (C
    a row at a time through shared memory where its rows are off 16 bytes), each only where the tile's
    constraints allow it; else the value in `p` stays. `p` may be partial (the heuristic's): the rung's
    defaults fill it in."""
    p = {**SPEC.defaults, **p}
    out: dict[str, int] = {}
    for name, value in (("B_COPY", _b_copy(m, n, k, p, p["SPLIT_K"])), ("C_STAGE", int(n % 4 != 0))):
        if not _constraints({**p, **out, name: value}):
            out[name] = value
    return out


def _best(m: int, n: int, k: int, sms: int, b_kmajor: bool) -> tuple[tuple[float, int, int], dict[str, int]]:
    scored = [(predicted_time(m, n, k, sms, c.cfg, c.speed * _bt_factor(m, c, b_kmajor), c.per_sm, c.tail,
                              c.min_slice), c.cfg) for c in SHAPE_CLASSES]
    return min(scored, key=lambda t: t[0][0])


# B^T read in place costs a tile its bt_speed where many block rows re-read each column stripe of B^T (M of
# 2048 and more: 0.857-0.906 x cuBLAS in place against 0.911-0.967 copied); with a few (M up to 1024) the
# tiles measured level with their row-major speed (128 x 256 split three ways 0.87-0.90 in place at M = 128 to
# 1024, copied 0.856 at 1024).
BT_MIN_BLOCK_ROWS = 16


def _bt_factor(m: int, c: ShapeClass, b_kmajor: bool) -> float:
    return c.bt_speed if b_kmajor and cdiv(m, c.cfg["BM"]) >= BT_MIN_BLOCK_ROWS else 1.0


# A B given transposed (x @ W.t()) is read in place (B_LAYOUT 2), copied into a row-major B first, or the
# product is swapped (C^T = W x^T: W the swapped product's A, read in place; x^T read in place or copied by
# the same rule; C^T written and copied back), whichever the model predicts fastest. In place, each tile at
# its bt_speed where many block rows re-read B^T (_bt_factor; B^T is copied element by element as A is: on
# 128 x 256 six more LDGSTS and their addresses per step, 1,119 -> 1,212 scheduled stall cycles per step of
# the main loop; measured at M >= 2048 0.875 of its row-major speed, 128 x 128 0.96, 128 x 64 level); a copy
# costs 8 bytes moved per element at about 2.8 TB/s against 1.96e11 multiply-adds per SM and second (the
# model's unit: 51.8 TFLOP/s over 132 SMs): 0.56 units per element.
# Measured on the H100, x cuBLAS (docs/journal.md, "a transposed weight in strict fp32"): in place 128 x 11008 x
# 4096 0.903, 64 x 13824 x 5120 0.844 (swapped 0.725, 0.752); swapped 2048 x 11008 x 4096 0.978, 128 x 28672 x 8192
# 0.912, 64 x 5120 x 13824 0.762 (in place or copied 0.950, 0.870, 0.726); copied 4096 x 12288 x 4096 0.968 (in
# place 0.906).
COPY_UNITS_PER_ELEMENT = 0.56


def _transposed_b(m: int, n: int, k: int, sms: int, may_swap: bool) -> str:
    copy = COPY_UNITS_PER_ELEMENT
    options = {"read": _best(m, n, k, sms, True)[0][0], "copy": _best(m, n, k, sms, False)[0][0] + copy * k * n}
    if may_swap:
        product = min(_best(n, m, k, sms, True)[0][0], _best(n, m, k, sms, False)[0][0] + copy * m * k)
        options["swap"] = product + copy * m * n
    return min(options, key=options.get)  # (on a tie the first: read, then copy)


def _b_copy(m: int, n: int, k: int, cfg: dict[str, int], split: int) -> int:
    """B's rows are 16-byte aligned when N is a multiple of 4 (a dense B from an aligned allocation): 16-byte
    copies. Else four-byte copies, which any B allows and which fit every class's registers on sm_80 to
    sm_90, rather than a padded copy of B (which also costs the call its repeat-call plan); except on
    128 x 256 for products of STAGE_MIN_MACS or more, where the padded copy is amortised and the tile's
    16-byte copies are worth it. Measured on the H100 (x cuBLAS, four-byte against padded): 128 x 256 at
    4097^3 0.81 against 0.88; 128 x 128 at 4097^3 0.93 / 0.94, 6000 x 601 x 200 0.66 / 0.62, 6000 x 601 x
    500 0.80 / 0.81; 128 x 64 at 1000 x 3001 x 200 0.67 / 0.60, 1000 x 3001 x 800 0.89 / 0.47; 2047 x 2049
    x 1023 (128 x 128, split tail) 0.74 / 0.61."""
    if n % 4 == 0:
        return 16
    if cfg["BN"] == 256 and m * n * k >= STAGE_MIN_MACS:
        return 16
    return 4


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
        Param("ORDER", 4, (1, 2, 3, 4, 5, 6), "order of one k's FFMAs (which operands the reuse cache can serve)"),
        # B_COPY follows B's alignment (the heuristic sets it from N), not the device: not searched.
        Param("B_COPY", 16, (16,), "bytes per copy of B: 16 (rows 16-byte aligned, else the checked loop) or 4 "
              "(any B)"),
        Param("WAVE", 1, (1,), "with SPLIT_K > 1: 1 splits every tile; W > 1 only the tiles past the last whole "
              "wave of W (set per device by the heuristic)"),
        Param("REDUCE", 1, (1,), "with SPLIT_K > 1: 1 sums the slices in the kernel (its last blocks), 2 in "
              "sgemm_split_reduce, a second launch over all of C (WAVE = 1 only)"),
        # C_STAGE follows C's alignment (the heuristic sets it from N), as B_COPY does B's: not searched.
        Param("C_STAGE", 0, (0,), "1: an unsplit tile (and a split tail's whole tiles) goes to C a row at a time "
              "through shared memory (for C whose rows are not 16-byte aligned, where the lanes' own 4-byte "
              "stores each cover 8 rows' sectors in part); 0: from the registers"),
        Param("BATCHED", 0, (0, 1), "1: a batch of products in one launch, one per grid.z (no split-K); set from "
                                    "the call", searched=False),
        Param("B_LAYOUT", B_ROW_MAJOR, (B_ROW_MAJOR, B_KMAJOR),
              "1: B row-major as given; 2: B^T given (N x K, K contiguous: a linear layer's weight as W.t()), "
              "copied element by element as A is, read in place (set from the call)", searched=False),
    ),
    constraints=_constraints,
    geometry=_geometry,
    outputs_per_thread=lambda p: p["TM"] * p["TN"],
    traffic_model=tile_traffic,
    heuristic=_heuristic,
    follows=_follows,
    workspace=_workspace,
    # The fused epilogue of epilogue.cuh (bias, activation, residual; fp32 out), applied once after any
    # split-K reduction; its four arguments follow the workspace ones.
    # With B_COPY = 16, B is read in 16-byte pieces by the unchecked loops; a B whose rows are not 16-byte
    # aligned is copied into padded rows (a K x N copy, about 1% of a large product) rather than run on the
    # checked path, for products of 2^30 multiply-adds or more (measured: 4097^3 0.71 -> 0.90 of cuBLAS,
    # 2047 x 2049 x 1023 0.58 -> 0.75; 333 x 777 x 999 0.36 -> 0.20, the copy's cost). With B_COPY = 4 any
    # B runs the unchecked loops as it is. A needs no alignment (four-byte copies), nor does a B^T read in
    # place (B_LAYOUT 2, copied as A is).
    # REDUCE = 2: the launch layer runs sgemm_split_reduce once the kernel is done, on a grid over C.
    # A batch (BATCHED = 1): one product per grid.z, unsplit; its count and strides are the last arguments.
    arguments=("workspace", "epilogue", "batch"),
    type_params=("BATCHED", "B_LAYOUT"),
    batch_params={"SPLIT_K": 1, "WAVE": 1, "REDUCE": 1},
    staging=Staging(lambda p: "B" if p["B_COPY"] == 16 and p["B_LAYOUT"] == B_ROW_MAJOR else "",
                    min_macs=STAGE_MIN_MACS),
    second_kernel=SecondKernel("sgemm_split_reduce", _after_geometry),
    transposed_b=_transposed_b,
    # every tile split (WAVE 1); a split tail (WAVE > 1) splits only the last wave's tiles, counted unsplit
    k_slices=lambda p: p["SPLIT_K"] if p["WAVE"] == 1 else 1,
)
