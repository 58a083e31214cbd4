"""Compile every shape class of rung 10 (sgemm) in every form the heuristic can pick, for several
architectures, and list the instantiations that use local memory (spills). No GPU needed.

    python3 scripts/spill_sweep.py [--archs sm_80,sm_86,sm_89,sm_90]

Forms: no split; a split tail (WAVE); every tile split, summed in the kernel or by the second kernel;
B copied in 16- and 4-byte pieces. About 8 s per instantiation on one core.
"""

import argparse

from gemmlab.kernels.registry import compile_spec, get
from gemmlab.kernels.rungs import sgemm

FORMS = [  # (SPLIT_K, WAVE, REDUCE)
    (1, 1, 1), (2, 1, 1), (4, 1, 2), (64, 1, 1), (64, 1, 2), (4, 264, 1), (8, 264, 1),
]

ap = argparse.ArgumentParser()
ap.add_argument("--archs", default="sm_80,sm_86,sm_89,sm_90")
args = ap.parse_args()
spec = get("sgemm")
found = 0
for arch in args.archs.split(","):
    for c in sgemm.SHAPE_CLASSES:
        for split, wave, reduce in FORMS:
            if wave > 1 and not c.tail:
                continue
            for b_copy in (16, 4):
                p = spec.validate(dict(c.cfg, SPLIT_K=split, WAVE=wave, REDUCE=reduce, B_COPY=b_copy))
                for name, r in compile_spec(spec, p, arch).resources.items():
                    if r.uses_local_memory:
                        found += 1
                        print(f"{arch} {name}: {r.registers} registers, {r.spill_stores} B spill stores, "
                              f"{r.spill_loads} B spill loads, {r.stack_frame} B stack")
print(f"{found} instantiations with local memory")
