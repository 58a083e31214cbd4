from ..spec import KernelSpec, Launch, Param, Traffic, block_threads_constraint, cdiv, pow2_choices


def _geometry(m: int, n: int, k: int, p: dict[str, int]) -> Launch:
    return Launch((cdiv(n, p["BX"]), cdiv(m, p["BY"]), 1), (p["BX"], p["BY"], 1))


def _traffic(m: int, n: int, k: int, p: dict[str, int]) -> Traffic:
    # The same requests as the naive rung; what changes is how many sectors each warp request touches.
    return Traffic(a_loads=m * n * k, b_loads=m * n * k, c_loads=0, c_stores=m * n)


SPEC = KernelSpec(
    name="coalesced",
    rung=2,
    source="02_coalesced.cu",
    template="coalesced_gemm",
    idea="the naive work with threadIdx.x walking columns: a warp reads consecutive addresses of B",
    params=(
        Param("BX", 32, pow2_choices(1, 1024), "threads per block along columns of C (threadIdx.x)"),
        Param("BY", 32, pow2_choices(1, 1024), "threads per block along rows of C (threadIdx.y)"),
    ),
    constraints=block_threads_constraint,
    geometry=_geometry,
    traffic_model=_traffic,
)
