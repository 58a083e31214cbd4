"""8-bit products against torch._scaled_mm (cuBLASLt), side by side: e4m3 with one scale per tensor and with one
per row of A and per column of B, bf16 out, L2 flushed, interleaved, each call as a torch user makes it.
Layout "block" (1 x 128 blocks of A, 128 x 128 of B, which torch._scaled_mm refuses on the H100) is timed
against gemmlab's own per-tensor product and torch's per-tensor one, in the same run.

    PYTHONPATH=src python3 scripts/fp8_probe.py [--shapes 4096x4096x4096,...] [--budget-ms 60] [--layouts tensor,row,block]

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
    ap.add_argument("--block-variants", default="",
                    help="rung 15 parameter sets 'K=V,K=V;K=V' also timed with block scales (named parameters "
                         "complete the rung's defaults, not its choice)")
    ap.add_argument("--variants", default="",
                    help="rung 15 parameter sets 'K=V,K=V;K=V' also timed with per-tensor and per-row scales (named "
                         "parameters complete the rung's defaults, not its choice), × torch")
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
            if layout == "block":
                ratios.append(block(m, n, k, x, w, args.budget_ms, args.block_variants))
                continue
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
            calls = {"torch": TimedCall(theirs), "gemmlab": TimedCall(ours)}
            for v in filter(None, args.variants.split(";")):
                p = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in v.split(",")}
                try:  # (checked first: a set the rung refuses for this shape is named, not timed)
                    out = gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb, kernel="wgmma", **p).double()
                    e = float((out - ref).norm() / ref.norm())
                    assert e <= 1e-2, f"{shape} {layout} {v}: rel. error {e:.2e}"
                    calls[v] = TimedCall(lambda p=p: gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb, kernel="wgmma",
                                                                    **p))
                except ValueError as exc:
                    print(f"  {v}: {str(exc).splitlines()[0][:150]}")
            del ref
            res = time_interleaved(calls, TimingOptions(budget_ms=len(calls) * args.budget_ms, rounds=6))
            t, g = res["torch"].median_ms, res["gemmlab"].median_ms
            flops = 2.0 * m * n * k
            ratios.append(t / g)
            print(f"| {m} × {n} × {k} | {layout} | {t:.3f} | {g:.3f} | {flops / t / 1e9:.0f} | {flops / g / 1e9:.0f} | "
                  f"{t / g:.3f} | {errs[0]:.1e} / {errs[1]:.1e} |"
                  + "".join(f" {v}: {t / res[v].median_ms:.3f} |" for v in calls if v not in ("torch", "gemmlab")),
                  flush=True)
    print(f"gemmlab x torch: worst {min(ratios):.3f}, best {max(ratios):.3f}")


def block(m, n, k, x, w, budget_ms, variants="") -> float:
    """Block scales (x: 1 x 128, w: 128 x 128) beside gemmlab's and torch's per-tensor products on the same
    shape; returns block x torch's per-tensor time. Errors against float64 of each's dequantized inputs."""
    qa, sa = gemmlab.quantize(x, "e4m3", "1x128")
    qw, sw = gemmlab.quantize(w, "e4m3", "128x128")
    ta, tsa = gemmlab.quantize(x, "e4m3", "tensor")
    tw, tsw = gemmlab.quantize(w, "e4m3", "tensor")
    sb = sw.t()

    def ours_block():
        return gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb)

    def ours_tensor():
        return gemmlab.matmul(ta, tw.t(), scale_a=tsa, scale_b=tsw)

    def theirs():
        return torch._scaled_mm(ta, tw.t(), scale_a=tsa.reshape(()), scale_b=tsw.reshape(()), out_dtype=torch.bfloat16)

    ref = gemmlab.dequantize(qa, sa).double() @ gemmlab.dequantize(qw, sw).double().t()
    err = float((ours_block().double() - ref).norm() / ref.norm())
    err32 = float((gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb, out_dtype="float32").double() - ref).norm()
                  / ref.norm())
    del ref
    ref = (ta.double() * tsa.double()) @ (tw.double() * tsw.double()).t()
    err_t = float((gemmlab.matmul(ta, tw.t(), scale_a=tsa, scale_b=tsw, out_dtype="float32").double() - ref).norm()
                  / ref.norm())
    del ref
    assert err <= 1e-2, f"{m}x{n}x{k} block: rel. error {err:.2e}"
    calls = {"torch": TimedCall(theirs), "tensor": TimedCall(ours_tensor), "block": TimedCall(ours_block)}
    for v in filter(None, variants.split(";")):
        p = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in v.split(",")}
        got = gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb, kernel="wgmma", out_dtype="float32", **p)
        ref = gemmlab.dequantize(qa, sa).double() @ gemmlab.dequantize(qw, sw).double().t()
        err_v = float((got.double() - ref).norm() / ref.norm())
        del ref, got
        assert err_v <= 1e-3, f"{m}x{n}x{k} block {v}: rel. error {err_v:.2e}"
        calls[v] = TimedCall(lambda p=p: gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb, kernel="wgmma", **p))
    res = time_interleaved(calls, TimingOptions(budget_ms=len(calls) * budget_ms, rounds=6))
    t, pt, b = res["torch"].median_ms, res["tensor"].median_ms, res["block"].median_ms
    flops = 2.0 * m * n * k
    print(f"| {m} × {n} × {k} | block | {t:.3f} (per tensor) | {b:.3f} (per tensor {pt:.3f}) | {flops / t / 1e9:.0f} | "
          f"{flops / b / 1e9:.0f} (per tensor {flops / pt / 1e9:.0f}) | {t / b:.3f} (block × own per tensor "
          f"{pt / b:.3f}) | fp32 out: block {err32:.1e}, per tensor {err_t:.1e}; bf16 out {err:.1e} |"
          + "".join(f" {v}: × own per tensor {pt / res[v].median_ms:.3f} |" for v in filter(None, variants.split(";"))),
          flush=True)
    return t / b


if __name__ == "__main__":
    main()
