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
    mb = p["MIN_BLOCKS"]
    if nt * mb > 2048 or mb > 32:
        errs.append(f"MIN_BLOCKS = {mb} blocks of {nt} threads exceed an SM (2048 threads, 32 blocks)")
    elif smem * mb > 227 * 1024:
        errs.append(f"MIN_BLOCKS = {mb} blocks of {smem} bytes of shared memory exceed an SM's 227 KiB")
    need, cap = p["TM"] + 24, min(255, 65536 // (nt * mb))
    if need > cap:
        errs.append(f"TM = {p['TM']} accumulators plus addressing need about {need} registers, but "
                    f"{mb} blocks of {nt} threads leave {cap} per thread: it would spill")
    return errs


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
        Param("BM", 128, pow2_choices(16, 256), "rows of C per block"),
        Param("BN", 64, pow2_choices(16, 256), "columns of C per block"),
        Param("BK", 8, pow2_choices(4, 32), "depth of one shared-memory step"),
        Param("TM", 16, pow2_choices(1, 16), "results per thread (a column of TM rows)"),
        Param("MIN_BLOCKS", 3, (1, 2, 3, 4, 6, 8), "resident blocks per SM the register budget must allow"),
    ),
    constraints=_constraints,
    geometry=_geometry,
    outputs_per_thread=lambda p: p["TM"],
    traffic_model=_traffic,
)
