"""Small-M (decoding) products against torch (cuBLAS), side by side: the weights' bytes over the time, their
share of the datasheet's DRAM bandwidth (the bound of rung 16's model, skinny.stream_seconds), and the ratio. Each call as a torch user makes it (y = x @ W.t(), a new output), L2 flushed.

    PYTHONPATH=src python3 scripts/decode_probe.py [--ms 1,8,16,64,128] [--nk 8192x8192,...] [--also wgmma]
    PYTHONPATH=src python3 scripts/decode_probe.py --warm   # compile rung 16's instantiations in parallel first

--also adds gemmlab with that kernel named (e.g. wgmma, to see where the tiled rung overtakes).
--row-major times x @ B with B (K x N) row-major instead of a linear layer's transposed weight.
--fp32 times strict fp32 (TF32 off) against cuBLAS instead of bf16.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import math

DATASHEET_TBS = 3.35


def warm(variants: list[dict[str, int]], workers: int = 14) -> None:
    """Compile rung 16 for every MT, type and layout the heuristic can pick, and the --variants (bf16 in and
    out, both layouts), in parallel processes."""
    import concurrent.futures as cf
    import multiprocessing as mp

    from gemmlab.kernels import registry

    spec = registry.get("skinny")
    sets = []
    for mt, at, ct, lay in itertools.product((8, 16, 32, 64), (1, 2, 4), (1, 2, 3), (1, 2)):
        if at == 4 and ct != 1:  # fp32 inputs: fp32 out
            continue
        p = spec.heuristic(mt, 8192, 8192, 132)
        sets.append({**p, "A_TYPE": at, "C_TYPE": ct, "B_LAYOUT": lay})
    for mt, v, lay in itertools.product((8, 16), variants, (1, 2)):
        sets.append({**spec.heuristic(mt, 8192, 8192, 132), **v, "A_TYPE": 2, "C_TYPE": 3, "B_LAYOUT": lay})
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as ex:
        list(ex.map(_compile, sets))
    print(f"compiled {len(sets)} instantiations of rung 16")


def _compile(p):
    from gemmlab.kernels import registry

    try:
        registry.compile_spec(registry.get("skinny"), p, "sm_90")  # rung 16 builds for the device's own arch
    except ValueError:  # a variant this layout or type cannot take: the probe says so when it times
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="1,4,8,16,32,64,128")
    ap.add_argument("--nk", default="4096x4096,8192x8192,14336x4096,28672x8192,8192x28672")
    ap.add_argument("--also", nargs="*", default=[])
    ap.add_argument("--variants", nargs="*", default=[], help='parameter sets over a rung\'s heuristic, '
                    '"[kernel:]NT=2,WARPS=8" (rung 16, skinny, where no kernel is named; gemv takes them too)')
    ap.add_argument("--row-major", action="store_true")
    ap.add_argument("--fp32", action="store_true")
    ap.add_argument("--budget-ms", type=float, default=60.0)
    ap.add_argument("--warm", action="store_true")
    args = ap.parse_args()
    def parse(v: str) -> tuple[str, dict[str, int]]:  # "[kernel:]NAME=V,..." (skinny where none is named)
        kern, _, rest = v.rpartition(":")
        return kern or "skinny", {kv.split("=")[0]: int(kv.split("=")[1]) for kv in rest.split(",") if kv}

    variants = {v: parse(v) for v in args.variants}
    if args.warm:
        warm([given for kern, given in variants.values() if kern == "skinny"])
        return

    import torch

    import gemmlab
    from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved
    from gemmlab.kernels import registry

    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = torch.float32 if args.fp32 else torch.bfloat16
    eb = 4 if args.fp32 else 2
    others = [*args.also, *args.variants]
    print(f"| M | N | K | layout | weights MB | torch µs | gemmlab µs | weights TB/s | % of {DATASHEET_TBS} TB/s "
          "| x torch | " + " | ".join(f"{k} x torch" for k in others) + " |")
    print("|---" * (10 + len(others)) + "|")
    ratios = []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m in (int(x) for x in args.ms.split(",")):
        for n, k in (tuple(int(v) for v in s.split("x")) for s in args.nk.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            if args.row_major:
                b = torch.randn(k, n, device="cuda", dtype=dtype)
            else:
                b = torch.randn(n, k, device="cuda", dtype=dtype).t()
            ref = x.double() @ b.double()
            got = gemmlab.matmul(x, b)
            err = ((got.double() - ref).norm() / ref.norm()).item()
            assert err < (1e-5 if args.fp32 else 1e-2), f"{m}x{n}x{k}: rel. error {err:.2e}"
            calls = {"torch": TimedCall(lambda: torch.matmul(x, b)), "gemmlab": TimedCall(lambda: gemmlab.matmul(x, b))}
            for kern in args.also:
                gemmlab.matmul(x, b, kernel=kern)
                calls[kern] = TimedCall(lambda kern=kern: gemmlab.matmul(x, b, kernel=kern))
            for v, (kern, given) in variants.items():
                spec = registry.get(kern)
                base = {key: val for key, val in spec.heuristic(m, n, k, sms).items() if key != "SPLIT"}
                rung = importlib.import_module(spec.heuristic.__module__)
                p = (rung.params_for(m, n, k, sms, **{**base, **given}) if kern == "skinny" else
                     {**base, **given, "SPLIT": given.get("SPLIT") or rung.split_for(m, n, k, sms, {**base, **given})})
                try:
                    got_v = gemmlab.matmul(x, b, kernel=kern, **p)
                except ValueError as exc:  # a set this shape cannot take: said, not timed
                    print(f"  {v}: {exc}")
                    continue
                err_v = ((got_v.double() - ref).norm() / ref.norm()).item()
                assert err_v < (1e-5 if args.fp32 else 1e-2), f"{v} {m}x{n}x{k}: rel. error {err_v:.2e}"
                calls[v] = TimedCall(lambda p=p, kern=kern: gemmlab.matmul(x, b, kernel=kern, **p))
            res = time_interleaved(calls, TimingOptions(budget_ms=args.budget_ms * len(calls), rounds=5))
            t_torch, t_ours = res["torch"].median_ms, res["gemmlab"].median_ms
            tbs = eb * n * k / (t_ours * 1e-3) / 1e12
            r = t_torch / t_ours
            ratios.append(r)
            extra = " | ".join(f"{t_torch / res[kern].median_ms:.3f}" if kern in res else "-" for kern in others)
            print(f"| {m} | {n} | {k} | {'K x N' if args.row_major else 'W.t()'} | {eb * n * k / 1e6:.0f} | "
                  f"{t_torch * 1e3:.1f} | {t_ours * 1e3:.1f} | {tbs:.2f} | {100 * tbs / DATASHEET_TBS:.0f}% | "
                  f"{r:.3f} |" + (f" {extra} |" if extra else ""), flush=True)
    gm = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"geometric mean x torch: {gm:.3f}; worst {min(ratios):.3f}")


if __name__ == "__main__":
    main()
