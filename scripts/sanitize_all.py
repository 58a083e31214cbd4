"""Every GPU rung under compute-sanitizer in one process: each rung of the registry in each dtype it takes
(and TF32 where it offers it) on odd shapes, plain and with the fused epilogue where it has one, then the
payloads that reach the rungs' special paths (sanitize_tensor.py: rung 15's schedules, clusters, TMA stores,
stream-K; sanitize_deferred.py: deferred stores over several tiles; sanitize_skinny.py: rung 16's splits and
layouts; sanitize_batched.py: batches; sanitize_transposed.py: rung 10 reading B^T in place;
sanitize_hopper_steps.py: rungs 12-14's tilings, layouts and epilogues; sanitize_fp8.py: 8-bit products;
sanitize_arrivals.py: rung 15's launch that waits for row blocks).
Run after every
kernel change:

    for t in memcheck racecheck; do compute-sanitizer --tool $t --print-limit 10 python3 scripts/sanitize_all.py; done

`--rungs-only` runs the registry loop alone (under racecheck the payloads take many minutes); `--rung NAME`
(repeatable) runs only those rungs' cases, and no payloads.
"""

import runpy
import sys
from pathlib import Path

import torch

import gemmlab
from gemmlab import formats
from gemmlab.kernels import registry
from gemmlab.runtime import device

HERE = Path(__file__).parent
SHAPES = [(67, 45, 33), (129, 131, 17), (1, 7, 5), (300, 520, 77), (300, 521, 300)]
cc = device.device_info().compute_capability
g = torch.Generator(device="cuda").manual_seed(11)
only = [sys.argv[i + 1] for i, arg in enumerate(sys.argv[:-1]) if arg == "--rung"]
unknown = sorted(set(only) - {spec.name for spec in registry.all_specs()})
if unknown:
    raise SystemExit(f"sanitize_all: no rung named {', '.join(unknown)}")
ran = 0
for spec in registry.all_specs():
    if cc < spec.min_cc or spec.target_arch(device.device_info().arch) is None or (only and spec.name not in only):
        continue
    # (8-bit inputs take B K-major and scales: sanitize_fp8.py)
    modes = [(torch.float32 if d == "float32" else getattr(torch, d), None) for d in spec.dtypes
             if not formats.is_fp8(d)]
    modes += [(torch.float32, p) for p in spec.precisions]
    for dt, precision in modes:
        for m, n, k in SHAPES:
            a = (torch.rand(m, k, generator=g, device="cuda") * 2 - 1).to(dt)
            b = (torch.rand(k, n, generator=g, device="cuda") * 2 - 1).to(dt)
            c = (torch.rand(m, n, generator=g, device="cuda") * 2 - 1).to(dt)
            gemmlab.matmul(a, b, kernel=spec.name, precision=precision)
            gemmlab.matmul(a, b, c.clone(), alpha=1.5, beta=0.5, kernel=spec.name, precision=precision)
            if spec.epilogue:
                gemmlab.matmul(a, b, bias=torch.rand(n, generator=g, device="cuda"), activation="gelu_tanh",
                               residual=c, kernel=spec.name, precision=precision)
            ran += 1
torch.cuda.synchronize()
print(f"sanitize_all: {ran} rung, dtype and shape cases")
PAYLOADS = ("sanitize_tensor.py", "sanitize_deferred.py", "sanitize_skinny.py", "sanitize_batched.py",
            "sanitize_transposed.py", "sanitize_hopper_steps.py", "sanitize_fp8.py", "sanitize_arrivals.py")
for payload in () if "--rungs-only" in sys.argv or only else PAYLOADS:
    runpy.run_path(str(HERE / payload), run_name="__main__")
print("sanitize_all: done")
