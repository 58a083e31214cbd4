"""Batched products once on odd shapes, for compute-sanitizer (memcheck, racecheck, initcheck): each rung
with a batched form (wgmma in BF16 and TF32, mma_sync, sgemm), an operand shared by the batch, B given
transposed per product, and the epilogue with a residual per product.

    compute-sanitizer --tool memcheck python3 scripts/sanitize_batched.py
"""

import torch

import gemmlab

g = torch.Generator(device="cuda").manual_seed(5)


def rand(*shape, dtype=torch.bfloat16):
    return (torch.rand(*shape, generator=g, device="cuda") * 2 - 1).to(dtype)


runs = [("wgmma", torch.bfloat16, None), ("wgmma", torch.float32, "tf32"), ("mma_sync", torch.bfloat16, None),
        ("sgemm", torch.float32, None), ("wgmma", torch.bfloat16, None, dict(BM=64, BN=64, SCHEDULE=2, HELD=2,
                                                                               STAGES=12, CLUSTER=1))]
for kernel, dt, precision, *named in runs:
    params = named[0] if named else {}
    for bt, m, n, k in [(3, 67, 136, 40), (2, 130, 264, 200), (5, 1, 64, 16)]:
        a, b = rand(bt, m, k, dtype=dt), rand(bt, k, n, dtype=dt)
        r = rand(bt, m, n, dtype=dt)
        bias = rand(n, dtype=torch.float32)
        gemmlab.matmul(a, b, kernel=kernel, precision=precision, **params)
        gemmlab.matmul(a[0], b, kernel=kernel, precision=precision, **params)                      # A shared
        gemmlab.matmul(a, rand(bt, n, k, dtype=dt).transpose(1, 2), kernel=kernel, precision=precision, **params)
        gemmlab.matmul(a, b, bias=bias, activation="silu", residual=r, kernel=kernel, precision=precision, **params)
        torch.cuda.synchronize()
print("sanitize_batched: done")
