"""Rung 15's launch that waits for row blocks (tests/test_arrivals_gpu.py's cases) under compute-sanitizer:

    compute-sanitizer --tool memcheck python3 scripts/sanitize_arrivals.py
    compute-sanitizer --tool racecheck python3 scripts/sanitize_arrivals.py --quick
"""

import sys

import torch

from gemmlab.api.call import matmul_after
from gemmlab.api.launch import Arrivals

sys.path.insert(0, "tests")
from test_arrivals_gpu import CASES  # noqa: E402

quick = "--quick" in sys.argv  # racecheck is slow: the two smallest cases
cases = sorted(CASES, key=lambda c: c[0] * c[1] * c[2])[:2] if quick else CASES
for m, n, k, rows, first, params in cases:
    blocks = -(-m // rows)
    a = torch.rand(m, k, device="cuda").to(torch.bfloat16)
    b = torch.rand(k, n, device="cuda").to(torch.bfloat16)
    flags = torch.full((blocks,), 3, dtype=torch.int32, device="cuda")
    c = matmul_after(a, b, arrivals=Arrivals(flags.data_ptr(), rows, 3, blocks, first=first), kernel="wgmma", **params)
    torch.cuda.synchronize()
    err = float((c.double() - a.double() @ b.double()).norm() / (a.double() @ b.double()).norm())
    assert err < 1e-2, (m, n, k, rows, first, err)
print(f"sanitize_arrivals: {len(cases)} cases ran")
