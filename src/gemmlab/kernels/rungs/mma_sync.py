"""Rung 11: tensor cores through warp-level mma.sync (fp16 / bf16 in, fp32 accumulate, fused epilogue).

The element types are template parameters like the tiles (A_TYPE, C_TYPE), so one spec covers every
instantiation; `gemmlab.matmul` sets them from the arrays' dtypes (callers do not pass them). The
epilogue is a run-time argument (`epilogue_flags`), not a template parameter.
"""

from __future__ import annotations

from ..spec import KernelSpec, Launch, Param, Traffic, cdiv, pow2_choices
from ._tiling import DYNAMIC_SMEM_LIMIT

# Element type codes shared with 11_mma_sync.cu (from 1: spec parameters are positive).
A_TYPES = {"float16": 1, "bfloat16": 2}
C_TYPES = {"float32": 1, "float16": 2, "bfloat16": 3}
TYPE_PARAMS = ("A_TYPE", "C_TYPE")

# Epilogue flags (the `epilogue` kernel argument), as in 11_mma_sync.cu.
BIAS_MODES = {None: 0, "row": 1, "col": 2}
ACTIVATIONS = {None: 0, "none": 0, "relu": 1, "gelu_tanh": 2, "gelu_erf": 3, "silu": 4}
ACT_SHIFT = 2
RESIDUAL_FLAG = 32


def epilogue_flags(bias_mode: str | None, activation: str | None, residual: bool) -> int:
    return BIAS_MODES[bias_mode] | (ACTIVATIONS[activation] << ACT_SHIFT) | (RESIDUAL_FLAG if residual else 0)


def warps(p: dict[str, int]) -> int:
    return (p["BM"] // p["WM"]) * (p["BN"] // p["WN"])


def smem_bytes(p: dict[str, int]) -> int:
    """STAGES x (A tile BM x (BK + 8) + B tile BK x (BN + 8)) 16-bit elements (rows padded by 16 bytes)."""
    return 2 * p["STAGES"] * (p["BM"] * (p["BK"] + 8) + p["BK"] * (p["BN"] + 8))


def _constraints(p: dict[str, int]) -> list[str]:
    bm, bn, bk, wm, wn = p["BM"], p["BN"], p["BK"], p["WM"], p["WN"]
    errs = []
    if wm % 16 or wn % 16 or bk % 16:
        errs.append(f"WM = {wm}, WN = {wn} and BK = {bk} must be multiples of 16 (the m16n8k16 shape, "
                    "B fragments loaded in pairs)")
    if bm % wm or bn % wn:
        errs.append(f"warp tile WM x WN = {wm} x {wn} must divide the block tile BM x BN = {bm} x {bn}")
    if p["STAGES"] < 2:
        errs.append(f"STAGES = {p['STAGES']}: the cp.async pipeline needs at least 2")
    if p["A_TYPE"] not in A_TYPES.values():
        errs.append(f"A_TYPE = {p['A_TYPE']} is not an input type code (1 fp16, 2 bf16)")
    if p["C_TYPE"] not in C_TYPES.values():
        errs.append(f"C_TYPE = {p['C_TYPE']} is not an output type code (1 fp32, 2 fp16, 3 bf16)")
    if errs:
        return errs
    nt = warps(p) * 32
    if not 32 <= nt <= 1024:
        return [f"{nt} threads per block (warps {bm // wm} x {bn // wn}), must be 32..1024"]
    if (bm * bk // 8) % nt or (bk * bn // 8) % nt:
        errs.append(f"the A tile ({bm}x{bk}) and B tile ({bk}x{bn}) must split evenly into 16-byte chunks over {nt} threads")
    if smem_bytes(p) > DYNAMIC_SMEM_LIMIT:
        errs.append(f"STAGES = {p['STAGES']} x ({bm}x{bk} + {bk}x{bn}) tiles need {smem_bytes(p)} bytes of shared "
                    f"memory, over the {DYNAMIC_SMEM_LIMIT // 1024} KiB limit")
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
    bm, bn, bk = p["BM"], p["BN"], p["BK"]
    blocks = cdiv(m, bm) * cdiv(n, bn)
    kp = cdiv(k, bk) * bk
    # Shared-memory loads: every warp reads its WM x BK slice of A and BK x WN slice of B per step.
    return Traffic(
        a_loads=m * k * cdiv(n, bn),
        b_loads=k * n * cdiv(m, bm),
        c_loads=0,
        c_stores=m * n,
        smem_loads=blocks * warps(p) * kp * (p["WM"] + p["WN"]),
    )


SPEC = KernelSpec(
    name="mma_sync",
    rung=11,
    source="11_mma_sync.cu",
    template="mma_sync_gemm",
    idea="tensor cores: mma.sync m16n8k16 (fp16/bf16, fp32 accumulate), ldmatrix, cp.async pipeline, fused epilogue",
    params=(
        Param("BM", 128, pow2_choices(32, 256), "rows of C per block"),
        Param("BN", 128, pow2_choices(32, 256), "columns of C per block"),
        Param("BK", 32, (16, 32, 64), "depth of one pipeline stage"),
        Param("WM", 64, pow2_choices(16, 128), "rows of C per warp"),
        Param("WN", 64, pow2_choices(16, 128), "columns of C per warp"),
        Param("STAGES", 4, (2, 3, 4, 5), "tiles in the cp.async ring"),
        Param("GROUP_M", 8, (1, 4, 8, 16), "block rows per group of the L2-friendly block order"),
        Param("A_TYPE", 2, tuple(A_TYPES.values()), "input type of A and B: 1 fp16, 2 bf16 (set from the dtype)"),
        Param("C_TYPE", 1, tuple(C_TYPES.values()), "output type: 1 fp32, 2 fp16, 3 bf16 (set from out_dtype)"),
    ),
    constraints=_constraints,
    geometry=_geometry,
    outputs_per_thread=lambda p: p["WM"] * p["WN"] // 32,
    traffic_model=_traffic,
    min_cc=(8, 0),
    dtypes=("float16", "bfloat16"),
    extra={"type_params": TYPE_PARAMS, "epilogue": True, "element_bytes": 2},
)
