"""One call on a GPU machine: environment, GPU tests, then the ladder against cuBLAS; a short table last.

    PYTHONPATH=src python3 scripts/device_check.py [--sizes 1024,2048,4096] [--variants] [--no-tests]

Writes the full logs under $OUT (or ./out) and prints the table at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1024,2048,4096")
    ap.add_argument("--no-tests", action="store_true")
    ap.add_argument("--variants", default="", help="extra kernel:K=V,K=V;... entries to time beside the defaults")
    ap.add_argument("--pytest-args", default="")
    ap.add_argument("--only", default="", help="comma-separated rungs to run (default: all)")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)

    import cupy as cp
    import gemmlab
    from gemmlab.runtime import compiler, device

    d = device.device_info()
    env = {
        "device": d.name, "cc": d.compute_capability, "sms": d.sm_count, "l2_mb": d.l2_bytes / 2**20,
        "sm_clock_mhz": d.sm_clock_khz / 1e3, "driver": d.driver_version, "runtime": d.runtime_version,
        "nvrtc": compiler.nvrtc_version(), "cupy": cp.__version__, "python": sys.version.split()[0],
        "gemmlab": gemmlab.__version__, "clocks": device.clocks_now(),
    }
    print(json.dumps(env, default=str), flush=True)
    (out / "env.json").write_text(json.dumps(env, default=str, indent=1))

    rc = 0
    if not args.no_tests:
        t0 = time.time()
        cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-x", "-p", "no:cacheprovider", "tests/",
               *args.pytest_args.split()]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        (out / "gpu_tests.log").write_text(proc.stdout + proc.stderr)
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-25:]
        print("\n".join(tail))
        print(f"GPU tests: exit {proc.returncode} in {time.time() - t0:.0f} s", flush=True)
        rc = proc.returncode

    from gemmlab.bench.measure import measure
    from gemmlab.kernels import specs_for_dtype

    only = [x for x in args.only.split(",") if x]
    entries: list = [s.name for s in specs_for_dtype("float32") if not only or s.name in only]
    for v in filter(None, args.variants.split(";")):
        name, _, kv = v.partition(":")
        entries.append((name, {k: int(x) for k, x in (p.split("=") for p in kv.split(",") if p)}))
    sizes = [int(s) for s in args.sizes.split(",")]
    results = []
    for size in sizes:
        results += measure(["cublas", *entries], (size, size, size), budget_ms=300, on_record=lambda r: print(
            f"  {r.kernel:14s} {r.m:6d} {r.params} {r.median_ms or float('nan'):10.4f} ms "
            f"err {r.rel_error if r.rel_error is not None else float('nan'):.1e}", flush=True))
    rows = []
    cub = {r.m: r for r in results if r.kernel == "cublas"}
    for r in results:
        ref = cub.get(r.m)
        rows.append({
            "kernel": r.kernel, "params": r.params, "m": r.m, "n": r.n, "k": r.k, "ok": r.ok,
            "rel_error": r.rel_error, "median_ms": r.median_ms, "q1_ms": r.q1_ms, "q3_ms": r.q3_ms, "tflops": r.tflops,
            "pct_cublas": 100 * r.tflops / ref.tflops if ref and ref.tflops else None,
        })
    (out / "ladder.json").write_text(json.dumps({"env": env, "results": rows}, default=str, indent=1))
    print(f"\n{'kernel':14s} {'params':44s} {'size':>6s} {'ms':>10s} {'TFLOP/s':>8s} {'%cuBLAS':>8s} {'IQR%':>6s} {'err':>8s}")
    for row in rows:
        if not row["ok"]:
            print(f"{row['kernel']:14s} {str(row['params']):44s} {row['m']:6d}  FAILED err {row['rel_error']}")
            rc = rc or 1
            continue
        print(f"{row['kernel']:14s} {str(row['params'])[:44]:44s} {row['m']:6d} {row['median_ms']:10.4f} "
              f"{row['tflops']:8.2f} {row['pct_cublas'] or float('nan'):7.1f}% "
              f"{100 * (row['q3_ms'] - row['q1_ms']) / row['median_ms']:5.1f}% {row['rel_error']:8.1e}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
