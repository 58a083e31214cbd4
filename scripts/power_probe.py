"""Cycles or clock? Each call run back to back for a while (no flush between calls), with NVML's SM clock
and board power sampled meanwhile: time per call, the clock it ran at, cycles per call (time x clock) and
energy per call (power x time). Candidates alternate, twice each. One table last.

    PYTHONPATH=src python3 scripts/power_probe.py --sizes 4096,8192 --seconds 1.5
"""

import argparse
import statistics

import cupy as cp
import torch

import gemmlab
from gemmlab.micro.clocks import ClockSampler

ap = argparse.ArgumentParser()
ap.add_argument("--sizes", default="4096,8192")
ap.add_argument("--seconds", type=float, default=1.5)
ap.add_argument("--reps", type=int, default=2)
ap.add_argument("--variants", nargs="*", default=[], help="rung 12 parameter sets also run, 'A=1,B=2'")
ap.add_argument("--no-fused", action="store_true")
ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
args = ap.parse_args()
torch.backends.cuda.matmul.allow_tf32 = False

rows = []
for size in args.sizes.split(","):
    m, n, k = (int(x) for x in size.split("x")) if "x" in size else (int(size),) * 3
    dt = getattr(torch, args.dtype)
    a = torch.randn(m, k, device="cuda").to(dt)
    b = torch.randn(k, n, device="cuda").to(dt)
    out = torch.empty(m, n, device="cuda", dtype=dt)
    bias = torch.randn(n, device="cuda")
    cands = {
        "cublas": lambda: torch.matmul(a, b, out=out),
        "wgmma": lambda: gemmlab.matmul(a, b, out, kernel="wgmma"),
    }
    if not args.no_fused:
        cands["fused gelu"] = lambda: gemmlab.matmul(a, b, out, bias=bias, activation="gelu_tanh")
    bt = b.t().contiguous().t()  # the same B, column-major (B^T given: read K-major, B_LAYOUT 2)
    for var in args.variants:
        params = {kk: int(v) for kk, v in (p.split("=") for p in var.split(",") if p != "bt")}
        bb = bt if "bt" in var.split(",") else b
        cands["wgmma " + var] = lambda p=params, bb=bb: gemmlab.matmul(a, bb, out, kernel="wgmma", **p)
    if any("bt" in v.split(",") for v in args.variants):
        cands["cublas bt"] = lambda: torch.matmul(a, bt, out=out)
    for fn in cands.values():
        fn()
    torch.cuda.synchronize()
    res = {name: [] for name in cands}
    import time
    t0 = time.perf_counter()  # bring the GPU to its sustained state first (the first call measured would run cool)
    while time.perf_counter() - t0 < 2.0:
        cands["cublas"]()
        torch.cuda.synchronize()
    for rep in range(args.reps):
        for name in (cands if rep % 2 == 0 else list(cands)[::-1]):
            fn = cands[name]
            for _ in range(20):  # settle
                fn()
            torch.cuda.synchronize()
            s, e = cp.cuda.Event(), cp.cuda.Event()
            calls = 0
            with ClockSampler(interval_s=0.005) as cs:
                s.record()
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < args.seconds:
                    for _ in range(10):
                        fn()
                    calls += 10
                    torch.cuda.synchronize() if calls % 200 == 0 else None
                e.record()
                e.synchronize()
            ms = cp.cuda.get_elapsed_time(s, e) / calls
            res[name].append((ms, cs.sm_mhz, cs.watts, "|".join(hex(x) for x in sorted(cs.throttle))))
    for name, xs in res.items():
        ms = statistics.median(x[0] for x in xs)  # (medians over the repetitions)
        mhz = statistics.median(x[1] for x in xs) if xs[0][1] else float("nan")
        w = statistics.median(x[2] for x in xs) if xs[0][2] else float("nan")
        rows.append((size, name, ms, 2 * m * n * k / ms / 1e9, mhz, ms * 1e-3 * mhz * 1e6 / 1e3, w, w * ms))
        print(size, name, [f"{x[0]:.4f} ms {x[1]} MHz {x[2]} W reasons {x[3]}" for x in xs], flush=True)

print(f"\n{'shape':>8s} {'call':24s} {'ms':>8s} {'TFLOP/s':>8s} {'MHz':>6s} {'kcycles':>8s} {'W':>6s} {'mJ':>7s}")
for r in rows:
    print(f"{r[0]:>8s} {r[1]:24s} {r[2]:8.4f} {r[3]:8.1f} {r[4]:6.0f} {r[5]:8.1f} {r[6]:6.1f} {r[7]:7.2f}")
