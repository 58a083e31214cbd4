"""The varied shape suite: gemmlab's best FP32 path (kernel="auto") against cuBLAS, side by side.

    PYTHONPATH=src python3 scripts/shape_suite.py [--kernel auto] [--quick]
    PYTHONPATH=src python3 scripts/shape_suite.py --kernel sgemm --shapes 333x777x999,1000x1000x1000 \
        --variants "BM=64,BN=64,WM=32,WN=32,TM=4,TN=8;BM=64,BN=64,WM=32,WN=32,TM=4,TN=8,STAGES=4"

Square 512 ... 8192, rectangular, K >> M*N, M*N >> K, and sizes that are not multiples of 8. Prints one
line per shape (and variant) and the geometric mean of the ratios last. --variants times the named
kernel with each parameter set (the spec's defaults fill in what a set leaves out) beside cuBLAS.
"""

from __future__ import annotations

import argparse
import math

import cupy as cp

import gemmlab
from gemmlab.bench import peers
from gemmlab.bench.ladder import rel_error
from gemmlab.bench.timing import time_gpu, tflops

SHAPES = [
    (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
    (1000, 1000, 1000), (3000, 3000, 3000), (4097, 4097, 4097), (2047, 2049, 1023),
    (8192, 1024, 4096), (1024, 8192, 4096), (4096, 4096, 512), (16384, 16384, 256),  # M*N >> K
    (256, 256, 65536), (512, 512, 16384), (128, 4096, 16384), (64, 64, 131072),       # K >> M*N
    (4096, 128, 4096), (128, 128, 128), (333, 777, 999), (5000, 3000, 1234),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel", default="auto")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shapes", default="", help="MxNxK,... instead of the suite")
    ap.add_argument("--variants", default="", help="NAME=V,NAME=V;... parameter sets of --kernel to time")
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    variants = [{k: int(v) for k, v in (kv.split("=") for kv in var.split(",") if kv)}
                for var in args.variants.split(";")] if args.variants else [{}]
    rng = cp.random.default_rng(7)
    ratios = []
    print(f"{'M':>6} {'N':>6} {'K':>7} {'ours ms':>9} {'cuBLAS ms':>10} {'TFLOP/s':>8} {'ratio':>6} {'err':>8}")
    for (m, n, k), params in ((s, v) for s in (shapes[:8] if args.quick else shapes) for v in variants):
        a = rng.uniform(-1, 1, (m, k), dtype=cp.float32)
        b = rng.uniform(-1, 1, (k, n), dtype=cp.float32)
        c = cp.empty((m, n), dtype=cp.float32)
        ref = a.astype(cp.float64) @ b.astype(cp.float64)
        c.fill(cp.nan)
        gemmlab.matmul(a, b, c, kernel=args.kernel, **params)
        err = rel_error(c, ref)
        if not err < 1e-4:
            print(f"{m:6d} {n:6d} {k:7d} FAILED err {err:.1e}")
            ratios.append(0.0)
            continue
        ours = time_gpu(lambda: gemmlab.matmul(a, b, c, kernel=args.kernel, **params), budget_ms=150)
        theirs = time_gpu(lambda: peers.cublas_sgemm(a, b, c), budget_ms=150)
        r = theirs.median_ms / ours.median_ms
        ratios.append(r)
        print(f"{m:6d} {n:6d} {k:7d} {ours.median_ms:9.3f} {theirs.median_ms:10.3f} "
              f"{tflops(m, n, k, ours.median_ms):8.2f} {r:6.3f} {err:8.1e} {params or ''}", flush=True)
    geo = math.exp(sum(math.log(max(r, 1e-9)) for r in ratios) / len(ratios))
    print(f"geometric mean of cuBLAS time / gemmlab time over {len(ratios)} shapes: {geo:.3f}")


if __name__ == "__main__":
    main()
