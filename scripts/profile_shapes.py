"""Launch cuBLAS's SGEMM and gemmlab's (kernel="auto" or --kernel with parameters) on a list of shapes, a
few times each, so that ncu can report what each library launches per shape (kernel names, grids, times).

    ncu --clock-control none -k "regex:gemm|splitK|reduce" --metrics gpu__time_duration.sum,\
launch__grid_size,launch__block_size,launch__registers_per_thread --csv \
        python3 scripts/profile_shapes.py --shapes 333x777x999,2047x2049x1023
"""

import argparse

import cupy as cp

import gemmlab
from gemmlab.bench import peers

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", required=True, help="MxNxK,...")
ap.add_argument("--kernel", default="auto")
ap.add_argument("--calls", type=int, default=2)
ap.add_argument("params", nargs="*", help="the kernel's parameters, NAME=VALUE")
args = ap.parse_args()
params = {k: int(v) for k, v in (p.split("=") for p in args.params)}
for shape in args.shapes.split(","):
    m, n, k = (int(x) for x in shape.split("x"))
    a = cp.random.rand(m, k, dtype=cp.float32) - 0.5
    b = cp.random.rand(k, n, dtype=cp.float32) - 0.5
    c = cp.empty((m, n), cp.float32)
    print(f"shape {m}x{n}x{k}", flush=True)
    for _ in range(args.calls):
        peers.cublas_sgemm(a, b, c)
        gemmlab.matmul(a, b, c, kernel=args.kernel, **params)
    cp.cuda.Device().synchronize()
