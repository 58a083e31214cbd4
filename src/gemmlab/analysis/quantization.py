"""Tile and wave quantization, and the sawtooth they draw across a sweep of sizes.

Tile quantization: a kernel computes C in whole tiles of tile_m x tile_n, so a size that is not a multiple
of the tile pays for padding: useful work / work done = M N / (ceil(M/tile_m) tile_m ceil(N/tile_n) tile_n).
Wave quantization: the SMs hold `slots` = SMs x blocks-per-SM tiles at once; T tiles take
ceil(T / slots) waves, and the last one may be mostly empty: efficiency T / (ceil(T/slots) x slots).

A persistent grid (rung 15) launches no more blocks than can be resident (`resident`, in whole clusters)
and each block walks the tiles: block b takes tiles b, b + resident, ... So the waves are rounds, tiles /
resident of them, the last one partly idle; a cluster's blocks take adjacent tiles together, so the tiles
counted are those of the launch's whole clusters (`tiles_launched`: an odd tile row count is rounded up,
the extra block computing padding). The busiest SM runs (its resident blocks) x (rounds) tiles.

The classical wave model assumes a partly filled wave takes as long as a full one, which is right only
when one resident block cannot use more of its SM than its share. A kernel whose single block keeps the
SM busier than 1/blocks-per-SM finishes a thin last wave sooner. `single_block_speed` s1 (measured by
`analysis.measure.calibrate_single_block_speed`) is the SM's throughput with one block, as a fraction of
its throughput when full: an SM holding b blocks runs at min(1, b s1) of full rate, so its b blocks take
b / min(1, b s1) block-times. s1 = 1/blocks-per-SM is the classical model, s1 = 1 an SM one block fills.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Sequence


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Quantization:
    m: int
    n: int
    k: int
    tile_m: int
    tile_n: int
    tile_k: int
    tiles_m: int
    tiles_n: int
    tiles: int
    sm_count: int
    blocks_per_sm: int
    slots: int
    tile_efficiency: float       # useful work / work done including the padding of edge tiles
    waves: float                 # tiles / slots
    full_waves: int              # ceil(tiles / slots)
    wave_efficiency: float       # tiles / (full_waves x slots): the classical wave model
    busiest_sm_blocks: float     # ceil(tiles / SMs): the blocks the busiest SM runs in total (fractional with
    #                              a last round in parts)
    balance_efficiency: float    # tiles / (busiest_sm_blocks x SMs)
    splits: int = 1              # blocks sharing a tile along K (a split over K): `tiles` counts those blocks
    last_parts: int = 1          # a persistent grid's last, partial round: each tile in this many parts along K

    @property
    def k_per_block(self) -> float:
        """The k one block (unit) runs: K, or its slice of K with a split."""
        return self.k / self.splits

    @property
    def useful_fraction(self) -> float:
        """The classical predicted efficiency: tile efficiency x wave efficiency."""
        return self.tile_efficiency * self.wave_efficiency


def quantize(m: int, n: int, k: int, tile_m: int, tile_n: int, sm_count: int, blocks_per_sm: int,
             tile_k: int = 1, resident: int | None = None, tiles_launched: int | None = None,
             splits: int = 1, last_parts: int = 1) -> Quantization:
    """Tile and wave quantization. `resident` (a persistent grid): the blocks running at once, which walk
    `tiles_launched` tiles (the tiles, padded to whole clusters; default: the tiles) in rounds; with
    `last_parts` > 1 the tiles of the last, partial round are each cut into that many parts along K, run
    side by side, so that round takes 1 / last_parts of one (the rounds, and the busiest SM's tiles, are
    then fractional). `splits`: blocks sharing each tile along K (a split over K), each over 1 / splits of
    it: the tiles counted are those blocks (units), and the padded work is theirs."""
    if min(tile_m, tile_n, tile_k, sm_count, blocks_per_sm, splits, last_parts) < 1:
        raise ValueError("tiles, SM count, blocks per SM, splits and parts must be positive")
    tm, tn = cdiv(m, tile_m), cdiv(n, tile_n)
    tiles = tm * tn * splits
    k_pad = cdiv(k, tile_k) * tile_k / splits  # the k of one unit (whole steps shared evenly)
    if resident is not None:
        if resident < 1:
            raise ValueError("a persistent grid needs at least one resident block")
        walked = max(tiles, tiles_launched or tiles)
        blocks = min(walked, resident)           # the launcher caps the grid at the tiles too
        slots = resident
        done = walked * tile_m * tile_n * k_pad
        tile_eff = (m * n * k) / done if done else 1.0
        full = cdiv(walked, blocks) if walked else 0
        parts = last_parts if walked % max(blocks, 1) else 1
        rounds = full - 1 + 1 / parts if parts > 1 else full
        wave_eff = walked / (rounds * slots) if full else 1.0
        per_sm = cdiv(blocks, sm_count) if walked else 0
        busiest = per_sm * rounds
        balance = walked / (busiest * sm_count) if busiest else 1.0
        return Quantization(m, n, k, tile_m, tile_n, tile_k, tm, tn, walked, sm_count, blocks_per_sm, slots,
                            tile_eff, walked / slots, full, wave_eff, busiest, balance, splits, parts)
    slots = sm_count * blocks_per_sm
    done = tiles * tile_m * tile_n * k_pad
    tile_eff = (m * n * k) / done if done else 1.0
    full = cdiv(tiles, slots) if tiles else 0
    wave_eff = tiles / (full * slots) if full else 1.0
    busiest = cdiv(tiles, sm_count) if tiles else 0
    balance = tiles / (busiest * sm_count) if busiest else 1.0
    return Quantization(m, n, k, tile_m, tile_n, tile_k, tm, tn, tiles, sm_count, blocks_per_sm, slots,
                        tile_eff, tiles / slots, full, wave_eff, busiest, balance, splits)


def sm_time_units(blocks: int, single_block_speed: float) -> float:
    """Time for one SM to finish `blocks` blocks started together, in block-times at the SM's full rate."""
    if blocks <= 0:
        return 0.0
    return blocks / min(1.0, blocks * single_block_speed)


def schedule_time_units(tiles: int, sm_count: int, blocks_per_sm: int, single_block_speed: float) -> float:
    """Time for the whole grid, in block-times at full SM rate: full waves, then the tail spread over SMs.

    Blocks are handed out breadth-first (one per SM before any SM gets a second), so a tail of r blocks
    puts ceil(r / SMs) on the busiest SM.
    """
    slots = sm_count * blocks_per_sm
    q, r = divmod(tiles, slots)
    t = q * sm_time_units(blocks_per_sm, single_block_speed)
    if r:
        t += sm_time_units(cdiv(r, sm_count), single_block_speed)
    return t


def predicted_efficiency(q: Quantization, single_block_speed: float | None = None) -> float:
    """Useful work over (time x the machine's full rate), with the SM-throughput wave model.

    `single_block_speed` None means the classical model (1 / blocks-per-SM).
    """
    s1 = 1.0 / q.blocks_per_sm if single_block_speed is None else single_block_speed
    units = schedule_time_units(q.tiles, q.sm_count, q.blocks_per_sm, s1)
    if not units:
        return 1.0
    return q.tile_efficiency * q.tiles / (units * q.sm_count)


def model_time_units(q: Quantization, single_block_speed: float | None = None) -> float:
    """Predicted time up to one constant (block-time per unit of tile work): units x padded tile work."""
    s1 = 1.0 / q.blocks_per_sm if single_block_speed is None else single_block_speed
    k_pad = cdiv(q.k, q.tile_k) * q.tile_k / q.splits
    return schedule_time_units(q.tiles, q.sm_count, q.blocks_per_sm, s1) * q.tile_m * q.tile_n * k_pad


@dataclass
class SawtoothFit:
    """The quantization model against a measured sweep, after fitting one scale (seconds per unit)."""

    shapes: list[tuple[int, int, int]]
    measured_tflops: list[float]
    predicted_tflops: list[float]
    rel_errors: list[float]            # (predicted - measured) / measured
    scale: float
    single_block_speed: float
    notes: list[str] = field(default_factory=list)

    @property
    def abs_errors(self) -> list[float]:
        return [abs(e) for e in self.rel_errors]

    @property
    def within_10pct(self) -> float:
        errs = self.abs_errors
        return sum(e <= 0.10 for e in errs) / len(errs) if errs else 0.0

    @property
    def p90_abs_error(self) -> float:
        errs = sorted(self.abs_errors)
        if not errs:
            return math.nan
        return errs[min(len(errs) - 1, math.ceil(0.9 * len(errs)) - 1)]

    @property
    def max_abs_error(self) -> float:
        return max(self.abs_errors) if self.rel_errors else math.nan

    @property
    def median_abs_error(self) -> float:
        return statistics.median(self.abs_errors) if self.rel_errors else math.nan


def fit_sawtooth(quants: Sequence[Quantization], measured_seconds: Sequence[float],
                 single_block_speed: float | None = None) -> SawtoothFit:
    """Fit the one free constant (time per unit of tile work) by the median ratio; compare point by point."""
    if len(quants) != len(measured_seconds) or not quants:
        raise ValueError("need one measured time per shape, and at least one shape")
    units = [model_time_units(q, single_block_speed) for q in quants]
    scale = statistics.median(t / u for t, u in zip(measured_seconds, units) if u > 0)
    shapes = [(q.m, q.n, q.k) for q in quants]
    meas = [2.0 * m * n * k / t / 1e12 for (m, n, k), t in zip(shapes, measured_seconds)]
    pred = [2.0 * m * n * k / (scale * u) / 1e12 for (m, n, k), u in zip(shapes, units)]
    errs = [(p - mm) / mm for p, mm in zip(pred, meas)]
    s1 = 1.0 / quants[0].blocks_per_sm if single_block_speed is None else single_block_speed
    return SawtoothFit(shapes, meas, pred, errs, scale, s1)
