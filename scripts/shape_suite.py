"""The shape suite: kernel="auto" against cuBLAS (torch.matmul) on the shapes people run, FP32 (TF32 off) and
BF16, side by side in one run, L2 flushed, each call as a torch user makes it (a new output each call).

    PYTHONPATH=src python3 scripts/shape_suite.py [--dtypes bfloat16,float32] [--quick] [--only llm]

45 shapes in five groups: square 512 ... 16384; sizes that are not multiples of a tile; LLM projections
(QKV, up / gate, down) for hidden sizes 2048-8192 and intermediate sizes 5504-28672 at 1 ... 16384 tokens
(B as a linear layer's weight, W.t()); K much larger than M x N; M x N much larger than K. Every result is
verified against a float64 product before it is timed. Prints one row per shape and dtype, then per dtype
the geometric mean of cuBLAS time / gemmlab time and the worst shape.
"""

from __future__ import annotations

import argparse
import math

SQUARE = [(s, s, s) for s in (512, 1024, 2048, 4096, 8192, 16384)]
ODD = [(1000, 1000, 1000), (3000, 3000, 3000), (4097, 4097, 4097), (6000, 6000, 6000), (1000, 3001, 2000),
       (2047, 2049, 1023), (5000, 3000, 1234)]
# (hidden, intermediate) and the token counts each is run at: up / gate (T x inter x hidden) and down
# (T x hidden x inter); QKV (T x 3 hidden x hidden) for one model.
MODELS = {(2048, 5504): (16, 2048), (4096, 11008): (1, 16, 128, 2048, 16384), (5120, 13824): (64, 8192),
          (8192, 28672): (1, 128, 4096)}
LONG_K = [(256, 256, 65536), (512, 512, 16384), (128, 4096, 16384), (64, 64, 131072)]
WIDE = [(16384, 16384, 256), (4096, 4096, 512), (8192, 8192, 1024)]


def llm_shapes() -> list[tuple[int, int, int]]:
    out = []
    for (hidden, inter), tokens in MODELS.items():
        for t in tokens:
            out += [(t, inter, hidden), (t, hidden, inter)]
    out.append((4096, 3 * 4096, 4096))
    return out


GROUPS = {"square": SQUARE, "odd": ODD, "llm": llm_shapes(), "long_k": LONG_K, "wide": WIDE}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--only", default="", help="groups, comma-separated: " + ", ".join(GROUPS))
    ap.add_argument("--quick", action="store_true", help="every third shape")
    ap.add_argument("--budget-ms", type=float, default=40.0)
    args = ap.parse_args()

    import torch

    import gemmlab
    from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    groups = args.only.split(",") if args.only else list(GROUPS)
    cases = [(g, s) for g in groups for s in GROUPS[g]]
    if args.quick:
        cases = cases[::3]
    print("| dtype | group | M | N | K | B | torch ms | gemmlab ms | gemmlab TFLOP/s | x cuBLAS | rel. error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for dt_name in args.dtypes.split(","):
        dt = getattr(torch, dt_name)
        tol = 1e-5 if dt_name == "float32" else 1e-2
        ratios = []
        for group, (m, n, k) in cases:
            gen = torch.Generator(device="cuda")
            gen.manual_seed(m * 7 + n * 13 + k)
            a = (torch.rand(m, k, device="cuda", generator=gen) * 2 - 1).to(dt)
            weight = group == "llm"
            b = ((torch.rand(n, k, device="cuda", generator=gen) * 2 - 1).to(dt).t() if weight
                 else (torch.rand(k, n, device="cuda", generator=gen) * 2 - 1).to(dt))
            ref = a.double() @ b.double()
            got = gemmlab.matmul(a, b)
            err = ((got.double() - ref).norm() / ref.norm()).item()
            layout = "W.t()" if weight else "K x N"
            if not err < tol:
                print(f"| {dt_name} | {group} | {m} | {n} | {k} | {layout} | | | | FAILED | {err:.1e} |", flush=True)
                ratios.append((0.0, (m, n, k)))
                continue
            del ref
            res = time_interleaved({"torch": TimedCall(lambda: torch.matmul(a, b)),
                                    "gemmlab": TimedCall(lambda: gemmlab.matmul(a, b))},
                                   TimingOptions(budget_ms=2 * args.budget_ms, rounds=4))
            t, o = res["torch"].median_ms, res["gemmlab"].median_ms
            ratios.append((t / o, (m, n, k)))
            print(f"| {dt_name} | {group} | {m} | {n} | {k} | {layout} | {t:.4f} | {o:.4f} | "
                  f"{2 * m * n * k / o / 1e9:.1f} | {t / o:.3f} | {err:.1e} |", flush=True)
        ok = [r for r, _ in ratios if r > 0]
        geo = math.exp(sum(math.log(r) for r in ok) / len(ok)) if ok else 0.0
        worst = min(ratios)
        summary[dt_name] = (geo, worst, len(ratios))
    for dt_name, (geo, worst, count) in summary.items():
        print(f"{dt_name}: {count} shapes, geometric mean x cuBLAS {geo:.3f}, worst {worst[0]:.3f} at "
              f"{' x '.join(map(str, worst[1]))}")


if __name__ == "__main__":
    main()
