"""Where a repeat call's host time goes: gemmlab.matmul on torch tensors taken apart layer by layer, each layer
timed as a loop of enqueued calls (no synchronisation inside, the GPU idle at the start; best of 5 medians),
beside torch.matmul; then a cProfile of many repeat calls of one shape, by own time.

    PYTHONPATH=src python3 scripts/host_split.py [--calls 20] [--profile-shape 64x256x256:bfloat16]

Layers, outermost first: the public gemmlab.matmul; api.call.matmul (no router, no 8-bit test); the plan
lookup and launch.run with the cached plan; the driver launch alone with the plan's packed arguments (and its
second launch where it has one); torch.empty of the output.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time

import torch

import gemmlab
from gemmlab import arrays
from gemmlab.api import call, launch

SHAPES = [((4096, 4096, 4096), "bfloat16"), ((64, 4096, 4096), "bfloat16"), ((256, 256, 256), "bfloat16"),
          ((4096, 4096, 4096), "float32"), ((64, 4096, 4096), "float32")]


def host_us(fn, calls: int) -> float:
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(5):
        loops = []
        for _ in range(5):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            loops.append((time.perf_counter() - t0) / calls * 1e6)
        best = min(best, statistics.median(loops))
    torch.cuda.synchronize()
    return best


def layers(m: int, n: int, k: int, dtype: str, calls: int) -> dict[str, float]:
    dt = getattr(torch, dtype)
    a = torch.randn(m, k, device="cuda").to(dt)
    b = torch.randn(k, n, device="cuda").to(dt)
    call.forget_launches()
    gemmlab.matmul(a, b)
    p = next(reversed(call._plans.values()))
    home = arrays.home(arrays.TORCH_CUDA)
    stream = home.stream(a.device.index)
    drv = launch.driver()

    def bare_launch():
        g, bl = p.grid, p.block
        drv.launch(p.function, g[0], g[1], g[2], bl[0], bl[1], bl[2], p.smem, stream, p.pack.address, 0)
        if p.second is not None:
            if p.second_launch is not None:
                p.second_launch(stream, p.second_pack.address)
            else:
                drv.launch(p.second_function, *p.second.grid, *p.second.block, p.second.smem, stream,
                           p.second_pack.address, 0)

    launch.run(p, home, a, b, None, None, None, 1.0, 0.0, stream)
    res = {
        "torch.matmul": host_us(lambda: torch.matmul(a, b), calls),
        "gemmlab.matmul": host_us(lambda: gemmlab.matmul(a, b), calls),
        "api.call.matmul": host_us(lambda: call.matmul(a, b), calls),
        "launch.run": host_us(lambda: launch.run(p, home, a, b, None, None, None, 1.0, 0.0, stream), calls),
        "driver launch(es)": host_us(bare_launch, calls),
        "torch.empty": host_us(lambda: torch.empty(m, n, device="cuda", dtype=dt), calls),
        "torch stream handle": host_us(lambda: home.stream(0), calls),
    }
    res["launches"] = 1 + (p.second is not None)
    res["kernel"] = p.spec.name if hasattr(p, "spec") else str(getattr(p, "kernel", "?"))
    return res


def profile(m: int, n: int, k: int, dtype: str, calls: int = 3000) -> str:
    dt = getattr(torch, dtype)
    a = torch.randn(m, k, device="cuda").to(dt)
    b = torch.randn(k, n, device="cuda").to(dt)
    for _ in range(5):
        gemmlab.matmul(a, b)
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for i in range(calls):
        gemmlab.matmul(a, b)
        if i % 200 == 199:
            torch.cuda.synchronize()  # (the queue never fills)
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(28)
    return s.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--profile-shape", default="64x256x256:bfloat16")
    args = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; µs per call, enqueue loops of {args.calls}")
    names = None
    for (m, n, k), dtype in SHAPES:
        r = layers(m, n, k, dtype, args.calls)
        if names is None:
            names = [x for x in r if x not in ("launches", "kernel")]
            print(f"{'shape':22s} {'kernel':10s} {'launches':>8s} " + " ".join(f"{x:>18s}" for x in names))
        print(f"{dtype:9s}{m}x{n}x{k:<6d} {r['kernel']:10s} {r['launches']:8d} "
              + " ".join(f"{r[x]:18.1f}" for x in names), flush=True)
    shape, dtype = args.profile_shape.split(":")
    m, n, k = (int(v) for v in shape.split("x"))
    print(profile(m, n, k, dtype))


if __name__ == "__main__":
    main()
