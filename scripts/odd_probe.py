"""Rung 15's tilings on the suite's odd sizes (BF16), against torch.matmul, interleaved, L2 flushed: which
tile shape, cluster and schedule each size wants, beside what kernel="auto" picks.

    PYTHONPATH=src:scripts python scripts/odd_probe.py [--budget 100] [--shapes MxNxK,...]
        [--variants "K=V,K=V;K=V"] [--stream-k | --pitch] [--promotion BYTES] [--kmajor]

--stream-k: kernel="auto" against its own choice with STREAM_K = 1 and stream-K's gates on rounds and
gain opened (rung 15's SK_MIN_ROUNDS, SK_MIN_GAIN), on shapes whose last round of tiles is partial.
--pitch: the same values read from rows padded to whole 128-byte lines (views into wider arrays), against the
contiguous operands, for torch and kernel="auto": what the rows' alignment costs each.
--promotion: the L2 fill width of tensor maps whose rows straddle lines (runtime.tma.STRADDLING_PROMOTION).
"""

import argparse

VARIANTS = [{}, {"BN": 256}, {"BN": 192}, {"CLUSTER": 1}, {"BN": 192, "CLUSTER": 1}]
ODD = [(3000, 3000, 3000), (5000, 5000, 5000), (6000, 6000, 6000), (3000, 3000, 8192), (2048, 11008, 4096),
       (1000, 1000, 1000), (5000, 3000, 1234)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=100.0)
    ap.add_argument("--stream-k", action="store_true")
    ap.add_argument("--pitch", action="store_true")
    ap.add_argument("--promotion", type=int, default=None,
                    help="the L2 fill width (bytes: 0, 64, 128, 256) of maps whose rows straddle 128-byte lines")
    ap.add_argument("--variants", default="", help="parameter sets 'K=V,K=V;K=V' in place of VARIANTS")
    ap.add_argument("--shapes", default="", help="MxNxK,... in place of the odd sizes")
    ap.add_argument("--kmajor", action="store_true", help="B as the transpose of an N x K weight (W.t())")
    args = ap.parse_args()
    import torch

    from variant_timing import compare

    if args.stream_k:
        stream_k(args.budget)
        return
    if args.promotion is not None:
        from gemmlab.runtime import tma

        tma.STRADDLING_PROMOTION = args.promotion
    if args.pitch:
        pitch(args.budget, args.kmajor, args.shapes)
        return
    shapes = [tuple(int(v) for v in t.split("x")) for t in args.shapes.split(",")] if args.shapes else ODD
    for m, n, k in shapes:
        a = (torch.rand(m, k, device="cuda") * 2 - 1).to(torch.bfloat16)
        b = (torch.rand(k, n, device="cuda") * 2 - 1).to(torch.bfloat16)
        if args.kmajor:
            b = b.t().contiguous().t()
        variants = [{kk: int(v) for kk, v in (p.split("=") for p in var.split(",") if p)}
                    for var in args.variants.split(";")] if args.variants else VARIANTS
        compare(f"{m}x{n}x{k}", a, b, lambda: torch.matmul(a, b), variants, args.budget)


PARTIAL = [(3000, 3000, 3000), (2500, 2500, 2500), (3500, 3500, 3500), (5000, 5000, 5000), (4096, 4096, 4096),
           (3000, 3000, 8192), (6000, 6000, 6000), (2048, 2048, 8192)]


def stream_k(budget):
    import torch

    import gemmlab
    from gemmlab.api import dispatch
    from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved
    from gemmlab.kernels import registry
    from gemmlab.kernels.rungs import wgmma
    from gemmlab.runtime import device

    wgmma.SK_MIN_ROUNDS, wgmma.SK_MIN_GAIN = 1, 0.0
    info = device.device_info()
    for m, n, k in PARTIAL:
        a = (torch.rand(m, k, device="cuda") * 2 - 1).to(torch.bfloat16)
        b = (torch.rand(k, n, device="cuda") * 2 - 1).to(torch.bfloat16)
        auto = dispatch.full_params(registry.get("wgmma"), m, n, k, info, "bfloat16", "bfloat16", None, None, False)[0]
        tiled = {name: auto[name] for name in ("BM", "BN", "STAGES", "HELD", "SCHEDULE", "GROUP_M", "CLUSTER", "DEFER")}
        ref = a.float() @ b.float()
        sk = dict(tiled, STREAM_K=1)
        got = gemmlab.matmul(a, b, kernel="wgmma", **sk)
        assert torch.allclose(got.float(), ref, rtol=2e-2, atol=5e-1)
        calls = {"torch": TimedCall(lambda: torch.matmul(a, b), graph=False),
                 "auto": TimedCall(lambda: gemmlab.matmul(a, b), graph=False),
                 "sk": TimedCall(lambda: gemmlab.matmul(a, b, kernel="wgmma", **sk), graph=False)}
        t = time_interleaved(calls, TimingOptions(budget_ms=budget))
        base = t["torch"].median_ms
        print(f"{m}x{n}x{k} {tiled}: torch {base * 1e3:.1f} us; auto x{base / t['auto'].median_ms:.3f}; "
              f"stream-K x{base / t['sk'].median_ms:.3f}", flush=True)


PITCHED = [(3000, 3000, 3000), (1000, 1000, 1000), (5000, 5000, 5000), (6000, 6000, 6000), (3000, 3000, 8192),
           (2500, 2500, 2500), (4096, 4096, 4096)]


def _padded(x, torch):
    """The same values in rows padded to whole 128-byte lines (a view into a wider array)."""
    rows, cols = x.shape
    wide = torch.zeros(rows, -(-cols // 64) * 64, dtype=x.dtype, device=x.device)
    wide[:, :cols] = x
    return wide[:, :cols]


def pitch(budget, kmajor, shapes=""):
    import torch

    import gemmlab
    from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved

    shapes = [tuple(int(v) for v in t.split("x")) for t in shapes.split(",")] if shapes else PITCHED
    for m, n, k in shapes:
        a = (torch.rand(m, k, device="cuda") * 2 - 1).to(torch.bfloat16)
        b = (torch.rand(k, n, device="cuda") * 2 - 1).to(torch.bfloat16)
        if kmajor:
            b = b.t().contiguous().t()
        ap = _padded(a, torch)
        bp = _padded(b.t(), torch).t() if kmajor else _padded(b, torch)
        ref = torch.matmul(a, b).float()
        for x, y in ((a, b), (ap, bp)):
            assert torch.allclose(gemmlab.matmul(x, y).float(), ref, rtol=2e-2, atol=5e-1)
        calls = {"torch": TimedCall(lambda: torch.matmul(a, b), graph=False),
                 "auto": TimedCall(lambda: gemmlab.matmul(a, b), graph=False),
                 "torch_pad": TimedCall(lambda: torch.matmul(ap, bp), graph=False),
                 "auto_pad": TimedCall(lambda: gemmlab.matmul(ap, bp), graph=False),
                 "auto_pad_a": TimedCall(lambda: gemmlab.matmul(ap, b), graph=False),
                 "auto_pad_b": TimedCall(lambda: gemmlab.matmul(a, bp), graph=False),
                 "copy_a": TimedCall(lambda: ap.copy_(a), graph=False)}
        t = time_interleaved(calls, TimingOptions(budget_ms=budget))
        base = t["torch"].median_ms
        print(f"{m}x{n}x{k}{' W.t()' if kmajor else ''}: torch {base * 1e3:.1f} us; " + "; ".join(
            f"{name} x{base / v.median_ms:.3f} ({v.median_ms * 1e3:.1f} us)" for name, v in t.items()
            if name != "torch"), flush=True)


if __name__ == "__main__":
    main()
