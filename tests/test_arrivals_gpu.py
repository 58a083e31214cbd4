"""Rung 15's launch that waits for row blocks of A (`matmul_after`, gemmlab.distributed's all-gather) on one GPU,
its flags already at the epoch: every element against float64 into a NaN-poisoned C, for blocks that are whole
cluster tiles (the walk rotated to the block named first, its groups no taller than a block: `arrival_group`)
and blocks that are not (no rotation), tilings with and without clusters. Skipped on GPUs other than sm_90.
Also run under compute-sanitizer by scripts/sanitize_arrivals.py."""

import pytest

from gemmlab.kernels import get

pytestmark = pytest.mark.gpu
SPEC = get("wgmma")
# (M, N, K, rows per flag, the block named first, tiling)
CASES = [(4096, 1024, 512, 1024, 1, {}), (4096, 1024, 512, 256, 5, {}), (4096, 1024, 512, 512, 0, {}),
         (2048, 520, 264, 256, 3, dict(CLUSTER=1, BN=128, STAGES=4)), (3072, 640, 256, 384, 2, {}),
         (2048, 512, 512, 2048, 0, dict(BM=128, BN=128, STAGES=5, SCHEDULE=2)), (1000, 264, 136, 200, 4, {})]


@pytest.fixture(autouse=True)
def _hopper_only():
    from gemmlab.runtime import device

    arch = device.device_info().arch
    if SPEC.target_arch(arch) is None:
        pytest.skip(f"wgmma needs sm_90a; this GPU is {arch}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-rows{c[3]}-first{c[4]}-{c[5]}")
def test_a_launch_that_waits_for_rows_matches_float64(case):
    torch = pytest.importorskip("torch")
    from gemmlab.api.call import matmul_after
    from gemmlab.api.launch import Arrivals

    m, n, k, rows, first, params = case
    blocks = -(-m // rows)
    g = torch.Generator(device="cuda").manual_seed(m + rows + first)
    a = (torch.rand(m, k, generator=g, device="cuda") * 2 - 1).to(torch.bfloat16)
    b = (torch.rand(k, n, generator=g, device="cuda") * 2 - 1).to(torch.bfloat16)
    want = a.double() @ b.double()
    flags = torch.full((blocks,), 7, dtype=torch.int32, device="cuda")  # every block present for epoch 7
    for epoch in (7, 6):  # (a flag past the epoch counts as present: the count may run ahead)
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        out = matmul_after(a, b, c, arrivals=Arrivals(flags.data_ptr(), rows, epoch, blocks, first=first),
                           kernel="wgmma", **params)
        torch.cuda.synchronize()
        assert out is c and not torch.isnan(c).any(), case
        err = float((c.double() - want).norm() / want.norm())
        assert err <= 1e-2, (case, epoch, err)
        # every element, not only the norm: a tile the rotated walk skipped or took twice shows here
        assert float((c.double() - want).abs().max()) <= 0.02 * float(want.abs().max()) + 0.05, case
