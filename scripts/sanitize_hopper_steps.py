"""The Hopper steps (rungs 12-14: tma_wgmma, warp_specialized, persistent) under compute-sanitizer: each
step's tilings on shapes with edges in M, N and K (one k step and less, K not a multiple of 64, an odd tile-row
count so a cluster's second block lies below the matrix, more tiles than SMs so persistent blocks walk several),
a row-major B and B^T read in place, plain, with beta and a C, and with the fused epilogue (the staged path
too: a C whose rows allow no pairs). Run alone or from sanitize_all.py:

    compute-sanitizer --tool memcheck python3 scripts/sanitize_hopper_steps.py
    compute-sanitizer --tool racecheck python3 scripts/sanitize_hopper_steps.py --quick
"""

import sys

import torch

import gemmlab

STEPS = {
    "tma_wgmma": [{}, dict(BM=64, BN=256, STAGES=2)],
    "warp_specialized": [{}, dict(BM=256, BN=128, STAGES=3)],
    "persistent": [{}, dict(CLUSTER=1, BN=128, STAGES=2), dict(BM=256, BN=128, STAGES=3)],
}
SHAPES = [(129, 264, 72), (300, 136, 40), (2100, 2056, 136)]
quick = "--quick" in sys.argv  # racecheck is slow: the first tiling and the two small shapes

g = torch.Generator(device="cuda").manual_seed(12)
ran = 0
for kernel, tilings in STEPS.items():
    for params in tilings[:1] if quick else tilings:
        for m, n, k in SHAPES[:2] if quick else SHAPES:
            x = (torch.rand(m, k, generator=g, device="cuda") * 2 - 1).to(torch.bfloat16)
            b = (torch.rand(k, n, generator=g, device="cuda") * 2 - 1).to(torch.bfloat16)
            w = (torch.rand(n, k, generator=g, device="cuda") * 2 - 1).to(torch.bfloat16)
            c = torch.rand(m, n, generator=g, device="cuda") * 2 - 1
            gemmlab.matmul(x, b, kernel=kernel, **params)
            gemmlab.matmul(x, w.t(), c.clone(), alpha=1.5, beta=0.5, kernel=kernel, **params)
            gemmlab.matmul(x, w.t(), bias=torch.rand(n, generator=g, device="cuda"), activation="gelu_tanh",
                           residual=c.to(torch.bfloat16), kernel=kernel, **params)
            odd = torch.empty(m, n + 1, device="cuda")[:, :n]  # rows n + 1 apart: the staged epilogue
            gemmlab.matmul(x, b, odd, bias=torch.rand(m, generator=g, device="cuda"), activation="relu",
                           kernel=kernel, **params)
            ran += 1
torch.cuda.synchronize()
print(f"sanitize_hopper_steps: {ran} step, tiling and shape cases")
