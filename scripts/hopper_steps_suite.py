"""The Hopper steps (rungs 12-14) and rung 15 on every shape of the shape suite in BF16, as kernel="auto" would
be called there (B given transposed for the LLM shapes, x @ W.t()): each result against the float64 product of
the same operands, relative error against the format's tolerance. Prints one line per rung and a table of the
worst shapes. A correctness sweep, not a timing:

    PYTHONPATH=src python3 scripts/hopper_steps_suite.py
"""

import torch

import gemmlab
from gemmlab.bench import suite

RUNGS = ("tma_wgmma", "warp_specialized", "persistent", "wgmma")
tol = suite.TOLERANCE["bfloat16"]
g = torch.Generator(device="cuda").manual_seed(15)
worst = {r: (0.0, None) for r in RUNGS}
failed = []
cases = suite.cases()
for group, (m, n, k) in cases:
    a = (torch.rand(m, k, generator=g, device="cuda") * 2 - 1).to(torch.bfloat16)
    if suite.b_layout(group) == "W.t()":
        b = (torch.rand(n, k, generator=g, device="cuda") * 2 - 1).to(torch.bfloat16).t()
    else:
        b = (torch.rand(k, n, generator=g, device="cuda") * 2 - 1).to(torch.bfloat16)
    ref = a.double() @ b.double()
    den = ref.norm().item() or 1.0
    for rung in RUNGS:
        c = gemmlab.matmul(a, b, kernel=rung)
        err = (c.double() - ref).norm().item() / den
        if not err <= tol:
            failed.append((rung, group, (m, n, k), err))
        if err > worst[rung][0]:
            worst[rung] = (err, (m, n, k))
    del a, b, ref
torch.cuda.synchronize()
for rung in RUNGS:
    print(f"{rung:17s} worst rel. error {worst[rung][0]:.2e} at {worst[rung][1]} (tolerance {tol:.0e})")
print(f"{len(cases)} shapes x {len(RUNGS)} rungs: {len(failed)} over the tolerance")
for f in failed:
    print("FAILED", *f)
