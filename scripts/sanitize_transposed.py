"""Rung 10 reading B^T in place (B_LAYOUT 2: x @ W.t() in strict fp32) under compute-sanitizer: every tile
class the heuristic picks, unsplit and in every form of the split over K, on shapes with edges in M, N and K,
plain, with beta and a C, and with the fused epilogue; then kernel="auto" on a batch of transposed weights.
Run alone or from sanitize_all.py:

    compute-sanitizer --tool memcheck python3 scripts/sanitize_transposed.py
"""

import torch

import gemmlab

TILES = [dict(BM=128, BN=256, BK=8, WM=128, WN=32, TM=16, TN=8, MIN_BLOCKS=1),
         dict(BM=128, BN=128, BK=16, WM=64, WN=32, TM=8, TN=8, MIN_BLOCKS=2),
         dict(BM=128, BN=64, BK=16, WM=64, WN=32, TM=8, TN=8, MIN_BLOCKS=3),
         dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, MIN_BLOCKS=5)]
SPLITS = [{}, dict(SPLIT_K=2), dict(SPLIT_K=4, WAVE=7), dict(SPLIT_K=8, REDUCE=2)]
SHAPES = [(67, 45, 33), (300, 520, 77), (129, 131, 1031)]

g = torch.Generator(device="cuda").manual_seed(13)
ran = 0
for tile in TILES:
    for split in SPLITS:
        for m, n, k in SHAPES:
            x = torch.rand(m, k, generator=g, device="cuda") * 2 - 1
            w = torch.rand(n, k + 3, generator=g, device="cuda")[:, 1:1 + k] * 2 - 1  # rows k + 3 apart
            c = torch.rand(m, n, generator=g, device="cuda") * 2 - 1
            gemmlab.matmul(x, w.t(), kernel="sgemm", **tile, **split)
            gemmlab.matmul(x, w.t(), c.clone(), alpha=1.5, beta=0.5, kernel="sgemm", **tile, **split)
            gemmlab.matmul(x, w.t(), bias=torch.rand(n, generator=g, device="cuda"), activation="gelu_tanh",
                           residual=c, kernel="sgemm", **tile, **split)
            ran += 1
xb = torch.rand(3, 70, 90, generator=g, device="cuda")
wb = torch.rand(3, 130, 90, generator=g, device="cuda")
gemmlab.matmul(xb, wb.transpose(1, 2))
torch.cuda.synchronize()
print(f"sanitize_transposed: {ran} tile, split and shape cases and a batch")
