from ..spec import KernelSpec, Launch, Param, Traffic, block_threads_constraint, cdiv, pow2_choices


def _geometry(m: int, n: int, k: int, p: dict[str, int]) -> Launch:
    return Launch((cdiv(m, p["BX"]), cdiv(n, p["BY"]), 1), (p["BX"], p["BY"], 1))


def _traffic(m: int, n: int, k: int, p: dict[str, int]) -> Traffic:
    # Every in-range thread reads a row of A and a column of B: K + K loads, one store.
    return Traffic(a_loads=m * n * k, b_loads=m * n * k, c_loads=0, c_stores=m * n)


SPEC = KernelSpec(
    name="naive",
    rung=1,
    source="01_naive.cu",
    template="naive_gemm",
    idea="one thread per element of C; threadIdx.x walks rows, so warps read A uncoalesced",
    params=(
        Param("BX", 16, pow2_choices(1, 1024), "threads per block along rows of C (threadIdx.x)"),
        Param("BY", 16, pow2_choices(1, 1024), "threads per block along columns of C (threadIdx.y)"),
    ),
    constraints=block_threads_constraint,
    geometry=_geometry,
    traffic_model=_traffic,
)
