"""Rung 15: Hopper wgmma fed by TMA, warp-specialised and persistent (fp16 / bf16 in, also tf32 and the 8-bit
e4m3 / e5m2 with scales; fp32 accumulate).

Built for sm_90a only (wgmma and setmaxnreg exist on no other target). The element types and the epilogue
follow rung 11 (same type codes, same flags, epilogue.cuh). Two things the launch needs beyond the common
argument list are described here and made by the launch layer: the tensor maps of A, B and C (`tensor_maps`),
the persistent grid (as many blocks as can be resident at once, in whole clusters: `persistent`, `cluster`),
and stream-K's workspace for the last round of tiles (`workspace`, once the grid is known). A batch of
products (BATCHED 1) is one launch: the grid walks the tiles of every product, the maps are 3-D; so are grouped
products (BATCHED 2, a mixture-of-experts layer), whose groups' rows the kernel reads on the GPU. A long K on
a C of few tiles is split (SPLIT_K, `split_for`): each tile's last unit adds the slices' fp32 sums where they
are few (`split_last_sums`), else fp32 slabs per slice that a second launch sums; at M <= 128 such a C runs
64 x 64 tiles, twice the blocks streaming B, split less or not at all (`narrow_small_m`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...formats import FP8_TYPES, type_code_problems
from ..spec import (KernelSpec, Launch, Param, SecondKernel, Staging, TensorMapBox, Trace, Traffic, Workspace, cdiv,
                    rows_16_byte_aligned)
from . import mma_sync

BK = 64                 # one 128-byte swizzle row per stage: 64 fp16/bf16 (32 tf32, same bytes)
THREADS = 384           # producer warpgroup + two consumer warpgroups
SMEM_LIMIT = 227 * 1024
ALIGN_SLACK = 1024      # the kernel rounds the dynamic shared-memory base up to 1024 bytes


COOPERATIVE, PINGPONG = 1, 2  # SCHEDULE values
BATCH, GROUPS = 1, 2          # BATCHED values: a batch of equal products, or grouped products
A_TYPE_CODES = {**mma_sync.INPUT_TYPES, **FP8_TYPES}  # the input types this rung takes
B_ROW_MAJOR, B_KMAJOR, B_SWAPPED = 1, 2, 3  # B_LAYOUT: B as given (K x N row-major), B^T given (N x K), or
#                                           tf32 on row-major B computed as C^T = B^T A^T
EPI_PITCH = 40          # fp32 per staged row of the epilogue (32 columns + 8 of padding)


def smem_bytes(p: dict[str, int]) -> int:
    """The TMA ring (STAGES x (BM + BN) rows of 128 bytes), the epilogue's region per consumer (its rows x 40
    fp32 for the staged path; where the copy engine may store C (`tma_store`), two boxes' worth of its rows x
    128 bytes, the larger) and the alignment slack."""
    per_row = max(EPI_PITCH * 4, 2 * 128) if tma_store(p) else EPI_PITCH * 4
    return p["STAGES"] * (p["BM"] + p["BN"]) * BK * 2 + consumer_rows(p) * 2 * per_row + ALIGN_SLACK


def tma_store(p: dict[str, int]) -> bool:
    """Whether the instantiation can write C through shared memory and TMA stores: 16-bit outputs, or fp32
    outputs of the transposed tf32 path (the kernel also needs beta == 0, no residual (transposed: no flags)
    and a map of C, checked per call)."""
    fp32 = p["C_TYPE"] == mma_sync.C_TYPES["float32"]
    return fp32 if p["B_LAYOUT"] == B_SWAPPED else not fp32


def consumer_rows(p: dict[str, int]) -> int:
    """Rows of a tile one consumer warpgroup computes: all BM in ping-pong, half otherwise."""
    return p["BM"] if p["SCHEDULE"] == PINGPONG else p["BM"] // 2


def _constraints(p: dict[str, int]) -> list[str]:
    bm, bn = p["BM"], p["BN"]
    errs = []
    if bm not in (64, 128, 256):
        errs.append(f"BM = {bm}: a consumer warpgroup takes 64 or 128 rows, so BM is 64 (ping-pong only), 128 or 256")
    elif bm == 64 and p["SCHEDULE"] != PINGPONG:
        errs.append("BM = 64 needs the ping-pong schedule (SCHEDULE = 2): split between two consumers, 32 rows "
                    "each would be below wgmma's 64")
    if bn not in (64, 128, 192, 256):
        errs.append(f"BN = {bn}: the wgmma tiles used are 64, 128, 192 or 256 columns wide")
    elif bn == 192 and p["A_TYPE"] not in mma_sync.A_TYPES.values():
        errs.append("BN = 192 is built for fp16 / bf16; tf32 and 8-bit inputs take 128 or 256")
    elif bn == 64 and p["A_TYPE"] == mma_sync.TF32:
        errs.append("BN = 64 is built for fp16 / bf16 and 8-bit inputs; tf32 takes 128 or 256")
    if p.get("STREAM_K") and p["SCHEDULE"] != COOPERATIVE:
        errs.append("STREAM_K = 1 needs the cooperative schedule (SCHEDULE = 1): ping-pong consumers take whole "
                    "tiles in turn")
    if p["B_LAYOUT"] not in (B_ROW_MAJOR, B_KMAJOR, B_SWAPPED):
        errs.append(f"B_LAYOUT = {p['B_LAYOUT']}: 1 (B row-major), 2 (B^T given, read K-major) or 3 (tf32 on a "
                    "row-major B, computed transposed)")
    elif p["A_TYPE"] == mma_sync.TF32 and p["B_LAYOUT"] == B_ROW_MAJOR:
        errs.append("A_TYPE = 3 (tf32) reads B K-major only: B_LAYOUT must be 2 (B^T given) or 3 (computed transposed)")
    elif p["A_TYPE"] in FP8_TYPES.values() and p["B_LAYOUT"] != B_KMAJOR:
        errs.append(f"A_TYPE = {p['A_TYPE']} (8-bit) reads B K-major only: B_LAYOUT must be 2 (B^T given: an N x K "
                    "weight W passed as W.t())")
    elif p["A_TYPE"] != mma_sync.TF32 and p["B_LAYOUT"] == B_SWAPPED:
        errs.append("B_LAYOUT = 3 (computed transposed) is the tf32 path; 16-bit types read a row-major B as it is (1)")
    if p["A_TYPE"] in FP8_TYPES.values() and p.get("BATCHED") == BATCH:
        errs.append("8-bit inputs run one product per launch or grouped products (BATCHED = 0 or 2)")
    if p.get("BATCHED") == GROUPS and (p["B_LAYOUT"] == B_SWAPPED or p.get("PROMOTE") or p["SPLIT_K"] > 1
                                       or p.get("STREAM_K")):
        errs.append("BATCHED = 2 (grouped products) goes without the swapped tf32 path (B_LAYOUT = 3), block "
                    "scales (PROMOTE = 1), a split over K (SPLIT_K = 1) and stream-K (STREAM_K = 0)")
    if p.get("PROMOTE") not in (None, 0, 1):
        errs.append(f"PROMOTE = {p['PROMOTE']}: 0 or 1 (8-bit inputs with block scales)")
    elif p.get("PROMOTE") and (p["A_TYPE"] not in FP8_TYPES.values() or bm != 128 or bn not in (128, 256)
                               or p["SCHEDULE"] != COOPERATIVE or (bn == 256 and p["DEFER"])):
        errs.append(f"PROMOTE = 1 (block scales: partial sums beside the sums) runs 8-bit inputs on cooperative tiles "
                    f"of 128 x 128, or 128 x 256 without deferred stores (BM = 128, BN = 128 or 256 with DEFER = 0, "
                    f"SCHEDULE = 1); got A_TYPE = {p['A_TYPE']}, BM = {bm}, BN = {bn}, SCHEDULE = {p['SCHEDULE']}, "
                    f"DEFER = {p['DEFER']}")
    if p["SPLIT_K"] > 1 and (p.get("STREAM_K") or p.get("BATCHED")):
        errs.append(f"SPLIT_K = {p['SPLIT_K']} goes without stream-K (STREAM_K = 0) and a batch (BATCHED = 0)")
    if p["SCHEDULE"] not in (COOPERATIVE, PINGPONG):
        errs.append(f"SCHEDULE = {p['SCHEDULE']}: 1 (consumers split each tile) or 2 (ping-pong: they alternate tiles)")
    elif not errs and (consumer_rows(p) // 64) * (bn // 2) > 128:
        errs.append(f"BM x BN = {bm} x {bn}{' in ping-pong' if p['SCHEDULE'] == PINGPONG else ''} needs "
                    f"{(consumer_rows(p) // 64) * bn // 2} accumulators per consumer thread (at most 128)")
    if p["HELD"] not in (1, 2):
        errs.append(f"HELD = {p['HELD']}: a consumer holds 1 or 2 slots")
    if p["CLUSTER"] not in (1, 2):
        errs.append(f"CLUSTER = {p['CLUSTER']}: blocks per cluster sharing B by multicast, 1 or 2")
    if p["STAGES"] < 2:
        errs.append(f"STAGES = {p['STAGES']}: the TMA ring needs at least 2 slots")
    if smem_bytes(p) > SMEM_LIMIT:
        errs.append(f"STAGES = {p['STAGES']} x ({bm} + {bn}) x {BK} 16-bit elements need {smem_bytes(p)} bytes of "
                    f"shared memory, over the {SMEM_LIMIT // 1024} KiB a block may have")
    errs += type_code_problems(p, A_TYPE_CODES)
    return errs


def _geometry(m: int, n: int, k: int, p: dict[str, int]) -> Launch:
    # One block per tile, in clusters of CLUSTER vertically adjacent tiles (an odd tile-row count is rounded
    # up: the extra block stores nothing); the launcher caps the grid at the blocks that can be resident at
    # once (the spec's `persistent`, whole clusters) and each cluster then walks the cluster tiles. With
    # B_LAYOUT 3 the tiles are of C^T (N x M).
    # With SPLIT_K > 1 there are SPLIT_K units per tile.
    cl = p["CLUSTER"]
    if p["B_LAYOUT"] == B_SWAPPED:
        m, n = n, m
    units = cl * cdiv(cdiv(m, p["BM"]), cl) * cdiv(n, p["BN"]) * p["SPLIT_K"]
    return Launch((units, 1, 1), (THREADS, 1, 1), smem=smem_bytes(p))


def _traffic(m: int, n: int, k: int, p: dict[str, int]) -> Traffic:
    """Elements TMA reads from global memory (L2) and the kernel stores, for one product: the wgmma's A
    operand (BM rows over K) once per tile, its B operand (BN columns over K) once per cluster of CLUSTER
    vertically adjacent tiles (each block copies 1 / CLUSTER of it and multicasts it to all), C once.
    Boxes past the matrix are zero-filled by the copy engine, not read. With B_LAYOUT 3 the tiles are of
    C^T, so A is the multicast operand. The persistent grid and the tile order change when a tile is read,
    not how often. smem_loads: the tiles' elements the tensor cores read from shared memory per k step,
    once per consumer warpgroup that works on the tile (cooperative: each its half of A and all of B;
    ping-pong: one consumer per tile)."""
    bm, bn = p["BM"], p["BN"]
    swapped = p["B_LAYOUT"] == B_SWAPPED  # tiles of C^T: the wgmma's A operand is B, its B operand A
    rows, cols = (n, m) if swapped else (m, n)
    kp = cdiv(k, BK) * BK
    tiles = cdiv(rows, bm) * cdiv(cols, bn)
    first = rows * k * cdiv(cols, bn)                              # the wgmma's A operand
    second = k * cols * cdiv(cdiv(rows, bm), p["CLUSTER"])        # its B operand
    a_loads, b_loads = (second, first) if swapped else (first, second)
    per_tile = bm + (2 * bn if p["SCHEDULE"] == COOPERATIVE else bn)
    if p["SPLIT_K"] > 1:  # fp32 sums per slice (of whole k steps), written and read back by whoever sums them
        scratch = split_slot_floats(m, n, p) if split_last_sums(p) else slab_floats(m, n, p)
        return Traffic(a_loads=a_loads, b_loads=b_loads, c_loads=0, c_stores=m * n, smem_loads=tiles * kp * per_tile,
                       scratch=scratch)
    return Traffic(a_loads=a_loads, b_loads=b_loads, c_loads=0, c_stores=m * n, smem_loads=tiles * kp * per_tile)


SK_MAX_PARTS = 4        # parts: the last round's tiles cut into at most this many parts (each a cluster),
SK_PARTS_MIN_GAIN = 0.03  # where that saves at least this share of the rounds (the heuristic then takes them)
SK_MIN_K_STEPS = 8      # stream-K only where a tile (a part) has at least this many k steps (BK each),
SK_MIN_GAIN = 0.01      # the last round's idle share saves at least this much of the time,
SK_MIN_ROUNDS = 8       # the whole tiles make at least this many rounds (stream-K's share is small),
SK_MAX_K_BYTES = 16384  # and a row of an operand panel (K x element bytes) is at most this long


def element_bytes(p: dict[str, int]) -> int:
    """Bytes per input element: 4 for tf32 (fp32 storage), 2 for fp16 / bf16, 1 for e4m3 / e5m2. A k step
    (one 128-byte swizzle row) holds 128 / element_bytes of them."""
    a = p["A_TYPE"]
    return 4 if a == mma_sync.TF32 else 1 if a in FP8_TYPES.values() else 2


def cluster_tiles(m: int, n: int, p: dict[str, int]) -> int:
    """Tiles of one cluster each (CLUSTER vertically adjacent tiles), the units the persistent grid walks."""
    rows, cols = (n, m) if p["B_LAYOUT"] == B_SWAPPED else (m, n)
    return cdiv(cdiv(rows, p["BM"]), p["CLUSTER"]) * cdiv(cols, p["BN"])


def stream_k_parts(m: int, n: int, k: int, p: dict[str, int], blocks: int) -> int:
    """Into how many parts (by k steps) each tile of the last, partial round is cut, one cluster per part, on
    a persistent grid of `blocks` blocks; 0 for none. Whatever STREAM_K says (the heuristic asks this to set it).

    With T cluster tiles on P clusters the last round holds r = T mod P tiles. Where it leaves half the clusters
    idle or more, each of its tiles is cut into `parts` = min(P // r, SK_MAX_PARTS) even k ranges (each at
    least SK_MIN_K_STEPS steps) on parts clusters, so that round takes 1 / parts of a tile's time, plus one
    fp32 tile of partial sums written and read per extra part. Every part starts when the whole rounds end,
    at one of `parts` k offsets that all stream tiles share: tiles sharing a panel still read its k slices
    together, which the equal runs (stream_k_tiles) lose. Taken where it saves SK_PARTS_MIN_GAIN of the
    rounds or more ((1 - 1 / parts) / rounds), with at least one whole round before it (a single partial
    round of long K is split_for's); cooperative schedule, one product. Predicted, BF16, the down projection
    2048 x 5120 x 13824 (320 tiles of 128 x 256 on 132 SMs, r = 56, halves): 3 rounds -> 2.5, 0.83 -> 0.95-0.97
    x cuBLAS."""
    if p["SCHEDULE"] != COOPERATIVE or p["SPLIT_K"] > 1 or p.get("BATCHED") or m == 0 or n == 0:
        return 0
    clusters = blocks // p["CLUSTER"]
    tiles = cluster_tiles(m, n, p)
    if clusters < 2 or tiles <= clusters or tiles % clusters == 0:
        return 0
    parts = min(clusters // (tiles % clusters), cdiv(k, 128 // element_bytes(p)) // SK_MIN_K_STEPS, SK_MAX_PARTS)
    if parts < 2 or (1 - 1 / parts) / cdiv(tiles, clusters) < SK_PARTS_MIN_GAIN:
        return 0
    return parts


def stream_k(m: int, n: int, k: int, p: dict[str, int], blocks: int) -> tuple[int, int]:
    """(stream-K tiles, parts) for STREAM_K = 1: the last round's tiles in parts where stream_k_parts takes
    them, else the equal runs of stream_k_tiles (parts 0); (0, 0) for none."""
    if not p.get("STREAM_K"):
        return 0, 0
    parts = stream_k_parts(m, n, k, p, blocks)
    if parts:
        return cluster_tiles(m, n, p) % (blocks // p["CLUSTER"]), parts
    return stream_k_tiles(m, n, k, p, blocks), 0


def stream_k_tiles(m: int, n: int, k: int, p: dict[str, int], blocks: int) -> int:
    """How many of the last cluster tiles the kernel spreads over all clusters by k steps in equal runs
    (stream-K), on a persistent grid of `blocks` blocks; 0 for none (stream_k takes parts first).

    Whole tiles go round-robin to the P clusters, so with T tiles the last round holds T mod P of them and
    leaves the other clusters idle for a tile's time: at 8192^3 (1024 cluster tiles of 128 x 256 on 66
    clusters of two) 15.5 rounds take the time of 16, 3 % lost. The last T mod P + P tiles are instead cut
    into P equal runs of k steps, one per cluster, so the work ends together: about T / P rounds, plus the
    partial sums that two clusters sharing a tile exchange through global memory (one 128 x 256 fp32 tile
    written and read per block, a few microseconds). Taking T mod P + P tiles, not T mod P, keeps every run
    at least a tile long, so no tile is shared by more than two clusters (the kernel relies on it). Only
    for the cooperative schedule, with at least SK_MIN_K_STEPS k steps per tile, a saving of at least
    SK_MIN_GAIN of the time, and (sk tiles x k steps x clusters) < 2^31 (the kernel's arithmetic).

    Only with STREAM_K = 1, which is not the default: on the H100 it gained nothing measurable (ncu, one
    launch each: 8192^3 BF16 +1.2 % cycles, 16384 x 14336 x 4096 +0.2 %, where 3 % and 1.3 % were the
    quantization loss to win back; docs/journal.md). The clusters' runs start at different k steps, so
    tiles that share a panel of A or B no longer read its k slices at the same time, and the panels of all
    the stream-K tiles must stay in L2 for the length of a run; where they cannot (long K, tf32's four-byte
    elements, or stream-K half of the work) it lost outright in timed runs (4096^3 BF16 -4.5 %, 16384 x 4096
    x 14336 -6 %, tf32 8192^3 -4 %, 4096^3 -23 %). Hence also: at least SK_MIN_ROUNDS rounds of whole tiles
    and K x element bytes <= SK_MAX_K_BYTES.
    """
    if not p.get("STREAM_K") or p["SCHEDULE"] != COOPERATIVE or m == 0 or n == 0:
        return 0
    clusters = blocks // p["CLUSTER"]
    tiles = cluster_tiles(m, n, p)
    steps = cdiv(k, 128 // element_bytes(p))
    if clusters < 1 or tiles <= clusters or tiles % clusters == 0 or steps < SK_MIN_K_STEPS:
        return 0
    if (tiles % clusters + clusters) * steps * clusters >= 2**31:  # the kernel's run arithmetic is 32-bit
        return 0
    rounds = cdiv(tiles, clusters)
    if (rounds - tiles / clusters) / rounds < SK_MIN_GAIN or rounds < SK_MIN_ROUNDS:
        return 0
    if k * element_bytes(p) > SK_MAX_K_BYTES:
        return 0
    return tiles % clusters + clusters


def workspace(m: int, n: int, k: int, p: dict[str, int], blocks: int) -> Workspace:
    """Stream-K's scratch on a persistent grid of `blocks` blocks: one slot of partial sums per consumer of
    each block (BM x BN fp32 per block: 17 MB for 132 blocks of 128 x 256), two flags per block (zero at
    launch; each flag a block sets is cleared by the block that reads it, so every launch leaves them
    zero), and the count of stream-K tiles and their parts (stream_k) as the kernel's scalars. Nothing when
    stream-K is off.
    Split-K's instead: where the last unit sums (split_last_sums), a slot of fp32 sums per slice of each tile
    part (split_parts: a consumer's rows of a block's tile) and a counter per part, and the scalar 1 that tells
    the kernel so; else a slab of fp32 sums per slice, M rows of N rounded up to 4 floats (slab_floats)."""
    if p["SPLIT_K"] > 1:
        if split_last_sums(p):
            return Workspace(split_slot_floats(m, n, p), split_parts(m, n, p), (0, 1))
        return Workspace(slab_floats(m, n, p), 0, (0, 0))
    sk, parts = stream_k(m, n, k, p, blocks)
    if not sk:
        return Workspace(scalars=(0, 0))
    return Workspace(blocks * p["BM"] * p["BN"], blocks * 2, (sk, parts))


# Split-K's second launch (wgmma_split_reduce, epilogue.cuh's split_sum_epilogue): reduce_lanes(SPLIT_K)
# threads per 4 columns of a row of C, blocks of SPLIT_REDUCE_THREADS (the #define of epilogue.cuh, which a
# test holds equal to this).
SPLIT_LANES = 8          # lanes per 4 columns from SPLIT_MANY slices on (a small C read from many slabs)
SPLIT_MANY = 16
SPLIT_REDUCE_THREADS = 256


def reduce_lanes(p: dict[str, int]) -> int:
    """Lanes of the slabs' sum per 4 columns of C: one for a few slices (each thread adds its column's slabs in
    order), SPLIT_LANES from SPLIT_MANY slices on (their sums meet in a tree of shuffles)."""
    return SPLIT_LANES if p["SPLIT_K"] >= SPLIT_MANY else 1


def slab_floats(m: int, n: int, p: dict[str, int]) -> int:
    """Split-K's slabs: SPLIT_K of M rows of N rounded up to 4 floats (the kernel's and the sum's layout)."""
    return p["SPLIT_K"] * m * cdiv(n, 4) * 4


SPLIT_LAST, SPLIT_SECOND = 1, 2  # SPLIT_SUM: the tile's last unit sums (a few slices), or a second launch
SPLIT_LAST_MAX = 4               # slices the last unit adds at most (15_wgmma.cu's #define of the same name)
SPLIT_LAST_BYTES = 96 * 1024     # and the other slices' sums one block reads, at most


def split_last_sums(p: dict[str, int]) -> bool:
    """Whether a split's slices are summed by each tile's last unit to finish (15_wgmma.cu's split_last): no
    second launch, but the last block reads the other slices' fp32 sums of its tile, (SPLIT_K - 1) BM x BN x 4
    bytes, alone. SPLIT_SUM 1, at most SPLIT_LAST_MAX slices and SPLIT_LAST_BYTES read; else the second launch
    sums them over the whole GPU. Measured, BF16, x cuBLAS, second launch / last unit (docs/journal.md, "a
    split's sum without a second launch"): 2 slices of 64 x 128 (32 KB) 128 x 4096 x 11008 W.t() 1.020 / 1.048,
    64 x 5120 x 13824 W.t() 0.988 / 1.003, 128 x 4096 x 16384 1.073 / 1.106; 4 of 64 x 128 (96 KB) 512 x 512 x
    16384 0.862 / 0.869; 4 of 128 x 128 (192 KB) 100 x 4000 x 11008 W.t() 0.977 / 0.955."""
    if not 1 < p["SPLIT_K"] <= SPLIT_LAST_MAX or p.get("SPLIT_SUM", SPLIT_LAST) != SPLIT_LAST:
        return False
    return (p["SPLIT_K"] - 1) * p["BM"] * p["BN"] * 4 <= SPLIT_LAST_BYTES


def split_parts(m: int, n: int, p: dict[str, int]) -> int:
    """Tile parts whose units count on one counter and share slots: a consumer's rows of each block's tile
    (cooperative schedule: two per tile; ping-pong: the whole tile)."""
    return cluster_tiles(m, n, p) * p["CLUSTER"] * (1 if p["SCHEDULE"] == PINGPONG else 2)


def split_slot_floats(m: int, n: int, p: dict[str, int]) -> int:
    """The last unit's slots: one per slice of each tile part, a consumer's rows x BN fp32 sums each."""
    return split_parts(m, n, p) * p["SPLIT_K"] * consumer_rows(p) * p["BN"]


def _split_reduce_geometry(m: int, n: int, k: int, p: dict[str, int]) -> Launch | None:
    if p["SPLIT_K"] == 1 or split_last_sums(p):
        return None
    threads = m * cdiv(n, 4) * reduce_lanes(p)
    return Launch((max(1, cdiv(threads, SPLIT_REDUCE_THREADS)), 1, 1), (SPLIT_REDUCE_THREADS, 1, 1))


# 64 x 128 ping-pong tiles, six slots held two at a time, no clusters: small C (_tiling) and split units (split_for)
PINGPONG_64x128 = {"BM": 64, "BN": 128, "SCHEDULE": PINGPONG, "STAGES": 6, "HELD": 2, "CLUSTER": 1}
# 64 x 256 ping-pong tiles, four slots held two at a time, no clusters: short K (_tiling)
PINGPONG_64x256 = {"BM": 64, "SCHEDULE": PINGPONG, "STAGES": 4, "HELD": 2, "CLUSTER": 1}
SPLIT_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128)
SPLIT_MIN_STEPS = 32    # k steps (of 64) per slice at least
SPLIT_MAX_SHARE = 0.5   # split only where the unsplit tiles (split_tiles) would keep at most this share of the SMs busy


def split_tiles(m: int, n: int) -> dict[str, int]:
    """The tiles a split over K runs: 64 x 128 ping-pong where M fits one or M and N are whole such tiles
    (less of the tensor cores' work past M; few tiles per slice share B, so no clusters), else 128 x 128."""
    if m <= 64 or (m % 64 == 0 and n % 128 == 0):
        return dict(PINGPONG_64x128)
    return {"BN": 128, "CLUSTER": 1}


def split_for(m: int, n: int, k: int, sms: int, elem: int = 2) -> int:
    """The slices of K per tile (of split_tiles), or 1 for none: the largest power of two (a compiled kernel
    per value) that keeps the units to one wave and the slices to SPLIT_MIN_STEPS k steps or more, for a C
    whose tiles would keep at most SPLIT_MAX_SHARE of the SMs busy unsplit; for 8-bit inputs (`elem` 1) from 64
    rows, half that share (below 64 rows the unsplit tiling is 128 rows high, mostly empty). A tile of 8-bit inputs streams half the bytes of a 16-bit one in half the time, and the split's
    fixed cost (the second launch, the fp32 slabs) stays: e4m3 x torch._scaled_mm, per tensor, H100 (docs/
    journal.md, "small M in 8 bits"), split / unsplit: 64 tiles (48 % of the SMs) 64 x 8192 x 8192 0.90 / 0.97,
    64 x 8192 x 4096 0.81 / 0.93, 128 x 4096 x 8192 0.82 / 0.87; 32 tiles (64 x 4096 x 8192) 0.83-0.85 / 0.81;
    16 (64 x 2048 x 8192) 0.90 with 4 slices / 0.67. Measured, BF16 x cuBLAS, L2
    flushed (docs/journal.md, "2026-11-27: long K on a small C" and "decoding, third round"): 64 x 64 x 131072
    0.22 (rung 16) -> 0.98 with 64 slices; 256 x 256 x 65536 0.86 with 32 slices of 128 x 128 tiles, 0.92
    with 16 of 64 x 128; 512 x 512 x 16384 0.85 / 0.87 the same way (8 / 4); and, once the second launch
    took one lane per 4 columns for a few slices (26 -> 9 us for two slabs of 128 x 11008), down
    projections at 64-128 tokens: 128 x 4096 x 11008 (B^T) 0.89 -> 0.98 with 2 slices, 64 x 5120 x 13824 0.90
    -> 0.98, 128 x 4096 x 16384 0.98 -> 1.07, where the units of a second wave (4 slices) lost 10-15 %."""
    if m == 0 or n == 0:
        return 1
    t = split_tiles(m, n)
    tiles = cdiv(m, t.get("BM", 128)) * cdiv(n, t["BN"])
    if tiles > SPLIT_MAX_SHARE * (min(max(elem, 1), 2) / 2 if m >= 64 else 1) * sms:
        return 1
    most = min(sms // tiles, cdiv(k, BK) // SPLIT_MIN_STEPS, SPLIT_CHOICES[-1])
    return max(s for s in SPLIT_CHOICES if s <= max(most, 1))


NARROW_MAX_SHARE = 0.8  # 192-column tiles where their rounds take at most this share of the 256-column ones


NARROW_PARTS_STEPS = 16  # against 192-column tiles, a last round in parts costs this many k steps more


def narrow_tiles_pay(m: int, n: int, sms: int, cluster: int, parts: int = 0, k_steps: int = 1) -> bool:
    """Whether 128 x 192 tiles (fp16 / bf16) fill the last round of a persistent grid so much better than
    128 x 256 ones that their rounds, each 3/4 as long, take at most NARROW_MAX_SHARE of the time, and
    (where the 256-wide tiles' last round would run in `parts`, stream_k_parts, of `k_steps` steps a tile)
    no longer than those with the parts: whole rounds, 1 / parts of one and NARROW_PARTS_STEPS k steps.
    That constant is fit to four shapes measured both ways (BF16 x cuBLAS, 192 columns against parts):
    3000^3 0.87 / 0.84, 3000 x 3000 x 8192 0.97 / 0.92, 512 x 11008 x 4096 0.88 / 0.83, 1024 x 5120 x 13824
    0.81 / 0.92; the rounds alone put the parts level or ahead on all four. 3000^3:
    288 tiles of 128 x 256 in clusters of two are 2.2 rounds on 66 clusters, run as 3; 384 of 128 x 192 are
    2.9 rounds, so 3 x 192 against 3 x 256 columns: 0.75. Measured, BF16 x cuBLAS, flushed (docs/journal.md,
    "2026-11-27: rows that straddle lines"): 3000^3 0.75 -> 0.87, 3000 x 3000 x 8192 0.80 -> 0.99, without
    clusters 3072 x 3072 x 8192 0.75 -> 1.03 and 1536 x 2048 x 2048 0.81 -> 0.97; where the rounds gain less
    they lost: 5000^3 (0.96 by rounds) 0.86 -> 0.85, 6000^3 (1.0) 0.98 -> 0.97, 2500 x 2500 x 8192 (1.13)
    2.13 -> 1.93, 4096^3 (1.13) 1.02 -> 0.90."""
    clusters = max(sms // cluster, 1)

    def rounds(bn: int) -> int:
        return cdiv(cdiv(cdiv(m, 128), cluster) * cdiv(n, bn), clusters)
    narrow = rounds(192) * 192
    if parts:
        whole = cdiv(cdiv(m, 128), cluster) * cdiv(n, 256) // clusters
        if narrow > (whole + 1 / parts + NARROW_PARTS_STEPS / k_steps) * 256:
            return False
    return narrow <= NARROW_MAX_SHARE * rounds(256) * 256


GROUP_CHOICES = (1, 4, 8, 16)

# Ring depths for tiles whose k steps stream B at the DRAM's rate (few rows of A, one round of tiles): more
# bytes in flight per SM where not every SM streams. BF16 x cuBLAS, flushed, interleaved (docs/journal.md,
# "2026-11-28: rings and arrivals"): 128 x 11008 x 4096 (B^T), 86 tiles of 128 x 128 on 132 SMs, 4 / 5 / 6
# slots 0.989 / 1.018 / 1.022; 128 x 14336 x 4096, 112 tiles, 0.982 / 0.978 (level). 64 x 128 ping-pong tiles
# in 16 bits keep 6 (7 and 8 lost 1-2 % at 64 x 13824 x 5120 and 64 x 5120 x 13824); in 8 bits, whose k step
# (128 of K) is as many bytes in half the tensor time, 8 slots: e4m3 x torch._scaled_mm, per tensor, 6 / 8
# slots: 128 x 4096 x 8192 0.859 / 0.911, 128 x 8192 x 8192 0.987 / 1.003, 64 x 8192 x 8192 0.974 / 0.980.
SMALL_C_STAGES = 6
FP8_PINGPONG_STAGES = 8


# 64 x 64 ping-pong tiles (BN 64, fp16 / bf16 and 8-bit) where M <= 128 and the shape heuristic would split
# 64 x 128 tiles over K (its C keeps at most SPLIT_MAX_SHARE of the SMs busy), as long as one wave holds them:
# twice the blocks streaming B, without a split's sum or with fewer slices. A block on such a product takes in
# about 75 GB/s (the slots its ring keeps in flight over the time they take to fill); half of what a 64 x 64
# tile reads is B, so 64 blocks bring B at about 2.4 TB/s, near the DRAM's rate, and a split then adds little
# but its sum. So: the fewest slices (none where possible) that put blocks on NARROW_MIN_SHARE of the SMs, in
# one wave, slices of SPLIT_MIN_STEPS k steps or more; at least two where K is long (NARROW_LONG_K_BYTES of
# each row or more: the blocks' intake then sets the time); where two do not fit one wave, unsplit if the two
# rates put that ahead of the 64 x 128 split (narrow_beats_split), else that split stays. Unsplit rings have
# 12 slots (16 KB each), split ones 8.
# Measured, BF16 x cuBLAS, flushed, interleaved (docs/journal.md, "2026-11-28: 64-column tiles"), before ->
# after: 64 x 4096 x 4096 0.857 -> 0.978 (unsplit), 128 x 4096 x 4096 (B^T) 0.840 -> 0.979, 64 x 8192 x 4096
# (B^T) 0.896 -> 0.984, 64 x 2048 x 4096 0.741 -> 0.849 (split 2), 32 x 4096 x 8192 (B^T) 0.955 -> 1.000,
# 64 x 4096 x 11008 (B^T) 0.970 -> 1.008, 128 x 2048 x 8192 0.947 -> 1.003; e4m3 x torch._scaled_mm, per
# tensor: 64 x 4096 x 8192 0.827 -> 0.928, 128 x 4096 x 8192 0.909 -> 0.945, 64 x 8192 x 4096 0.959 ->
# 0.989, 64 x 2048 x 8192 0.801 -> 0.849. Where a wave does not hold them the 64 x 128 split stays: 96 x 8192
# x 8192 (256 such tiles) 0.920 against 0.765 unsplit; at 64 x 2048 x 4096 four slices lost to two (0.826).
PINGPONG_64x64 = {"BM": 64, "BN": 64, "SCHEDULE": PINGPONG, "HELD": 2, "CLUSTER": 1}
NARROW_STAGES, NARROW_SPLIT_STAGES = 12, 8
NARROW_LONG_K_BYTES = 16384
NARROW_MIN_SHARE = 0.45  # 64 blocks of 132 SMs measured level with cuBLAS where K is short
# The two rates of such products on the H100 (docs/journal.md, "2026-11-28: rings and arrivals"): what one block
# takes in (bytes a second) and the DRAM's rate; a split's sum by the last unit, two slices of a 64 x 128 tile
BLOCK_INTAKE, DRAM_RATE, SPLIT_SUM_US = 75e9, 2.7e12, 2.5


def narrow_small_m(m: int, n: int, k: int, sms: int, elem: int) -> dict[str, int] | None:
    """64 x 64 ping-pong tiles, unsplit or split as set out above, for an M <= 128 product of `elem`-byte
    inputs whose 64 x 128 tiles split_for would split (with 16-bit inputs' share of the SMs, also for 8-bit
    ones); None where they do not apply."""
    wide_split = split_for(m, n, k, sms)  # (16-bit inputs' share of the SMs)
    tiles = cdiv(m, 64) * cdiv(n, 64)
    if m > 128 or wide_split == 1 or tiles > sms:
        return None
    most = min(sms // tiles, cdiv(k, BK) // SPLIT_MIN_STEPS, SPLIT_CHOICES[-1])
    need = min(s for s in SPLIT_CHOICES if tiles * s >= NARROW_MIN_SHARE * sms or s == SPLIT_CHOICES[-1])
    if k * elem >= NARROW_LONG_K_BYTES:
        need = max(need, 2)
    split = max(s for s in SPLIT_CHOICES if s <= min(need, max(most, 1)))
    t = split_tiles(m, n)
    if split == 1 and need > 1 and not narrow_beats_split(m, n, k, elem, t.get("BM", 128) + t["BN"], wide_split):
        return None
    if split == 1:
        return {**PINGPONG_64x64, "STAGES": NARROW_STAGES}
    return {**PINGPONG_64x64, "STAGES": NARROW_SPLIT_STAGES, "SPLIT_K": split}


def narrow_beats_split(m: int, n: int, k: int, elem: int, edges: int, split: int) -> bool:
    """Whether unsplit 64 x 64 tiles take no longer than `split` slices of split_tiles' tiles (BM + BN =
    `edges`) by the two rates: a block's time is the larger of its bytes at BLOCK_INTAKE and the product's
    bytes at DRAM_RATE, and the split adds its sum, SPLIT_SUM_US. For a long K whose two slices of 64 x 64
    tiles would not fit one wave. BF16 x cuBLAS, B^T, flushed (docs/journal.md, "2026-11-28: 64-column
    tiles"), model (us, unsplit / split) and measured (unsplit / split): 64 x 5120 x 13824 52.4 / 54.9, 1.016 /
    1.000; 64 x 8192 x 8192 49.8 / 52.3, 0.992 / 0.945; 128 x 4096 x 8192 28.0 / 27.4 (split kept) but 0.966 /
    0.906; 128 x 4096 x 11008 37.6 / 36.9, 1.027 / 1.041; 64 x 8192 x 28672 175 / 178, 1.055 / 1.061 (level).
    The model's error is a few per cent either way."""
    dram = (m + n) * k * elem / DRAM_RATE
    narrow = max(128 * k * elem / BLOCK_INTAKE, dram)
    split_time = max(edges * cdiv(k, split) * elem / BLOCK_INTAKE, dram) + SPLIT_SUM_US * 1e-6
    return narrow <= split_time


def wave_footprint(group: int, bm: int, bn: int, resident: int, tiles_m: int) -> float:
    """Rows of A plus columns of B (each a panel over all of K) that one wave of `resident` tiles touches
    when the tile order walks `group` tile rows before moving right: min(group, tiles_m) x BM rows and
    resident / that columns' worth of BN. What L2 must bring from memory per wave, up to the element size."""
    g = max(1, min(group, tiles_m))
    return g * bm + resident / g * bn


def best_group(bm: int, bn: int, resident: int, tiles_m: int) -> int:
    """The GROUP_M whose wave touches the least (wave_footprint), the smallest of equals. For 128 x 256 tiles
    on 132 SMs: 16 (a square-ish 2048 x 2112 patch of C per wave, against 1024 x 4224 with 8; measured at
    8192^3: 1.53 -> 1.23 GB read from memory, cuBLAS 1.25)."""
    return min(GROUP_CHOICES, key=lambda g: (wave_footprint(g, bm, bn, resident, tiles_m), g))


def _heuristic(m: int, n: int, k: int, sms: int, element: str | None = None,
               b_kmajor: bool = False) -> dict[str, int]:
    """The tiling (_tiling; with `element` fp16 / bf16 or None, 192-column tiles where narrow_tiles_pay), for
    it the tile order's group height (best_group), stream-K where the last round's tiles pay to be cut
    into parts (stream_k_parts), and for unsplit 64 x 128 ping-pong tiles of 8-bit inputs without clusters a
    ring of FP8_PINGPONG_STAGES slots. (For tf32 on a row-major B the kernel's tile rows are
    columns of C, so the cap at M's tile rows is then N's; it matters only below 16 tile rows.)"""
    split = split_for(m, n, k, sms, 1 if element in FP8_TYPES else 2)
    narrow = None if element == "tf32" else narrow_small_m(m, n, k, sms, 1 if element in FP8_TYPES else 2)
    if narrow is not None:
        p, split = narrow, narrow.get("SPLIT_K", 1)
    elif split > 1:
        p = split_tiles(m, n)
        p["SPLIT_K"] = split
    else:
        p = _tiling(m, n, k, sms)
    # the last, partial round's tiles in parts by k steps, where stream_k_parts says it pays
    layout = B_KMAJOR if b_kmajor else B_SWAPPED if element == "tf32" else B_ROW_MAJOR
    full = {**SPEC.defaults, **p, "A_TYPE": A_TYPE_CODES.get(element or "bfloat16", 2), "B_LAYOUT": layout}
    parts = stream_k_parts(m, n, k, full, sms)
    if split == 1 and p.get("BN", 256) == 256 and p.get("BM", 128) == 128 and element in (None, "float16", "bfloat16") \
            and narrow_tiles_pay(m, n, sms, p.get("CLUSTER", 2), parts, cdiv(k, 128 // element_bytes(full))):
        p["BN"] = 192
        parts = stream_k_parts(m, n, k, {**full, "BN": 192}, sms)
    if parts:
        p["STREAM_K"] = 1
    if element in FP8_TYPES and split == 1 and p.get("SCHEDULE") == PINGPONG and p.get("BN") == 128 \
            and p.get("CLUSTER") == 1:
        p["STAGES"] = FP8_PINGPONG_STAGES
    bm, bn = p.get("BM", 128), p.get("BN", 256)
    p["GROUP_M"] = best_group(bm, bn, sms, cdiv(m, bm))
    return p


def _tiling(m: int, n: int, k: int, sms: int) -> dict[str, int]:
    """Tiles per shape class on `sms` SMs (the defaults, 128 x 256 in clusters of two, elsewhere), from
    side-by-side timings against cuBLAS (docs/journal.md):
    - fewer default tiles than half the SMs (1024^3: 32 tiles on 132 SMs): 128 x 128 tiles without
      clusters, twice the blocks at work (1024^3: 0.43 -> 0.67 of cuBLAS; 1000^3: 0.41 -> 0.63, later
      0.81), in a ring of SMALL_C_STAGES slots; when M and N are whole 64 x 128 tiles and 128 x 128 ones
      would still leave half the SMs idle (or M <= 64), 64 x 128 ping-pong tiles instead, four times the
      blocks, six slots held two at a time
      (1024^3: 0.69 -> 0.82-0.84 in three runs; 128 x 4096 x 16384: 0.98 against 0.66; the same tiles on
      1000^3 measured 0.73 against 0.81, for a reason not established; 128 x 11008 x 4096, 86 tiles of 128 x
      128: 0.87 against 0.99); where M or N is not whole such tiles and rows straddle 128-byte lines, 64 x
      128 ping-pong tiles in clusters of two (B copied once for two blocks) if they make one wave
      (1000^3: 0.86 -> 0.90, 1000 x 1000 x 4000 0.85 -> 0.94; without clusters 0.82 and 0.73; 1200^3, 190
      of them, 1.01 -> 0.79);
    - at most one wave of default tiles and K <= 2048 (2048^3: 128 tiles): the default tiles without
      clusters (2048^3: 0.97; 128 x 128 ping-pong tiles, two waves, measured 0.82 against 0.78 under the
      first flush and 0.88 against 0.97 under the reading flush);
    - N <= 128 (a 256-wide tile would compute half zeros): 128 x 128 tiles without clusters (a batch of 16
      x 4096 x 128 x 4096: 0.91 -> 1.08 of torch.bmm, then bound by reading A once at 2.6 TB/s);
    - K <= 128 (one or two k steps: a tile is mostly its epilogue) with many tiles: 64 x 256 ping-pong tiles
      without clusters, one consumer's stores under the other's loads (batches of torch.bmm: 64 x 512 x 512
      x 64 0.93 -> 1.02, 32 x 1024 x 1024 x 128 0.97 -> 1.02, 96 x 2048 x 2048 x 128 0.86 -> 0.97);
    - K <= 1024 with rows of whole 128-byte lines (K and N multiples of 64) and at most one wave of default
      tiles: the same 64 x 256 ping-pong tiles, twice the blocks (2048 x 2048 x 512: 0.86 for 128 x 128
      ping-pong, 0.93 for the defaults without clusters, 1.00);
    - K <= 256 (four k steps) with many tiles, or K <= 1024 in whole lines: the default tiles without
      clusters, whose deferred stores run under the next tile's k steps (16384 x 16384 x 256: 1.04, against
      0.83 for the ping-pong tiles below and 0.86 for 64 x 256 ping-pong; 4096 x 4096 x 1024: 1.02 against
      0.93 for 128 x 128 ping-pong and 0.99 for 64 x 256; 8192 x 8192 x 1024: 1.07, 1.05, 1.06; 4096 x 4096
      x 512: 1.05, 0.96, 1.05); on straddling rows without clusters 64 x 256 ping-pong lost (3000 x 3000 x
      1000: 0.73 -> 0.51);
    - short K (K <= 1024) on rows across lines, with many tiles: the ping-pong schedule, whose epilogue of
      one tile overlaps the other consumer's main loop, a large share when a tile has 16 k steps or fewer
      (measured before the rules above, in whole lines: 4096 x 4096 x 1024 0.70 -> 0.80; 8192 x 4096 x 1024
      0.72 -> 0.79);
    - at most four rounds of default tiles, rows of A and B whole 128-byte lines (K and N multiples of 64):
      no clusters. A cluster's barriers at the start and the end cost about 0.8 % of 4096^3 (the timeline:
      fill 1.9 -> 1.5 %, end 0.6 -> 0.2 %), more than its shared B saves in so few rounds (4096^3: 0.6 % less
      time at the power limit, 0.995 -> 1.017 of cuBLAS flushed; at 8192^3, sixteen rounds, clusters of two
      stay 1 % ahead). Where rows straddle lines (3000 x 5000 x 2000: rows of 10,000 and 4,000 bytes)
      clusters, which copy B once for two blocks, are worth 30 % (0.65 -> 0.94 of cuBLAS; likely the extra
      sectors of every copy of B, not checked with counters)."""
    wide = cdiv(m, 128) * cdiv(n, 256)
    lines = n % 64 == 0 and k % 64 == 0  # rows of A and B whole 128-byte lines (16-bit elements)
    if 2 * wide <= sms:
        if m % 64 == 0 and n % 128 == 0:
            if m <= 64 or 2 * cdiv(m, 128) * cdiv(n, 128) <= sms:
                return dict(PINGPONG_64x128)
        elif not lines and cdiv(m, 64) * cdiv(n, 128) <= sms:
            return {**PINGPONG_64x128, "CLUSTER": 2}
        return {"BN": 128, "CLUSTER": 1, "STAGES": SMALL_C_STAGES}
    if n <= 128:
        return {"BN": 128, "CLUSTER": 1}
    if k <= 128 or (k <= 1024 and lines and wide <= sms):
        return dict(PINGPONG_64x256)
    if k <= 256 or (k <= 1024 and lines) or (wide <= sms and k <= 2048):
        return {"CLUSTER": 1}
    if k <= 1024:
        return {"SCHEDULE": PINGPONG, "BN": 128, "STAGES": 5, "HELD": 2}
    if wide <= 4 * sms and lines:
        return {"CLUSTER": 1}
    return {}


GROUP_CLUSTER_ROWS = 512  # grouped products: no clusters where the groups average this many rows or fewer


def group_params(rows: int, n: int, k: int, p: dict[str, int]) -> dict[str, int]:
    """What grouped products change over the shape heuristic's tiles for all groups' rows as one product: no
    clusters where the groups average GROUP_CLUSTER_ROWS rows (four tile rows) or fewer. A cluster pairs two
    tile rows of one group and waits for both blocks' consumers before a slot is free; with short groups the
    pairs are few per group and B, which the pair shares, is small. Measured, BF16, flushed (docs/journal.md,
    "grouped products"): 128 groups x 512 x 768 x 2048 342 -> 320 us (uniform sizes), 348 -> 332 us (skewed);
    64 x 512 x 1408 x 2048 level (306 -> 304-310 us; an interleaved sweep had put it 3 % ahead, inside the
    spread); at 2048 rows a group (8 x 2048 x 14336 x 4096) clusters and none were level within the spread.
    64 x 64 tiles (narrow_small_m, chosen for all groups' rows as one product of few tiles) go back to the 64 x
    128 ping-pong tiles measured for groups: each group's rows take tile rows of their own, so the tiles are
    not few, and 64-column tiles have not been timed on groups."""
    if (p.get("BM"), p.get("BN"), p.get("SCHEDULE")) == (64, 64, PINGPONG):  # (what the caller named stays)
        return dict(PINGPONG_64x128)
    if p.get("CLUSTER", SPEC.defaults["CLUSTER"]) > 1 and rows <= GROUP_CLUSTER_ROWS:
        return {"CLUSTER": 1}
    return {}


@dataclass(frozen=True)
class GroupedWork:
    """What a grouped call (BATCHED 2) gives the persistent grid, by the model: its cluster tiles (each group's
    rows in whole tile rows, rounded up to whole clusters, times the column tiles), the rounds they take on
    `clusters` clusters, the share of the last round's clusters at work, and the share of the tiles' area that
    is output (the rest: rows past a group's end, columns past N, a cluster's second block below a group)."""

    cluster_tiles: int
    clusters: int
    rounds: int
    last_round: float
    output_share: float

    @property
    def efficiency(self) -> float:
        """Output per tile-time on the grid, against a grid of whole, full tiles: what the tiling leaves of the
        dense rate."""
        if self.cluster_tiles == 0:
            return 1.0
        return self.output_share * self.cluster_tiles / (self.rounds * self.clusters)


def grouped_work(sizes, n: int, p: dict[str, int], sms: int) -> GroupedWork:
    """The model of a grouped call's tiles (GroupedWork) for group sizes `sizes` (rows), N columns, parameters
    `p` (BM, BN, CLUSTER) on `sms` SMs (one block each)."""
    bm, bn, cl = p["BM"], p["BN"], p["CLUSTER"]
    clusters = max(sms // cl, 1)
    tiles = sum(cdiv(cdiv(s, bm), cl) for s in sizes if s > 0) * cdiv(n, bn)
    rounds = cdiv(tiles, clusters)
    last = (tiles - (rounds - 1) * clusters) / clusters if tiles else 1.0
    area = tiles * cl * bm * bn
    return GroupedWork(tiles, clusters, rounds, last, sum(sizes) * n / area if area else 1.0)


def operand_problems(a_ptr: int, lda: int, b_ptr: int, ldb: int, elem_bytes: int = 2) -> list[str]:
    """What keeps A and B from being read by TMA (16-byte aligned base and rows); empty when fine."""
    return rows_16_byte_aligned(a_ptr, lda, b_ptr, ldb, elem_bytes)


def tensor_maps(m: int, n: int, k: int, p: dict[str, int]) -> tuple[TensorMapBox | None, ...]:
    """The kernel's three tensor maps (A's, B's, C's, in its argument order), described for the launch layer
    to encode.

    fp16 / bf16 with a row-major B (B_LAYOUT 1): A in boxes of BM rows x one 128-byte k step, B in boxes of
    a k step x 64 columns, read N-major. B_LAYOUT 2: B^T (N x K) read K-major, each block of a cluster copying
    its share of BN rows (the launch layer passes B^T: the caller's transposed weight as it is, or for tf32
    a transposed copy). B_LAYOUT 3 (tf32 on a row-major B, C^T = B^T A^T): the wgmma's A operand is B, read
    N-major in boxes of 32 x 32, its B operand A, read K-major. C's map (boxes of a consumer's rows x 64
    columns; 32 x 32 on the transposed path) exists only where the instantiation can store through TMA
    (`tma_store`); it is optional: where C's rows are not 16-byte aligned the kernel stores from registers.
    """
    eb = element_bytes(p)
    bk = 128 // eb
    share = p["BN"] // p["CLUSTER"]  # rows of a K-major operand each block of a cluster copies
    layout = p["B_LAYOUT"]
    c = None
    if tma_store(p):
        box = (32, 32) if layout == B_SWAPPED else (consumer_rows(p), 64)
        c = TensorMapBox("C", m, n, *box, optional=True)
    if layout == B_SWAPPED:
        return (TensorMapBox("B", k, n, bk, 32, eb), TensorMapBox("A", m, k, share, bk, eb), c)
    a = TensorMapBox("A", m, k, p["BM"], bk, eb)
    if layout == B_KMAJOR:
        return (a, TensorMapBox("B", n, k, share, bk, eb), c)
    return (a, TensorMapBox("B", k, n, b_box_rows(p), 64, eb), c)


def b_box_rows(p: dict[str, int]) -> int:
    """K rows per box of a row-major B: a whole k step, or its share where the tile's 64-column chunks do not
    split evenly over the cluster (BN 192 in clusters of two: each block copies half the k rows of every
    chunk and multicasts them)."""
    bk = 128 // element_bytes(p)
    return bk // p["CLUSTER"] if (p["BN"] // 64) % p["CLUSTER"] else bk


SPEC = KernelSpec(
    name="wgmma",
    rung=15,
    source="15_wgmma.cu",
    template="wgmma_gemm",
    idea="Hopper: TMA into swizzled shared memory, wgmma from producer/consumer warpgroups, persistent grid",
    params=(
        Param("BM", 128, (64, 128, 256), "rows of C per tile (cooperative: two consumer warpgroups of BM / 2 "
                                          "rows; ping-pong: one of BM rows)"),
        Param("BN", 256, (64, 128, 192, 256), "columns of C per tile (the wgmma N; 192: fp16 / bf16, for shapes "
                                              "whose last round of 256-wide tiles is mostly empty; 64: fp16 / bf16 "
                                              "and 8-bit, one chunk of B per k step, for a small M)"),
        Param("STAGES", 4, (2, 3, 4, 5, 6, 8, 12), "slots in the TMA ring (one k step each: 128 bytes of K per row)"),
        Param("HELD", 1, (1, 2), "slots a consumer holds: 1 waits for its wgmmas before handing a slot back, "
                                 "2 hands back the previous one (B_LAYOUT 3: always 1)"),
        Param("SCHEDULE", COOPERATIVE, (COOPERATIVE, PINGPONG), "1: the two consumers split each tile; 2 (ping-pong): "
                                     "they take alternate tiles, so one's epilogue overlaps the other's main loop"),
        Param("GROUP_M", 16, GROUP_CHOICES, "tile rows per group of the persistent tile order (the heuristic: "
                                            "best_group, the least panel footprint per wave)"),
        Param("A_TYPE", 2, tuple(A_TYPE_CODES.values()),
              "input type of A and B: 1 fp16, 2 bf16, 3 tf32, 5 e4m3, 6 e5m2 (set from the dtype and precision)"),
        Param("C_TYPE", 1, tuple(mma_sync.C_TYPES.values()), "output type: 1 fp32, 2 fp16, 3 bf16 (set from out_dtype)"),
        Param("B_LAYOUT", B_ROW_MAJOR, (B_ROW_MAJOR, B_KMAJOR, B_SWAPPED),
              "1: B row-major (K x N); 2: B^T given (N x K, read K-major); 3: tf32 on a row-major B, computed as "
              "C^T = B^T A^T (B read into registers); set from the arrays and the precision"),
        Param("CLUSTER", 2, (1, 2), "blocks per cluster: 2 vertically adjacent tiles share B, each block copying "
                                    "half of it from L2 and multicasting it to both"),
        Param("STREAM_K", 0, (0, 1), "1: the last rounds of tiles are spread over more clusters by k steps "
                                     "(stream-K, cooperative schedule: the last round's tiles in parts where "
                                     "`stream_k_parts` says it pays, which the heuristic takes, else equal runs "
                                     "where `stream_k_tiles` does); 0: whole tiles only"),
        Param("DEFER", 1, (0, 1), "1: a tile's TMA stores (16-bit outputs, cooperative schedule) are issued "
                                  "during the next tile's first k steps, a box of 64 columns after each step's "
                                  "wgmmas, its outputs held packed in registers; 0: stored before the next tile "
                                  "begins"),
        Param("BATCHED", 0, (0, BATCH, GROUPS), "1: a batch of products in one launch (3-D tensor maps, the "
                                                "persistent grid walking every product's tiles); 2: grouped "
                                                "products (each group's rows of A times its own B, group_tile); "
                                                "set from the call", searched=False),
        Param("SPLIT_K", 1, SPLIT_CHOICES, "slices of K per tile (1: none): the (slice, tile) units' fp32 sums are "
                                           "added in slice order and the epilogue applied as SPLIT_SUM says (the "
                                           "heuristic: split_for)", searched=False),
        Param("SPLIT_SUM", SPLIT_LAST, (SPLIT_LAST, SPLIT_SECOND),
              "with SPLIT_K > 1: 1, each tile's last unit adds the slices' sums and stores the tile where they "
              "are few and small (split_last_sums; else as 2); 2, a second launch sums the slabs",
              template=False, searched=False),
        Param("PROMOTE", 0, (0, 1), "1: 8-bit inputs with block scales: each k step (128 of K) into a fresh "
                                    "accumulator, added into the fp32 sums times its scales once its wgmmas "
                                    "complete; set from the call's scales", searched=False),
    ),
    constraints=_constraints,
    geometry=_geometry,
    outputs_per_thread=lambda p: (consumer_rows(p) // 64) * p["BN"] // 2,
    traffic_model=_traffic,
    heuristic=_heuristic,
    min_cc=(9, 0),
    targets=("sm_90a",),
    dtypes=("float16", "bfloat16", *FP8_TYPES),
    precisions=("tf32",),
    arguments=("epilogue", "tensor_maps", "workspace", "batch", "scales", "groups", "arrivals"),
    type_params=(*mma_sync.TYPE_PARAMS, "B_LAYOUT", "BATCHED", "PROMOTE"),
    batch_params={"STREAM_K": 0, "SPLIT_K": 1},
    group_params=group_params,
    persistent=True,
    cluster=lambda p: p["CLUSTER"],
    tensor_maps=tensor_maps,
    workspace=workspace,
    second_kernel=SecondKernel(lambda p: f"wgmma_split_reduce<{p['C_TYPE']}, {reduce_lanes(p)}>",
                               _split_reduce_geometry, dependent=True),
    k_slices=lambda p: p["SPLIT_K"],
    last_round_parts=lambda m, n, k, p, blocks: stream_k(m, n, k, p, blocks)[1],
    operand_rules=operand_problems,
    staging=Staging("AB"),
    # GELU with erf does not take the deferred stores (its temporaries beside the 64 held registers spill), so
    # under DEFER=1 it stores from registers; DEFER=0 gives it the TMA-store path. Measured, BF16, x the plain
    # product, flushed and interleaved: 4096^3 0.69 -> 0.86, 8192^3 0.82 -> 0.91 (docs/journal.md).
    # A residual (beta == 0, R's rows allowing pairs) is added box by box on the stores through TMA, which the
    # deferred stores cannot hold beside their registers (its loads spilled): DEFER=0 for calls with one.
    # Measured, BF16 down projections x W^T + R against torch eager: from registers 0.90-0.96 (docs/journal.md).
    # Block scales (PROMOTE 1) hold partial sums beside the sums: 128 x 256 cooperative tiles without the
    # deferred stores (128 x 128 tiles are bound by L2 at 8-bit: 24 KB a k step for half the work; measured
    # 0.58-0.61 of the per-tensor product).
    epilogue_params={"gelu_erf": {"DEFER": 0}, "residual": {"DEFER": 0},
                     "block_scales": {"BM": 128, "BN": 256, "SCHEDULE": COOPERATIVE, "STAGES": 4, "HELD": 1,
                                      "DEFER": 0}},
    trace=Trace("GEMMLAB_TRACE", lambda p: 128 // element_bytes(p)),
    # Over rung 14 (persistent): the epilogue through TMA stores under the next tile's k steps, the tiles
    # chosen per shape (15_wgmma.cu's header).
    expected_gain=(1.05, 1.15),
)
