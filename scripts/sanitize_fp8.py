"""8-bit products (rung 15, e4m3 / e5m2) under compute-sanitizer: every scale layout (block scales included:
1 x 128 of A, 128 x 128 of B, promoted step by step), tilings with edges in M, N and K, the split over K,
stream-K in parts, the fused epilogue and the staged copies of unaligned rows. Run alone or from
sanitize_all.py:

    compute-sanitizer --tool memcheck python3 scripts/sanitize_fp8.py
    compute-sanitizer --tool racecheck python3 scripts/sanitize_fp8.py --quick
    compute-sanitizer --tool memcheck python3 scripts/sanitize_fp8.py 64    # the tilings of one tile width
"""

import sys

import torch

import gemmlab

TILINGS = [{}, dict(BM=128, BN=128, CLUSTER=1), dict(BM=64, BN=128, SCHEDULE=2, HELD=2, STAGES=6, SPLIT_K=4, CLUSTER=1),
           dict(BM=64, BN=64, SCHEDULE=2, HELD=2, STAGES=8, CLUSTER=1), dict(BM=128, BN=64, STAGES=8, SPLIT_K=2, CLUSTER=1)]
SHAPES = [(129, 264, 144), (300, 136, 48), (2100, 520, 1040)]
quick = "--quick" in sys.argv  # racecheck is slow: the first tiling and the two small shapes
width = next((int(a) for a in sys.argv[1:] if a.isdigit()), 0)  # a tile width given: its tilings alone
if width:
    TILINGS = [p for p in TILINGS if p.get("BN") == width]

g = torch.Generator(device="cuda").manual_seed(8)
ran = 0
for dtype in ("e4m3", "e5m2"):
    for params in TILINGS[:1] if quick else TILINGS:
        named = {"kernel": "wgmma", **params} if params else {}
        for m, n, k in SHAPES[:2] if quick else SHAPES:
            qa, sa = gemmlab.quantize(torch.randn(m, k, generator=g, device="cuda"), dtype, "row")
            qw, sw = gemmlab.quantize(torch.randn(n, k, generator=g, device="cuda"), dtype, "row")
            gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sw.t(), **named)
            gemmlab.matmul(qa, qw.t(), scale_a=sa[:1, :1].clone(), scale_b=2.0, out_dtype="float32", **named)
            c = torch.randn(m, n, generator=g, device="cuda")
            gemmlab.matmul(qa, qw.t(), c, alpha=0.5, beta=1.5, scale_a=sa, scale_b=sw.t(), **named)
            gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sw.t(), bias=torch.randn(n, generator=g, device="cuda"),
                           activation="gelu_tanh", residual=c.bfloat16(), **named)
            ran += 1
    if width:
        continue
    # rows of 72 bytes at an odd address: staged copies
    qa, sa = gemmlab.quantize(torch.randn(100, 72, generator=g, device="cuda"), dtype, "row")
    odd = torch.empty(100, 77, device="cuda", dtype=qa.dtype)[:, 5:].copy_(qa)
    qw, sw = gemmlab.quantize(torch.randn(200, 72, generator=g, device="cuda"), dtype, "row")
    gemmlab.matmul(odd, qw.t(), scale_a=sa, scale_b=sw.t())
    # block scales: a partial k block and column block, the split over K, stream-K in parts (4352 rows: 68
    # cluster tiles of 128 x 128 on 66 clusters), the fused epilogue
    for params in [{}, dict(CLUSTER=1, SPLIT_K=4)] + ([] if quick else [dict(STREAM_K=1)]):
        named = {"kernel": "wgmma", **params} if params else {}
        for m, n, k in [(129, 264, 400)] + ([] if quick else [(4352, 512, 2048)]):
            qa, sa = gemmlab.quantize(torch.randn(m, k, generator=g, device="cuda"), dtype, "1x128")
            qw, sw = gemmlab.quantize(torch.randn(n, k, generator=g, device="cuda"), dtype, "128x128")
            gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sw.t(), **named)
            gemmlab.matmul(qa, qw.t(), scale_a=sa.t().contiguous().t(), scale_b=sw.t(), bias=torch.randn(n, device="cuda"),
                           activation="silu", out_dtype="float32", **named)
            ran += 1
torch.cuda.synchronize()
print(f"sanitize_fp8: {ran} format, tiling and shape cases")
