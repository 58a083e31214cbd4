"""Rung 15's split over K under compute-sanitizer, bf16 and fp16: a tile's edges in M, N and K, empty slices,
both schedules, clusters, B given transposed, the full epilogue (beta, bias, SiLU, residual) in the sum, and
fp32 / 16-bit outputs; the slices summed by each tile's last unit (SPLIT_SUM 1, up to four slices) and by
the second launch (SPLIT_SUM 2).

    for t in memcheck racecheck synccheck; do compute-sanitizer --tool $t python3 scripts/sanitize_split.py [BN]; done

A number BN given runs only the tilings of that tile width.
"""

import sys

import torch

import gemmlab

TILINGS = (dict(BN=128, CLUSTER=1), dict(BM=64, BN=128, SCHEDULE=2, STAGES=6, HELD=2, CLUSTER=1), dict(BN=256),
           dict(BM=64, BN=64, SCHEDULE=2, STAGES=8, HELD=2, CLUSTER=1), dict(BM=128, BN=64, STAGES=8, CLUSTER=2))
if len(sys.argv) > 1:
    TILINGS = tuple(p for p in TILINGS if p["BN"] == int(sys.argv[1]))
for dt in (torch.bfloat16, torch.float16):
    for m, n, k in ((1, 8, 4096), (130, 136, 3000), (64, 64, 256)):
        a = torch.randn(m, k, device="cuda").to(dt)
        bias = torch.randn(n, device="cuda")
        r = torch.randn(m, n, device="cuda").to(dt)
        for b in (torch.randn(k, n, device="cuda").to(dt), torch.randn(n, k, device="cuda").to(dt).t()):
            for p in TILINGS:
                for split in (2, 4, 64):
                    for how in (1, 2):
                        c = torch.randn(m, n, device="cuda").to(dt)
                        gemmlab.matmul(a, b, c, alpha=1.5, beta=0.5, bias=bias, activation="silu", residual=r,
                                       kernel="wgmma", SPLIT_K=split, SPLIT_SUM=how, **p)
                        gemmlab.matmul(a, b, kernel="wgmma", out_dtype="float32", SPLIT_K=split, SPLIT_SUM=how, **p)
torch.cuda.synchronize()
print("split sanitize run done")
