"""Which blocks sweep K together? New launches whose DRAM traffic tells the cache model's hypotheses apart.

    PYTHONPATH=src python3 scripts/device_traffic_probe.py [--model-only] [--only NAME,NAME]

The cache model (`gemmlab.analysis.caching`) says a wave of SMs x b blocks stays in step while memory paces
its blocks, and becomes a stream of one-block-per-SM cohorts when the SM's L1 data stage paces them
(the resident blocks queue more than MEMORY_ROUND_CYCLES global-load wavefronts per k). Each launch below
is chosen so that the two pictures predict different DRAM bytes, and so that the obvious alternatives
(blocks per SM decide, or tiled kernels drift too) predict something else again.

Order of work: every prediction is printed and written to $OUT/predictions.json first; then one ncu
process profiles one launch of each (`analysis.ncu.profile`: --clock-control none, caches flushed before
each pass, a small metric set); then each launch's measured DRAM and L1 -> L2 bytes are printed beside the
model, the two forced alternatives and the stage's measured busy fraction (the L1 / shared-memory bound
at the clock ncu saw, over the measured duration: near 100% means stage-paced), and a table last
($OUT/results.json). Sizes keep each launch under ~70 ms, the whole run well under 4 minutes on an H100.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("OUT", "out"))
GB = 1e9


@dataclass
class Probe:
    name: str            # a short label
    kernel: str
    m: int
    n: int
    k: int
    params: dict = field(default_factory=dict)
    why: str = ""


# Each probe keeps the operand whose panels are shared across the resident set larger than the L2
# (4096 x 4096 fp32 = 64 MiB > 50 MiB) and shrinks the other dimension to keep the launch short.
PROBES = [
    Probe("naive16 N=1024", "naive", 4096, 1024, 4096, {"BX": 16, "BY": 16},
          "the ladder's naive block (stage-paced, 1088 wavefronts per k) at a quarter of the columns: does "
          "the stream (A re-read by nearly every block) hold at another N?"),
    Probe("naive32x32", "naive", 4096, 1024, 4096, {"BX": 32, "BY": 32},
          "2 blocks per SM and the mirror image of coalesced 32 x 32 (A panels shared by blocks 128 ids "
          "apart, as B's are there) but stage-paced (2112 per k): stream predicted; in step here would "
          "say the number of blocks per SM, not the stage, decides"),
    Probe("naive8x32", "naive", 4096, 2048, 4096, {"BX": 8, "BY": 32},
          "8 blocks per SM, 9 lines per warp load: stage-paced at half the naive rung's queue (576 per k); "
          "stream predicted"),
    Probe("coalesced32x32 M=1024", "coalesced", 1024, 4096, 4096, {"BX": 32, "BY": 32},
          "the ladder's coalesced block (memory-paced, 128 per k) at a quarter of the rows: in step "
          "predicted, B once per wave"),
    Probe("coalesced32x8", "coalesced", 1024, 4096, 4096, {"BX": 32, "BY": 8},
          "8 blocks per SM, as naive 16 x 16, but memory-paced (128 per k): in step predicted; a stream here "
          "(8x the DRAM reads) would say blocks per SM, not the stage, staggers the blocks"),
    Probe("coalesced16x16", "coalesced", 1024, 4096, 4096, {"BX": 16, "BY": 16},
          "192 per k, just above MEMORY_ROUND_CYCLES = 165: stream predicted; in step here puts the "
          "threshold above 192"),
    Probe("coalesced8x32", "coalesced", 1024, 4096, 4096, {"BX": 8, "BY": 32},
          "320 per k: stream predicted; in step here puts the threshold above 320"),
    Probe("smem_tiled G=1", "smem_tiled", 4096, 4096, 4096, {"BLOCK_DIM": 32, "GROUP_M": 1},
          "a tiled rung in row-major block order, with the grid and occupancy of coalesced 32 x 32: in step "
          "predicted (B once per wave); docs/journal.md records 8.4 GB, a stream: does "
          "shared-memory pressure pace a tiled kernel's blocks apart?"),
    Probe("blocktile_2d 8192x8192", "blocktile_2d", 8192, 8192, 4096, {},
          "a tiled rung over 15.5 waves instead of the ladder's 3.9: in step predicted; a stream here says "
          "tiled waves drift apart given enough waves"),
]


def load_device(model_only: bool):
    from gemmlab.analysis import facts

    if model_only:
        return facts.H100_SXM
    dev, preset = facts.resolve(None)
    if preset:
        raise SystemExit("no GPU found: run with --model-only for the predictions alone")
    return dev


def predict_all(probes: list[Probe], dev) -> list[dict]:
    from gemmlab.analysis.models import model_kernel

    rows = []
    for p in probes:
        mdl = model_kernel(p.kernel, p.m, p.n, p.k, p.params, dev)
        c = mdl.cache
        alt = {}
        for label, forced in (("in_step", False), ("stream", True)):
            a = model_kernel(p.kernel, p.m, p.n, p.k, p.params, dev, mdl.resources, stream=forced).cache
            alt[label] = {"dram": a.dram_bytes, "dram_read": a.dram_read_bytes, "l2": a.l2_bytes}
        rows.append({
            "name": p.name, "kernel": p.kernel, "m": p.m, "n": p.n, "k": p.k, "params": mdl.params, "why": p.why,
            "blocks_per_sm": mdl.occupancy.blocks_per_sm, "blocks": mdl.geometry.blocks, "waves": c.waves,
            "stage_wavefronts_per_k": c.stage_wavefronts_per_k, "stream": c.stream,
            "in_step_blocks": c.in_step_blocks, "groups": c.groups,
            "model": {"dram": c.dram_bytes, "dram_read": c.dram_read_bytes, "dram_write": c.dram_write_bytes,
                      "l2": c.l2_bytes, "l2_load": c.l2_load_bytes, "compulsory": c.compulsory_read_bytes},
            "alternatives": alt,
        })
    return rows


def print_predictions(rows: list[dict]) -> None:
    from gemmlab.analysis.caching import MEMORY_ROUND_CYCLES

    print(f"=== predictions (written before any measurement; stage-paced above {MEMORY_ROUND_CYCLES:.0f} "
          f"wavefronts per k)")
    for r in rows:
        m, alt = r["model"], r["alternatives"]
        print(f"\n  {r['name']}: {r['kernel']} {r['m']}x{r['n']}x{r['k']} {r['params']}")
        print(f"    {r['blocks']} blocks, {r['blocks_per_sm']} per SM, {r['waves']} waves; "
              f"{r['stage_wavefronts_per_k']:.0f} global-load wavefronts per k per SM -> "
              f"{'stream of ' + str(r['groups']) + ' cohorts' if r['stream'] else 'waves in step'}")
        print(f"    model DRAM {m['dram'] / GB:.3f} GB (read {m['dram_read'] / GB:.3f}, compulsory "
              f"{m['compulsory'] / GB:.3f}), L1->L2 {m['l2'] / GB:.2f} GB; in step: DRAM "
              f"{alt['in_step']['dram'] / GB:.3f} L2 {alt['in_step']['l2'] / GB:.2f}; stream: DRAM "
              f"{alt['stream']['dram'] / GB:.3f} L2 {alt['stream']['l2'] / GB:.2f}")
        print(f"    why: {r['why']}")


# ncu's raw page with --print-units base writes durations in "ns" (older releases: "nsecond"); only the
# long forms are scaled by analysis.ncu.convert, so the probe reads the duration cells and their unit itself.
_SECONDS_PER = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3,
                "s": 1.0, "second": 1.0}
DURATION_METRIC = "gpu__time_duration.sum"


def durations_s(raw_csv: str, metric: str = DURATION_METRIC) -> list[float | None]:
    """Each profiled launch's duration in seconds, from ncu's raw CSV (header row, units row, one row per
    launch): the cell, thousands separators removed, times the unit's length in seconds."""
    import csv
    import io

    rows = [r for r in csv.reader(io.StringIO(raw_csv.strip())) if r and not r[0].startswith("==")]
    if len(rows) < 2 or metric not in rows[0]:
        return []
    i = rows[0].index(metric)
    has_units = rows[1][0] == ""
    scale = _SECONDS_PER.get(rows[1][i].strip(), math.nan) if has_units else math.nan
    out: list[float | None] = []
    for r in rows[2 if has_units else 1:]:
        try:
            v = float(r[i].replace(",", "")) * scale
        except (ValueError, IndexError):
            v = math.nan
        out.append(None if math.isnan(v) else v)
    return out


def measure(rows: list[dict], dev) -> list[dict]:
    from gemmlab.analysis import ncu
    from gemmlab.analysis.bounds import predict
    from gemmlab.analysis.models import model_kernel
    from gemmlab.micro.ceilings import Ceilings

    keys = ("dram_read_bytes", "dram_write_bytes", "l2_bytes", "l2_from_l1_sectors", "duration_s", "sm_clock_hz")
    metrics = {key: ncu.METRICS[key] for key in keys}
    runs = [ncu.ProfileRun(r["kernel"], r["m"], r["n"], r["k"], r["params"]) for r in rows]
    t0 = time.time()
    counters = ncu.profile(runs, workdir=OUT / "ncu", timeout_s=200, metrics=metrics)
    print(f"\n=== ncu: {len(counters)} launches profiled in {time.time() - t0:.0f} s")
    sheet = Ceilings.datasheet(dev)
    raw = OUT / "ncu" / "raw.csv"
    secs = durations_s(raw.read_text()) if raw.exists() else []
    for i, (r, c) in enumerate(zip(rows, counters)):
        l2, metric = c.l2_compared_bytes
        dram = c.dram_bytes
        mhz = c.sm_clock_mhz
        dur = secs[i] if i < len(secs) else None
        mdl = model_kernel(r["kernel"], r["m"], r["n"], r["k"], r["params"], dev)
        stage_s = predict(mdl, sheet, mhz).bound("L1/shared").seconds
        r["measured"] = {"dram": dram, "dram_read": c.get("dram_read_bytes"), "dram_write": c.get("dram_write_bytes"),
                         "l2": l2, "l2_metric": metric, "lts_bytes": c.get("l2_bytes"), "duration_s": dur,
                         "sm_clock_mhz": mhz, "stage_busy": stage_s / dur if dur else None,
                         "kernel_name": c.kernel_name}
    return rows


def _ratio(a: float | None, b: float | None) -> float:
    return a / b if a is not None and b else math.nan


def closer(r: dict) -> str:
    """Which forced picture's DRAM is nearer the measurement (in log ratio)."""
    d = r["measured"]["dram"]
    if not d:
        return "-"
    a, s = r["alternatives"]["in_step"]["dram"], r["alternatives"]["stream"]["dram"]
    if abs(a - s) < 0.1 * max(a, s):
        return "either"
    return "in step" if abs(math.log(a / d)) < abs(math.log(s / d)) else "stream"


def print_results(rows: list[dict]) -> None:
    print("\n=== per launch: model against ncu")
    for r in rows:
        m, meas = r["model"], r["measured"]
        tot_m, tot_n = m["dram"] + m["l2"], (meas["dram"] or 0) + (meas["l2"] or 0)
        print(f"  {r['name']}: DRAM model {m['dram'] / GB:.3f} / ncu {(meas['dram'] or math.nan) / GB:.3f} GB "
              f"(x{_ratio(m['dram'], meas['dram']):.2f}); L1->L2 model {m['l2'] / GB:.2f} / ncu "
              f"{(meas['l2'] or math.nan) / GB:.2f} GB (x{_ratio(m['l2'], meas['l2']):.2f}); sum x{_ratio(tot_m, tot_n):.2f}; "
              f"{(meas['duration_s'] or math.nan) * 1e3:.1f} ms at {meas['sm_clock_mhz'] or math.nan:.0f} MHz, "
              f"stage busy {100 * (meas['stage_busy'] or math.nan):.0f}%; DRAM nearer: {closer(r)}")
    print("\n=== table (GB; 'pace' is the model's: S = stream, W = waves in step)")
    head = (f"{'probe':24s} {'pace':>4s} {'wf/k':>5s} {'in-step':>8s} {'stream':>8s} {'model':>8s} {'ncu DRAM':>9s} "
            f"{'m/ncu':>6s} {'L2 m':>7s} {'L2 ncu':>7s} {'sum m/n':>7s} {'busy':>5s} {'nearer':>8s}")
    print(head)
    for r in rows:
        m, meas, alt = r["model"], r["measured"], r["alternatives"]
        tot_m, tot_n = m["dram"] + m["l2"], (meas["dram"] or 0) + (meas["l2"] or 0)
        print(f"{r['name']:24s} {'S' if r['stream'] else 'W':>4s} {r['stage_wavefronts_per_k']:5.0f} "
              f"{alt['in_step']['dram'] / GB:8.3f} {alt['stream']['dram'] / GB:8.3f} {m['dram'] / GB:8.3f} "
              f"{(meas['dram'] or math.nan) / GB:9.3f} {_ratio(m['dram'], meas['dram']):6.2f} {m['l2'] / GB:7.2f} "
              f"{(meas['l2'] or math.nan) / GB:7.2f} {_ratio(tot_m, tot_n):7.2f} "
              f"{100 * (meas['stage_busy'] or math.nan):4.0f}% {closer(r):>8s}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-only", action="store_true", help="print the predictions (H100 preset) and stop")
    ap.add_argument("--only", default="", help="comma-separated probe names (default: all)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    OUT.mkdir(parents=True, exist_ok=True)
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    probes = [p for p in PROBES if not only or p.name in only]
    if not probes:
        raise SystemExit(f"--only matched no probe; names: {', '.join(p.name for p in PROBES)}")
    dev = load_device(args.model_only)
    print(f"device: {dev.name}, {dev.sm_count} SMs, L2 {dev.l2_bytes / 2**20:.0f} MiB", flush=True)
    rows = predict_all(probes, dev)
    print_predictions(rows)
    (OUT / "predictions.json").write_text(json.dumps({"device": dev.name, "rows": rows}, indent=1, default=str))
    print(f"\n  predictions written to {OUT / 'predictions.json'}", flush=True)
    if args.model_only:
        return 0
    from gemmlab.analysis.ncu import NcuUnavailable

    try:
        rows = measure(rows, dev)
    except NcuUnavailable as exc:
        print(f"ncu unavailable: {exc}")
        return 1
    print_results(rows)
    (OUT / "results.json").write_text(json.dumps({"device": dev.name, "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
