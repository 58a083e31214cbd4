"""Parameter sets of the GPU rungs against kernel="auto" and torch.matmul (cuBLAS) on chosen BF16 shapes, each
checked against a float64 product first, then timed interleaved with the L2 flushed; one line of ratios to torch
per shape (x > 1: faster than torch). Groups:
- "split": long K on a small C (rung 15's split over K, rung 16);
- "tiles": rung 15's tiles on odd, square and wide shapes;
- "small": tiles, splits and ring depths of M <= 128 products that stream B;
- "narrow": 64-column tiles on M <= 128 products, unsplit (two ring depths) and split in two or four, against
  `auto`;
- "narrow_long": M <= 128 with a long K: unsplit 64 x 64 tiles against the 64 x 128 split;
- "m128": the shape suite's rows with M <= 128 and N, K >= 4096, kernel="auto" alone;
- "fp32": rung 10's tile classes in strict fp32, TF32 off on both sides;
- "fp32_rows": strict fp32 with N off a multiple of 4: C written through shared memory (`auto`) against the
  same parameters with C_STAGE = 0, and with 64 x 64 tiles (five blocks an SM);
- "sum": rung 15's split as the heuristic sets it, its slices summed by the second launch (SPLIT_SUM 2) and by
  each tile's last unit (SPLIT_SUM 1, up to four slices), and twice the slices.
Named parameter sets complete the rung's defaults, not the heuristic's choice.

    PYTHONPATH=src python3 scripts/split_probe.py [--groups split,tiles] [--budget-ms 40]
"""

from __future__ import annotations

import argparse

from gemmlab.bench import suite

# rung 10's tiles: the four shape classes' and one of eight warps (32 x 32 warp tiles) on 128 x 64
T128x128 = dict(BM=128, BN=128, BK=16, WM=64, WN=32, TM=8, TN=8)
T128x64 = dict(BM=128, BN=64, BK=16, WM=64, WN=32, TM=8, TN=8)
T128x64_8W = dict(BM=128, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8)
T64x128 = dict(BM=64, BN=128, BK=16, WM=32, WN=64, TM=8, TN=8)
T64x64 = dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8)
# Two warps of 64 x 64 with the largest class's 16 x 8 per thread: its LDS per FFMA (6 per 128) on a small
# tile (sass_mix: 0.85 and 0.87 FFMA per scheduled cycle for one warp, against 0.83 for T128x64).
T128x64_2W = dict(BM=128, BN=64, BK=8, WM=64, WN=64, TM=16, TN=8)
T64x128_2W = dict(BM=64, BN=128, BK=8, WM=64, WN=64, TM=16, TN=8)
SG = dict(GROUP_M=8, ORDER=4, STAGES=3, WAVE=1)

# (M, N, K, B given as a weight's transpose, [(kernel, params), ...])
PP = dict(BM=64, BN=128, SCHEDULE=2, STAGES=6, HELD=2, CLUSTER=1)
PP192 = dict(BM=64, BN=192, SCHEDULE=2, STAGES=5, HELD=2, CLUSTER=1)
PP256 = dict(BM=64, BN=256, SCHEDULE=2, STAGES=4, HELD=2, CLUSTER=1)
NP = dict(BM=64, BN=64, SCHEDULE=2, HELD=2, CLUSTER=1)  # 64 x 64 ping-pong tiles
CASES = {"split": [
    (64, 64, 131072, False, [("wgmma", dict(PP, SPLIT_K=64)), ("wgmma", dict(PP, SPLIT_K=128)),
                             ("wgmma", dict(BN=128, CLUSTER=1, SPLIT_K=128)), ("skinny", {})]),
    (256, 256, 65536, False, [("wgmma", dict(BN=128, CLUSTER=1, SPLIT_K=s)) for s in (16, 32)] + [("skinny", {})]),
    (512, 512, 16384, False, [("wgmma", dict(BN=128, CLUSTER=1, SPLIT_K=s)) for s in (1, 4, 8, 16)]),
    (128, 4096, 16384, False, [("wgmma", dict(BN=128, CLUSTER=1, SPLIT_K=s)) for s in (1, 2, 4)] + [("skinny", {})]),
    (128, 4096, 11008, True, [("wgmma", dict(BN=128, CLUSTER=1, SPLIT_K=s)) for s in (1, 2, 4)]),
    (64, 5120, 13824, True, [("wgmma", dict(BN=128, CLUSTER=1, SPLIT_K=s)) for s in (1, 2)]),
    (512, 512, 16384, False, [("wgmma", dict(PP, SPLIT_K=s)) for s in (2, 4)]),
], "tiles": [
    (3000, 3000, 3000, False, [("wgmma", d) for d in (dict(BN=192, CLUSTER=1), dict(BN=128), dict(
        BN=128, SCHEDULE=2, STAGES=5, HELD=2), dict(BM=256, BN=128, STAGES=3))]),
    (6000, 6000, 6000, False, [("wgmma", d) for d in (dict(BN=192, CLUSTER=1), dict(BN=128))]),
    (2048, 2048, 2048, False, [("wgmma", d) for d in (dict(BN=192, CLUSTER=1), dict(BN=256, CLUSTER=1), dict(
        BM=64, BN=256, SCHEDULE=2, STAGES=4, HELD=2, CLUSTER=1), dict(BM=64, BN=192, SCHEDULE=2, STAGES=5, HELD=2,
                                                                        CLUSTER=1))]),
    (1000, 1000, 1000, False, [("wgmma", d) for d in (dict(BM=64, BN=128, SCHEDULE=2, STAGES=6, HELD=2, CLUSTER=1),
                                                      dict(BN=192, CLUSTER=1), dict(BM=64, BN=192, SCHEDULE=2,
                                                                                    STAGES=5, HELD=2, CLUSTER=1))]),
    (16384, 16384, 256, False, [("wgmma", d) for d in (dict(BM=64, BN=256, SCHEDULE=2, STAGES=4, HELD=2, CLUSTER=1),
                                                       dict(BN=256, CLUSTER=1), dict(BN=128, SCHEDULE=2, STAGES=3,
                                                                                     HELD=2, CLUSTER=1))]),
    (512, 512, 512, False, [("wgmma", d) for d in (dict(BM=64, BN=128, SCHEDULE=2, STAGES=4, HELD=2, CLUSTER=1),
                                                   dict(BN=128, CLUSTER=1, STAGES=4))]),
    (128, 11008, 4096, True, [("wgmma", d) for d in (dict(BN=128, CLUSTER=1), dict(BM=64, BN=128, SCHEDULE=2, STAGES=6,
                                                                                    HELD=2, CLUSTER=1),
                                                     dict(BM=64, BN=256, SCHEDULE=2, STAGES=4, HELD=2, CLUSTER=1))]),
], "fp32": [
    (m, n, k, wt, [("sgemm", dict(SG, **t, B_COPY=bc, MIN_BLOCKS=mb, SPLIT_K=sk, REDUCE=2 if sk >= 4 else 1))
                   for t, mb, sk in tiles])
    for (m, n, k, wt, bc), tiles in {
        (2047, 2049, 1023, False, 4): [(T128x64_8W, 2, 1), (T128x64, 2, 1), (T128x64, 3, 1),
                                       (T64x128, 3, 1), (T128x128, 2, 1), (T64x64, 5, 1), (T128x64_2W, 4, 1),
                                       (T64x128_2W, 4, 1)],
        (1000, 3001, 2000, False, 4): [(T128x64_8W, 2, 1), (T64x128, 3, 1), (T64x64, 5, 1),
                                       (T128x128, 2, 1), (T128x64_2W, 4, 1), (T64x128_2W, 4, 1)],
        (512, 512, 512, False, 16): [(T64x64, 5, 1), (T64x64, 5, 2), (T128x64_8W, 2, 4), (T64x64, 5, 8)],
        (128, 28672, 8192, True, 16): [(T128x128, 2, 1), (T128x64_8W, 2, 1), (T64x128, 3, 1),
                                       (T128x64, 3, 1), (T128x64_2W, 4, 1)],
        (64, 13824, 5120, True, 16): [(T64x64, 5, 1), (T64x64, 5, 2), (T64x128, 3, 1), (T64x128, 3, 2),
                                      (T64x128_2W, 4, 1)],
    }.items()
], "small": [  # M <= 128 products that read B at the DRAM's rate: how many SMs stream it, how deep their rings
    (128, 11008, 4096, True, [("wgmma", dict(BN=128, CLUSTER=1, STAGES=st)) for st in (4, 5, 6)]
     + [("wgmma", dict(PP192, STAGES=st)) for st in (5, 6)]),
    (64, 13824, 5120, True, [("wgmma", dict(PP, STAGES=st)) for st in (6, 7, 8)]),
    (64, 5120, 13824, True, [("wgmma", dict(PP, SPLIT_K=2, STAGES=st)) for st in (6, 8)]),
    (64, 4096, 4096, False, [("wgmma", dict(PP, SPLIT_K=2, STAGES=st)) for st in (6, 8)]
     + [("wgmma", dict(PP, STAGES=st, HELD=held)) for st, held in ((6, 2), (8, 2), (8, 1))]),
    (128, 4096, 4096, True, [("wgmma", dict(PP, STAGES=st, HELD=held)) for st, held in ((6, 2), (8, 2), (8, 1))]),
    (512, 512, 16384, False, [("wgmma", dict(PP, SPLIT_K=4, STAGES=st, HELD=held)) for st, held in ((6, 2), (8, 2),
                                                                                                  (8, 1))]),
    (128, 28672, 8192, True, [("wgmma", d) for d in (dict(CLUSTER=1), dict(CLUSTER=1, STAGES=3),
                                                      dict(BN=192, CLUSTER=1, STAGES=4))]),
    (96, 8192, 8192, True, [("wgmma", dict(BN=128, CLUSTER=1, SPLIT_K=2, STAGES=st)) for st in (4, 6)]),
    (128, 14336, 4096, True, [("wgmma", dict(BN=128, CLUSTER=1, STAGES=st)) for st in (4, 6)]),
], "narrow": [  # 64-column tiles at M <= 128: ring depth, unsplit, and split in two or four
    (m, n, k, wt, [("wgmma", d) for d in (dict(NP, STAGES=8), dict(NP, STAGES=12), dict(NP, STAGES=8, SPLIT_K=2),
                                          dict(NP, STAGES=8, SPLIT_K=4))])
    for m, n, k, wt in ((64, 4096, 4096, False), (128, 4096, 4096, True), (64, 2048, 4096, False),
                        (64, 8192, 4096, True), (32, 4096, 8192, True), (16, 4096, 4096, True), (96, 8192, 8192, True),
                        (128, 8192, 4096, True), (64, 4096, 11008, True), (128, 2048, 8192, False),
                        (64, 5120, 13824, True))
], "narrow_long": [  # a long K whose two slices of 64 x 64 tiles would not fit one wave: unsplit against the
    # 64 x 128 split (narrow_beats_split)
    (m, n, k, True, [("wgmma", dict(PP, SPLIT_K=2)), ("wgmma", dict(NP, STAGES=12))])
    for m, n, k in ((64, 5120, 13824), (64, 8192, 8192), (128, 4096, 8192), (128, 4096, 11008), (64, 8192, 28672))
], "m128": [  # the shape suite's rows of M <= 128 with N and K >= 4096: kernel="auto" alone against torch
    (m, n, k, group in suite.WEIGHT_GROUPS, []) for group, shapes in suite.GROUPS.items() for m, n, k in shapes
    if m <= 128 and n >= 4096 and k >= 4096
], "fp32_rows": [  # strict fp32, N off a multiple of 4: C through shared memory (auto) against the lanes' own
    # stores (the same parameters with C_STAGE = 0)
    (m, n, k, False, "c_stage") for m, n, k in ((1000, 3001, 200), (1000, 3001, 800), (6000, 601, 200), (333, 777, 999),
                                                (2047, 2049, 1023), (4096, 4095, 512), (300, 521, 4096))
], "sum": [(m, n, k, wt, "heuristic") for m, n, k, wt in (
    (64, 4096, 4096, False), (128, 4096, 11008, True), (64, 5120, 13824, True), (128, 4096, 16384, False),
    (64, 64, 131072, False), (256, 256, 65536, False), (512, 512, 16384, False), (100, 4000, 11008, True),
    (128, 4096, 4096, False), (64, 2048, 4096, False), (32, 4096, 8192, True), (64, 8192, 4096, True))]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-ms", type=float, default=40.0)
    ap.add_argument("--groups", default=",".join(CASES))
    args = ap.parse_args()
    import torch

    import gemmlab
    from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved

    torch.backends.cuda.matmul.allow_tf32 = False  # strict fp32 on both sides (bf16 is unaffected)
    for group, (m, n, k, wt, configs) in [(g, c) for g in args.groups.split(",") for c in CASES[g]]:
        dt = torch.float32 if group.startswith("fp32") else torch.bfloat16
        a = torch.randn(m, k, device="cuda", dtype=dt)
        b = torch.randn(n, k, device="cuda", dtype=dt).t() if wt else torch.randn(k, n, device="cuda", dtype=dt)
        ref = (a.double() @ b.double()).float()
        scale = ref.abs().max().item()
        calls = {"torch": TimedCall(lambda: torch.matmul(a, b), graph=False),
                 "auto": TimedCall(lambda: gemmlab.matmul(a, b), graph=False)}
        names = {"auto": "auto"}
        if configs == "c_stage":  # the heuristic's parameters with C written from the registers
            from gemmlab.kernels import get
            from gemmlab.runtime import device

            h = get("sgemm").heuristic(m, n, k, device.device_info().sm_count)
            configs = [("sgemm", {**h, "C_STAGE": 0}),  # and 64 x 64 tiles, five blocks an SM, as cuBLAS tiles these
                       ("sgemm", {**h, **T64x64, "MIN_BLOCKS": 5})]
        if configs == "heuristic":  # the heuristic's split, summed either way
            from gemmlab.kernels import get
            from gemmlab.runtime import device

            p = get("wgmma").heuristic(m, n, k, device.device_info().sm_count, "bfloat16", wt)
            configs = [("wgmma", {**p, "SPLIT_SUM": how}) for how in (2, 1)]
            configs.append(("wgmma", {**p, "SPLIT_K": 2 * p.get("SPLIT_K", 1)}))  # twice the slices, as `auto` sums them
        for i, (kernel, cfg) in enumerate(configs):
            try:
                got = gemmlab.matmul(a, b, kernel=kernel, **cfg).float()
            except Exception as exc:  # noqa: BLE001  (a set this shape cannot take: said, not timed)
                print(f"  {kernel} {cfg}: {type(exc).__name__}: {str(exc)[:100]}")
                continue
            err = (got - ref).abs().max().item() / scale
            assert err < (1e-4 if dt == torch.float32 else 1e-2), (kernel, cfg, err)
            calls[f"v{i}"] = TimedCall(lambda kernel=kernel, cfg=cfg: gemmlab.matmul(a, b, kernel=kernel, **cfg),
                                       graph=False)
            names[f"v{i}"] = f"{kernel} " + ",".join(f"{key}={v}" for key, v in cfg.items())
        t = time_interleaved(calls, TimingOptions(budget_ms=args.budget_ms))
        base = t["torch"].median_ms
        print(f"{m}x{n}x{k}{' W.t()' if wt else ''}: torch {base * 1e3:.1f} us; " + "; ".join(
            f"{names[name]} {v.median_ms * 1e3:.1f} us x{base / v.median_ms:.3f}" for name, v in t.items()
            if name != "torch"), flush=True)


if __name__ == "__main__":
    main()
