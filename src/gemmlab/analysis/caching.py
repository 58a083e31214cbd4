"""Traffic through the caches: what reaches L2 and DRAM of everything the kernel requests.

What ncu would count, modelled from the launch geometry, the occupancy and the L2 size in three steps:
which blocks sweep K together, what they fetch from L2, and what of that L2 must fetch from DRAM.

Which blocks move in step. Blocks are handed out in id order, one per SM in turn (block i of a round goes
to SM i mod SMs), and each SM holds b of them. What keeps them together is memory:

- Memory-paced (tiled kernels, which wait at a barrier for each K tile's loads, and direct kernels whose
  loads pass the L1 data stage quickly): a warp's next iteration waits for its loads. A block that falls behind the blocks it shares panels with finds their
  lines already in L2, runs faster than the block that fetched them from DRAM, and catches up. The
  SMs x b resident blocks of a wave sweep K together.
- Stage-paced: the L1 data stage serves one wavefront per cycle, and a direct kernel's uncoalesced load is
  many wavefronts (the naive rung's load of A: one per row of the warp's C patch). When the SM's resident
  blocks queue more global-load wavefronts per k than one memory-paced round lasts (MEMORY_ROUND_CYCLES),
  the stage sets every block's pace, hit or miss: nothing pulls a lagging block back, and the blocks that
  share an SM's stage spread until the SM runs them a block lifetime / b apart. What then moves in step is
  a cohort of SMs blocks (one per SM), cohorts a lifetime / b apart: a stream, in which blocks that share
  a panel but sit in different cohorts meet only through L2. With b = 1 a cohort is a wave.
  The ladder: naive 16 x 16 queues 8 blocks x 8 warps x (16 + 1) = 1088 wavefronts per k (stage-paced);
  coalesced 32 x 32, 2 x 32 x 2 = 128 (memory-paced). Tiled kernels are taken as memory-paced: their
  global loads are a few coalesced wavefronts per k (at most 18 on the ladder, against blocktile_2d's 256
  FMA cycles per k), and between barriers a block waits on each K tile's loads.
  Known limits, measured by scripts/device_traffic_probe.py (docs/analysis.md): the rule is yes / no, and
  coalesced 32 x 8 (8 blocks per SM, 128 per k) drifted part of the way (5.2 GB of DRAM, in step 1.1,
  stream 8.4); smem_tiled in row-major order (GROUP_M = 1) ran as a full stream (8.5 GB) though its
  global loads are 4 wavefronts per k. Seven other probes matched the rule within 12%.

L1 -> L2 (ncu: lts__t_sectors_srcunit_tex x 32). Within a block, L1 keeps what one warp fetched for the
others and for the next iterations (the naive rung's 8 warps all read the same 16 rows of A), so a block
fetches its *footprint* once: its rows of A over all of K and its columns of B over all of K, rounded to
32-byte sectors. In-step blocks resident on the same SM share L1 too and fetch a panel they have in common
once between them; staggered blocks (a stream) do not. For the tiled rungs the footprint *is* the
requested traffic (each element is loaded once per block); for the direct rungs it is far less.

L2 -> DRAM (ncu: dram__bytes_read.sum, dram__bytes_write.sum). Whatever the blocks of one in-step group
(a wave, or a cohort of a stream) share is read from DRAM once. A panel that a later group needs again may
still be in L2: between its two uses the caches see d distinct bytes (those of the groups in between).
With LRU replacement (the default) it survives iff d fits in the L2 of C bytes, a cliff. With random
replacement (`replacement="random"`) every miss evicts a random line, so a line survives the (1 - h) d /
line misses in between with probability exp(-(1 - h) d / C), and the steady-state hit rate h solves
h = exp(-(d / C)(1 - h)): h = 1 while d <= C, then it falls smoothly (0.58 at d = 1.3 C, 0.2 at 2 C).
LRU is the default because the H100 measurements say so: the coalesced rung's 4096^3 DRAM reads (4.34 GB
by ncu) are B once per wave, 4.33 GB with LRU against 2.07 GB with random replacement, and the naive
rung's (16.7 GB) are its A panel once per block, which random replacement would keep 60% of.
C is written once; the part of it still dirty in L2 when the kernel ends (the last groups' tiles, up to
the L2's size) is not written back within the kernel and ncu does not see it.

Assumptions to keep in mind: one effective L2 capacity (`l2_fraction` of the reported size: chips with
two L2 partitions may hold shared data twice); a group's blocks sweep K at one rate (a stream's cohorts
overlap in time, but the distance between two uses counts the groups in between whole); no prefetching.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..kernels.spec import KernelSpec
from ..runtime.device import DeviceInfo
from .counts import ELEM, L1Traffic
from .facts import SECTOR, SMS_PER_TPC
from .geometry import Geometry

# Cycles one memory-paced round takes: the time an SM's resident warps need for one k when they wait on
# their loads rather than on the L1 data stage. From the coalesced rung on the reference H100: 6.48
# TFLOP/s at 4096^3 and 1980 MHz is 21.2 ms = 4.2e7 cycles, in which each SM runs 124 blocks, 62 pairs
# one after another, 4096 k each: 165 cycles per k, while its stage work is 128 wavefronts per k (78%
# busy: memory sets the pace). The naive rung (1088 wavefronts per k) took 1115 cycles per k, 98% of its
# stage bound. Any threshold from 165 to 576 (naive 8 x 32, which ran at 98% of its stage bound) fits
# the measured rungs; only kernels queuing in that range depend on the value.
MEMORY_ROUND_CYCLES = 165.0


@dataclass(frozen=True)
class CacheTraffic:
    l1_requested_bytes: float      # 32 x sectors requested by global loads
    l2_load_bytes: float           # L1 misses fetched from L2
    l2_store_bytes: float          # store sectors written through to L2
    dram_read_bytes: float
    dram_write_bytes: float
    compulsory_read_bytes: float   # every byte of A and B the tiles touch, once
    c_bytes: float                 # C, once
    waves: int                     # ceil(blocks / (SMs x blocks per SM))
    wave_footprint_bytes: float    # the largest in-step group's distinct A, B and C bytes
    l2_capacity_bytes: float
    l1_sharing: float              # L2 loads with co-resident sharing / without (1: blocks share nothing)
    modelled: bool = True          # False: untiled grid, requested traffic used as is
    stage_wavefronts_per_k: float = 0.0  # global-load wavefronts an SM's resident blocks queue per k
    in_step_blocks: int = 0        # blocks that sweep K together: a wave (SMs x b), or a cohort (SMs)
    groups: int = 0                # in-step groups over the launch: waves, or a stream's cohorts
    stream: bool = False           # stage-paced: the SM's blocks run staggered, cohorts of one per SM
    xbar_load_bytes: float | None = None  # L2 -> SM bytes with every SM counted (None: as l2_load_bytes)
    carried: float = 1.0           # sectors carried per sector asked for (Traffic.a_carried / b_carried, weighted)

    @property
    def delivered_bytes(self) -> float:
        """What the crossbar carries between the SMs and L2, every SM counted: loads and stores."""
        loads = self.l2_load_bytes if self.xbar_load_bytes is None else self.xbar_load_bytes
        return loads + self.l2_store_bytes

    @property
    def l2_bytes(self) -> float:
        return self.l2_load_bytes + self.l2_store_bytes

    @property
    def dram_bytes(self) -> float:
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def l1_hit_rate(self) -> float:
        """Of the sectors asked for, the share L1 served: 1 - what the SM received from L2 / what it asked
        (in sectors carried: cp.async into rows off a sector asks for some twice)."""
        asked = self.l1_requested_bytes * self.carried
        got = self.l2_load_bytes if self.xbar_load_bytes is None else self.xbar_load_bytes
        return max(0.0, 1.0 - got / asked) if asked else 0.0


def _sector_round(nbytes: np.ndarray) -> np.ndarray:
    return np.ceil(nbytes / SECTOR) * SECTOR


REPLACEMENTS = ("lru", "random")


@functools.lru_cache(maxsize=4096)
def survival(distance_over_capacity: float, replacement: str = "lru") -> float:
    """Probability that a line is still in L2 when reused after `distance_over_capacity` x C distinct bytes."""
    if replacement not in REPLACEMENTS:
        raise ValueError(f"replacement must be one of {REPLACEMENTS}, got {replacement!r}")
    a = distance_over_capacity
    if a <= 1.0:
        return 1.0
    if replacement == "lru":
        return 0.0
    lo, hi = 0.0, 1.0 - 1e-12  # exp(-a (1 - h)) - h is > 0 at 0 and < 0 just below 1 when a > 1
    for _ in range(60):
        mid = (lo + hi) / 2
        if math.exp(-a * (1 - mid)) > mid:
            lo = mid
        else:
            hi = mid
    return lo


def stage_wavefronts_per_k(l1: L1Traffic, geo: Geometry, k: int, blocks_per_sm: int) -> float:
    """Global-load wavefronts the SM's resident blocks bring to the L1 data stage per k (one per cycle is
    served): the blocks' average per k, times the blocks an SM holds."""
    blocks = geo.blocks
    if not blocks or k <= 0:
        return 0.0
    return l1.global_load_wavefronts / (blocks * k) * max(1, blocks_per_sm)


def stage_paced(l1: L1Traffic, geo: Geometry, k: int, blocks_per_sm: int) -> bool:
    """Whether the L1 data stage, not memory, paces a direct kernel's blocks (see the module docstring)."""
    return geo.direct and stage_wavefronts_per_k(l1, geo, k, blocks_per_sm) > MEMORY_ROUND_CYCLES


def cache_traffic(spec: KernelSpec, m: int, n: int, k: int, params: dict, geo: Geometry, l1: L1Traffic,
                  device: DeviceInfo, blocks_per_sm: int, l2_fraction: float = 1.0,
                  replacement: str = "lru", stream: bool | None = None, elem: int = ELEM,
                  out_elem: int | None = None, resident: int | None = None) -> CacheTraffic:
    """The model of the module docstring. `stream`: None decides from the pacing; True (a stream of
    one-block-per-SM cohorts) or False (waves in step) forces one, to compare the two. `elem`, `out_elem`:
    bytes per element of A and B, and of C (the input's by default).

    `resident`: for a persistent grid, the blocks that run at once (whole clusters). Block b of such a grid
    takes tiles b, b + resident, ... of the tile order, so the tiles of round r are r x resident ..
    (r + 1) x resident - 1 of that order: the rounds are the in-step groups, exactly as waves are for a grid
    of one block per tile. The working set of a round (its distinct panels of A and B and its tiles of C)
    against the L2 is then what decides reuse, and a grouped order (GROUP_M tile rows before the next
    column) makes that set a compact patch of C. Not modelled: the rounds drifting apart (a block whose
    tiles are all interior runs as fast as one at the edge; with the producer loading a tile ahead they
    stay within a tile of each other), and TMA multicast, which is in the requested traffic (one L2 read of
    a shared tile per cluster) and so caps the L1 -> L2 bytes, not the DRAM bytes."""
    out_elem = elem if out_elem is None else out_elem
    if replacement not in REPLACEMENTS:
        raise ValueError(f"replacement must be one of {REPLACEMENTS}, got {replacement!r}")
    t = spec.traffic(m, n, k, params)
    requested = l1.global_load_sectors * SECTOR
    stores = l1.global_store_sectors * SECTOR
    c_bytes = float(out_elem * m * n)
    cap = float(device.l2_bytes) * l2_fraction
    S = device.sm_count
    b = max(1, blocks_per_sm)
    slots = S * b if resident is None else max(1, resident)
    stage = stage_wavefronts_per_k(l1, geo, k, b)
    if not geo.tiled or m == 0 or n == 0 or k == 0:
        loads = float(elem * (t.a_loads + t.b_loads))
        return CacheTraffic(requested, min(requested, loads), stores, elem * (m * k + k * n), c_bytes,
                            elem * (m * k + k * n), c_bytes, 1, loads + c_bytes, cap, 1.0, modelled=False,
                            stage_wavefronts_per_k=stage, in_step_blocks=slots, groups=1)

    if stream is None:
        stream = stage_paced(l1, geo, k, b)
    group_size = min(S, slots) if stream else slots
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
    a_panel_of_row = np.minimum(geo.tile_m, m - np.arange(geo.grid_m) * geo.tile_m) * float(_sector_round(np.array(k * elem)))
    b_panel_of_col = k * _sector_round(np.minimum(geo.tile_n, n - np.arange(geo.grid_n) * geo.tile_n) * float(elem))
    grp = ids // group_size

    # L1 -> L2: distinct panels per (wave, SM) when the wave is in step; per block in a stream, whose
    # co-resident blocks are a lifetime / b apart in K and meet in L2, not in L1. What the crossbar delivers
    # counts every SM; what L2 looks up counts the two SMs of a TPC once for what they read together.
    alone = float(t.a_carried * a_panel_of_row[row].sum() + t.b_carried * b_panel_of_col[col].sum())
    asked = requested  # in sectors carried
    if requested and (t.a_carried != 1.0 or t.b_carried != 1.0):
        asked = requested * alone / float(a_panel_of_row[row].sum() + b_panel_of_col[col].sum())
    if stream:
        per_sm = per_tpc = alone
    else:
        slot = ids % slots                            # the block's place in its round
        sm = slot % S if resident is None else slot   # round-robin over SMs; a persistent block has its own
        first = (ids // slots) * slots                # a key per round

        def distinct_bytes(key: np.ndarray, keys: np.ndarray, panel: np.ndarray, sizes: int) -> float:
            uniq = np.unique(key * sizes + keys)
            return float(panel[uniq % sizes].sum())

        def shared_by(key: np.ndarray) -> float:
            return (t.a_carried * distinct_bytes(key, row, a_panel_of_row, geo.grid_m)
                    + t.b_carried * distinct_bytes(key, col, b_panel_of_col, geo.grid_n))

        per_sm = shared_by(first + sm)
        # Which blocks the two SMs of a TPC run together: a round's blocks 2j and 2j+1 at the start. A
        # persistent grid keeps them so for its whole walk; so does a grid of one block per SM, whose TPC
        # partners finish together and are handed the next two blocks together. Where an SM holds several
        # blocks, a freed slot takes whatever block comes next: partners after the first round are left
        # to chance, and the model pairs none.
        paired = np.ones(T, bool) if resident is not None or b == 1 else ids < slots
        per_tpc = shared_by(first + np.where(paired, sm // SMS_PER_TPC, sm)) if S % SMS_PER_TPC == 0 else per_sm
    xbar_loads = min(asked, per_sm) if asked else per_sm
    # A cluster's multicast (in `requested`: one read per cluster) pairs the same two blocks as their TPC.
    l2_loads = min(asked, per_tpc) if asked else per_tpc

    # L2 -> DRAM: panels per in-step group, LRU reuse distance in groups.
    groups = int(grp[-1]) + 1 if T else 0
    c_of_group = np.bincount(grp, weights=rows_in * cols_in * out_elem, minlength=groups)
    rows_of = [np.unique(row[w * group_size:(w + 1) * group_size]) for w in range(groups)]  # ids in order
    cols_of = [np.unique(col[w * group_size:(w + 1) * group_size]) for w in range(groups)]
    foot = [float(a_panel_of_row[rows_of[w]].sum() + b_panel_of_col[cols_of[w]].sum() + c_of_group[w])
            for w in range(groups)]
    last_a: dict[int, int] = {}
    last_b: dict[int, int] = {}
    dram_read = 0.0
    compulsory = 0.0

    @functools.lru_cache(maxsize=None)
    def distance(w0: int, w: int) -> float:
        """Distinct bytes touched by groups w0 .. w-1, stopping once past 20x the capacity (no survivor)."""
        if w - w0 == 1:
            return foot[w0]
        ra: set = set()
        cb: set = set()
        total = 0.0
        for v in range(w0, w):
            for r in rows_of[v].tolist():
                if r not in ra:
                    ra.add(r)
                    total += a_panel_of_row[r]
            for c in cols_of[v].tolist():
                if c not in cb:
                    cb.add(c)
                    total += b_panel_of_col[c]
            total += c_of_group[v]
            if total > 20 * cap:
                break
        return total

    for w in range(groups):
        for panels, last, sizes in ((rows_of[w], last_a, a_panel_of_row), (cols_of[w], last_b, b_panel_of_col)):
            for u in panels.tolist():
                nbytes = float(sizes[u])
                w0 = last.get(u)
                if w0 is None:
                    compulsory += nbytes
                    dram_read += nbytes
                else:
                    dram_read += nbytes * (1.0 - survival(distance(w0, w) / cap, replacement))
                last[u] = w

    # C still dirty in L2 at the end: the most recent groups' tiles, as far back as the L2 reaches.
    resident, room = 0.0, cap
    for w in range(groups - 1, -1, -1):
        if foot[w] <= room:
            resident += c_of_group[w]
            room -= foot[w]
        else:
            resident += c_of_group[w] * max(0.0, room) / foot[w] if foot[w] else 0.0
            break
    dram_write = max(0.0, c_bytes - resident)
    return CacheTraffic(
        l1_requested_bytes=requested, l2_load_bytes=l2_loads, l2_store_bytes=stores,
        dram_read_bytes=dram_read, dram_write_bytes=dram_write, compulsory_read_bytes=compulsory,
        c_bytes=c_bytes, waves=-(-T // slots) if T else 0, wave_footprint_bytes=max(foot) if foot else 0.0,
        l2_capacity_bytes=cap, l1_sharing=per_sm / alone if alone else 1.0, xbar_load_bytes=xbar_loads,
        carried=asked / requested if requested else 1.0,
        stage_wavefronts_per_k=stage, in_step_blocks=group_size, groups=groups, stream=bool(stream),
    )
