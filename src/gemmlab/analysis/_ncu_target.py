"""The process `ncu` profiles: launches each requested kernel exactly once, nothing else of ours.

    python -m gemmlab.analysis._ncu_target '[{"kernel": "naive", "m": 4096, "n": 4096, "k": 4096, "params": {},
                                                "fmt": "fp32"}]'

Operands are random in [-1, 1) (CuPy's generator kernels and torch's conversions do not match ncu's kernel
filter), of the run's format: CuPy arrays, or torch tensors for bfloat16 (CuPy has none); C in the same
dtype. Each kernel is compiled and loaded before its one launch, so the launch ncu sees is the measured one.
Prints nothing.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    from .. import api
    from ..formats import format_named
    from ..kernels import registry
    from ..runtime.device import require_cupy

    cp = require_cupy()
    runs = json.loads(argv[0])
    rng = cp.random.default_rng(0)
    for r in runs:
        spec = registry.get(r["kernel"])
        params = r.get("params") or {}
        nf = format_named(r.get("fmt", "fp32"))
        a = rng.uniform(-1, 1, (r["m"], r["k"]), dtype=cp.float32)
        b = rng.uniform(-1, 1, (r["k"], r["n"]), dtype=cp.float32)
        if nf.dtype == "bfloat16":
            import torch

            a, b = (torch.from_dlpack(x).to(torch.bfloat16) for x in (a, b))
            c = torch.empty((r["m"], r["n"]), dtype=torch.bfloat16, device=a.device)
        else:
            a, b = a.astype(nf.dtype), b.astype(nf.dtype)
            c = cp.empty((r["m"], r["n"]), dtype=nf.dtype)
        if nf.name == "fp32":  # compile and load first (the call's own type parameters are fp32's defaults)
            api.prepare(spec, params)
        cp.cuda.Device().synchronize()
        api.matmul(a, b, c, kernel=spec.name, precision=nf.precision, **params)
        cp.cuda.Device().synchronize()
        del a, b, c
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
