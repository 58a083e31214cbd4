from ..spec import KernelSpec, Launch, Param, Traffic, cdiv, pow2_choices

STATIC_SMEM_LIMIT = 48 * 1024
MAX_ACCUMULATORS = 128  # TM*TN registers of accumulators; beyond this ptxas spills at 255 registers


def _constraints(p: dict[str, int]) -> list[str]:
    bm, bn, bk, tm, tn = p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]
    errs = []
    if bm % tm or bn % tn:
        return [f"TM = {tm} must divide BM = {bm} and TN = {tn} must divide BN = {bn}"]
    nt = (bm // tm) * (bn // tn)
    if not 32 <= nt <= 1024:
        return [f"(BM/TM)*(BN/TN) = {nt} threads per block, must be 32..1024"]
    if (bm * bk) % nt or (bk * bn) % nt:
        errs.append(f"the A tile (BM*BK = {bm * bk}) and B tile (BK*BN = {bk * bn}) must split evenly over {nt} threads")
    smem = 4 * (bm * bk + bk * bn)
    if smem > STATIC_SMEM_LIMIT:
        errs.append(f"shared memory 4*(BM*BK + BK*BN) = {smem} bytes exceeds the 48 KiB static limit")
    if tm * tn > MAX_ACCUMULATORS:
        errs.append(f"TM*TN = {tm * tn} accumulators per thread exceeds {MAX_ACCUMULATORS} (would spill)")
    return errs


def _geometry(m: int, n: int, k: int, p: dict[str, int]) -> Launch:
    nt = (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])
    return Launch((cdiv(n, p["BN"]), cdiv(m, p["BM"]), 1), (nt, 1, 1))


def _traffic(m: int, n: int, k: int, p: dict[str, int]) -> Traffic:
    bm, bn, bk, tm, tn = p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]
    threads = cdiv(m, bm) * cdiv(n, bn) * (bm // tm) * (bn // tn)
    return Traffic(
        a_loads=m * k * cdiv(n, bn),
        b_loads=k * n * cdiv(m, bm),
        c_loads=0,
        c_stores=m * n,
        smem_loads=threads * cdiv(k, bk) * bk * (tm + tn),  # per k: TM of A, TN of B
    )


SPEC = KernelSpec(
    name="blocktile_2d",
    rung=5,
    source="05_blocktile_2d.cu",
    template="blocktile_2d_gemm",
    idea="each thread computes a TM x TN tile of C in registers: an outer product per k",
    params=(
        Param("BM", 128, pow2_choices(16, 256), "rows of C per block"),
        Param("BN", 128, pow2_choices(16, 256), "columns of C per block"),
        Param("BK", 8, pow2_choices(4, 64), "depth of one shared-memory step"),
        Param("TM", 8, pow2_choices(1, 16), "rows of C per thread"),
        Param("TN", 8, pow2_choices(1, 16), "columns of C per thread"),
    ),
    constraints=_constraints,
    geometry=_geometry,
    outputs_per_thread=lambda p: p["TM"] * p["TN"],
    traffic_model=_traffic,
)
