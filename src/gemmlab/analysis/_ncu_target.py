"""The process `ncu` profiles: launches each requested kernel exactly once, nothing else of ours.

    python -m gemmlab.analysis._ncu_target '[{"kernel": "naive", "m": 4096, "n": 4096, "k": 4096, "params": {}}]'

Operands are random in [-1, 1) (CuPy's generator kernels do not match ncu's kernel filter). Each kernel
is compiled and loaded before its one launch, so the launch ncu sees is the measured one. Prints nothing.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    from .. import api
    from ..kernels import registry
    from ..runtime.device import require_cupy

    cp = require_cupy()
    runs = json.loads(argv[0])
    rng = cp.random.default_rng(0)
    for r in runs:
        spec = registry.get(r["kernel"])
        params = r.get("params") or {}
        a = rng.uniform(-1, 1, (r["m"], r["k"]), dtype=cp.float32)
        b = rng.uniform(-1, 1, (r["k"], r["n"]), dtype=cp.float32)
        c = cp.empty((r["m"], r["n"]), dtype=cp.float32)
        api.prepare(spec, params)  # compile and load outside the profiled launch
        cp.cuda.get_current_stream().synchronize()
        api.matmul(a, b, c, kernel=spec.name, **params)
        cp.cuda.get_current_stream().synchronize()
        del a, b, c
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
