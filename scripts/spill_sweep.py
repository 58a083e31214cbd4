"""Compile every shape class of rung 10 (sgemm) in every form the heuristic can pick, for several
architectures, and list the instantiations that use local memory (spills). No GPU needed.

    python3 scripts/spill_sweep.py [--archs sm_80,sm_86,sm_89,sm_90]

Forms: no split; a split tail (WAVE) in 2 to 16 slices; every tile split in 2 to 64 slices, summed in the
kernel or by the second kernel; B copied in 16- and 4-byte pieces. One module per architecture (the
instantiations share one parse): a few minutes for the four on one core.
"""

import argparse

from gemmlab.kernels.registry import get
from gemmlab.kernels.rungs import sgemm
from gemmlab.runtime import compiler

FORMS = [  # (SPLIT_K, WAVE, REDUCE)
    (1, 1, 1), (2, 1, 1), (4, 1, 1), (4, 1, 2), (16, 1, 2), (64, 1, 1), (64, 1, 2),
    (2, 264, 1), (4, 264, 1), (8, 264, 1), (16, 264, 1),
]

ap = argparse.ArgumentParser()
ap.add_argument("--archs", default="sm_80,sm_86,sm_89,sm_90")
args = ap.parse_args()
spec = get("sgemm")
exprs = []
for c in sgemm.SHAPE_CLASSES:
    for split, wave, reduce in FORMS:
        if wave > 1 and not c.tail:
            continue
        for b_copy in (16, 4):
            p = spec.validate(dict(c.cfg, SPLIT_K=split, WAVE=wave, REDUCE=reduce, B_COPY=b_copy))
            exprs.append(spec.name_expression(p))
exprs.append(spec.second_kernel.name_for(spec.defaults))
found = 0
for arch in args.archs.split(","):
    resources = compiler.compile_file(spec.source_path, exprs, arch, need_report=True).resources
    for name in exprs:
        r = resources[name]
        if r.uses_local_memory:
            found += 1
            print(f"{arch} {name}: {r.registers} registers, {r.spill_stores} B spill stores, "
                  f"{r.spill_loads} B spill loads, {r.stack_frame} B stack")
    print(f"{arch}: {len(exprs)} instantiations compiled", flush=True)
print(f"{found} instantiations with local memory")
