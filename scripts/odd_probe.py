"""Rung 12's tilings on the suite's odd sizes (BF16), against torch.matmul, interleaved, L2 flushed: which
tile shape, cluster and schedule each size wants, beside what kernel="auto" picks.

    PYTHONPATH=src python scripts/odd_probe.py [--budget 100]
"""

import argparse

VARIANTS = [{}, {"CLUSTER": 1}, {"BN": 128}, {"BN": 128, "CLUSTER": 1}, {"BM": 256, "BN": 128},
            {"SCHEDULE": 2, "BN": 128, "STAGES": 5, "HELD": 2}, {"SCHEDULE": 2, "BN": 128, "STAGES": 5, "HELD": 2,
                                                                  "CLUSTER": 1}]
ODD = [(1000, 1000, 1000), (3000, 3000, 3000), (4097, 4097, 4097), (6000, 6000, 6000), (1000, 3001, 2000),
       (2047, 2049, 1023), (5000, 3000, 1234)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=100.0)
    args = ap.parse_args()
    import torch

    import gemmlab
    from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved

    for m, n, k in ODD:
        a = (torch.rand(m, k, device="cuda") * 2 - 1).to(torch.bfloat16)
        b = (torch.rand(k, n, device="cuda") * 2 - 1).to(torch.bfloat16)
        ref = a.float() @ b.float()
        calls = {"torch": TimedCall(lambda: torch.matmul(a, b), graph=False),
                 "auto": TimedCall(lambda: gemmlab.matmul(a, b), graph=False)}
        for i, cfg in enumerate(VARIANTS):
            try:
                got = gemmlab.matmul(a, b, kernel="wgmma", **cfg)
            except Exception as exc:  # noqa: BLE001
                print(f"  {cfg}: {type(exc).__name__}: {str(exc)[:100]}")
                continue
            assert torch.allclose(got.float(), ref, rtol=2e-2, atol=5e-1), cfg
            calls[f"v{i}"] = TimedCall(lambda cfg=cfg: gemmlab.matmul(a, b, kernel="wgmma", **cfg), graph=False)
        t = time_interleaved(calls, TimingOptions(budget_ms=args.budget))
        base = t["torch"].median_ms
        print(f"{m}x{n}x{k}: torch {base * 1e3:.1f} us; " + "; ".join(
            f"{name}{'' if name == 'auto' else ' ' + str(VARIANTS[int(name[1:])])} x{base / v.median_ms:.3f}"
            for name, v in t.items() if name != "torch"), flush=True)


if __name__ == "__main__":
    main()
