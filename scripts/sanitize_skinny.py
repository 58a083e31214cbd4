"""Rung 16 (skinny) under compute-sanitizer, fp16, bf16 and fp32: both layouts of B, odd shapes (edges of N, K and M, rows of A
beyond one block), splits of K with the last block's reduction, the copy engine's slots (COPY 1, 3), the persistent
stream-K schedule (SCHED 1), the full epilogue, and staged operands.

    for t in memcheck racecheck synccheck; do compute-sanitizer --tool $t python3 scripts/sanitize_skinny.py; done
"""

import torch

import gemmlab

for dt in (torch.bfloat16, torch.float16, torch.float32):
    for m, n, k in ((1, 200, 333), (7, 130, 1000), (37, 72, 96)):
        a = torch.randn(m, k, device="cuda").to(dt)
        bias = torch.randn(n, device="cuda")
        c = torch.randn(m, n, device="cuda").to(dt)
        r = torch.randn(m, n, device="cuda").to(dt)
        for b in (torch.randn(k, n, device="cuda").to(dt), torch.randn(n, k, device="cuda").to(dt).t()):
            for p in (dict(SPLIT=1), dict(SPLIT=3), dict(MT=8, NT=1, UNROLL=4, STAGES=4, WARPS=8, SPLIT=2),
                      dict(MT=8, NT=4, UNROLL=2, STAGES=3, WARPS=2, COPY=1, SPLIT=3),
                      dict(MT=8, NT=4, UNROLL=2, STAGES=3, WARPS=2, COPY=1, SCHED=1, SPLIT=5),
                      dict(MT=8, NT=4, UNROLL=2, STAGES=3, WARPS=2, COPY=0, SCHED=1, SPLIT=7),
                      dict(MT=8, NT=4, UNROLL=2, STAGES=3, WARPS=2, COPY=3, SPLIT=2),
                      dict(MT=8, NT=4, UNROLL=2, STAGES=3, WARPS=2, COPY=3, SCHED=1, SPLIT=6)):
                gemmlab.matmul(a, b, c, alpha=1.5, beta=0.5, bias=bias, activation="silu", residual=r,
                               kernel="skinny", **p)
            gemmlab.matmul(a[:, 1:], b[1:], kernel="skinny")  # unaligned rows: staged copies
torch.cuda.synchronize()
print("skinny sanitize run done")
