"""8-bit products against torch._scaled_mm (cuBLASLt), side by side: e4m3 with one scale per tensor and with one
per row of A and per column of B, bf16 out, L2 flushed, interleaved, each call as a torch user makes it.

    PYTHONPATH=src python3 scripts/fp8_probe.py [--shapes 4096x4096x4096,...] [--budget-ms 60]

Prints per shape and scale layout: torch ms, gemmlab ms, TFLOP/s of both, gemmlab x torch, and the relative
error of each against the float64 product of the dequantized inputs (verified before timing).
"""

from __future__ import annotations

import argparse

import torch

import gemmlab
from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved

SHAPES = "4096x4096x4096,8192x8192x8192,4096x7168x16384,8192x28672x8192,64x8192x8192,128x8192x8192,128x28672x8192"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--budget-ms", type=float, default=60.0)
    ap.add_argument("--layouts", default="tensor,row")
    args = ap.parse_args()
    print("| M × N × K | scales | torch ms | gemmlab ms | torch TFLOP/s | gemmlab TFLOP/s | gemmlab × torch | "
          "error torch / gemmlab |")
    print("|---" * 8 + "|")
    ratios = []
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        x = torch.randn(m, k, device="cuda")
        w = torch.randn(n, k, device="cuda") / k**0.5
        for layout in args.layouts.split(","):
            qa, sa = gemmlab.quantize(x, "e4m3", "tensor" if layout == "tensor" else "row")
            qw, sw = gemmlab.quantize(w, "e4m3", "tensor" if layout == "tensor" else "row")
            sa_t = sa.reshape(()) if layout == "tensor" else sa           # torch: 0-d scales per tensor
            sb_t = sw.reshape(()) if layout == "tensor" else sw.t()
            sb = sw.t().contiguous()
            ref = (qa.double() * sa.double()) @ (qw.double() * sw.double()).t()

            def theirs():
                return torch._scaled_mm(qa, qw.t(), scale_a=sa_t, scale_b=sb_t, out_dtype=torch.bfloat16)

            def ours():
                return gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb)

            errs = []
            for f in (theirs, ours):
                out = f().double()
                errs.append(float((out - ref).norm() / ref.norm()))
            assert errs[1] <= 1e-2, f"{shape} {layout}: gemmlab's rel. error {errs[1]:.2e}"
            del ref
            res = time_interleaved({"torch": TimedCall(theirs), "gemmlab": TimedCall(ours)},
                                   TimingOptions(budget_ms=2 * args.budget_ms, rounds=6))
            t, g = res["torch"].median_ms, res["gemmlab"].median_ms
            flops = 2.0 * m * n * k
            ratios.append(t / g)
            print(f"| {m} × {n} × {k} | {layout} | {t:.3f} | {g:.3f} | {flops / t / 1e9:.0f} | {flops / g / 1e9:.0f} | "
                  f"{t / g:.3f} | {errs[0]:.1e} / {errs[1]:.1e} |", flush=True)
    print(f"gemmlab x torch: worst {min(ratios):.3f}, best {max(ratios):.3f}")


if __name__ == "__main__":
    main()
