"""Strict FP32 on torch tensors, as a torch user calls it: gemmlab.matmul(a, b, out) against
torch.matmul(a, b, out=out) (cuBLAS, TF32 off), side by side in one run.

    PYTHONPATH=src python3 scripts/torch_fp32_vs_cublas.py [--sizes 4096 8192] [--reps 30]

Each call is timed with a CUDA event pair on torch's current stream around the Python call (so launch
gaps count), after a warm-up; the two callers alternate call by call, each over three rotating input sets
(more than the L2 holds at these sizes); verified against a float64 product first. Prints the median
times, TFLOP/s and gemmlab / cuBLAS.
"""

import argparse
import statistics

import torch

import gemmlab

ap = argparse.ArgumentParser()
ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
ap.add_argument("--reps", type=int, default=30)
args = ap.parse_args()
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

rows = []
for n in args.sizes:
    sets = [(torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")) for _ in range(3)]
    out = torch.empty(n, n, device="cuda")
    a, b = sets[0]
    gemmlab.matmul(a, b, out)
    ref = a.double() @ b.double()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-4, err
    calls = {"gemmlab": lambda a, b: gemmlab.matmul(a, b, out), "cublas": lambda a, b: torch.matmul(a, b, out=out)}
    times = {name: [] for name in calls}
    for name, fn in calls.items():  # warm-up
        for a, b in sets:
            fn(a, b)
    torch.cuda.synchronize()
    for rep in range(args.reps):
        order = list(calls) if rep % 2 == 0 else list(calls)[::-1]
        for name in order:
            a, b = sets[rep % 3]
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            calls[name](a, b)
            e.record()
            e.synchronize()
            times[name].append(s.elapsed_time(e))
    med = {k: statistics.median(v) for k, v in times.items()}
    tf = {k: 2 * n**3 / (v * 1e-3) / 1e12 for k, v in med.items()}
    rows.append((n, med["gemmlab"], med["cublas"], tf["gemmlab"], tf["cublas"], med["cublas"] / med["gemmlab"], err))

print(f"{'size':>6} {'gemmlab ms':>11} {'cuBLAS ms':>10} {'gemmlab TF':>11} {'cuBLAS TF':>10} {'x cuBLAS':>9} {'rel err':>8}")
for n, g, c, tg, tc, ratio, err in rows:
    print(f"{n:>6} {g:>11.3f} {c:>10.3f} {tg:>11.1f} {tc:>10.1f} {ratio:>9.3f} {err:>8.1e}")
