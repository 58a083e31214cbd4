"""What a rung's launch geometry says about how it covers C, inferred from the spec alone.

The registry gives each rung a `geometry(M, N, K, params)` function and a traffic model; the analysis
needs a little more: the C tile a block computes, which grid dimension walks rows, whether threads read
their operands straight from global memory, and the part of C one warp covers. All of it is read off
those two functions by probing them at small sizes, so a new rung needs no entry here:

  tile_m     the largest M for which launch(M, 1, 1) has as few blocks as launch(1, 1, 1) (likewise tile_n)
  x_walks    "m" when launch(2 tile_m, 1, 1) has two blocks along grid.x, else "n"
  direct     the spec's A loads equal M N K: every thread reads a row of A and a column of B itself
             (the naive and coalesced rungs), instead of staging tiles in shared memory
  warp_rows, warp_cols   for direct kernels with one result per thread, the C elements of one warp:
             threadIdx.x walks the same dimension as blockIdx.x (each rung's index map), so a warp spans
             min(32, block.x) elements along it and 32 / that along the other

A grid that does not map blocks to C tiles (a persistent grid of a fixed block count, such as skinny's
stream-K) is reported as untiled; the cache model then falls back to the requested traffic. A clustered
launch (spec.cluster > 1) rounds the tiles along one side up to whole clusters, so probing it would find
the cluster's extent rather than a tile's: the tile is probed with the same parameters at a cluster of
one (the parameter spec.cluster reads set to 1). A persistent rung whose spec geometry lists one block per
tile (rung 15: the launcher caps the grid at the resident blocks) is tiled here; the cap is the model's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..kernels.spec import KernelSpec

PROBE_LIMIT = 1 << 16


@dataclass(frozen=True)
class Geometry:
    tile_m: int                 # rows of C per block
    tile_n: int                 # columns of C per block
    x_walks: str                # "m" or "n": the dimension blockIdx.x (and threadIdx.x) walks
    grid_m: int                 # blocks along M at this size
    grid_n: int                 # blocks along N
    grid_other: int             # blocks along anything else (grid.z, split-K copies); 1 for the ladder
    threads_per_block: int
    block: tuple[int, int, int]
    smem_dynamic: int
    outputs_per_thread: int
    direct: bool
    warp_rows: int
    warp_cols: int
    tiled: bool = True

    @property
    def blocks(self) -> int:
        return self.grid_m * self.grid_n * self.grid_other


def _blocks(spec: KernelSpec, m: int, n: int, k: int, p: dict) -> int:
    return spec.launch(m, n, k, p).blocks


def _largest_single_block(spec: KernelSpec, p: dict, along: str) -> int | None:
    """The largest extent along M (or N) that still takes as few blocks as 1 x 1 (one tile, times any
    split-K copies); None when nothing ever splits."""
    base = _blocks(spec, 1, 1, 1, p)

    def one(v: int) -> bool:
        return (_blocks(spec, v, 1, 1, p) if along == "m" else _blocks(spec, 1, v, 1, p)) == base

    if one(PROBE_LIMIT):
        return None
    lo, hi = 1, PROBE_LIMIT  # one(lo) is True, one(hi) is False
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if one(mid):
            lo = mid
        else:
            hi = mid
    return lo


def outputs_per_thread(spec: KernelSpec, p: dict) -> int:
    fn = getattr(spec, "outputs_per_thread", None)
    if callable(fn):
        try:
            return max(1, int(fn(p)))
        except Exception:
            pass
    # Derive it: launched threads per block against the C elements a block covers.
    tm = _largest_single_block(spec, p, "m") or 1
    tn = _largest_single_block(spec, p, "n") or 1
    threads = spec.launch(tm, tn, 1, p).threads_per_block
    return max(1, (tm * tn) // max(1, threads))


def one_cluster(spec: KernelSpec, p: dict) -> dict:
    """`p` with a cluster of one block, e.g. for probing tiles (p itself where the launch is not clustered)."""
    if spec.cluster is None or spec.cluster(p) <= 1:
        return p
    for name in p:
        q = {**p, name: 1}
        try:
            if spec.cluster(q) == 1 and not spec.problems(q):
                return q
        except (KeyError, TypeError, ValueError):
            continue
    return p


def infer(spec: KernelSpec, m: int, n: int, k: int, params: dict | None = None) -> Geometry:
    p0 = spec.validate(params or {})
    launch = spec.launch(m, n, k, p0)
    p = one_cluster(spec, p0)
    tm = _largest_single_block(spec, p, "m")
    tn = _largest_single_block(spec, p, "n")
    opt = outputs_per_thread(spec, p)
    probe = spec.traffic(64, 64, 64, p)
    direct = probe.a_loads == 64 * 64 * 64
    tiled = tm is not None and tn is not None
    if not tiled:
        return Geometry(m, n, "n", 1, 1, max(1, launch.blocks), launch.threads_per_block, launch.block,
                        launch.smem, opt, direct, 1, 32, tiled=False)
    x_walks = "m" if spec.launch(2 * tm, 1, 1, p).grid[0] > spec.launch(1, 1, 1, p).grid[0] else "n"
    grid_m, grid_n = -(-m // tm), -(-n // tn)
    other = max(1, launch.blocks // max(1, grid_m * grid_n))
    bx, by = launch.block[0], launch.block[1]
    wx = min(32, bx)
    wy = max(1, min(by, 32 // wx))
    if x_walks == "m":
        wr, wc = wx, wy
    else:
        wr, wc = wy, wx
    return Geometry(tm, tn, x_walks, grid_m, grid_n, other, launch.threads_per_block, launch.block, launch.smem,
                    opt, direct, wr, wc)
