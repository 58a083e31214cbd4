"""The deferred TMA stores of rung 15 (DEFER 1) alone under compute-sanitizer (racecheck on the whole
tensor-core payload, scripts/sanitize_tensor.py, takes longer): several tiles per block, one k step and two,
a bias with an activation, fp16 and bf16, clusters of one and two.

    compute-sanitizer --tool racecheck python3 scripts/sanitize_deferred.py
"""

import torch

import gemmlab

for k, dt in ((136, torch.bfloat16), (64, torch.float16)):
    a, b = torch.randn(2100, k, device="cuda").to(dt), torch.randn(k, 4100, device="cuda").to(dt)
    gemmlab.matmul(a, b, kernel="wgmma", DEFER=1)
    gemmlab.matmul(a, b, bias=torch.randn(4100, device="cuda"), activation="silu", kernel="wgmma", DEFER=1, CLUSTER=1)
torch.cuda.synchronize()
print("sanitizer payload done")
