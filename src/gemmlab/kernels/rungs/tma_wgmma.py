"""Rung 12: the first Hopper step: TMA fills an mbarrier ring, one warpgroup multiplies out of it with wgmma.

fp16 / bf16 in, fp32 accumulate, the fused epilogue from the registers; sm_90a only. 128 threads per block,
one block per tile; the default 128 x 128 tile at three stages (97 KB of shared memory) lets two blocks
share an SM, so one block's epilogue and waits overlap the other's wgmmas. Rules shared with rungs 13 and 14:
_hopper_steps.
"""

from __future__ import annotations

from ._hopper_steps import Step, spec

STEP = Step(consumers=1, persistent=False)

SPEC = spec(STEP, name="tma_wgmma", rung=12, template="tma_wgmma_gemm",
            idea="Hopper step 1: TMA copies into a ring of swizzled slots, wgmma from one warpgroup",
            defaults=(128, 128, 3, 8),
            expected_gain=(2.3, 2.9))
