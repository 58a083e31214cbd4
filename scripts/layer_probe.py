"""Fused linear layers against torch eager, side by side: up / gate projections act(x W^T + b) and down
projections x W^T + R (the residual), on LLM shapes, BF16, L2 flushed, each call as a torch user makes it.

    PYTHONPATH=src python3 scripts/layer_probe.py [--tokens 2048,4096] [--variants "DEFER=0" ...]

Columns: torch eager (matmul, then the epilogue as separate kernels), gemmlab's plain product + torch's
epilogue, gemmlab fused; the ratios fused / eager and fused / (plain + torch's epilogue). --variants times the
fused call with rung 15 parameters over its heuristic (to find where a fused call loses).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import gemmlab
from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved

# (hidden, intermediate) of common model families: the up projection is tokens x inter x hidden, the down
# projection tokens x hidden x inter.
MODELS = [(4096, 11008), (4096, 14336), (5120, 13824), (8192, 28672)]
ACTS = {"silu": F.silu, "gelu_tanh": lambda z: F.gelu(z, approximate="tanh")}


def _named(p: dict) -> dict:
    """Parameters of rung 15 go with its name (kernel="auto" takes none)."""
    return {"kernel": "wgmma", **p} if p else {}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="2048,4096")
    ap.add_argument("--models", default="", help="HIDDENxINTER,... instead of the built-in list")
    ap.add_argument("--acts", default="silu,gelu_tanh")
    ap.add_argument("--no-down", action="store_true")
    ap.add_argument("--no-up", action="store_true")
    ap.add_argument("--variants", nargs="*", default=[])
    ap.add_argument("--budget-ms", type=float, default=60.0)
    args = ap.parse_args()
    models = [tuple(int(v) for v in s.split("x")) for s in args.models.split(",")] if args.models else MODELS
    print("| layer | M × N × K | eager ms | plain+torch ms | fused ms | fused × eager | fused × (plain+torch) |"
          + "".join(f" {v} × eager |" for v in args.variants))
    print("|---" * (7 + len(args.variants)) + "|")
    worst = []
    for tokens in (int(t) for t in args.tokens.split(",")):
        for hidden, inter in models:
            cases = [] if args.no_up else [(f"up {a}", tokens, inter, hidden, a) for a in args.acts.split(",")]
            if not args.no_down:
                cases.append(("down + residual", tokens, hidden, inter, None))
            for label, m, n, k, act in cases:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
                b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
                r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
                bias32 = b.float()
                if act:
                    f = ACTS[act]
                    eager = lambda: f(torch.matmul(x, w.t()) + b)
                    plain = lambda: f(gemmlab.matmul(x, w.t()) + b)
                    fused = lambda p={}: gemmlab.matmul(x, w.t(), bias=bias32, activation=act, **_named(p))
                else:
                    eager = lambda: torch.matmul(x, w.t()) + r
                    plain = lambda: gemmlab.matmul(x, w.t()) + r
                    fused = lambda p={}: gemmlab.matmul(x, w.t(), residual=r, **_named(p))
                ref = eager().float()
                got = fused().float()
                err = ((got - ref).norm() / ref.norm()).item()
                assert err < 2e-2, f"{label} {m}x{n}x{k}: rel. error {err:.2e} against eager"
                calls = {"eager": TimedCall(eager), "plain": TimedCall(plain), "fused": TimedCall(fused)}
                for v in args.variants:
                    given = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in v.split(",") if kv}
                    base = gemmlab.api.explain_choice("bfloat16", shape=(m, n, k), cc=(9, 0), sm_count=132,
                                                      kernel="wgmma", out_dtype="bfloat16", activation=act,
                                                      b_kmajor=True).params
                    p = {q: base[q] for q in ("BM", "BN", "STAGES", "HELD", "SCHEDULE", "GROUP_M", "CLUSTER", "DEFER")}
                    p.update(given)
                    fused(p)
                    calls[v] = TimedCall(lambda p=p: fused(p))
                res = time_interleaved(calls, TimingOptions(budget_ms=args.budget_ms * len(calls), rounds=6))
                e, pl, fu = res["eager"].median_ms, res["plain"].median_ms, res["fused"].median_ms
                worst.append(pl / fu)
                extra = "".join(f" {e / res[v].median_ms:.3f} |" for v in args.variants)
                print(f"| {label} | {m} × {n} × {k} | {e:.3f} | {pl:.3f} | {fu:.3f} | {e / fu:.3f} | {pl / fu:.3f} |"
                      + extra, flush=True)
    print(f"fused × (plain + torch's epilogue): worst {min(worst):.3f}")


if __name__ == "__main__":
    main()
