"""Rung 17 (gemv) under compute-sanitizer, fp16 and bf16: odd shapes (edges of N, K inside a chunk, rows of A
beyond one block), every parameter shape, splits of K with the last block's reduction, the full epilogue, K = 0,
and staged operands.

    for t in memcheck racecheck synccheck; do compute-sanitizer --tool $t python3 scripts/sanitize_gemv.py; done
"""

import torch

import gemmlab

for dt in (torch.bfloat16, torch.float16):
    for m, n, k in ((1, 200, 336), (7, 130, 1000), (37, 72, 96), (3, 40, 0)):
        a = torch.randn(m, k, device="cuda").to(dt)
        bias = torch.randn(n, device="cuda")
        c = torch.randn(m, n, device="cuda").to(dt)
        r = torch.randn(m, n, device="cuda").to(dt)
        b = torch.randn(n, k, device="cuda").to(dt).t()
        for p in (dict(SPLIT=1), dict(SPLIT=3), dict(MT=16, NT=1, WARPS=8, UNROLL=2, SPLIT=2),
                  dict(MT=16, NT=1, WARPS=8, UNROLL=2, SPLIT=1), dict(MT=8, NT=1, WARPS=4, UNROLL=2, SPLIT=1),
                  dict(MT=8, NT=2, WARPS=4, UNROLL=2, SPLIT=5), dict(MT=16, NT=2, WARPS=16, UNROLL=1, SPLIT=1)):
            gemmlab.matmul(a, b, c, alpha=1.5, beta=0.5, bias=bias, activation="silu", residual=r, kernel="gemv", **p)
        if k > 1:
            w = torch.randn(n, k - 1, device="cuda").to(dt)
            gemmlab.matmul(a[:, 1:], w.t(), kernel="gemv")  # unaligned rows: staged copies
torch.cuda.synchronize()
print("gemv sanitize run done")
