"""Rung 16: small M (decoding). Each warp streams its columns of B once through a private ring in shared memory
(each lane's cp.async, or Hopper's copy engine: COPY), split over K (a grid of slices, or a persistent grid of
equal runs across the items: SCHED); fp16 / bf16 on the tensor cores as C^T = B^T A^T (fp32 accumulate), strict
fp32 on the CUDA cores; the fused epilogue.

A product with few rows of A (the tokens of a decoding step) does 2 M flops per element of B, so its time is
the bytes of B over the DRAM bandwidth: `stream_seconds` is the model, and `fits_shape` keeps the rung to
the shapes where that holds (kernel="auto" takes it there, the tiled rungs elsewhere). The split over K
(SPLIT, grid.y) is a launch parameter, not a template one: one compiled kernel serves every split.
"""

from __future__ import annotations

from ...formats import STRICT_FP32 as FP32, type_code_problems
from ..spec import KernelSpec, Launch, Param, Staging, Traffic, Workspace, cdiv, rows_16_byte_aligned
from . import mma_sync

KC = 32                 # k per chunk (two m16n8k16 steps)
SMEM_LIMIT = 227 * 1024
MAX_M = 16              # kernel="auto" takes the rung up to this many rows of A (fits_shape)
WIDE_N = 16384          # ... and below this many columns of C (fits_shape)
MAX_M_FP32 = 32         # fp32: up to this many rows of A (fits_shape)
B_ROW_MAJOR, B_KMAJOR = 1, 2


def warp_columns(p: dict[str, int]) -> int:
    """Columns of C (rows of B^T) one warp streams: 16 per m16 tile."""
    return 16 * p["NT"]


A_TYPES = {**mma_sync.A_TYPES, "float32": FP32}  # fp16 and bf16 on the tensor cores, fp32 on the CUDA cores


def element_bytes(p: dict[str, int]) -> int:
    return 4 if p["A_TYPE"] == FP32 else 2


def group_k(p: dict[str, int]) -> int:
    """k per group (one slot of a warp's ring): 64 UNROLL bytes of a row of B^T, 16-bit UNROLL chunks of 32 k,
    fp32 half as many k (so that a slot takes the same shared memory for every type)."""
    return 64 * p["UNROLL"] // element_bytes(p)


def panel_k(p: dict[str, int]) -> int:
    """k of A one shared-memory panel holds: about 16 KB, a whole number of pairs of groups."""
    pair = 2 * group_k(p)
    return max(1, (16384 // element_bytes(p) // p["MT"]) // pair) * pair


def accumulators(p: dict[str, int]) -> int:
    """fp32 accumulators per thread: 16-bit, NT x MT / 2 (MMA fragments); fp32, MT per column a lane owns."""
    if p["A_TYPE"] == FP32:
        return max(1, 16 * p["NT"] // 32) * p["MT"]
    return p["NT"] * p["MT"] // 2


def slot_bytes(p: dict[str, int]) -> int:
    """One slot of a warp's ring: a group (UNROLL chunks of 32 k) of its 16 NT columns of B, rows padded
    (B^T given: 16 NT rows of 64 UNROLL bytes + 32, fp32 + 16; row-major: group_k k-rows of 16 NT elements +
    16 bytes); with COPY 3 also the group's k of MT rows of A."""
    eb = element_bytes(p)
    a_rows = 0
    if p.get("COPY", 0) == 3:  # the group's k of A's MT rows too, padded as the panel's
        a_rows = p["MT"] * eb * (group_k(p) + (4 if eb == 4 else 32 if p["B_LAYOUT"] == B_KMAJOR else 16))
    if p["B_LAYOUT"] == B_KMAJOR:
        return 16 * p["NT"] * (64 * p["UNROLL"] + (32 if eb == 2 else 16)) + a_rows
    return group_k(p) * (16 * p["NT"] * eb + 16) + a_rows


def smem_bytes(p: dict[str, int]) -> int:
    """The panel of A (MT rows x panel_k + padding: 4 elements for fp32, else 32 or 16), every warp's ring and,
    where the copy engine fills the slots (COPY 1-3), an 8-byte mbarrier per slot."""
    eb = element_bytes(p)
    pad = 4 if eb == 4 else 32 if p["B_LAYOUT"] == B_KMAJOR else 16
    bars = 8 * p["WARPS"] * p["STAGES"] if p.get("COPY", 0) else 0
    return eb * p["MT"] * (panel_k(p) + pad) + p["WARPS"] * p["STAGES"] * slot_bytes(p) + bars


def registers(p: dict[str, int]) -> int:
    """Registers a thread needs, about: the accumulators, one chunk's fragments of B (8 NT) and of A (4), and
    about 40 for addresses and the loop."""
    if p["A_TYPE"] == FP32:  # a float4 of B per column the lane owns, one of A
        return accumulators(p) + 4 * max(1, 16 * p["NT"] // 32) + 4 + 40
    return accumulators(p) + 8 * p["NT"] + 4 + 40


def _constraints(p: dict[str, int]) -> list[str]:
    errs = []
    if p["MT"] not in (8, 16, 32, 64):
        errs.append(f"MT = {p['MT']}: rows of A per block are whole n8 tiles, 8, 16, 32 or 64")
    if p["NT"] not in (1, 2, 4):
        errs.append(f"NT = {p['NT']}: a warp takes 1, 2 or 4 m16 tiles (16, 32 or 64 columns of C)")
    if p["WARPS"] not in (1, 2, 4, 8, 16):
        errs.append(f"WARPS = {p['WARPS']}: 1, 2, 4, 8 or 16 warps per block")
    if p["UNROLL"] not in (1, 2, 4, 8):
        errs.append(f"UNROLL = {p['UNROLL']}: 1, 2, 4 or 8 chunks of {KC} k per slot")
    if p["COPY"] not in (0, 1, 2, 3):
        errs.append(f"COPY = {p['COPY']}: 0 (cp.async by every lane), 1 (bulk copies), 2 (bulk copies, B "
                    "evicted first from L2) or 3 (bulk copies of B and of A's rows into the slot)")
    if p["STAGES"] < 2:
        errs.append(f"STAGES = {p['STAGES']}: a warp's ring needs at least 2 slots")
    if p["SPLIT"] > 65535:
        errs.append(f"SPLIT = {p['SPLIT']}: at most 65535 slices of K (grid.y) or persistent blocks")
    if p["SCHED"] not in (0, 1):
        errs.append(f"SCHED = {p['SCHED']}: 0 (a grid of slices of K) or 1 (a persistent grid, stream-K)")
    if p["B_LAYOUT"] not in (B_ROW_MAJOR, B_KMAJOR):
        errs.append(f"B_LAYOUT = {p['B_LAYOUT']}: 1 (B row-major) or 2 (B^T given, read K-major)")
    errs += type_code_problems(p, A_TYPES)
    if not errs and registers(p) > 232:
        errs.append(f"MT = {p['MT']}, NT = {p['NT']} need about {registers(p)} registers per thread (at most 232 "
                    "without spilling)")
    if not errs and smem_bytes(p) > SMEM_LIMIT:
        errs.append(f"WARPS = {p['WARPS']} x STAGES = {p['STAGES']} slots of {slot_bytes(p)} bytes and the panel of "
                    f"A need {smem_bytes(p)} bytes of shared memory, over the {SMEM_LIMIT // 1024} KiB a block may have")
    return errs


def items(m: int, n: int, p: dict[str, int]) -> int:
    """Pieces of C a block computes whole or in parts: a block's columns (WARPS x 16 NT) x a tile of MT rows."""
    return cdiv(n, p["WARPS"] * warp_columns(p)) * cdiv(m, p["MT"])


def _geometry(m: int, n: int, k: int, p: dict[str, int]) -> Launch:
    """SCHED 0: (column blocks, SPLIT slices of K, tiles of rows); SCHED 1: SPLIT persistent blocks."""
    block = (p["WARPS"] * 32, 1, 1)
    if p.get("SCHED", 0) == 1:
        return Launch((p["SPLIT"], 1, 1), block, smem=smem_bytes(p))
    return Launch((cdiv(n, p["WARPS"] * warp_columns(p)), p["SPLIT"], cdiv(m, p["MT"])), block, smem=smem_bytes(p))


def _traffic(m: int, n: int, k: int, p: dict[str, int]) -> Traffic:
    """Elements read from and written to global memory, whichever schedule deals the work out: B once per
    tile of MT rows; A (its M rows over all of K) once per column of blocks, into the block's shared panel
    (COPY 0-2), or once per warp of that column with COPY 3, where each warp copies A's rows into its own
    slots; C stored once. Padding (rows past M, k past K) is zero-filled, not read. Not counted: the split's
    fp32 partial sums (SPLIT > 1), written and read once through L2."""
    readers = cdiv(n, p["WARPS"] * warp_columns(p)) * (p["WARPS"] if p.get("COPY", 0) == 3 else 1)
    return Traffic(a_loads=m * k * readers, b_loads=k * n * cdiv(m, p["MT"]), c_loads=0, c_stores=m * n)


def workspace(m: int, n: int, k: int, p: dict[str, int], blocks: int) -> Workspace:
    """Partial sums (a slot of the block's threads x `accumulators` each) and one counter per item; nothing
    with SPLIT = 1. SCHED 0: a slot per block (SPLIT x M x N padded to whole tiles). SCHED 1: two per block
    (its run's first and last items may be parts)."""
    if p["SPLIT"] <= 1:
        return Workspace()
    g = _geometry(m, n, k, p)
    slots = 2 * min(g.blocks, blocks) if p.get("SCHED", 0) == 1 else g.blocks  # (the launch may hold fewer)
    return Workspace(floats=slots * g.threads_per_block * accumulators(p), ints=items(m, n, p))


def stream_bytes(m: int, n: int, k: int, p: dict[str, int]) -> int:
    """What must cross the DRAM interface at the least: B once per tile of MT rows, A and C once (the input
    type's bytes from A_TYPE, the output's from C_TYPE)."""
    tiles = cdiv(m, p["MT"])
    out_bytes = 4 if p["C_TYPE"] == mma_sync.C_TYPES["float32"] else 2
    return element_bytes(p) * (k * n * tiles + m * k) + out_bytes * m * n


def stream_seconds(m: int, n: int, k: int, p: dict[str, int], dram_bytes_per_s: float) -> float:
    """The model: the bytes that must move (stream_bytes) over the DRAM bandwidth. The kernel's speed is
    quoted as a share of this bound (the partial sums stay in L2 and are left out)."""
    return stream_bytes(m, n, k, p) / dram_bytes_per_s


def fits_shape(m: int, n: int, k: int, dtype: str = "bfloat16") -> str | None:
    """Where kernel="auto" takes this rung (measured against the tiled rungs on the same calls, H100,
    docs/journal.md):
    - fp16 / bf16 decoding, M <= MAX_M and N < WIDE_N. At M = 32 and N = 8192 rung 15 ran at 0.78 x cuBLAS,
      this rung at 0.69; at M = 64, rung 15 at 0.98-1.03; with N = 28672, rung 15's 128-column tiles already
      give every SM a column of B to stream (1.0 x cuBLAS at M = 1-32, this rung 0.65-0.93);
    - not fp16 / bf16 with long K on a tiny C above MAX_M rows: rung 15 splits K there (wgmma.split_for;
      64 x 64 x 131072 0.98 x cuBLAS against this rung's 0.22, 256 x 256 x 65536 0.86 against 0.30);
    - fp32, M <= 16, or M <= MAX_M_FP32 with N >= 256: rung 10 (32-row tiles at the least; a transposed B, a
      linear layer's weight, copied first) ran at 0.12-0.30 x cuBLAS at M = 1-16, this rung at 0.89-1.28;
      at M = 32 0.28-0.51 against 0.79-0.89, except N = 64 with K = 131072 (0.61 against 0.36); at M = 64
      rung 10 is as fast or faster (this rung's FMAs each wait on a shared-memory read of A)."""
    if dtype == "float32":
        if m <= 16 or (m <= MAX_M_FP32 and n >= 256):
            return None
        return (f"built for M <= 16 in fp32, or M <= {MAX_M_FP32} with N >= 256; at {m} x {n} x {k} the tiled fp32 "
                "rung is faster")
    if m <= MAX_M:
        if n >= WIDE_N:
            return f"built for N < {WIDE_N} at small M; at N = {n} a tiled rung's tiles already cover every SM"
        return None
    return f"built for M <= {MAX_M} (decoding); at {m} x {n} x {k} a tiled rung is faster"


def blocks_per_sm(p: dict[str, int], regs_per_sm: int = 65536, smem_per_sm: int = 228 * 1024,
                  warps_per_sm: int = 64) -> int:
    """Blocks one SM holds at once: by registers (the estimate of `registers`, in units of 8), by shared
    memory (the panel of A plus 1 KB the SM reserves per block) and by warps (H100 limits by default)."""
    regs = -(-registers(p) // 8) * 8
    threads = 32 * p["WARPS"]
    return max(1, min(regs_per_sm // (regs * threads), smem_per_sm // (smem_bytes(p) + 1024),
                      warps_per_sm // p["WARPS"]))


def _heuristic(m: int, n: int, k: int, sms: int, element: str | None = None,
               b_kmajor: bool = False) -> dict[str, int]:
    """MT: the rows of A rounded up to a whole n8 tile (at most 64). Eight warps per block (two per SM
    sub-partition: with four, each warp waited on its shared-memory reads about 40 % of its cycles, ncu).
    MT = 8: one m16 tile per warp and slots of four chunks (each row of a transposed weight copied in runs
    of 256 bytes); above, two tiles, two chunks and three slots. Each lane's cp.async (COPY 0): the copy
    engine (COPY 1-3) measured the same at M = 1 and 1-4 % slower at M = 8-16 in this geometry, and
    no better in its own (4 warps, 512-byte runs). From side-by-side timings
    against cuBLAS at M = 1, 8, 16, 32 and N x K = 4096 x 4096, 8192 x 8192, 14336 x 4096, 28672 x 8192,
    8192 x 28672 (docs/journal.md). SPLIT: best_split (params_for). Where those slices would take more than
    one wave of blocks (14336 x 4096: 112 column blocks x 7 slices of 608 k on 132 SMs), each block pays its
    ring's fill again and again: the persistent schedule (SCHED 1) instead, 0.76 -> 0.83 x cuBLAS at M = 1
    and 0.68 -> 0.79 at M = 8 there."""
    mt = 8
    while mt < min(m, 64):
        mt *= 2
    shape = dict(MT=mt, NT=1, UNROLL=4, STAGES=4, WARPS=8) if mt == 8 else dict(MT=mt, NT=2, UNROLL=2, STAGES=3, WARPS=8)
    p = params_for(m, n, k, sms, **shape, COPY=0, SCHED=0)
    slots = blocks_per_sm({**SPEC.defaults, **p, "B_LAYOUT": B_KMAJOR}) * max(sms, 1)
    if items(m, n, p) * p["SPLIT"] > slots:  # more than one wave of short slices: persistent runs instead
        return params_for(m, n, k, sms, **shape, COPY=0, SCHED=1)
    return p


def params_for(m: int, n: int, k: int, sms: int, **given: int) -> dict[str, int]:
    """`given` (the defaults for what it leaves out) and, unless given, SPLIT: with SCHED 0 the slices of K
    that fill the waves of resident blocks (best_split; each slice at least two groups long), with SCHED 1
    one block per resident slot (at most one per unit of work)."""
    p = {**{q.name: q.default for q in SPEC.params if q.template}, **given, "B_LAYOUT": B_KMAJOR}
    if "SPLIT" not in given:  # (the larger panel pitch of B^T given: an upper bound for either layout)
        slots = blocks_per_sm(p) * max(sms, 1)
        if p["SCHED"] == 1:  # (16-bit groups: the most k per group, the fewest units)
            p["SPLIT"] = max(1, min(slots, items(m, n, p) * cdiv(k, 64 * p["UNROLL"] // 2)))
        else:
            columns = max(1, items(m, n, p))
            most = max(1, min(cdiv(k, 64 * p["UNROLL"] // 2) // 2, 256))
            p["SPLIT"] = best_split(columns, slots, most)
    out = {name: p[name] for name in ("MT", "NT", "UNROLL", "STAGES", "WARPS", "COPY", "SCHED", "SPLIT")}
    return {**out, **{key: v for key, v in given.items() if key not in out}}


def best_split(columns: int, slots: int, most: int) -> int:
    """The fewest slices of K (at most `most`) whose blocks fill the resident slots (`slots`: blocks per SM x
    SMs) to 95 % over their waves: 112 columns on 132 slots use 85 % with 1 to 6 slices, 99 % with 7. Else
    the best filling."""
    def filled(s: int) -> float:
        blocks = columns * s
        return blocks / (cdiv(blocks, slots) * slots)

    for s in range(1, most + 1):
        if filled(s) >= 0.95:
            return s
    return max(range(1, most + 1), key=lambda s: (filled(s), -s))


SPEC = KernelSpec(
    name="skinny",
    rung=16,
    source="16_skinny.cu",
    template="skinny_gemm",
    idea="small M: each warp streams its columns of B once through a private ring (cp.async or the copy "
         "engine), split over K or persistent stream-K; tensor cores on C^T = B^T A^T (fp32 on the CUDA cores)",
    params=(
        Param("MT", 8, (8, 16, 32, 64), "rows of A per block (n8 tiles of the swapped MMA)"),
        Param("NT", 4, (1, 2, 4), "m16 tiles per warp: 16 NT columns of C"),
        Param("WARPS", 4, (1, 2, 4, 8, 16), "warps per block, side by side over N"),
        Param("UNROLL", 2, (1, 2, 4, 8), "chunks of 32 k of B per slot of a warp's ring"),
        Param("STAGES", 4, (2, 3, 4, 6), "slots of a warp's ring: STAGES - 1 in flight while it computes"),
        Param("COPY", 0, (0, 1, 2, 3), "who fills a slot: 0 every lane (cp.async, 16 bytes each); 1 the copy "
                                      "engine, one bulk copy per row (sm_90 on, K in 16-byte pieces, rows of 128 "
                                      "bytes and more; else 0's path); 2 as 1, B evicted first from L2; 3 as 1, "
                                      "with A's rows in the slot (no shared panel)"),
        Param("SCHED", 0, (0, 1), "0: a grid of column blocks x SPLIT slices of K x row tiles; 1: SPLIT persistent "
                                  "blocks, each an equal run of groups across the items (stream-K)"),
        Param("A_TYPE", 2, tuple(A_TYPES.values()), "input type of A and B: 1 fp16, 2 bf16 (tensor cores), 4 fp32 "
                                                   "(CUDA cores, strict); from the dtype"),
        Param("C_TYPE", 1, tuple(mma_sync.C_TYPES.values()), "output type: 1 fp32, 2 fp16, 3 bf16 (from out_dtype)"),
        Param("B_LAYOUT", B_ROW_MAJOR, (B_ROW_MAJOR, B_KMAJOR),
              "1: B row-major (K x N); 2: B^T given (N x K, read K-major); set from the arrays"),
        Param("SPLIT", 1, (1, 2, 4, 8, 16, 32, 64), "SCHED 0: slices of K over blocks (grid.y); SCHED 1: blocks of "
                                                    "the persistent grid; the last part of an item to finish adds "
                                                    "the partial sums", template=False),
    ),
    constraints=_constraints,
    geometry=_geometry,
    outputs_per_thread=lambda p: p["NT"] * p["MT"] // 2,
    traffic_model=_traffic,
    heuristic=_heuristic,
    workspace=workspace,
    min_cc=(8, 0),
    dtypes=("float16", "bfloat16", "float32"),
    arguments=("epilogue", "workspace"),
    type_params=(*mma_sync.TYPE_PARAMS, "B_LAYOUT"),
    operand_rules=rows_16_byte_aligned,  # A and B are read in 16-byte pieces
    staging=Staging("AB"),
    fits_shape=fits_shape,
    persistent=lambda p: p.get("SCHED", 0) == 1,
)
