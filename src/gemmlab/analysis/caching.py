"""Traffic through the caches: what reaches L2 and DRAM of everything the kernel requests.

What ncu would count, modelled in two steps from the launch geometry, the occupancy and the L2 size.

L1 -> L2 (ncu: lts__t_sectors_srcunit_tex x 32). Within a block, L1 keeps what one warp fetched for
the others and for the next iterations (the naive rung's 8 warps all read the same 16 rows of A), so a
block fetches its *footprint* once: its rows of A over all of K and its columns of B over all of K,
rounded to 32-byte sectors. Blocks resident on the same SM at the same time share L1 too: blocks are
handed out round-robin (block i of a wave goes to SM i mod SMs), run in step, and fetch a row panel of A
or a column panel of B once between them. For the tiled rungs the footprint *is* the requested
traffic (each element is loaded once per block); for the direct rungs it is far less.

L2 -> DRAM (ncu: dram__bytes_read.sum, dram__bytes_write.sum). The resident blocks of one wave sweep K
together, so whatever they share in a wave is read from DRAM once. A panel that a later wave needs again
may still be in L2: between its two uses the caches see d distinct bytes (those of the waves in between).
With LRU replacement it survives iff d fits in the L2 of C bytes, a cliff. With random replacement
(`replacement="random"`, the default: NVIDIA does not document its policy, and a random-like one is the
cautious middle) every miss evicts a random line, so a line survives the (1 - h) d / line misses in
between with probability exp(-(1 - h) d / C), and the steady-state hit rate h solves
h = exp(-(d / C)(1 - h)): h = 1 while d <= C, then it falls smoothly (0.58 at d = 1.3 C, 0.2 at 2 C).
C is written once; the part of it still dirty in L2 when the kernel ends (the last waves' tiles, up to
the L2's size) is not written back within the kernel and ncu does not see it.

Assumptions to keep in mind: one effective L2 capacity (`l2_fraction` of the reported size: chips with
two L2 partitions may hold shared data twice), waves that stay in step, and no prefetching.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..kernels.spec import KernelSpec
from ..runtime.device import DeviceInfo
from .counts import ELEM, L1Traffic
from .facts import SECTOR
from .geometry import Geometry


@dataclass(frozen=True)
class CacheTraffic:
    l1_requested_bytes: float      # 32 x sectors requested by global loads
    l2_load_bytes: float           # L1 misses fetched from L2
    l2_store_bytes: float          # store sectors written through to L2
    dram_read_bytes: float
    dram_write_bytes: float
    compulsory_read_bytes: float   # every byte of A and B the tiles touch, once
    c_bytes: float                 # C, once
    waves: int
    wave_footprint_bytes: float    # the largest wave's distinct A, B and C bytes
    l2_capacity_bytes: float
    l1_sharing: float              # L2 loads with co-resident sharing / without (1: blocks share nothing)
    modelled: bool = True          # False: untiled grid, requested traffic used as is

    @property
    def l2_bytes(self) -> float:
        return self.l2_load_bytes + self.l2_store_bytes

    @property
    def dram_bytes(self) -> float:
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def l1_hit_rate(self) -> float:
        return 1.0 - self.l2_load_bytes / self.l1_requested_bytes if self.l1_requested_bytes else 0.0


def _sector_round(nbytes: np.ndarray) -> np.ndarray:
    return np.ceil(nbytes / SECTOR) * SECTOR


REPLACEMENTS = ("random", "lru")


@functools.lru_cache(maxsize=4096)
def survival(distance_over_capacity: float, replacement: str = "random") -> float:
    """Probability that a line is still in L2 when reused after `distance_over_capacity` x C distinct bytes."""
    a = distance_over_capacity
    if a <= 1.0:
        return 1.0
    if replacement == "lru":
        return 0.0
    if replacement != "random":
        raise ValueError(f"replacement must be one of {REPLACEMENTS}, got {replacement!r}")
    lo, hi = 0.0, 1.0 - 1e-12  # exp(-a (1 - h)) - h is > 0 at 0 and < 0 just below 1 when a > 1
    for _ in range(60):
        mid = (lo + hi) / 2
        if math.exp(-a * (1 - mid)) > mid:
            lo = mid
        else:
            hi = mid
    return lo


def cache_traffic(spec: KernelSpec, m: int, n: int, k: int, params: dict, geo: Geometry, l1: L1Traffic,
                  device: DeviceInfo, blocks_per_sm: int, l2_fraction: float = 1.0,
                  replacement: str = "random") -> CacheTraffic:
    t = spec.traffic(m, n, k, params)
    requested = l1.global_load_sectors * SECTOR
    stores = l1.global_store_sectors * SECTOR
    c_bytes = float(ELEM * m * n)
    cap = float(device.l2_bytes) * l2_fraction
    if not geo.tiled or m == 0 or n == 0 or k == 0:
        loads = float(ELEM * (t.a_loads + t.b_loads))
        return CacheTraffic(requested, min(requested, loads), stores, ELEM * (m * k + k * n), c_bytes,
                            ELEM * (m * k + k * n), c_bytes, 1, loads + c_bytes, cap, 1.0, modelled=False)

    S = device.sm_count
    b = max(1, blocks_per_sm)
    slots = S * b
    T = geo.grid_m * geo.grid_n
    ids = np.arange(T, dtype=np.int64)
    if "GROUP_M" in params:
        # Grouped block order (common.cuh's grouped_tile): ids run down GROUP_M tile rows, then right.
        g = max(1, int(params["GROUP_M"]))
        per_group = g * geo.grid_n
        first = (ids // per_group) * g
        rows_here = np.minimum(geo.grid_m - first, g)
        row, col = first + (ids % per_group) % rows_here, (ids % per_group) // rows_here
    elif geo.x_walks == "m":
        row, col = ids % geo.grid_m, ids // geo.grid_m
    else:
        col, row = ids % geo.grid_n, ids // geo.grid_n
    rows_in = np.minimum(geo.tile_m, m - row * geo.tile_m).astype(np.float64)
    cols_in = np.minimum(geo.tile_n, n - col * geo.tile_n).astype(np.float64)
    # Bytes of one A row panel (its rows over all of K) and one B column panel (all of K, its columns).
    a_panel_of_row = np.minimum(geo.tile_m, m - np.arange(geo.grid_m) * geo.tile_m) * float(_sector_round(np.array(k * ELEM)))
    b_panel_of_col = k * _sector_round(np.minimum(geo.tile_n, n - np.arange(geo.grid_n) * geo.tile_n) * float(ELEM))
    wave = ids // slots
    sm = (ids % slots) % S
    group = wave * S + sm

    # L1 -> L2: distinct panels per (wave, SM).
    def distinct_bytes(keys: np.ndarray, panel: np.ndarray, sizes: int) -> float:
        uniq = np.unique(group * sizes + keys)
        return float(panel[uniq % sizes].sum())

    shared = distinct_bytes(row, a_panel_of_row, geo.grid_m) + distinct_bytes(col, b_panel_of_col, geo.grid_n)
    alone = float(a_panel_of_row[row].sum() + b_panel_of_col[col].sum())
    l2_loads = min(requested, shared) if requested else shared

    # L2 -> DRAM: panels per wave, LRU reuse distance in waves.
    waves = int(wave[-1]) + 1 if T else 0
    c_of_wave = np.bincount(wave, weights=rows_in * cols_in * ELEM, minlength=waves)
    rows_of_wave = [np.unique(row[w * slots:(w + 1) * slots]) for w in range(waves)]  # ids are in wave order
    cols_of_wave = [np.unique(col[w * slots:(w + 1) * slots]) for w in range(waves)]
    foot = [float(a_panel_of_row[rows_of_wave[w]].sum() + b_panel_of_col[cols_of_wave[w]].sum() + c_of_wave[w])
            for w in range(waves)]
    last_a: dict[int, int] = {}
    last_b: dict[int, int] = {}
    dram_read = 0.0
    compulsory = 0.0

    def distance(w0: int, w: int) -> float:
        """Distinct bytes touched by waves w0 .. w-1, stopping once past 20x the capacity (no survivor)."""
        if w - w0 == 1:
            return foot[w0]
        ra: set = set()
        cb: set = set()
        total = 0.0
        for v in range(w0, w):
            for r in rows_of_wave[v]:
                if r not in ra:
                    ra.add(r)
                    total += a_panel_of_row[r]
            for c in cols_of_wave[v]:
                if c not in cb:
                    cb.add(c)
                    total += b_panel_of_col[c]
            total += c_of_wave[v]
            if total > 20 * cap:
                break
        return total

    for w in range(waves):
        for panels, last, sizes in ((rows_of_wave[w], last_a, a_panel_of_row), (cols_of_wave[w], last_b, b_panel_of_col)):
            for u in panels.tolist():
                nbytes = float(sizes[u])
                w0 = last.get(u)
                if w0 is None:
                    compulsory += nbytes
                    dram_read += nbytes
                else:
                    dram_read += nbytes * (1.0 - survival(distance(w0, w) / cap, replacement))
                last[u] = w

    # C still dirty in L2 at the end: the most recent waves' tiles, as far back as the L2 reaches.
    resident, room = 0.0, cap
    for w in range(waves - 1, -1, -1):
        if foot[w] <= room:
            resident += c_of_wave[w]
            room -= foot[w]
        else:
            resident += c_of_wave[w] * max(0.0, room) / foot[w] if foot[w] else 0.0
            break
    dram_write = max(0.0, c_bytes - resident)
    return CacheTraffic(
        l1_requested_bytes=requested, l2_load_bytes=l2_loads, l2_store_bytes=stores,
        dram_read_bytes=dram_read, dram_write_bytes=dram_write, compulsory_read_bytes=compulsory,
        c_bytes=c_bytes, waves=waves, wave_footprint_bytes=max(foot) if foot else 0.0,
        l2_capacity_bytes=cap, l1_sharing=shared / alone if alone else 1.0,
    )
