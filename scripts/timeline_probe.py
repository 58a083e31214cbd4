"""Where rung 15's time goes, per phase, from its traced build (GPU): analysis.timeline over shapes and
parameter variants; one table last. Segments go to $OUT (or --out) as JSON for plots.

    PYTHONPATH=src python3 scripts/timeline_probe.py --shapes 4096 8192 --variants "" "HELD=2"
"""

import argparse
import json
import os

import torch

from gemmlab.analysis import timeline

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", nargs="+", default=["4096", "8192"], help="N (cube) or MxNxK")
ap.add_argument("--variants", nargs="+", default=[""], help="parameter sets, 'A=1,B=2' ('' for the defaults)")
ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
ap.add_argument("--acts", nargs="*", default=[], help="also a fused column bias + these activations ('none': the bias alone)")
ap.add_argument("--repeat", type=int, default=2, help="traced launches per case (each summarised)")
ap.add_argument("--flop-per-clock", type=float, default=4096.0, help="the SM's dense peak per clock (H100 bf16: 4096)")
ap.add_argument("--out", default=os.environ.get("OUT", "."))
args = ap.parse_args()

torch.backends.cuda.matmul.allow_tf32 = False
dt = getattr(torch, args.dtype)
rows = []
for shape in args.shapes:
    m, n, k = (int(x) for x in shape.split("x")) if "x" in shape else (int(shape),) * 3
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", generator=g).to(dt)
    b = torch.randn(k, n, device="cuda", generator=g).to(dt)
    c = torch.empty(m, n, device="cuda", dtype=dt)
    for var in args.variants:
        params = {kk: int(v) for kk, v in (p.split("=") for p in var.split(",") if p)}
        cases = [("plain", {})]
        bias = torch.randn(n, device="cuda")
        for act in args.acts:
            cases.append(("bias" if act == "none" else act, dict(bias=bias, activation=None if act == "none" else act)))
        for label, kw in cases:
            for r in range(args.repeat):
                tl = timeline.record(a, b, c, **kw, **params)
                s = timeline.summarise(tl, flop_per_clock=args.flop_per_clock)
                ref = torch.matmul(a.float(), b.float())
                if kw:
                    ref = ref + kw["bias"]
                    ref = {"relu": torch.relu, "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
                           "gelu_erf": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}.get(label, lambda x: x)(ref)
                err = float((c.float() - ref).norm() / ref.norm())
                if label.startswith("gelu"):  # also the worst element against float64, relative to its row's scale
                    ref64 = (a.double() @ b.double()) + kw["bias"].double()
                    ref64 = torch.nn.functional.gelu(ref64, approximate="tanh" if label == "gelu_tanh" else "none")
                    worst = float(((c.double() - ref64).abs() / (ref64.abs() + 1e-2)).max())
                    print(f"{m}x{n}x{k} {var} {label}: worst elementwise |err| / (|ref| + 0.01) = {worst:.2e}")
                name = f"{m}x{n}x{k} {var or 'defaults'} {label} #{r}"
                if "epilogue_detail" in s:
                    print(name, "epilogue (cycles):", " ".join(f"{kk} {v:.0f}" for kk, v in s["epilogue_detail"].items()))
                rows.append((name, s, err))
                with open(os.path.join(args.out, f"timeline_{m}x{n}x{k}_{var or 'defaults'}_{label}_{r}.json".replace(",", "_").replace("=", "")), "w") as f:
                    json.dump({"summary": s, "segments": timeline.segments(tl)}, f)
                # per round of units: when the blocks began it (spread over SMs) and its main loop's cycles
                if r == 0:
                    seg = timeline.segments(tl)
                    by_unit = {}
                    for x in seg:
                        if x["consumer"] == 0:
                            by_unit.setdefault(x["unit"], []).append(x)
                    line = []
                    for u in sorted(by_unit)[:6]:
                        xs = by_unit[u]
                        beg = [x["begin"] for x in xs]
                        main = sorted(x["main_end"] - x["data"] for x in xs)
                        epi = sorted(x["epilogue_end"] - x["main_end"] for x in xs)
                        line.append(f"u{u}: n={len(xs)} begin {min(beg):.1f}-{max(beg):.1f} us, main {main[len(main)//2]:.2f} us, "
                                    f"epi {epi[len(epi)//2]:.2f} us, data wait {sorted(x['data']-x['begin'] for x in xs)[len(xs)//2]:.2f} us")
                    print(name, "params", s["params"])
                    print("   " + "\n   ".join(line))

print()
hdr = f"{'case':44s} {'us':>7s} {'GHz':>5s} " + " ".join(f"{p[:5]:>6s}" for p in timeline.PHASES) + f" {'cyc/k':>6s} {'eff':>5s} {'acct':>5s} {'err':>8s}"
print(hdr)
for name, s, err in rows:
    sh = s["phases_share"]
    print(f"{name:44s} {s['duration_us']:7.1f} {s['clock_ghz']:5.2f} " + " ".join(f"{100 * sh[p]:5.1f}%" for p in timeline.PHASES)
          + f" {s['main_cycles_per_kstep']:6.0f} {s.get('main_efficiency', 0):5.3f} {s['accounted']:5.3f} {err:8.1e}")
