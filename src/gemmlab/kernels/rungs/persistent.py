"""Rung 14: the third Hopper step: rung 13 on a persistent grid, in clusters that share B by multicast.

As many blocks as can be resident walk the tiles in groups of GROUP_M tile rows, the ring carried across
tiles (the next tile's copies land during this tile's epilogue); clusters of two vertically adjacent tiles
copy half of B each and multicast it to both. Rules shared with rungs 12 and 13: _hopper_steps.
"""

from __future__ import annotations

from ._hopper_steps import Step, spec

STEP = Step(consumers=2, persistent=True)

SPEC = spec(STEP, name="persistent", rung=14, template="persistent_gemm",
            idea="Hopper step 3: a persistent grid in grouped tile order, clusters of two sharing B by TMA multicast",
            defaults=(128, 256, 4, 16),
            expected_gain=(1.05, 1.15))
