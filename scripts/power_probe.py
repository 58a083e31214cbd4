"""Cycles or clock? Each call run back to back at the power limit (bench.sustained.time_sustained): time per
call, the SM clock it ran at, cycles per call (time x clock), board power and energy per call. One table last.

    PYTHONPATH=src python3 scripts/power_probe.py --sizes 4096,8192 --seconds 1.0 --reps 4 --variants GROUP_M=8
"""

import argparse

import torch

import gemmlab
from gemmlab.bench.sustained import time_sustained

ap = argparse.ArgumentParser()
ap.add_argument("--sizes", default="4096,8192", help="N (cube) or MxNxK, comma-separated")
ap.add_argument("--seconds", type=float, default=1.0, help="per turn")
ap.add_argument("--reps", type=int, default=2, help="turns per call, in alternating order")
ap.add_argument("--variants", nargs="*", default=[], help="rung 15 parameter sets also run, 'A=1,B=2' ('bt': B given "
                                                          "transposed, with cuBLAS on the same B)")
ap.add_argument("--no-fused", action="store_true", help="leave out the fused bias + GELU call")
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
    cands = {"cublas": lambda: torch.matmul(a, b, out=out), "wgmma": lambda: gemmlab.matmul(a, b, out, kernel="wgmma")}
    if not args.no_fused:
        cands["fused gelu"] = lambda: gemmlab.matmul(a, b, out, bias=bias, activation="gelu_tanh")
    bt = b.t().contiguous().t()  # the same B, column-major (B^T given: read K-major, B_LAYOUT 2)
    for var in args.variants:
        parts = var.split(",")
        params = {kk: int(v) for kk, v in (p.split("=") for p in parts if p != "bt")}
        bb = bt if "bt" in parts else b
        cands["wgmma " + var] = lambda p=params, bb=bb: gemmlab.matmul(a, bb, out, kernel="wgmma", **p)
    if any("bt" in v.split(",") for v in args.variants):
        cands["cublas bt"] = lambda: torch.matmul(a, bt, out=out)
    res = time_sustained(cands, seconds=args.seconds, turns=args.reps)
    for name, r in res.items():
        print(size, name, [f"{t.ms:.4f} ms {t.sm_mhz} MHz {t.watts} W reasons {'|'.join(hex(x) for x in t.reasons)}"
                           for t in r.turns], flush=True)
        rows.append((size, name, r.ms, 2 * m * n * k / r.ms / 1e9, r.sm_mhz or float("nan"),
                     r.kcycles or float("nan"), r.watts or float("nan"), (r.joules or float("nan")) * 1e3))

print(f"\n{'shape':>8s} {'call':24s} {'ms':>8s} {'TFLOP/s':>8s} {'MHz':>6s} {'kcycles':>8s} {'W':>6s} {'mJ':>7s}")
for r in rows:
    print(f"{r[0]:>8s} {r[1]:24s} {r[2]:8.4f} {r[3]:8.1f} {r[4]:6.0f} {r[5]:8.1f} {r[6]:6.1f} {r[7]:7.2f}")
