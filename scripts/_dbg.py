import torch, gemmlab, traceback
from gemmlab.kernels.rungs import skinny
a = torch.randn(64, 131072, device="cuda", dtype=torch.bfloat16); b = torch.randn(131072, 64, device="cuda", dtype=torch.bfloat16)
ref = a.double() @ b.double()
base = skinny._heuristic(64, 64, 131072, 132)
for extra in ({}, {"SCHED": 0, "SPLIT": 256}, {"SCHED": 1, "SPLIT": 132}, {"WARPS": 4}, {"WARPS": 8, "SCHED": 1, "SPLIT": 132}, {"WARPS": 2, "SCHED": 1, "SPLIT": 100}):
    p = {**base, **extra}
    try:
        out = gemmlab.matmul(a, b, kernel="skinny", **p); torch.cuda.synchronize()
        print(p, "ok", ((out.double() - ref).norm() / ref.norm()).item())
    except Exception as e:
        print(p, "FAIL", type(e).__name__, str(e)[:200])
