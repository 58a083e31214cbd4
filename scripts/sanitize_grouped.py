"""Grouped products once on odd shapes, for compute-sanitizer (memcheck, racecheck, initcheck): group sizes
with empty groups and tails shorter than a tile, B row-major and K-major, the tilings a grouped call can take
(clusters of two and none, 192 columns, 64-row ping-pong tiles), a bias per group with an activation, the
masked layout, ends out of order on the GPU, and 8-bit inputs with per-row and per-group scales.

    compute-sanitizer --tool memcheck python3 scripts/sanitize_grouped.py
"""

import torch

import gemmlab

g = torch.Generator(device="cuda").manual_seed(5)


def rand(*shape, dtype=torch.bfloat16):
    return (torch.rand(*shape, generator=g, device="cuda") * 2 - 1).to(dtype)


sizes = [0, 67, 130, 0, 1, 200]
ends = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
t, k, n, gs = sum(sizes) + 3, 200, 264, len(sizes)
a = rand(t, k)
w = rand(gs, n, k)
tilings = [{}, {"CLUSTER": 1}, {"BN": 192}, {"BN": 128, "CLUSTER": 1},
           {"BM": 64, "BN": 256, "SCHEDULE": 2, "STAGES": 4, "HELD": 2, "CLUSTER": 1},
           {"BM": 64, "BN": 64, "SCHEDULE": 2, "STAGES": 12, "HELD": 2, "CLUSTER": 1}, {"BN": 64}]
for params in tilings:
    kernel = "wgmma" if params else "auto"
    gemmlab.grouped_matmul(a, w.transpose(1, 2), ends, kernel=kernel, **params)
    gemmlab.grouped_matmul(a, w.transpose(1, 2).contiguous(), ends, kernel=kernel, **params)
gemmlab.grouped_matmul(a, w.transpose(1, 2), ends, bias=torch.rand(gs, n, device="cuda"), activation="gelu_tanh")
gemmlab.grouped_matmul(a, w.transpose(1, 2), torch.tensor([50, 10, 400, 9, 10**6, 5], dtype=torch.int32,
                                                          device="cuda"))
room = 70
gemmlab.grouped_matmul(rand(gs, room, k), w.transpose(1, 2), counts=torch.tensor([0, 70, 3, 69, 1, 40],
                                                                                 dtype=torch.int32, device="cuda"))
qa = rand(t, k).to(torch.float8_e4m3fn)
qw = rand(gs, n, 256).to(torch.float8_e4m3fn)
gemmlab.grouped_matmul(rand(t, 256).to(torch.float8_e4m3fn), qw.transpose(1, 2), ends,
                       scale_a=torch.rand(t, 1, device="cuda"), scale_b=torch.rand(gs, n, device="cuda"))
gemmlab.grouped_matmul(rand(t, 256).to(torch.float8_e4m3fn), qw.transpose(1, 2), ends,
                       scale_a=torch.rand(1, device="cuda"), scale_b=torch.rand(gs, device="cuda"), out_dtype="float32")
torch.cuda.synchronize()
print("sanitize_grouped: done")
