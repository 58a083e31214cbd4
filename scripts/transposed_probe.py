"""Strict fp32 with a transposed weight (y = x @ W.t()): kernel="auto" (rung 10 reading W in place) and rung
10 with named tiles and splits against torch.matmul (cuBLAS, TF32 off), each checked against a float64
product first, then timed interleaved with the L2 flushed. The named sets are compiled first, in parallel.

    PYTHONPATH=src python3 scripts/transposed_probe.py [--budget-ms 60] [--shapes MxNxK,...]
        [--variants "tile,SPLIT_K=V;tile;copy"]   (tile: 128x256, 128x128, 128x64 or 64x64, as rung 10's
        classes; copy: kernel="auto" on W^T copied into a row-major B, the copy timed with it)
"""

from __future__ import annotations

import argparse

SHAPES = [(128, 11008, 4096), (64, 13824, 5120), (64, 5120, 13824), (128, 4096, 11008), (48, 11008, 4096),
          (128, 28672, 8192), (128, 8192, 28672), (256, 11008, 4096), (512, 11008, 4096), (2048, 5504, 2048),
          (2048, 2048, 5504), (2048, 11008, 4096)]
TILES = {"128x256": dict(BM=128, BN=256, BK=8, WM=128, WN=32, TM=16, TN=8, MIN_BLOCKS=1),
         "128x128": dict(BM=128, BN=128, BK=16, WM=64, WN=32, TM=8, TN=8, MIN_BLOCKS=2),
         "128x64": dict(BM=128, BN=64, BK=16, WM=64, WN=32, TM=8, TN=8, MIN_BLOCKS=3),
         "64x64": dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, MIN_BLOCKS=5)}


def parse_variants(text: str) -> list[tuple[str, dict[str, int]]]:
    out = []
    for var in filter(None, text.split(";")):
        if var == "copy":
            continue
        tile, *rest = var.split(",")
        params = dict(TILES[tile])
        params.update({k: int(v) for k, v in (p.split("=") for p in rest if p)})
        out.append((var, params))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-ms", type=float, default=60.0)
    ap.add_argument("--shapes", default="")
    ap.add_argument("--variants", default="")
    args = ap.parse_args()
    import torch

    import gemmlab
    from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved
    from gemmlab.kernels import get
    from gemmlab.runtime import device
    from gemmlab.tune.search import precompile

    torch.backends.cuda.matmul.allow_tf32 = False
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    variants = parse_variants(args.variants)
    spec = get("sgemm")
    full = [spec.validate({"REDUCE": 2 if p.get("SPLIT_K", 1) >= 4 and p.get("WAVE", 1) == 1 else 1, **p,
                           "B_LAYOUT": 2, "BATCHED": 0})
            for _, p in variants]
    precompile(spec, full, device.device_info().arch)
    for m, n, k in shapes:
        x = torch.rand(m, k, device="cuda") * 2 - 1
        w = torch.rand(n, k, device="cuda") * 2 - 1
        ref = x.double() @ w.double().t()
        scale = ref.abs().max().item()
        calls = {"torch": TimedCall(lambda: torch.matmul(x, w.t()), graph=False),
                 "auto": TimedCall(lambda: gemmlab.matmul(x, w.t()), graph=False)}
        for (label, _), p in zip(variants, full):
            kw = {name: p[name] for name in spec.defaults if name not in ("B_LAYOUT", "BATCHED")}
            err = (gemmlab.matmul(x, w.t(), kernel="sgemm", **kw).double() - ref).abs().max().item() / scale
            assert err < 1e-5, (m, n, k, label, err)
            calls[label] = TimedCall(lambda kw=kw: gemmlab.matmul(x, w.t(), kernel="sgemm", **kw), graph=False)
        if "copy" in args.variants.split(";"):  # W^T copied to a row-major B first, as a call without B_LAYOUT did
            calls["copy"] = TimedCall(lambda: gemmlab.matmul(x, w.t().contiguous()), graph=False)
        err = (gemmlab.matmul(x, w.t()).double() - ref).abs().max().item() / scale
        assert err < 1e-5, (m, n, k, "auto", err)
        from gemmlab import api

        auto = api.explain_choice("float32", shape=(m, n, k), info=device.device_info(), b_kmajor=True).params
        t = time_interleaved(calls, TimingOptions(budget_ms=args.budget_ms))
        base = t["torch"].median_ms
        pick = f"{auto['BM']}x{auto['BN']} split {auto['SPLIT_K']}"
        pick += f" wave {auto['WAVE']}" if auto["WAVE"] > 1 else ""
        print(f"{m}x{n}x{k} W.t(): torch {base * 1e3:.1f} us; auto ({pick}) x{base / t['auto'].median_ms:.3f}; "
              + "; ".join(f"{name} x{base / v.median_ms:.3f}" for name, v in t.items()
                          if name not in ("torch", "auto")),
              flush=True)


if __name__ == "__main__":
    main()
