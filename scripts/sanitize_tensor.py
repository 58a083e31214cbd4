"""The tensor-core rungs under compute-sanitizer, on odd shapes: wgmma in both schedules and with the
full epilogue, TF32 on wgmma (B given transposed, and a row-major B computed transposed) and mma_sync,
and a shape where every block walks several tiles; clusters of
one and two blocks (an odd tile-row count leaves a block below the matrix), the epilogues written straight
from the registers (plain and bias + GELU on interior blocks) and through TMA stores (16-bit C, beta = 0), B given transposed, staged operands,
and stream-K's last rounds (partial sums handed between clusters, in equal runs and in parts). The deferred TMA stores (the default)
run in the wgmma calls above; scripts/sanitize_deferred.py has them on several tiles per block.

    for t in memcheck racecheck; do compute-sanitizer --tool $t python3 scripts/sanitize_tensor.py; done

`residual` as an argument: the residual on the TMA stores alone (its first part).
"""

import sys

import torch

import gemmlab


def residual_on_the_stores():
    """A residual with beta == 0, added on the TMA stores (DEFER 0): the producer brings its rows into L2 a few k
    steps before a unit's last (at the first on short K): edge tiles, both schedules, clusters, stream-K, a
    batch."""
    for k in (72, 1000):
        xr, wr = torch.randn(300, k, device="cuda").bfloat16(), torch.randn(264, k, device="cuda").bfloat16()
        rr = torch.randn(300, 264, device="cuda").bfloat16()
        for p in ({}, dict(SCHEDULE=2, BN=128, STAGES=5, HELD=2),
                  dict(BM=64, BN=64, SCHEDULE=2, STAGES=12, HELD=2, CLUSTER=1), dict(CLUSTER=2), dict(STREAM_K=1)):
            gemmlab.matmul(xr, wr.t(), residual=rr, kernel="wgmma", **p)
        xb, rb = torch.randn(3, 130, k, device="cuda").bfloat16(), torch.randn(3, 130, 264, device="cuda").bfloat16()
        gemmlab.matmul(xb, wr.t(), residual=rb, kernel="wgmma")


residual_on_the_stores()
if "residual" in sys.argv[1:]:  # that part alone
    torch.cuda.synchronize()
    sys.exit(0)

for dt in (torch.bfloat16, torch.float16):
    for m, n, k in ((67, 48, 40), (129, 136, 24), (300, 264, 72)):
        a = torch.randn(m, k, device="cuda").to(dt)
        b = torch.randn(k, n, device="cuda").to(dt)
        c = torch.randn(m, n, device="cuda").to(dt)
        r = torch.randn(m, n, device="cuda").to(dt)
        bias = torch.randn(n, device="cuda")
        for p in ({}, dict(SCHEDULE=2, BN=128, STAGES=5, HELD=2), dict(BM=256, BN=128, STAGES=3),
                  dict(BM=64, BN=64, SCHEDULE=2, STAGES=12, HELD=2, CLUSTER=1), dict(BM=128, BN=64, CLUSTER=2)):
            gemmlab.matmul(a, b, c, alpha=1.5, beta=0.5, bias=bias, activation="gelu_tanh", residual=r,
                           kernel="wgmma", **p)
# 16-bit C with beta == 0: the TMA-store epilogue (edge tiles, several tiles per block, bias + activation).
for p in ({}, dict(SCHEDULE=2, BN=128, STAGES=5, HELD=2), dict(BM=64, BN=128, SCHEDULE=2, STAGES=6, HELD=2, CLUSTER=1),
          dict(BM=64, BN=64, SCHEDULE=2, STAGES=12, HELD=2, CLUSTER=1)):
    a, b = torch.randn(520, 72, device="cuda").bfloat16(), torch.randn(72, 776, device="cuda").bfloat16()
    c = torch.empty(520, 776, device="cuda").bfloat16()
    gemmlab.matmul(a, b, c, kernel="wgmma", **p)
    gemmlab.matmul(a, b, c, bias=torch.randn(776, device="cuda"), activation="gelu_tanh", kernel="wgmma", **p)
a = torch.randn(129, 72, device="cuda")
b = torch.randn(72, 136, device="cuda")
gemmlab.matmul(a, b, precision="tf32", kernel="wgmma")
gemmlab.matmul(a, b, precision="tf32", kernel="mma_sync")
# TF32 on a row-major B, computed transposed: several tiles per block, both schedules, beta and flags.
a, b = torch.randn(700, 72, device="cuda"), torch.randn(72, 520, device="cuda")
c, bias = torch.randn(700, 520, device="cuda"), torch.randn(520, device="cuda")
for p in ({}, dict(SCHEDULE=2, BN=128, STAGES=5), dict(BN=128, CLUSTER=1)):
    gemmlab.matmul(a, b, c, alpha=1.5, beta=0.5, precision="tf32", kernel="wgmma", **p)
gemmlab.matmul(a, b, c, beta=0.5, bias=bias, activation="relu", precision="tf32", kernel="wgmma")
for p in ({}, dict(SCHEDULE=2, BN=128, STAGES=5)):  # beta = 0: the transposed tile through TMA stores
    gemmlab.matmul(a, b, c, precision="tf32", kernel="wgmma", **p)
big = torch.randn(700, 520, device="cuda").bfloat16()
bb = torch.randn(520, 1096, device="cuda").bfloat16()
gemmlab.matmul(big, bb, kernel="wgmma", SCHEDULE=2, BN=128, STAGES=4, HELD=2)  # several tiles per block
gemmlab.matmul(big, bb, kernel="wgmma")
x = torch.randn(300, 200, device="cuda").bfloat16()  # 3 tile rows: in clusters of two, one block idles
w = torch.randn(520, 200, device="cuda").bfloat16()
col = torch.randn(520, device="cuda")
for cl in (1, 2):
    for p in ({}, dict(SCHEDULE=2, BN=128, STAGES=5, HELD=2)):
        gemmlab.matmul(x, w.t(), kernel="wgmma", CLUSTER=cl, **p)
        gemmlab.matmul(x, w.t(), bias=col, activation="gelu_tanh", kernel="wgmma", CLUSTER=cl, **p)
        gemmlab.matmul(x, w.t().contiguous(), alpha=2.0, kernel="wgmma", out_dtype=torch.float32, CLUSTER=cl, **p)
odd = torch.randn(130, 91, device="cuda").half()  # rows of 91 elements: staged into padded copies
gemmlab.matmul(odd, torch.randn(91, 37, device="cuda").half())
# Stream-K (STREAM_K = 1): more cluster tiles than the grid has clusters (132 SMs: 66 clusters of two, 132 blocks without),
# the last rounds spread by k steps, sums handed over through the workspace; edges, a block below the
# matrix, the fused epilogue through TMA stores, and tf32 computed transposed (tiles along N).
from gemmlab.kernels.rungs import wgmma  # noqa: E402

wgmma.SK_MIN_ROUNDS = 1  # stream-K on problems of two rounds (the rule keeps it for eight or more)
for cl, rows in ((2, 256 * 70 - 36), (1, 128 * 136 - 36)):
    a, b = torch.randn(rows, 552, device="cuda").bfloat16(), torch.randn(552, 200, device="cuda").bfloat16()
    gemmlab.matmul(a, b, kernel="wgmma", CLUSTER=cl, STREAM_K=1, out_dtype=torch.float32)
    gemmlab.matmul(a, b, bias=torch.randn(200, device="cuda"), activation="gelu_tanh", kernel="wgmma", CLUSTER=cl,
                   STREAM_K=1)
a, b = torch.randn(200, 600, device="cuda"), torch.randn(600, 256 * 70 - 36, device="cuda")
gemmlab.matmul(a, b, precision="tf32", kernel="wgmma", STREAM_K=1)
# The last round's tiles in parts (stream_k_parts): a few tiles past one round, each cut into 2 (18 k steps)
# or 4 (33 k steps) parts whose sums the owner adds; edges, a block below the matrix, the fused epilogue.
for cl, rows, k in ((2, 256 * 69 - 36, 1100), (1, 128 * 137 - 36, 2100)):
    a, b = torch.randn(rows, k, device="cuda").bfloat16(), torch.randn(k, 200, device="cuda").bfloat16()
    gemmlab.matmul(a, b, kernel="wgmma", CLUSTER=cl, STREAM_K=1, out_dtype=torch.float32)
    gemmlab.matmul(a, b, bias=torch.randn(200, device="cuda"), activation="gelu_tanh", kernel="wgmma", CLUSTER=cl,
                   STREAM_K=1)
torch.cuda.synchronize()
print("sanitizer payload done")
