"""Strict fp32 with a transposed weight (y = x @ W.t()) at 32-512 tokens: kernel="auto" (which computes
C^T = W x^T where dispatch.computes_transposed says so) against rung 10 named (which copies W^T first) and
torch.matmul (cuBLAS, TF32 off), checked first, then timed interleaved with the L2 flushed.

    PYTHONPATH=src python3 scripts/transposed_probe.py [--budget-ms 40]
"""

from __future__ import annotations

import argparse

SHAPES = [(m, n, k) for m in (48, 64, 128, 256, 512) for n, k in ((11008, 4096), (4096, 11008))] + [
    (64, 13824, 5120), (64, 5120, 13824), (128, 28672, 8192), (128, 8192, 28672)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-ms", type=float, default=40.0)
    args = ap.parse_args()
    import torch

    import gemmlab
    from gemmlab import api
    from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved

    torch.backends.cuda.matmul.allow_tf32 = False
    for m, n, k in SHAPES:
        x = torch.randn(m, k, device="cuda")
        w = torch.randn(n, k, device="cuda")
        ref = x.double() @ w.double().t()
        scale = ref.abs().max().item()
        for kernel in ("auto", "sgemm"):
            err = (gemmlab.matmul(x, w.t(), kernel=kernel).double() - ref).abs().max().item() / scale
            assert err < 1e-5, (m, n, k, kernel, err)
        swapped = list(api.call._plans.values())[-2].transposed
        t = time_interleaved({"torch": TimedCall(lambda: torch.matmul(x, w.t()), graph=False),
                              "auto": TimedCall(lambda: gemmlab.matmul(x, w.t()), graph=False),
                              "sgemm": TimedCall(lambda: gemmlab.matmul(x, w.t(), kernel="sgemm"), graph=False)},
                             TimingOptions(budget_ms=args.budget_ms))
        base = t["torch"].median_ms
        print(f"{m}x{n}x{k} W.t(): torch {base * 1e3:.1f} us; auto{' (C^T = W x^T)' if swapped else ''} "
              f"x{base / t['auto'].median_ms:.3f}; sgemm (W^T copied) x{base / t['sgemm'].median_ms:.3f}", flush=True)


if __name__ == "__main__":
    main()
