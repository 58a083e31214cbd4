"""Rung 13: the second Hopper step: a producer warpgroup copies, two consumer warpgroups multiply.

Rung 12 with warp specialisation: full and empty mbarriers hand slots between the roles, setmaxnreg moves
the registers to the consumers (40 for the producer, 232 for each consumer), and the tile grows to 128 x 256
(each consumer 64 x 256, 128 accumulators per thread). One block per tile and per SM. Rules shared with rungs
12 and 14: _hopper_steps.
"""

from __future__ import annotations

from ._hopper_steps import Step, spec

STEP = Step(consumers=2, persistent=False)

SPEC = spec(STEP, name="warp_specialized", rung=13, template="warp_specialized_gemm",
            idea="Hopper step 2: producer / consumer warpgroups over full and empty barriers, setmaxnreg, 128x256 tiles",
            defaults=(128, 256, 4, 8),
            expected_gain=(1.15, 1.35))
