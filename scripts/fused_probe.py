"""Where the time of a fused epilogue goes (rung 15, BF16): the plain GEMM, bias alone, and bias with each
activation, timed interleaved with cuBLAS, each also replayed from a CUDA graph (no host time between
calls), with the SM clock the harness read beside every timing.

    PYTHONPATH=src python3 scripts/fused_probe.py [--sizes 4096,8192] [--variants "DEFER=0" ...] [--no-graphs]

--variants adds rung 15 with those parameters (kernel="wgmma") for the plain call and each activation, e.g. to
see what the deferred stores do for GELU with erf.
"""

from __future__ import annotations

import argparse

import cupy as cp
import torch

import gemmlab
from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--budget-ms", type=float, default=250.0)
    ap.add_argument("--rounds", type=int, default=10, help="least interleaved rounds (one batch per call each)")
    ap.add_argument("--variants", nargs="*", default=[], help='rung 15 parameter sets, "A=1,B=2"')
    ap.add_argument("--no-graphs", action="store_true", help="leave out the graph replays")
    args = ap.parse_args()
    side = cp.cuda.Stream(non_blocking=True)
    print("| N | call | TFLOP/s | x plain | SM MHz (min-max) |\n|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        a = torch.randn(size, size, device="cuda").bfloat16()
        b = torch.randn(size, size, device="cuda").bfloat16()
        out = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
        bias = torch.randn(size, device="cuda")
        calls = {"cublas": lambda: torch.matmul(a, b, out=out), "plain": lambda: gemmlab.matmul(a, b, out),
                 "bias": lambda: gemmlab.matmul(a, b, out, bias=bias)}
        for act in ("relu", "gelu_tanh", "gelu_erf", "silu"):
            calls[act] = lambda act=act: gemmlab.matmul(a, b, out, bias=bias, activation=act)
        for v in args.variants:
            p = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in v.split(",") if kv}
            calls[f"plain [{v}]"] = lambda p=p: gemmlab.matmul(a, b, out, kernel="wgmma", **p)
            for act in ("gelu_tanh", "gelu_erf", "silu"):
                calls[f"{act} [{v}]"] = lambda act=act, p=p: gemmlab.matmul(a, b, out, bias=bias, activation=act,
                                                                             kernel="wgmma", **p)
        with side, torch.cuda.stream(torch.cuda.ExternalStream(side.ptr)):
            timed = {}
            for name, fn in calls.items():
                fn()
                timed[name] = TimedCall(fn, graph=False)
                if name in ("plain", "gelu_tanh", "cublas") and not args.no_graphs:
                    timed[name + " (graph)"] = TimedCall(fn, graph=True)
            res = time_interleaved(timed, TimingOptions(budget_ms=args.budget_ms * len(timed), rounds=args.rounds))
        flops = 2.0 * size**3
        base = res["plain"].median_ms
        for name, t in res.items():
            mhz = f"{t.sm_mhz_min:.0f}-{t.sm_mhz_max:.0f}" if t.sm_mhz_min else "-"
            print(f"| {size} | {name} | {flops / t.median_ms / 1e9:.1f} | {base / t.median_ms:.3f} | {mhz} |",
                  flush=True)


if __name__ == "__main__":
    main()
