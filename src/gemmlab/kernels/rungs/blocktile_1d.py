from ..spec import KernelSpec, Launch, Param, Traffic, cdiv, pow2_choices

STATIC_SMEM_LIMIT = 48 * 1024


def _constraints(p: dict[str, int]) -> list[str]:
    bm, bn, bk, tm = p["BM"], p["BN"], p["BK"], p["TM"]
    errs = []
    if bm % tm:
        errs.append(f"TM = {tm} must divide BM = {bm}")
        return errs
    nt = bm * bn // tm
    if not 32 <= nt <= 1024:
        errs.append(f"BM*BN/TM = {nt} threads per block, must be 32..1024")
        return errs
    if (bm * bk) % nt or (bk * bn) % nt:
        errs.append(f"the A tile (BM*BK = {bm * bk}) and B tile (BK*BN = {bk * bn}) must split evenly over {nt} threads")
    smem = 4 * (bm * bk + bk * bn)
    if smem > STATIC_SMEM_LIMIT:
        errs.append(f"shared memory 4*(BM*BK + BK*BN) = {smem} bytes exceeds the 48 KiB static limit")
    need, cap = register_estimate(p), min(255, 65536 // nt)
    if need > cap:
        errs.append(f"about {need} registers per thread needed (TM accumulators, hoisted operands), "
                    f"but {nt} threads leave {cap}: it would spill")
    return errs


def register_estimate(p: dict[str, int]) -> int:
    """Registers ptxas needs without spilling: TM accumulators, TM hoisted A values, and the unrolled
    BK loop's addresses and B values, plus fixed overhead (checked against ptxas over the search space)."""
    return 2 * p["TM"] + p["BK"] + 24


def _geometry(m: int, n: int, k: int, p: dict[str, int]) -> Launch:
    return Launch((cdiv(n, p["BN"]), cdiv(m, p["BM"]), 1), (p["BM"] * p["BN"] // p["TM"], 1, 1))


def _traffic(m: int, n: int, k: int, p: dict[str, int]) -> Traffic:
    bm, bn, bk, tm = p["BM"], p["BN"], p["BK"], p["TM"]
    threads = cdiv(m, bm) * cdiv(n, bn) * (bm * bn // tm)
    return Traffic(
        a_loads=m * k * cdiv(n, bn),
        b_loads=k * n * cdiv(m, bm),
        c_loads=0,
        c_stores=m * n,
        smem_loads=threads * cdiv(k, bk) * bk * (1 + tm),  # per k: one of B, TM of A
    )


SPEC = KernelSpec(
    name="blocktile_1d",
    rung=4,
    source="04_blocktile_1d.cu",
    template="blocktile_1d_gemm",
    idea="each thread computes a column of TM results in registers, reusing one B value TM times",
    params=(
        Param("BM", 64, pow2_choices(16, 256), "rows of C per block"),
        Param("BN", 64, pow2_choices(16, 256), "columns of C per block"),
        Param("BK", 8, pow2_choices(4, 32), "depth of one shared-memory step"),
        Param("TM", 8, pow2_choices(1, 16), "results per thread (a column of TM rows)"),
    ),
    constraints=_constraints,
    geometry=_geometry,
    traffic_model=_traffic,
)
