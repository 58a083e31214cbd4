"""Launch one tensor-core GEMM a few times so that ncu can profile one launch (used under ncu).

    ncu --clock-control none -k regex:wgmma --launch-skip 2 --launch-count 1 --section SpeedOfLight \
        python3 scripts/ncu_tensor_once.py --kernel wgmma --n 4096 BN=128 STAGES=6
"""

import argparse

import torch

import gemmlab

ap = argparse.ArgumentParser()
ap.add_argument("--kernel", default="wgmma")
ap.add_argument("--n", type=int, default=4096)
ap.add_argument("params", nargs="*")
args = ap.parse_args()
params = {k: int(v) for k, v in (p.split("=") for p in args.params)}
a = torch.randn(args.n, args.n, device="cuda").bfloat16()
b = torch.randn(args.n, args.n, device="cuda").bfloat16()
out = torch.empty(args.n, args.n, device="cuda", dtype=torch.bfloat16)
for _ in range(4):
    gemmlab.matmul(a, b, out, kernel=args.kernel, **params)
torch.cuda.synchronize()
