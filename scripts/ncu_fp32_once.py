"""Launch one fp32 GEMM a few times so that ncu can profile one launch (used under ncu).

    ncu --clock-control none -k regex:sgemm --launch-skip 2 --launch-count 1 --section WarpStateStats \
        python3 scripts/ncu_fp32_once.py --kernel sgemm --n 4096
"""

import argparse

import cupy as cp

import gemmlab

ap = argparse.ArgumentParser()
ap.add_argument("--kernel", default="sgemm")
ap.add_argument("--n", type=int, default=4096)
ap.add_argument("params", nargs="*")
args = ap.parse_args()
params = {k: int(v) for k, v in (p.split("=") for p in args.params)}
a = cp.random.rand(args.n, args.n, dtype=cp.float32)
b = cp.random.rand(args.n, args.n, dtype=cp.float32)
c = cp.empty((args.n, args.n), cp.float32)
for _ in range(4):
    gemmlab.matmul(a, b, c, kernel=args.kernel, **params)
cp.cuda.Device().synchronize()
