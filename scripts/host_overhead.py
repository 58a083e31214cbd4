"""Host time per gemmlab.matmul call on torch tensors (what a repeat call costs the CPU), beside torch.matmul.

    PYTHONPATH=src python3 scripts/host_overhead.py [--n 4096] [--calls 200] [--profile]

At the default N = 256 the GPU work is small, so the host is what is measured: the
wall time of enqueuing `calls` launches, divided by `calls`, before the final synchronisation.
"""

import argparse
import time

import torch

import gemmlab

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=256)
ap.add_argument("--calls", type=int, default=200)
ap.add_argument("--profile", action="store_true", help="also cProfile the gemmlab auto call (top 20, cumulative)")
args = ap.parse_args()
n = args.n
a = torch.randn(n, n, device="cuda").bfloat16()
b = torch.randn(n, n, device="cuda").bfloat16()
out = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
bias = torch.randn(n, device="cuda")
cases = {
    "gemmlab auto": lambda: gemmlab.matmul(a, b, out),
    "gemmlab auto + bias + gelu": lambda: gemmlab.matmul(a, b, out, bias=bias, activation="gelu_tanh"),
    "gemmlab mma_sync": lambda: gemmlab.matmul(a, b, out, kernel="mma_sync"),
    "torch.matmul": lambda: torch.matmul(a, b, out=out),
}
for name, fn in cases.items():
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    print(f"{name:30s} host {1e6 * (t1 - t0) / args.calls:7.1f} us/call")

if args.profile:
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.calls):
        cases["gemmlab auto"]()
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(20)
