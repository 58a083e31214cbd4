"""Run every GPU rung once on odd shapes (for compute-sanitizer: memcheck, racecheck, initcheck).

    compute-sanitizer --tool memcheck python3 scripts/sanitize_run.py [kernel[:NAME=V,NAME=V] ...]

A kernel named with parameters runs with them (e.g. `sgemm:BM=128,BN=256,SPLIT_K=2`) instead of the
shape heuristic's choice.
"""

import sys

import cupy as cp

import gemmlab
from gemmlab.kernels import specs_for_dtype

entries = sys.argv[1:] or [s.name for s in specs_for_dtype("float32")]
runs = []
for e in entries:
    name, _, rest = e.partition(":")
    runs.append((name, {k: int(v) for k, v in (kv.split("=") for kv in rest.split(",") if kv)}))
rng = cp.random.default_rng(3)
for m, n, k in [(67, 45, 33), (129, 131, 17), (1, 7, 5), (300, 520, 77)]:
    a = rng.uniform(-1, 1, (m, k), dtype=cp.float32)
    b = rng.uniform(-1, 1, (k, n), dtype=cp.float32)
    c = rng.uniform(-1, 1, (m, n), dtype=cp.float32)
    for name, params in runs:
        gemmlab.matmul(a, b, c, alpha=1.5, beta=0.5, kernel=name, **params)
        gemmlab.matmul(a, b, kernel=name, **params)
cp.cuda.Device().synchronize()
print("ran", len(runs), "kernels on 4 odd shapes")
