"""Rung 11: tensor cores through warp-level mma.sync (fp16 / bf16 / tf32 in, fp32 accumulate, fused epilogue).

The element types are template parameters like the tiles (A_TYPE, C_TYPE), so one spec covers every
instantiation; `gemmlab.matmul` sets them from the arrays' dtypes, `precision` and `out_dtype` (callers do
not pass them). tf32 (A_TYPE 3: fp32 operands, m16n8k8, inputs rounded with cvt.rna) runs only when a
caller asks for precision="tf32". The epilogue is a run-time argument (`epilogue_flags`), not a template
parameter.
"""

from __future__ import annotations

from ..spec import KernelSpec, Launch, Param, Traffic, cdiv, pow2_choices
from ...formats import A_TYPES, C_TYPES, INPUT_TYPES, TF32, TYPE_PARAMS  # noqa: F401  (re-exported)
from ...formats import type_code_problems
from ...formats import ACT_SHIFT, BIAS_MODES, RESIDUAL_FLAG, epilogue_flags  # noqa: F401
from ...formats import ACTIVATION_CODES as ACTIVATIONS  # noqa: F401
from ._tiling import DYNAMIC_SMEM_LIMIT

# Element type codes (shared with epilogue.cuh) and epilogue flags come from the one formats table
# (gemmlab.formats): A_TYPES are the 16-bit input types every tensor-core rung takes; this rung adds tf32 (fp32
# storage), INPUT_TYPES is its full set.
# Parameters that replace the defaults for one input type. tf32 stages BK = 16 fp32 columns: the same 64
# bytes per row, the same shared memory per stage and the same blocks per SM as BK = 32 of fp16 / bf16.
TYPE_DEFAULTS = {"tf32": {"BK": 16}}



def warps(p: dict[str, int]) -> int:
    return (p["BM"] // p["WM"]) * (p["BN"] // p["WN"])


def element_bytes(p: dict[str, int]) -> int:
    """Bytes per stored input element: 4 for tf32 (fp32 storage), else 2."""
    return 4 if p.get("A_TYPE") == TF32 else 2


def smem_bytes(p: dict[str, int]) -> int:
    """STAGES x (A tile BM x (BK + 16 bytes) + B tile BK x (BN + 8 elements)) input elements: rows of A
    padded by one 16-byte chunk, rows of B by 8 elements (16 bytes for 16-bit types, 32 for tf32)."""
    e = element_bytes(p)
    return e * p["STAGES"] * (p["BM"] * (p["BK"] + 16 // e) + p["BK"] * (p["BN"] + 8))


def _constraints(p: dict[str, int]) -> list[str]:
    bm, bn, bk, wm, wn = p["BM"], p["BN"], p["BK"], p["WM"], p["WN"]
    tf32 = p["A_TYPE"] == TF32
    errs = []
    if wm % 16 or wn % 16:
        errs.append(f"WM = {wm} and WN = {wn} must be multiples of 16 (m16 tiles; B fragments in pairs of n8)")
    if tf32 and bk % 8:
        errs.append(f"BK = {bk} must be a multiple of 8 for tf32 (the m16n8k8 shape)")
    elif not tf32 and bk % 16:
        errs.append(f"BK = {bk} must be a multiple of 16 for fp16 / bf16 (the m16n8k16 shape)")
    if tf32 and bk > 32:
        errs.append(f"BK = {bk}: at most 32 for tf32 (BK = 64 unrolls 8 k-steps of fragments; ptxas spills)")
    if tf32 and bn % 32:
        errs.append(f"BN = {bn} must be a multiple of 32 for tf32 (the conflict-free B layout: row pitch "
                    "8 words mod 32)")
    if bm % wm or bn % wn:
        errs.append(f"warp tile WM x WN = {wm} x {wn} must divide the block tile BM x BN = {bm} x {bn}")
    if p["STAGES"] < 2:
        errs.append(f"STAGES = {p['STAGES']}: the cp.async pipeline needs at least 2")
    errs += type_code_problems(p, INPUT_TYPES)
    if errs:
        return errs
    nt = warps(p) * 32
    if not 32 <= nt <= 1024:
        return [f"{nt} threads per block (warps {bm // wm} x {bn // wn}), must be 32..1024"]
    chunk = 16 // element_bytes(p)  # elements per 16-byte cp.async chunk
    if (bm * bk // chunk) % nt or (bk * bn // chunk) % nt:
        errs.append(f"the A tile ({bm}x{bk}) and B tile ({bk}x{bn}) must split evenly into 16-byte chunks over {nt} threads")
    if smem_bytes(p) > DYNAMIC_SMEM_LIMIT:
        errs.append(f"STAGES = {p['STAGES']} x ({bm}x{bk} + {bk}x{bn}) tiles of {element_bytes(p)}-byte elements need "
                    f"{smem_bytes(p)} bytes of shared memory, over the {DYNAMIC_SMEM_LIMIT // 1024} KiB limit")
    # Per thread: WM x WN / 32 fp32 accumulators, A and B fragments, ~40 for addresses and loop state.
    need = wm * wn // 32 + 4 * (wm // 16) + 2 * (wn // 8) + 40
    if need > 255:
        errs.append(f"warp tile WM x WN = {wm} x {wn} needs about {need} registers per thread (at most 255): it would spill")
    elif need * nt > 65536:
        errs.append(f"{nt} threads x about {need} registers exceed the SM's 65536")
    return errs


def _geometry(m: int, n: int, k: int, p: dict[str, int]) -> Launch:
    return Launch((cdiv(n, p["BN"]), cdiv(m, p["BM"]), 1), (warps(p) * 32, 1, 1), smem=smem_bytes(p))


def _traffic(m: int, n: int, k: int, p: dict[str, int]) -> Traffic:
    """Elements cp.async reads from global memory and the kernel stores: each block its BM rows of A and BN
    columns of B over all of K (chunks past the edge copy only their bytes inside, or none), so A once per
    column of tiles and B once per row of tiles; C stored once. In bytes: 2 per input element for fp16 /
    bf16, 4 for tf32 (the analysis multiplies)."""
    bm, bn, bk = p["BM"], p["BN"], p["BK"]
    blocks = cdiv(m, bm) * cdiv(n, bn)
    kp = cdiv(k, bk) * bk
    # Shared-memory rows are padded by one 16-byte chunk (A; B by 8 elements) for conflict-free ldmatrix:
    # where the pitch is an odd number of chunks, every other row starts 16 bytes off a sector, and the
    # crossbar carries its sectors twice (H100: 1.5x, scripts/l2_merge_probe.py).
    elem = 4 if p["A_TYPE"] == 3 else 2
    chunk = 16 // elem

    def carried(pitch_elems: int) -> float:
        return 1.5 if (pitch_elems * elem) % 32 == 16 else 1.0

    # Shared-memory loads: every warp reads its WM x BK slice of A and BK x WN slice of B per step.
    return Traffic(
        a_loads=m * k * cdiv(n, bn),
        b_loads=k * n * cdiv(m, bm),
        c_loads=0,
        c_stores=m * n,
        smem_loads=blocks * warps(p) * kp * (p["WM"] + p["WN"]),
        a_carried=carried(bk + chunk),
        b_carried=carried(bn + 8),
    )


SPEC = KernelSpec(
    name="mma_sync",
    rung=11,
    source="11_mma_sync.cu",
    template="mma_sync_gemm",
    idea="tensor cores: mma.sync (fp16/bf16; tf32 on request; fp32 accumulate), ldmatrix, cp.async pipeline, fused epilogue",
    params=(
        Param("BM", 128, pow2_choices(32, 256), "rows of C per block"),
        Param("BN", 128, pow2_choices(32, 256), "columns of C per block"),
        Param("BK", 32, (8, 16, 32, 64), "depth of one pipeline stage (tf32 default: 16)"),
        Param("WM", 64, pow2_choices(16, 128), "rows of C per warp"),
        Param("WN", 64, pow2_choices(16, 128), "columns of C per warp"),
        Param("STAGES", 4, (2, 3, 4, 5), "tiles in the cp.async ring"),
        Param("GROUP_M", 8, (1, 4, 8, 16), "block rows per group of the L2-friendly block order"),
        Param("A_TYPE", 2, tuple(INPUT_TYPES.values()),
              "input type of A and B: 1 fp16, 2 bf16, 3 tf32 (set from the dtype and precision)"),
        Param("C_TYPE", 1, tuple(C_TYPES.values()), "output type: 1 fp32, 2 fp16, 3 bf16 (set from out_dtype)"),
        Param("BATCHED", 0, (0, 1), "1: a batch of products in one launch, one per grid.z; set from the call",
              searched=False),
    ),
    constraints=_constraints,
    geometry=_geometry,
    outputs_per_thread=lambda p: p["WM"] * p["WN"] // 32,
    traffic_model=_traffic,
    min_cc=(8, 0),
    dtypes=("float16", "bfloat16"),
    precisions=("tf32",),
    arguments=("epilogue", "batch"),
    type_params=(*TYPE_PARAMS, "BATCHED"),
    type_defaults=TYPE_DEFAULTS,
)
