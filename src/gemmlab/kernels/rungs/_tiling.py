"""Shared rules of the register-tiled rungs (06 onwards): constraints, geometry and traffic.

Not a rung itself (no SPEC): the registry skips it.
"""

from __future__ import annotations

from ..spec import Launch, Param, Traffic, cdiv, pow2_choices

STATIC_SMEM_LIMIT = 48 * 1024
DYNAMIC_SMEM_LIMIT = 227 * 1024  # per block with opt-in on sm_80 and sm_90 (checked against the device at launch)
REGISTERS_PER_SM = 65536
# Registers a thread needs besides its accumulators and fragments (indices, pointers, loop state);
# calibrated against ptxas for the default tiles, used only to prune hopeless candidates early.
REGISTER_OVERHEAD = 40


def block_threads(p: dict[str, int]) -> int:
    if "WM" in p:
        return (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32
    return (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])


def tile_constraints(p: dict[str, int], smem_floats: int, fragment_sets: int = 1,
                     smem_limit: int = STATIC_SMEM_LIMIT, fragment_regs: int | None = None,
                     staged_loads: bool = True) -> list[str]:
    """fragment_regs: registers a thread holds for A and B fragments (default fragment_sets x (TM + TN));
    staged_loads: global loads pass through registers (4 per float4); False for cp.async kernels."""
    bm, bn, bk, tm, tn = p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]
    errs = []
    if tm % 4 or tn % 4 or bk % 4:
        errs.append(f"TM = {tm}, TN = {tn} and BK = {bk} must be multiples of 4 (float4 accesses)")
    if "WM" in p:
        wm, wn = p["WM"], p["WN"]
        if bm % wm or bn % wn:
            errs.append(f"warp tile WM x WN = {wm} x {wn} must divide the block tile {bm} x {bn}")
        if wm % tm or wn % tn:
            errs.append(f"thread tile TM x TN = {tm} x {tn} must divide the warp tile {wm} x {wn}")
        elif (wm // tm) * (wn // tn) != 32:
            errs.append(f"(WM/TM) x (WN/TN) = {wm // tm} x {wn // tn} lanes, must be 32")
    elif bm % tm or bn % tn:
        errs.append(f"thread tile TM x TN = {tm} x {tn} must divide the block tile {bm} x {bn}")
    if errs:
        return errs
    nt = block_threads(p)
    if not 32 <= nt <= 1024:
        return [f"{nt} threads per block, must be 32..1024"]
    if (bm * bk // 4) % nt or (bk * bn // 4) % nt:
        errs.append(f"the A tile ({bm}x{bk}) and B tile ({bk}x{bn}) must split evenly into float4s over {nt} threads")
    if 4 * smem_floats > smem_limit:
        errs.append(f"shared memory {4 * smem_floats} bytes exceeds the {smem_limit // 1024} KiB limit")
    loads = (bm * bk + bk * bn) // 4 // nt if nt and staged_loads else 0
    frags = fragment_sets * (tm + tn) if fragment_regs is None else fragment_regs
    need = tm * tn + frags + 4 * loads + REGISTER_OVERHEAD
    if need > 255:
        errs.append(f"TM x TN = {tm} x {tn} needs about {need} registers per thread (at most 255): it would spill")
    elif need * nt > REGISTERS_PER_SM:
        errs.append(f"{nt} threads x about {need} registers exceed the SM's {REGISTERS_PER_SM}")
    return errs


def tile_geometry(m: int, n: int, k: int, p: dict[str, int]) -> Launch:
    return Launch((cdiv(n, p["BN"]), cdiv(m, p["BM"]), 1), (block_threads(p), 1, 1))


def tile_traffic(m: int, n: int, k: int, p: dict[str, int]) -> Traffic:
    bm, bn, bk, tm, tn = p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]
    threads = cdiv(m, bm) * cdiv(n, bn) * block_threads(p)
    return Traffic(
        a_loads=m * k * cdiv(n, bn),
        b_loads=k * n * cdiv(m, bm),
        c_loads=0,
        c_stores=m * n,
        smem_loads=threads * cdiv(k, bk) * bk * (tm + tn),
    )


def block_tile_params(bm: int = 128, bn: int = 128, bk: int = 8, tm: int = 8, tn: int = 8) -> tuple[Param, ...]:
    """The parameters of a register-tiled rung: block tile, step depth, thread tile (with defaults)."""
    return (
        Param("BM", bm, pow2_choices(32, 256), "rows of C per block"),
        Param("BN", bn, pow2_choices(32, 256), "columns of C per block"),
        Param("BK", bk, (4, 8, 16, 32), "depth of one shared-memory step"),
        Param("TM", tm, (4, 8, 16), "rows of C per thread"),
        Param("TN", tn, (4, 8, 16), "columns of C per thread"),
    )


def warp_tile_params(bm: int = 128, bn: int = 128, bk: int = 8, wm: int = 64, wn: int = 32, tm: int = 8,
                     tn: int = 8) -> tuple[Param, ...]:
    """As block_tile_params, with the warp tile between the block and the thread tiles."""
    block = {p.name: p for p in block_tile_params(bm, bn, bk, tm, tn)}
    return (
        block["BM"], block["BN"], block["BK"],
        Param("WM", wm, pow2_choices(16, 128), "rows of C per warp"),
        Param("WN", wn, pow2_choices(16, 128), "columns of C per warp"),
        block["TM"], block["TN"],
    )
