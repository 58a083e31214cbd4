"""Where a persistent kernel's time goes, tile by tile, measured inside the kernel.

A rung whose spec names a trace switch (`spec.trace`: a preprocessor macro, and the k of one main-loop step
as a function of the parameters) can be built with it.
Each block then records the global timer and its SM clock at entry and at each consumer's exit, and its
SM; each consumer warpgroup records, per work unit (a tile, or a stream-K run of one), its SM clock at
four points: the unit begins, its first slot of data is there, its last wgmma is done, its epilogue is
issued. `record` (GPU) builds that variant, runs one call of `gemmlab.matmul` through it and returns a
`Timeline`; the normal build is untouched (the switch is part of the compile and launch caches' keys).

`summarise` (no GPU) divides each consumer's share of the kernel, in cycles of its SM's clock, into

    start     the first block's entry to this block's entry (launch skew)
    fill      entry to the first unit's first data (barriers, the first TMA round trip)
    wait      later units: the unit begins to its first data (the producer behind the consumers)
    main      first data to the last wgmma done (the main loops)
    epilogue  last wgmma done to the epilogue issued
    between   epilogue issued to the next unit's start (the tile walk)
    end       last epilogue issued to the consumer's exit (stores draining, the cluster barrier)
    tail      the consumer's exit to the last exit of any block (an idle SM at the end)

which add up to the kernel's duration. The clock readings are exact within an SM; across SMs they are
placed by the global timer (a microsecond-scale resolution on some GPUs), which only `start` and `tail`
depend on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Records the traced build keeps (passed to it as -D switches): blocks, and units per consumer; a block
# past the first or a unit past the second is not recorded.
TRACE_BLOCKS = 256
TRACE_UNITS = 256

PHASES = ("start", "fill", "wait", "main", "epilogue", "between", "end", "tail")

# Field positions, as the kernel writes them (15_wgmma.cu, "timeline").
_B_GT_IN, _B_CLK_IN, _B_SM = 0, 1, 2
_B_OUT = ((3, 4), (5, 6))  # (global timer, clock) at each consumer's exit
_U_GT, _U_BEGIN, _U_DATA, _U_MAIN, _U_EPI, _U_TILE, _U_KB, _U_KE = range(8)


@dataclass
class Timeline:
    """The raw records of one traced launch: `blocks` (B x 8) and `units` (B x consumers x U x 8), unsigned
    64-bit, as the kernel wrote them (zero where nothing was written); the problem and the parameters."""

    kernel: str
    m: int
    n: int
    k: int
    params: dict[str, int]
    blocks: np.ndarray
    units: np.ndarray
    dtype: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # Inside the TMA-store epilogue (B x consumers x U x 16): clock64 once the bias is loaded, then per box of
    # 64 columns its outputs computed, its buffer free, its store issued; zero where that epilogue did not run.
    epilogue: np.ndarray | None = None

    def used_blocks(self) -> np.ndarray:
        """Indices of the blocks that ran (an entry was recorded)."""
        return np.nonzero(self.blocks[:, _B_CLK_IN])[0]

    def truncated(self) -> str:
        """Why the records may be incomplete ('' when they are not): every block slot used (a grid larger than
        the trace holds) or a consumer that filled every unit slot."""
        why = []
        if self.blocks.shape[0] and len(self.used_blocks()) == self.blocks.shape[0]:
            why.append(f"all {self.blocks.shape[0]} block records used (the grid may be larger)")
        full = [int(b) for b in self.used_blocks() for cw in range(self.units.shape[1])
                if self.unit_count(b, cw) == self.units.shape[2]]
        if full:
            why.append(f"{len(full)} consumer(s) filled all {self.units.shape[2]} unit records (later units are missing)")
        return "; ".join(why)

    def unit_count(self, b: int, cw: int) -> int:
        """Work units consumer `cw` of block `b` began (a recorded start, in order from the first)."""
        began = self.units[b, cw, :, _U_BEGIN] != 0
        return int(np.argmin(began)) if not began.all() else int(began.size)


def _i64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.uint64).astype(np.int64)


def _first_data(u: np.ndarray) -> np.ndarray:
    """Units' first-data clocks (a unit with no k steps records none: its begin stands in)."""
    return np.where(u[..., _U_DATA] != 0, u[..., _U_DATA], u[..., _U_BEGIN])


def block_clock_ghz(tl: Timeline) -> np.ndarray:
    """Each used block's SM clock in GHz: its clock cycles over its global-timer nanoseconds, entry to the
    first consumer's exit."""
    used = tl.used_blocks()
    blk = _i64(tl.blocks[used])
    gt_out, clk_out = _B_OUT[0]
    ns = blk[:, gt_out] - blk[:, _B_GT_IN]
    cyc = blk[:, clk_out] - blk[:, _B_CLK_IN]
    if (ns <= 0).any() or (cyc <= 0).any():
        raise ValueError("timeline: a block's exit was not recorded after its entry (was the trace zeroed and the "
                         "launch complete?)")
    return cyc / ns


def summarise(tl: Timeline, flop_per_clock: float | None = None) -> dict[str, Any]:
    """The phases (module docstring) per consumer, averaged over blocks and consumers: cycles, and shares of
    the kernel's duration; with the main loops' cycles per k step. `flop_per_clock`: the SM's peak for the
    input type (multiply-adds count two), to state the main loops' efficiency against it."""
    used = tl.used_blocks()
    if used.size == 0:
        raise ValueError("timeline: no block recorded its entry")
    blk = _i64(tl.blocks)
    ghz_all = block_clock_ghz(tl)
    ghz = float(np.median(ghz_all))
    t0 = int(blk[used, _B_GT_IN].min())
    consumers = tl.units.shape[1]
    t_end = max(int(blk[used, _B_OUT[cw][0]].max()) for cw in range(consumers))
    duration_ns = t_end - t0
    per: list[dict[str, float]] = []
    steps_main: list[float] = []
    covered: dict[int, list[tuple[int, int]]] = {}
    for b in used:
        clk_in = int(blk[b, _B_CLK_IN])
        for cw in range(consumers):
            gt_out, clk_out = (int(blk[b, f]) for f in _B_OUT[cw])
            u = _i64(tl.units[b, cw, : tl.unit_count(b, cw)])
            ph = dict.fromkeys(PHASES, 0.0)
            ph["start"] = (int(blk[b, _B_GT_IN]) - t0) * ghz
            ph["tail"] = (t_end - gt_out) * ghz
            if len(u) == 0:
                ph["end"] = clk_out - clk_in
            else:
                data = _first_data(u)
                ph["fill"] = data[0] - clk_in
                ph["wait"] = float((data[1:] - u[1:, _U_BEGIN]).sum())
                ph["main"] = float((u[:, _U_MAIN] - data).sum())
                ph["epilogue"] = float((u[:, _U_EPI] - u[:, _U_MAIN]).sum())
                ph["between"] = float((u[1:, _U_BEGIN] - u[:-1, _U_EPI]).sum())
                ph["end"] = clk_out - u[-1, _U_EPI]
                # the first unit's begin lies inside `fill` (entry to its data); later ones in `between`
                ks = u[:, _U_KE] - u[:, _U_KB]
                for row, d, kk in zip(u, data, ks):
                    if kk > 0:
                        steps_main.append(float(row[_U_MAIN] - d) / float(kk))
                    covered.setdefault(int(row[_U_TILE]), []).append((int(row[_U_KB]), int(row[_U_KE])))
            per.append(ph)
    mean = {p: float(np.mean([d[p] for d in per])) for p in PHASES}
    total = duration_ns * ghz
    out: dict[str, Any] = {
        "kernel": tl.kernel, "m": tl.m, "n": tl.n, "k": tl.k, "params": dict(tl.params), "dtype": tl.dtype,
        "blocks": int(used.size), "consumers": consumers,
        "duration_us": duration_ns / 1e3, "clock_ghz": ghz,
        "clock_ghz_spread": (float(ghz_all.min()), float(ghz_all.max())),
        "cycles": total,
        "phases_cycles": mean,
        "phases_share": {p: (mean[p] / total if total > 0 else 0.0) for p in PHASES},
        "accounted": (sum(mean.values()) / total if total > 0 else 0.0),
        "units": int(sum(len(v) for v in covered.values())),
        "tiles": len(covered),
        "main_cycles_per_kstep": float(np.median(steps_main)) if steps_main else 0.0,
        "main_cycles_per_kstep_range": (float(np.min(steps_main)), float(np.max(steps_main))) if steps_main else (0.0, 0.0),
        "truncated": tl.truncated(),
    }
    detail = epilogue_detail(tl)
    if detail:
        out["epilogue_detail"] = detail
    bk = tl.extra.get("k_step")
    if flop_per_clock and bk and steps_main:
        flop_step = 2.0 * tl.params["BM"] * tl.params["BN"] * bk
        out["ideal_cycles_per_kstep"] = flop_step / flop_per_clock
        out["main_efficiency"] = out["ideal_cycles_per_kstep"] / out["main_cycles_per_kstep"]
    return out


def epilogue_detail(tl: Timeline) -> dict[str, float]:
    """Medians over the units whose epilogue went through TMA stores, in cycles: `prologue` (last wgmma done
    to the bias loaded), per box b `compute_b` (its outputs computed: arithmetic and packing), `wait_b` (its
    buffer free: the copy engine done reading it, and the warpgroup's barrier), `store_b` (written to shared
    memory, fenced, barrier, TMA store issued), and `after` (the last store issued to the next unit's start).
    With deferred stores (rung 15's DEFER 1) a unit's epilogue only packs its outputs (`pack`: all boxes) and
    the stores run inside the next unit's first k steps, so there are no boxes here."""
    if tl.epilogue is None:
        return {}
    rows: dict[str, list[float]] = {}
    for b in tl.used_blocks():
        for cw in range(tl.units.shape[1]):
            n = tl.unit_count(b, cw)
            e = _i64(tl.epilogue[b, cw, :n])
            u = _i64(tl.units[b, cw, :n])
            for ei, ui in zip(e, u):
                if ei[0] == 0:
                    continue
                boxes = int(np.count_nonzero(ei[1:]) // 3)
                rows.setdefault("prologue", []).append(float(ei[0] - ui[_U_MAIN]))
                prev = ei[0]
                if boxes == 0 and ei[1] != 0:  # deferred stores: the packing alone
                    rows.setdefault("pack", []).append(float(ei[1] - prev))
                    prev = ei[1]
                for cb in range(boxes):
                    c, w, st = ei[1 + 3 * cb], ei[2 + 3 * cb], ei[3 + 3 * cb]
                    rows.setdefault(f"compute_{cb}", []).append(float(c - prev))
                    rows.setdefault(f"wait_{cb}", []).append(float(w - c))
                    rows.setdefault(f"store_{cb}", []).append(float(st - w))
                    prev = st
                rows.setdefault("after", []).append(float(ui[_U_EPI] - prev))
    return {k: float(np.median(v)) for k, v in rows.items()}


def tile_coverage(tl: Timeline) -> dict[int, list[tuple[int, int]]]:
    """For each tile, the k ranges of the units that computed it, over all blocks (a block's tile index is
    that of its cluster's tile, so blocks of one cluster list the same ranges)."""
    cov: dict[int, list[tuple[int, int]]] = {}
    for b in tl.used_blocks():
        for cw in range(tl.units.shape[1]):
            for row in _i64(tl.units[b, cw, : tl.unit_count(b, cw)]):
                cov.setdefault(int(row[_U_TILE]), []).append((int(row[_U_KB]), int(row[_U_KE])))
    return cov


def segments(tl: Timeline) -> list[dict[str, Any]]:
    """Every recorded unit as times in microseconds from the kernel's start (each block's clock placed by its
    entry's global-timer reading): sm, block, consumer, unit, tile, begin, data, main_end, epilogue_end."""
    used = tl.used_blocks()
    blk = _i64(tl.blocks)
    ghz = block_clock_ghz(tl)
    t0 = int(blk[used, _B_GT_IN].min())
    rows = []
    for g, b in zip(ghz, used):
        base_ns = int(blk[b, _B_GT_IN]) - t0
        clk_in = int(blk[b, _B_CLK_IN])

        def us(c: int) -> float:
            return (base_ns + (c - clk_in) / g) / 1e3

        for cw in range(tl.units.shape[1]):
            u = _i64(tl.units[b, cw, : tl.unit_count(b, cw)])
            for i, (row, data) in enumerate(zip(u, _first_data(u))):
                rows.append({"sm": int(blk[b, _B_SM]), "block": int(b), "consumer": cw, "unit": i,
                             "tile": int(row[_U_TILE]), "begin": us(row[_U_BEGIN]), "data": us(data),
                             "main_end": us(row[_U_MAIN]), "epilogue_end": us(row[_U_EPI])})
    return rows


def record(a, b, c=None, *, kernel: str = "wgmma", **matmul_kwargs) -> Timeline:
    """Run `gemmlab.matmul(a, b, c, kernel=kernel, **matmul_kwargs)` once through the traced build of
    `kernel` (after one untimed call that compiles and loads it) and return what it recorded. GPU only."""
    from .. import api
    from ..kernels import registry
    from ..runtime import compiler, device, launch

    spec = registry.get(kernel)
    trace = spec.trace
    if trace is None:
        raise ValueError(f"kernel {kernel!r} has no traced build (its spec names no trace switch)")
    cupy = device.require_cupy()
    m, k = a.shape
    n = b.shape[1]
    switches = (f"-D{trace.define}", f"-DGEMMLAB_TRACE_BLOCKS={TRACE_BLOCKS}", f"-DGEMMLAB_TRACE_UNITS={TRACE_UNITS}")
    with compiler.options_added(*switches):
        api.forget_launches()
        try:
            api.matmul(a, b, c, kernel=kernel, **matmul_kwargs)  # compile and load the traced build
            loaded = api.loaded(spec.name)
            if len(loaded) != 1:
                raise RuntimeError(f"expected one traced instantiation of {kernel}, found {len(loaded)}")
            prepared = loaded[0]
            globals_ = [cupy.ndarray(shape, dtype=cupy.uint64, memptr=launch.module_global(prepared.module, name))
                        for name, shape in (("gemmlab_trace_block", (TRACE_BLOCKS, 8)),
                                            ("gemmlab_trace_unit", (TRACE_BLOCKS, 2, TRACE_UNITS, 8)),
                                            ("gemmlab_trace_epilogue", (TRACE_BLOCKS, 2, TRACE_UNITS, 16)))]
            for g in globals_:
                g.fill(0)
            cupy.cuda.Device().synchronize()
            api.matmul(a, b, c, kernel=kernel, **matmul_kwargs)
            cupy.cuda.Device().synchronize()
            blocks, units, epilogue = (cupy.asnumpy(g) for g in globals_)
        finally:
            api.forget_launches()
    p = dict(prepared.params)
    return Timeline(kernel, m, n, k, p, blocks, units, dtype=str(getattr(a, "dtype", "")),
                    extra={"k_step": int(trace.k_step(p))}, epilogue=epilogue)
