"""Rung 17: small M (decoding) with the weights loaded straight into registers. All warps of a block take the
same 16 NT rows of the weight W (B given transposed, N x K: y = x @ W.t()) and split each block step's K
between them, so DRAM sees long runs of few rows; each lane's 16-byte loads are its MMA fragments (a
permutation of k applied alike to both operands); fp16 / bf16 on the tensor cores as C^T = B^T A^T, fp32
accumulators, slices of K over blocks (SPLIT) added in a fixed order; the fused epilogue.

Its model is rung 16's: the bytes that must cross the DRAM interface over the bandwidth (`skinny.stream_seconds`).
"""

from __future__ import annotations

from ...formats import type_code_problems
from ..spec import KernelSpec, Launch, Param, Staging, Traffic, Workspace, cdiv, rows_16_byte_aligned
from . import mma_sync, skinny

B_KMAJOR = skinny.B_KMAJOR  # the one layout this rung reads: B given transposed (N x K, K contiguous)
THREADS_PER_SM = 512         # __launch_bounds__(32 WARPS, 16 / WARPS): at most 128 registers a thread


def block_columns(p: dict[str, int]) -> int:
    """Columns of C (rows of W) one block streams: 16 per m16 tile."""
    return 16 * p["NT"]


def block_k(p: dict[str, int]) -> int:
    """k one block step covers: WARPS runs of 32 UNROLL k side by side."""
    return p["WARPS"] * 32 * p["UNROLL"]


def pairs(p: dict[str, int]) -> int:
    """(row, two columns) pairs of a block's tile: what each slice of K writes to the workspace."""
    return 16 * p["NT"] * p["MT"] // 2


def blocks_per_sm(p: dict[str, int]) -> int:
    """Blocks one SM holds at once: the launch bounds ask for 512 threads (16 warps) an SM."""
    return max(1, THREADS_PER_SM // (32 * p["WARPS"]))


def registers(p: dict[str, int]) -> int:
    """Registers a thread needs, about: two steps of fragments (W: 8 NT a chunk, A: 4 per n8 tile), the
    accumulators and about 30 for addresses and the loop. Over 128 (the launch bounds' limit) it spills
    (MT = 8, UNROLL = 4 by 8 bytes, MT = 16, UNROLL = 4 by hundreds)."""
    return 2 * p["UNROLL"] * (8 * p["NT"] + 4 * (p["MT"] // 8)) + 4 * p["NT"] * (p["MT"] // 8) + 30


def _constraints(p: dict[str, int]) -> list[str]:
    errs = []
    if p["MT"] not in (8, 16):
        errs.append(f"MT = {p['MT']}: rows of A per block are one or two n8 tiles, 8 or 16")
    if p["NT"] not in (1, 2):
        errs.append(f"NT = {p['NT']}: a block takes 1 or 2 m16 tiles (16 or 32 columns of C)")
    if p["WARPS"] not in (4, 8, 16):
        errs.append(f"WARPS = {p['WARPS']}: 4, 8 or 16 warps per block")
    if p["UNROLL"] not in (1, 2, 4):
        errs.append(f"UNROLL = {p['UNROLL']}: 1, 2 or 4 chunks of 32 k per warp step")
    if p["SPLIT"] < 1 or p["SPLIT"] > 65535:
        errs.append(f"SPLIT = {p['SPLIT']}: 1 to 65535 slices of K (grid.y)")
    if p["B_LAYOUT"] != B_KMAJOR:
        errs.append(f"B_LAYOUT = {p['B_LAYOUT']}: gemv reads B only given transposed (N x K, K contiguous: a linear "
                    "layer's weight W as W.t()); a row-major B runs on skinny")
    if not errs and registers(p) > 128:
        errs.append(f"MT = {p['MT']}, NT = {p['NT']}, UNROLL = {p['UNROLL']} need about {registers(p)} registers a "
                    f"thread; the launch bounds allow 128 ({THREADS_PER_SM} threads an SM)")
    errs += type_code_problems(p, mma_sync.A_TYPES)
    return errs


def items(m: int, n: int, p: dict[str, int]) -> int:
    """Tiles of C a column of blocks computes: 16 NT columns x MT rows of A."""
    return cdiv(n, block_columns(p)) * cdiv(m, p["MT"])


def _geometry(m: int, n: int, k: int, p: dict[str, int]) -> Launch:
    """(column blocks, SPLIT slices of K, tiles of MT rows): one unit of work per block; the warps' sums in
    static shared memory."""
    return Launch((cdiv(n, block_columns(p)), p["SPLIT"], cdiv(m, p["MT"])), (32 * p["WARPS"], 1, 1))


def _traffic(m: int, n: int, k: int, p: dict[str, int]) -> Traffic:
    """W once per tile of MT rows of A; A's rows (the slice's k) once per block (L1 keeps them for the block's
    warps); C stored once; with SPLIT > 1 the blocks' fp32 sums written and read once."""
    scratch = 2 * pairs(p) * cdiv(n, block_columns(p)) * cdiv(m, p["MT"]) * p["SPLIT"] if p["SPLIT"] > 1 else 0
    return Traffic(a_loads=m * k * cdiv(n, block_columns(p)), b_loads=k * n * cdiv(m, p["MT"]), c_loads=0,
                   c_stores=m * n, scratch=scratch)


def workspace(m: int, n: int, k: int, p: dict[str, int], blocks: int) -> Workspace:
    """A slot of a block's pairs (two floats each) per block and one counter per tile of C (a column of
    blocks); nothing with SPLIT = 1."""
    if p["SPLIT"] <= 1:
        return Workspace()
    return Workspace(floats=_geometry(m, n, k, p).blocks * 2 * pairs(p), ints=items(m, n, p))


def _heuristic(m: int, n: int, k: int, sms: int, element: str | None = None,
               b_kmajor: bool = False) -> dict[str, int]:
    """MT: 8 rows of A up to M = 8, else 16. One m16 tile (16 rows of W) per block, warps of two chunks: at
    MT = 8 eight warps (a block step of 512 k, two blocks per SM), at MT = 16 four (four blocks per SM). With
    one block per SM (sixteen warps) each block's first bytes waited a DRAM latency with nothing else to
    stream: from the geometries against torch.matmul at M = 1 and 16, W of 5504 x 2048 to 8192 x 28672
    (scripts/decode_probe.py --variants, docs/journal.md): at M = 1 eight warps 1.00-1.05 x torch against
    sixteen's 0.85-1.02; at M = 16 four warps 0.98-1.01 against eight's 0.91-1.02; four chunks a step spill
    at MT = 16 and, once the epilogue is in, at MT = 8 with eight warps.
    SPLIT: 1 wherever the tiles of C fill a wave of resident blocks: splitting K there measured 15-50 %
    slower (11008 x 4096 at M = 1: 1.05 x torch whole, 0.71 in two slices; the slices' sums and counters at
    the end of every block, and twice the blocks); where they do not (small N), the slices that fill one
    wave, each at least two block steps long.
    The other warp count (four at MT = 8, eight at MT = 16) where its last wave of blocks is fuller by a tenth
    or more of a wave (`tail_fill`): at M = 16, 11008 x 4096 (688 tiles: 1.30 waves of four-warp blocks, 2.61
    of eight) measured 1.022 and 1.042 x torch with eight warps against 0.991 and 1.014 with four, 28672 x 8192
    1.016 against 0.999; at M = 1, 5504 x 2048 (344 tiles, 0.65 of a wave with four warps) 0.998 with four
    against 0.978; where both fill alike the default stayed ahead (14336 x 4096, 13824 x 5120: 1-3 %)."""
    p = dict(MT=8, NT=1, WARPS=8, UNROLL=2) if m <= 8 else dict(MT=16, NT=1, WARPS=4, UNROLL=2)
    other = {**p, "WARPS": 4 if p["WARPS"] == 8 else 8}
    if split_for(m, n, k, sms, p) == 1 and split_for(m, n, k, sms, other) == 1 and (
            tail_fill(items(m, n, other), blocks_per_sm(other) * sms)
            >= tail_fill(items(m, n, p), blocks_per_sm(p) * sms) + TAIL_FILL_GAIN):
        p = other
    return {**p, "SPLIT": split_for(m, n, k, sms, p)}


TAIL_FILL_GAIN = 0.1  # how much fuller the other warp count's last wave must be (a tenth of a wave)


def tail_fill(tiles: int, slots: int) -> float:
    """The share of the resident slots the waves of `tiles` blocks fill on average: 1 for one wave or less (all
    blocks stream at once), else tiles / (slots x whole waves)."""
    if tiles <= slots:
        return 1.0
    return tiles / (slots * cdiv(tiles, slots))


def split_for(m: int, n: int, k: int, sms: int, p: dict[str, int]) -> int:
    """Slices of K for these parameters: 1 where the tiles of C fill the resident blocks, else as many as fill
    them once (each slice at least two block steps long)."""
    tiles, slots = max(1, items(m, n, p)), blocks_per_sm(p) * max(sms, 1)
    most = max(1, k // (2 * block_k(p)))
    return max(1, min(most, slots // tiles))


def fits_shape(m: int, n: int, k: int, dtype: str = "bfloat16") -> str | None:
    """Where kernel="auto" takes this rung: fp16 / bf16 at M <= skinny.MAX_M, B given transposed (the
    dispatcher passes over it for a row-major B: B_LAYOUT's one choice); above 16 rows a tiled rung is faster
    (rung 16's rule). At N >= 16384 too: 28672 x 8192 at M = 1-16 ran at 0.98-1.06 x torch against rung 15's
    0.96-1.00 (docs/journal.md)."""
    if dtype == "float32":
        return "fp16 / bf16 only; strict fp32 at small M runs on skinny"
    if m > skinny.MAX_M:
        return f"built for M <= {skinny.MAX_M} (decoding); at {m} x {n} x {k} a tiled rung is faster"
    return None


SPEC = KernelSpec(
    name="gemv",
    rung=17,
    source="17_gemv.cu",
    template="gemv_gemm",
    idea="small M: the weights straight into registers, a block's warps side by side along K of the same rows "
         "(long runs per row); tensor cores on C^T = B^T A^T, fragments as loaded",
    params=(
        Param("MT", 8, (8, 16), "rows of A per block (n8 tiles of the swapped MMA)"),
        Param("NT", 1, (1, 2), "m16 tiles per block: 16 NT columns of C (rows of W)"),
        Param("WARPS", 8, (4, 8, 16), "warps per block, side by side along K"),
        Param("UNROLL", 2, (1, 2, 4), "chunks of 32 k per warp step (two steps in flight)"),
        Param("A_TYPE", 2, tuple(mma_sync.A_TYPES.values()), "input type of A and B: 1 fp16, 2 bf16; from the dtype"),
        Param("C_TYPE", 1, tuple(mma_sync.C_TYPES.values()), "output type: 1 fp32, 2 fp16, 3 bf16 (from out_dtype)"),
        Param("B_LAYOUT", B_KMAJOR, (B_KMAJOR,), "2: B given transposed (N x K, read K-major), the only layout; "
                                                  "set from the arrays"),
        Param("SPLIT", 1, (1, 2, 4, 8, 16, 32, 64), "slices of K over blocks (grid.y); the last block of a tile of C "
                                                    "to finish adds the partial sums in slice order", template=False),
    ),
    constraints=_constraints,
    geometry=_geometry,
    outputs_per_thread=lambda p: max(1, pairs(p) * 2 // (32 * p["WARPS"])),
    traffic_model=_traffic,
    heuristic=_heuristic,
    workspace=workspace,
    min_cc=(8, 0),
    dtypes=("float16", "bfloat16"),
    arguments=("epilogue", "workspace"),
    type_params=(*mma_sync.TYPE_PARAMS, "B_LAYOUT"),
    operand_rules=rows_16_byte_aligned,  # A and B are read in 16-byte pieces
    staging=Staging("AB"),
    fits_shape=fits_shape,
    k_slices=lambda p: p["SPLIT"],
)
