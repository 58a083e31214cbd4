"""Grouped products (mixture-of-experts layers) against torch on the GPU, side by side (interleaved, L2
flushed): the built-in shapes (bench.grouped.SHAPES) with uniform and skewed group sizes, BF16 and e4m3,
through `gemmlab bench --grouped`'s measurement (bench.grouped.measure). One line per problem, the ratios to
torch's grouped product, torch.bmm (equal groups) and the loop last.

    PYTHONPATH=src python scripts/grouped_probe.py [--dtype bfloat16,float8_e4m3fn] [--budget 200]
        [--spread uniform,skewed] [--shapes G:T:N:K,...] [--variants]
"""

import argparse

from gemmlab.bench import grouped as gp

VARIANTS = [{}, {"CLUSTER": 1}, {"BN": 128}, {"BN": 128, "CLUSTER": 1}, {"BN": 192},
            {"SCHEDULE": 2, "BN": 128, "STAGES": 5, "HELD": 2},
            {"SCHEDULE": 2, "BN": 128, "STAGES": 5, "HELD": 2, "CLUSTER": 1},
            {"BM": 64, "BN": 256, "SCHEDULE": 2, "STAGES": 4, "HELD": 2, "CLUSTER": 1}, {"GROUP_M": 4}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16,float8_e4m3fn")
    ap.add_argument("--budget", type=float, default=200.0)
    ap.add_argument("--spread", default="uniform,skewed")
    ap.add_argument("--shapes", default="", help="G:T:N:K,... instead of the built-in shapes")
    ap.add_argument("--variants", action="store_true", help="rung 15's tilings against torch's grouped product")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split(":")) for s in args.shapes.split(",") if s] or gp.SHAPES
    if args.variants:
        for dtype in args.dtype.split(","):
            for g, t, n, k in shapes:
                for spread in args.spread.split(","):
                    variants(gp.Problem(g, t, n, k, dtype, spread), VARIANTS, args.budget)
        return
    rows = []
    for dtype in args.dtype.split(","):
        for g, t, n, k in shapes:
            for spread in args.spread.split(","):
                p = gp.Problem(g, t, n, k, dtype, spread)
                res = gp.measure(p, budget_ms=args.budget)
                by = {r.kernel: r for r in res.records}
                gl = next(r for r in res.records if r.family == "gpu")
                if not gl.ok:
                    rows.append(f"{p.describe()}: gemmlab {gl.status} {gl.note}")
                    print(rows[-1], flush=True)
                    continue
                parts = [f"{dtype[:8]:8s} G={g:3d} T={t:5d} N={n:5d} K={k:5d} {spread:7s} "
                         f"{gl.median_ms * 1e3:8.1f} us {gl.tflops:6.0f} TF"]
                for key, name in ((gp.GROUPED_MM, "grouped"), (gp.BMM, "bmm"), (gp.LOOP, "loop")):
                    r = by.get(key)
                    if r is not None and r.ok:
                        parts.append(f"{name} {r.tflops:5.0f} TF x{r.median_ms / gl.median_ms:.3f}")
                    elif r is not None:
                        parts.append(f"{name} {r.status}: {r.note[:60]}")
                rows.append(" | ".join(parts))
                print(rows[-1], flush=True)
    print("\n".join(["", "summary (x: the peer's time over gemmlab's)"] + rows))


def variants(problem, configs, budget):
    """gemmlab's grouped call with each parameter set (and kernel="auto") against torch's grouped product on the
    same operands (bench.grouped.build), each checked on its sampled rows first, then all timed interleaved."""
    import torch

    import gemmlab
    from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved

    calls, ref = gp.build(problem, torch, gemmlab)
    ours, peer = calls[0], next((c for c in calls if c.kernel == gp.GROUPED_MM), None)
    if peer is None:
        print(f"{problem.describe()}: no torch grouped product here")
        return
    timed = {"torch": TimedCall(peer.fn, graph=False), "auto": TimedCall(ours.fn, graph=False)}
    for i, cfg in enumerate(configs):
        fn = ours.with_params(kernel="wgmma", **cfg)
        try:
            out = fn()
        except Exception as exc:  # noqa: BLE001  (a set this shape cannot take: said, not timed)
            print(f"  {cfg}: {type(exc).__name__}: {str(exc)[:100]}")
            continue
        rows = torch.as_tensor(gp.sample_rows(problem.sizes()), device=ref.device)
        err = float((out[rows].double() - ref).norm() / ref.norm())
        if not err < 2e-2:
            print(f"  {cfg}: relative error {err:.2e}")
            continue
        timed[f"v{i}"] = TimedCall(fn, graph=False)
    t = time_interleaved(timed, TimingOptions(budget_ms=budget))
    b = t["torch"].median_ms
    print(f"{problem.describe()}: torch {b * 1e3:.1f} us; " + "; ".join(
        f"{name}{'' if name == 'auto' else ' ' + str(configs[int(name[1:])])} x{b / v.median_ms:.3f}"
        for name, v in t.items() if name != "torch"), flush=True)


if __name__ == "__main__":
    main()
