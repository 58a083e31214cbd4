"""Run every GPU rung once on odd shapes (for compute-sanitizer: memcheck, racecheck, initcheck).

    compute-sanitizer --tool memcheck python3 scripts/sanitize_run.py [kernel ...]
"""

import sys

import cupy as cp

import gemmlab
from gemmlab.kernels import specs_for_dtype

names = sys.argv[1:] or [s.name for s in specs_for_dtype("float32")]
rng = cp.random.default_rng(3)
for m, n, k in [(67, 45, 33), (129, 131, 17), (1, 7, 5)]:
    a = rng.uniform(-1, 1, (m, k), dtype=cp.float32)
    b = rng.uniform(-1, 1, (k, n), dtype=cp.float32)
    c = rng.uniform(-1, 1, (m, n), dtype=cp.float32)
    for name in names:
        gemmlab.matmul(a, b, c, alpha=1.5, beta=0.5, kernel=name)
        gemmlab.matmul(a, b, kernel=name)
cp.cuda.Device().synchronize()
print("ran", len(names), "kernels on 3 odd shapes")
