"""The analysis on a GPU machine, in one call: tests, microbenchmarks, and every model checked against measurement.

    PYTHONPATH=src python3 scripts/device_analysis_check.py

Steps (each prints what it found; files go under $OUT, or ./out):
  1. GPU tests of the analysis and microbenchmarks (pytest -m gpu)             gpu_tests.log
  2. microbenchmarks beside the datasheet, with the SM clock of each          ceilings.json
  3. every rung and cuBLAS at 4096^3: Table 1, Table 2, roofline, paragraphs   analysis.md, analysis_*.png, ladder.json
  4. DRAM + L2 traffic: model against ncu for naive .. blocktile_2d at 4096^3 traffic.json, ncu/
     (ncu --clock-control none, one launch each; without ncu: time bounds instead)
  5. quantization sawtooth of the best fp32 rung, N = 1024 .. 2048 step 16     sawtooth.png, sawtooth.json
  6. L2 cliff: the naive rung's predicted against measured fall-off            cliff.png, cliff.json
and last a PASS / FAIL table of the analysis's targets (summary.json). Meant to finish in under 7 minutes
on an H100.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

OUT = Path(os.environ.get("OUT", "out"))
ROOT = Path(__file__).resolve().parents[1]
T0 = time.time()

SIZE = 4096                    # the size for the ladder, the roofline and the traffic check
SAWTOOTH_MK = 4096             # fixed M and K of the sawtooth sweep
SAWTOOTH_N = range(1024, 2049, 16)
CLIFF_SIZES = [512, 1024, 1536, 2048, 2560, 3072, 4096]
CLIFF_NCU_SIZE = 1024          # a size whose A, B and C fit in L2: ncu's DRAM bytes below the cliff
DRAM_COPY_REFERENCE = 3.0e12   # the reference device-copy figure (bytes read + written per second)
TRAFFIC_TOL = 0.25
SAWTOOTH_TOL = 0.10
CLIFF_TOL = 0.10


@dataclass
class Check:
    name: str
    status: str      # PASS, FAIL, INFO, SKIP
    detail: str


CHECKS: list[Check] = []


def check(name: str, ok: bool | None, detail: str) -> None:
    status = "INFO" if ok is None else ("PASS" if ok else "FAIL")
    CHECKS.append(Check(name, status, detail))
    print(f"  [{status}] {name}: {detail}", flush=True)


def header(title: str) -> None:
    print(f"\n=== {title}  (t = {time.time() - T0:.0f} s)", flush=True)


def step(name: str):
    """Run a step; an exception becomes a FAIL line (traceback in the log), never the end of the script."""
    def wrap(fn):
        def run(*a, **kw):
            try:
                return fn(*a, **kw)
            except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the script
                (OUT / f"error-{fn.__name__}.log").write_text(traceback.format_exc())
                check(name, False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
                                   f"(traceback in error-{fn.__name__}.log)")
                return None
        return run
    return wrap


def save_json(name: str, obj) -> None:
    (OUT / name).write_text(json.dumps(obj, indent=1, default=str))


# --------------------------------------------------------------------------------------------- steps


@step("environment")
def environment():
    header("environment")
    import cupy as cp

    import gemmlab
    from gemmlab.analysis import ncu
    from gemmlab.runtime import compiler, device

    d = device.device_info()
    env = {"device": d.name, "cc": d.compute_capability, "sms": d.sm_count, "l2_mib": d.l2_bytes / 2**20,
           "boost_mhz": d.sm_clock_khz / 1e3, "mem_mhz": d.mem_clock_khz / 1e3, "bus_bits": d.mem_bus_bits,
           "driver": d.driver_version, "runtime": d.runtime_version, "nvrtc": compiler.nvrtc_version(),
           "cupy": cp.__version__, "gemmlab": gemmlab.__version__, "python": sys.version.split()[0],
           "ncu": ncu.find_ncu(), "clocks_now": device.clocks_now(d.index)}
    for k, v in env.items():
        print(f"  {k}: {v}")
    save_json("env.json", env)
    return d


@step("GPU tests")
def gpu_tests():
    header("1. GPU tests: pytest -m gpu tests/test_analysis*.py tests/test_micro*.py")
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_analysis*.py")) + \
        sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_micro*.py"))
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rs", *files]
    from gemmlab.runtime.compiler import cache_dir

    # Share the kernel cache with the steps below, so each kernel is compiled once.
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               GEMMLAB_CACHE_DIR=os.environ.get("GEMMLAB_CACHE_DIR", str(cache_dir().parent)))
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240, env=env)
        log, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        log, rc = f"{exc.stdout or ''}{exc.stderr or ''}\nTIMEOUT after 240 s", -1
    (OUT / "gpu_tests.log").write_text(log)
    tail = [ln for ln in log.strip().splitlines() if ln.strip()][-12:]
    print("\n".join("  " + ln for ln in tail))
    summary = tail[-1] if tail else "no output"
    check("GPU tests (analysis, micro)", rc == 0, summary.strip("= "))


@step("microbenchmarks")
def microbenchmarks(dev):
    header("2. microbenchmarks (datasheet at the SM clock sampled during each run)")
    from gemmlab.micro.bench import run_micro
    from gemmlab.micro.ceilings import Ceilings, cache_path

    def show(r):
        sheet = r.datasheet_at_clock or r.datasheet
        unit = (lambda v: f"{v / 1e12:8.2f} TFLOP/s") if r.unit == "FLOP/s" else (lambda v: f"{v / 1e9:8.0f} GB/s  ")
        clk = f"{r.sm_clock_mhz:.0f} MHz" if r.sm_clock_mhz else "clock n/a"
        print(f"  {r.name:12s} {unit(r.value)}  datasheet {unit(sheet) if sheet else '-':>16s}  "
              f"{100 * r.value / sheet if sheet else float('nan'):5.1f}%  at {clk}  ({r.detail})", flush=True)

    results = run_micro(budget_ms=150, on_result=show)
    ceil = Ceilings.from_results(results, dev)
    ceil.save(OUT / "ceilings.json")
    ceil.save(cache_path(dev))
    by = {r.name: r for r in results}

    fma = by.get("fp32_fma")
    if fma:
        clk = fma.sm_clock_mhz or dev.sm_clock_khz / 1e3
        lanes = dev.fp32_lanes_per_sm
        limit = dev.sm_count * lanes * 2 * clk * 1e6
        check(f"FMA peak >= 90% of SMs x {lanes} x 2 x clock", fma.value >= 0.9 * limit,
              f"{fma.value / 1e12:.1f} TFLOP/s = {100 * fma.value / limit:.1f}% of {limit / 1e12:.1f} at "
              f"{clk:.0f} MHz ({'sampled' if fma.sm_clock_mhz else 'boost clock: NVML unavailable'}); "
              f"{100 * fma.value / fma.datasheet:.1f}% of the {dev.sm_clock_khz / 1e3:.0f} MHz boost figure")
    copy, memcpy = by.get("dram_copy"), by.get("memcpy_d2d")
    if copy:
        extra = f"; cudaMemcpy in the same run {memcpy.value / 1e12:.2f} TB/s" if memcpy else ""
        check("DRAM copy >= 90% of 3.0 TB/s", copy.value >= 0.9 * DRAM_COPY_REFERENCE,
              f"{copy.value / 1e12:.2f} TB/s = {100 * copy.value / DRAM_COPY_REFERENCE:.0f}% of 3.0 TB/s, "
              f"{100 * copy.value / copy.datasheet:.0f}% of the {copy.datasheet / 1e12:.2f} TB/s datasheet{extra}")
    for name, label in (("l2_read", "L2 bandwidth reported with datasheet"),
                        ("smem_read", "shared-memory bandwidth reported with datasheet")):
        r = by.get(name)
        if r:
            sheet = r.datasheet_at_clock or r.datasheet
            check(label, r.value > 0 and sheet is not None,
                  f"{r.value / 1e12:.2f} TB/s = {100 * r.value / sheet:.0f}% of {sheet / 1e12:.2f} TB/s "
                  f"({r.basis}){'' if r.published else ' [nominal: no published figure]'}")
    for name in ("l1_read", "tensor_fp16", "tensor_bf16", "tensor_fp16_wgmma", "tensor_bf16_wgmma", "dram_read",
                 "dram_write"):
        r = by.get(name)
        if r:
            sheet = r.datasheet_at_clock or r.datasheet
            rate = f"{r.value / 1e12:.1f} TFLOP/s" if r.unit == "FLOP/s" else f"{r.value / 1e12:.2f} TB/s"
            hopper = dev.compute_capability >= (9, 0)
            note = " (mma.sync; the datasheet figure needs wgmma)" if name in ("tensor_fp16", "tensor_bf16") and hopper else ""
            check(f"{name} (reported)", None, f"{rate} = {100 * r.value / sheet:.0f}% of datasheet{note}")
    return ceil


def _through_blocktile_2d():
    from gemmlab.analysis.models import fp32_specs

    names = [s.name for s in fp32_specs()]
    return names[: names.index("blocktile_2d") + 1] if "blocktile_2d" in names else names[:5]


@step("ladder and report section")
def ladder(dev, ceil):
    header(f"3. every rung and cuBLAS at {SIZE}^3: Table 1, Table 2, roofline")
    from gemmlab.analysis import analysis_section
    from gemmlab.analysis.models import fp32_specs
    from gemmlab.bench.measure import measure

    n = SIZE
    entries = [s.name for s in fp32_specs()] + ["cublas"]

    def show(r):
        print(f"  {r.kernel:14s} {r.median_ms or float('nan'):9.3f} ms {r.tflops or float('nan'):7.2f} TFLOP/s  at "
              f"{r.sm_clock_mhz or float('nan'):.0f} MHz  err {r.rel_error if r.rel_error is not None else float('nan'):.1e}"
              f"{'' if r.ok else '  FAILED VERIFICATION'}", flush=True)

    meas = measure(entries, (n, n, n), budget_ms=150, on_record=show)
    save_json("ladder.json", [m.as_dict() for m in meas])
    sec = analysis_section(meas, dev, ceil)
    (OUT / "analysis.md").write_text(sec.markdown)
    for name, fig in sec.figures.items():
        fig.savefig(OUT / f"{name}.png", dpi=130)
    failed = [m.kernel for m in meas if not m.ok]
    check(f"ladder verified and timed at {SIZE}^3", not failed,
          f"{len(meas) - len(failed)}/{len(meas)} ok; analysis.md + {len(sec.figures)} figures written"
          + (f"; FAILED: {failed}" if failed else ""))
    return {m.kernel: m for m in meas}


@step("DRAM + L2 traffic against ncu")
def traffic(dev, ceil, measured):
    header("4. DRAM + L2 traffic: model against ncu (--clock-control none, cold L2, one launch each)")
    from gemmlab.analysis import ncu
    from gemmlab.analysis.models import model_kernel
    from gemmlab.kernels import get

    n, c = SIZE, CLIFF_NCU_SIZE
    target = _through_blocktile_2d()
    # Explicit (default) parameters, so that a tuned entry for this GPU cannot change what runs.
    runs = [ncu.ProfileRun(name, n, n, n, get(name).defaults) for name in target] + \
        [ncu.ProfileRun(target[0], c, c, c, get(target[0]).defaults)]
    try:
        counters = ncu.profile(runs, workdir=OUT / "ncu", timeout_s=240)
    except ncu.NcuUnavailable as exc:
        print(f"  ncu unavailable: {exc}\n  falling back to time bounds for the memory-bound rungs")
        return traffic_by_time(dev, ceil, measured, target, str(exc))
    rows = []
    print(f"  {'kernel':14s} {'shape':>16s} {'DRAM model':>11s} {'DRAM ncu':>11s} {'L1<->L2 model':>14s} "
          f"{'L1<->L2 ncu':>12s} {'lts__t_bytes':>12s} {'sum ratio':>9s} {'L1 hit m/ncu':>13s} {'SM MHz':>7s}")
    for run, c in zip(runs, counters):
        mdl = model_kernel(run.kernel, run.m, run.n, run.k, run.params, dev)
        cmp_ = ncu.compare_traffic(mdl, c)
        ls, lh = c.get("l1_global_load_sectors"), c.get("l1_global_load_hit_sectors")
        hit = f"{100 * mdl.cache.l1_hit_rate:.0f}/{100 * lh / ls:.0f}%" if ls and lh is not None else "-"
        print(f"  {run.kernel:14s} {run.m}x{run.n}x{run.k:>5d} {mdl.cache.dram_bytes / 1e9:10.3f}G "
              f"{(cmp_.measured_dram or math.nan) / 1e9:10.3f}G {cmp_.model_l2 / 1e9:13.2f}G "
              f"{(cmp_.measured_l2 or math.nan) / 1e9:11.2f}G {(c.get('l2_bytes') or math.nan) / 1e9:11.2f}G "
              f"{cmp_.sum_ratio or math.nan:9.2f} {hit:>13s} {c.sm_clock_mhz or math.nan:7.0f}", flush=True)
        rows.append({"run": run.label, "model": {"dram": mdl.cache.dram_bytes, "dram_read": mdl.cache.dram_read_bytes,
                                                 "dram_write": mdl.cache.dram_write_bytes, "l2": mdl.cache.l2_bytes,
                                                 "l1_requested": mdl.cache.l1_requested_bytes,
                                                 "smem_load_wavefronts": mdl.l1.smem_load_wavefronts},
                     "counters": c.as_dict(), "sum_ratio": cmp_.sum_ratio, "dram_ratio": cmp_.dram_ratio,
                     "l2_ratio": cmp_.l2_ratio, "l2_metric": cmp_.l2_metric})
        if run.m == n:
            ok = cmp_.within(TRAFFIC_TOL)
            check(f"traffic {run.kernel} {n}^3: model DRAM+L2 within 25% of ncu", ok,
                  f"model {(cmp_.model_dram + cmp_.model_l2) / 1e9:.2f} GB vs ncu "
                  f"{((cmp_.measured_dram or 0) + (cmp_.measured_l2 or 0)) / 1e9:.2f} GB (ratio "
                  f"{cmp_.sum_ratio or math.nan:.2f}; DRAM {cmp_.dram_ratio or math.nan:.2f}, L2 "
                  f"{cmp_.l2_ratio or math.nan:.2f} via {cmp_.l2_metric}) at {c.sm_clock_mhz or math.nan:.0f} MHz")
        sc = c.get("smem_load_bank_conflicts")
        if sc is not None and run.m == n:
            check(f"{run.kernel} shared memory (reported)", None,
                  f"load wavefronts model {mdl.l1.smem_load_wavefronts / 1e9:.2f} G vs ncu "
                  f"{(c.get('smem_load_wavefronts') or math.nan) / 1e9:.2f} G; bank conflicts ld {sc:.3g} st "
                  f"{c.get('smem_store_bank_conflicts') or 0:.3g}; occupancy theoretical "
                  f"{100 * mdl.occupancy.fraction:.0f}% achieved {c.get('achieved_occupancy_pct') or math.nan:.0f}%")
    save_json("traffic.json", rows)
    return {r["run"]: r for r in rows}


def traffic_by_time(dev, ceil, measured, target, why):
    from gemmlab.analysis.bounds import predict
    from gemmlab.analysis.models import model_kernel

    n = SIZE
    rows = []
    for name in target:
        m = (measured or {}).get(name)
        if m is None or not m.ok:
            check(f"traffic {name} (time fallback)", False, "no measurement from step 3")
            continue
        mdl = model_kernel(name, n, n, n, m.params, dev)
        pred = predict(mdl, ceil, m.sm_clock_mhz)
        lim = pred.limiter
        memory_bound = lim.resource in ("DRAM", "L2") or (
            lim.resource == "L1/shared" and mdl.l1.global_load_wavefronts >= mdl.l1.smem_load_wavefronts)
        ratio = lim.seconds / m.seconds
        rows.append({"kernel": name, "limiter": lim.resource, "bound_s": lim.seconds, "measured_s": m.seconds})
        if memory_bound:
            check(f"traffic {name} {n}^3 (no ncu: time bound within 25%)", abs(ratio - 1) <= TRAFFIC_TOL,
                  f"{lim.resource} bound {lim.seconds * 1e3:.2f} ms vs measured {m.seconds * 1e3:.2f} ms "
                  f"(ratio {ratio:.2f}) at {m.sm_clock_mhz or math.nan:.0f} MHz; ncu: {why}")
        else:
            check(f"traffic {name} {n}^3 (no ncu)", None,
                  f"limiter {lim.resource} is dominated by shared-memory wavefronts, not DRAM / L2 / L1 traffic: "
                  f"no time check (bound / measured {ratio:.2f})")
    save_json("traffic.json", {"ncu": why, "rows": rows})
    return None


@step("quantization sawtooth")
def sawtooth(dev):
    from gemmlab import api
    from gemmlab.analysis.figures import sawtooth_figure
    from gemmlab.analysis.measure import calibrate_single_block_speed, sweep
    from gemmlab.analysis.models import sawtooth_quants
    from gemmlab.analysis.quantization import fit_sawtooth

    spec = api.choose_kernel("float32")
    m = k = SAWTOOTH_MK
    shapes = [(m, n, k) for n in SAWTOOTH_N]
    params = spec.defaults
    header(f"5. quantization sawtooth: {spec.name} (the best fp32 rung) {params}, M = K = {m}, "
           f"N = {shapes[0][1]} .. {shapes[-1][1]} step {SAWTOOTH_N.step}")
    quants, geo, b = sawtooth_quants(spec, params, shapes, dev)
    cal = calibrate_single_block_speed(spec.name, params, k, budget_ms=80)
    print(f"  tile {geo.tile_m}x{geo.tile_n}, {b} block(s) per SM, single-block speed s1 = "
          f"{cal.single_block_speed:.2f} {('(' + cal.note + ')') if cal.note else ''}", flush=True)
    meas = sweep(spec.name, shapes, params, budget_ms=30)
    bad = [r for r in meas if not r.ok]
    if bad:
        check("sawtooth verified", False, f"{spec.name} failed verification at N = {bad[0].n}")
        return
    fit = fit_sawtooth(quants, [r.seconds for r in meas], cal.single_block_speed)
    fig = sawtooth_figure([s[1] for s in shapes], fit.predicted_tflops, fit.measured_tflops, fit.rel_errors,
                          f"{spec.name} {geo.tile_m}x{geo.tile_n}, M = K = {m}, {dev.name}", geo.tile_n,
                          f"quantization model (s1 = {fit.single_block_speed:.2f}, one fitted scale)")
    fig.savefig(OUT / "sawtooth.png", dpi=130)
    for i in range(0, len(shapes), 8):
        print(f"  N = {shapes[i][1]:5d}: measured {fit.measured_tflops[i]:6.2f}  model {fit.predicted_tflops[i]:6.2f} "
              f"TFLOP/s  ({100 * fit.rel_errors[i]:+.1f}%)  waves {quants[i].waves:.2f}  at "
              f"{meas[i].sm_clock_mhz or math.nan:.0f} MHz")
    save_json("sawtooth.json", {"kernel": spec.name, "params": params, "blocks_per_sm": b,
                                "single_block_speed": cal.single_block_speed, "calibration": cal.note,
                                "shapes": shapes, "measured_tflops": fit.measured_tflops,
                                "predicted_tflops": fit.predicted_tflops, "rel_errors": fit.rel_errors,
                                "clocks_mhz": [r.sm_clock_mhz for r in meas]})
    spread = max(fit.measured_tflops) / min(fit.measured_tflops)
    clocks = [r.sm_clock_mhz for r in meas if r.sm_clock_mhz]
    clk = f"; SM clock {min(clocks):.0f}-{max(clocks):.0f} MHz" if clocks else "; SM clock not sampled"
    check(f"sawtooth of {spec.name} within 10%", fit.p90_abs_error <= SAWTOOTH_TOL,
          f"{100 * fit.within_10pct:.0f}% of {len(shapes)} points within 10% (90th percentile "
          f"{100 * fit.p90_abs_error:.1f}%, median {100 * fit.median_abs_error:.1f}%, max {100 * fit.max_abs_error:.1f}%); "
          f"measured max/min {spread:.2f}{clk}; pass: 90th percentile <= 10%")


@step("L2 cliff")
def cliff(dev, ceil, traffic_rows):
    from gemmlab.analysis.cliff import falloff, l2_cliff
    from gemmlab.analysis.figures import cliff_figure
    from gemmlab.analysis.measure import sweep
    from gemmlab.analysis.models import fp32_specs

    name = fp32_specs()[0].name
    sizes = CLIFF_SIZES
    cl = l2_cliff(name, sizes, None, dev, ceil)
    header(f"6. L2 cliff: {name}; A+B+C fit in L2 up to N = {cl.n_all_fit}, A+B up to N = {cl.n_operands_fit}")
    meas = {r.n: r for r in sweep(name, [(s, s, s) for s in sizes], budget_ms=60) if r.ok}
    rates = {s: meas[s].tflops for s in meas}
    for p in cl.points:
        r = meas.get(p.n)
        print(f"  N = {p.n:5d}: model {p.predicted_tflops:6.3f} TFLOP/s ({p.prediction.limiter.resource}, DRAM "
              f"reads {p.dram_reread:5.1f}x compulsory)   measured {r.tflops if r else math.nan:6.3f} TFLOP/s at "
              f"{(r.sm_clock_mhz if r else None) or math.nan:.0f} MHz")
    cliff_figure(cl, rates, f"L2 cliff: {name} on {dev.name}").savefig(OUT / "cliff.png", dpi=130)
    pred = cl.predicted_falloff()
    got = falloff(sorted(rates), [rates[s] for s in sorted(rates)], cl.n_all_fit)
    save_json("cliff.json", {"kernel": name, "n_all_fit": cl.n_all_fit, "n_operands_fit": cl.n_operands_fit,
                             "predicted_tflops": {p.n: p.predicted_tflops for p in cl.points},
                             "dram_reread": {p.n: p.dram_reread for p in cl.points}, "measured_tflops": rates,
                             "predicted_falloff": pred, "measured_falloff": got})
    check(f"L2 cliff: predicted {name} fall-off matches measured", abs(got - pred) <= CLIFF_TOL,
          f"rate past N = {cl.n_all_fit} over rate below: model x{pred:.2f}, measured x{got:.2f} "
          f"(pass: within {CLIFF_TOL:.2f}); the model has DRAM reads go from {cl.points[0].dram_reread:.1f}x to "
          f"{cl.points[-1].dram_reread:.1f}x compulsory (re-reads from N = {cl.n_reread}) while the L1 bound stays longest")
    if traffic_rows:
        for label, row in traffic_rows.items():
            if label.startswith(name):
                c = row["counters"]["values"]
                meas_r = c.get("dram_read_bytes")
                check(f"cliff evidence {label}: DRAM reads", None,
                      f"model {row['model']['dram_read'] / 1e9:.3f} GB vs ncu "
                      f"{(meas_r if meas_r is not None else math.nan) / 1e9:.3f} GB")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "src"))
    dev = environment()
    if dev is None:
        print_summary()
        return 1
    gpu_tests()
    ceil = microbenchmarks(dev)
    if ceil is None:
        from gemmlab.micro.ceilings import Ceilings

        ceil = Ceilings.datasheet(dev)
    measured = ladder(dev, ceil)
    rows = traffic(dev, ceil, measured)
    sawtooth(dev)
    cliff(dev, ceil, rows)
    return print_summary()


def print_summary() -> int:
    save_json("summary.json", [c.__dict__ for c in CHECKS] + [{"elapsed_s": time.time() - T0}])
    width = max((len(c.name) for c in CHECKS), default=10)
    print(f"\n=== SUMMARY: the analysis on the device ({time.time() - T0:.0f} s; files in {OUT.resolve()})")
    print(f"{'check':{width}s}  result  detail")
    for c in CHECKS:
        print(f"{c.name:{width}s}  {c.status:6s}  {c.detail}")
    fails = sum(c.status == "FAIL" for c in CHECKS)
    passes = sum(c.status == "PASS" for c in CHECKS)
    print(f"{passes} PASS, {fails} FAIL, {sum(c.status == 'INFO' for c in CHECKS)} INFO")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
