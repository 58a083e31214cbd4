"""One rung-13 call shape for ncu: y = x @ W.t() (bf16, W N x K) with the parameters given, called 4 times.

    ncu --clock-control none -k regex:skinny --launch-skip 3 --launch-count 1 --section WarpStateStats \
        python3 scripts/ncu_skinny.py --mnk 1x8192x8192 SCHED=1 COPY=1 NT=1 UNROLL=8 STAGES=4 WARPS=4
"""

import argparse

import torch

import gemmlab
from gemmlab.kernels.rungs import skinny

ap = argparse.ArgumentParser()
ap.add_argument("--mnk", default="1x8192x8192")
ap.add_argument("params", nargs="*", help="NAME=VALUE over the heuristic's")
args = ap.parse_args()
m, n, k = (int(v) for v in args.mnk.split("x"))
given = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in args.params}
sms = torch.cuda.get_device_properties(0).multi_processor_count
base = {key: v for key, v in skinny.SPEC.heuristic(m, n, k, sms).items() if key != "SPLIT"}
p = skinny.params_for(m, n, k, sms, **{**base, **given})
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
for _ in range(4):
    gemmlab.matmul(x, w.t(), kernel="skinny", **p)
torch.cuda.synchronize()
print(p)
