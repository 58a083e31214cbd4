"""One call on an H100 for rung 15 (wgmma): correctness against float64, then wgmma (and its variants),
mma_sync and cuBLAS (torch.matmul) side by side, and GEMM + bias + GELU against torch eager (and, with --compile,
torch.compile; where nvmath-python is installed, cuBLASLt's own fused GELU + bias).

    PYTHONPATH=src python3 scripts/device_wgmma_check.py [--sizes 4096,8192] [--variants "BN=128,STAGES=6;..."]
                                                         [--no-correctness] [--budget-ms 300] [--compile MODE]

A short table last; everything also in $OUT/wgmma.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
OUT = Path(os.environ.get("OUT", "out"))

SHAPES = [(1, 1, 1), (17, 17, 17), (129, 257, 65), (1000, 1000, 1000), (7, 300, 129), (300, 8, 64),
          (33, 72, 1000), (256, 512, 8), (2048, 2048, 2048), (1536, 4096, 1024)]


def parse_variants(text: str) -> list[dict[str, int]]:
    out = []
    for chunk in filter(None, (c.strip() for c in text.split(";"))):
        out.append({k: int(v) for k, v in (kv.split("=") for kv in chunk.split(","))})
    return out


def correctness(torch, gemmlab, variants) -> list[str]:
    failures = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for params in [{}] + variants:
        for dt in (torch.bfloat16, torch.float16):
            for m, n, k in SHAPES:
                a = (torch.rand(m, k, device="cuda", generator=g) * 2 - 1).to(dt)
                b = (torch.rand(k, n, device="cuda", generator=g) * 2 - 1).to(dt)
                ref = a.double() @ b.double()
                try:
                    for out_dtype in ("float32", None):
                        c = gemmlab.matmul(a, b, kernel="wgmma", out_dtype=out_dtype, **params)
                        err = ((c.double() - ref).norm() / max(ref.norm(), 1e-30)).item()
                        ok = err <= 1e-2 and bool(torch.isfinite(c).all())
                        if not ok:
                            failures.append(f"{params} {dt} {m}x{n}x{k} -> {out_dtype}: rel {err:.2e}")
                except Exception as exc:  # noqa: BLE001
                    failures.append(f"{params} {dt} {m}x{n}x{k}: {type(exc).__name__}: {str(exc)[:200]}")
    # Epilogue with beta, bias, GELU, residual on an odd shape; NaN C with beta = 0.
    m, n, k = 300, 520, 200
    a = torch.randn(m, k, device="cuda").bfloat16()
    b = torch.randn(k, n, device="cuda").bfloat16()
    c0 = torch.randn(m, n, device="cuda").bfloat16()
    r = torch.randn(m, n, device="cuda").bfloat16()
    bias = torch.randn(n, device="cuda")
    ref = torch.nn.functional.gelu(1.5 * (a.double() @ b.double()) + 0.5 * c0.double() + bias.double(),
                                   approximate="tanh") + r.double()
    try:
        c = c0.clone()
        gemmlab.matmul(a, b, c, alpha=1.5, beta=0.5, bias=bias, activation="gelu_tanh", residual=r, kernel="wgmma")
        err = ((c.double() - ref).norm() / ref.norm()).item()
        if err > 1e-2:
            failures.append(f"epilogue: rel {err:.2e}")
        nanc = torch.full((m, n), float("nan"), device="cuda")
        gemmlab.matmul(a, b, nanc, beta=0.0, kernel="wgmma")
        if not bool(torch.isfinite(nanc).all()):
            failures.append("beta = 0 read C (NaN leaked)")
    except Exception as exc:  # noqa: BLE001
        failures.append(f"epilogue: {type(exc).__name__}: {str(exc)[:300]}")
    return failures


def nvmath_gelu_bias(torch, a, b, bias_rows):
    """cuBLASLt's fused GEMM + bias + GELU (tanh) through nvmath-python, planned once (the stateful API, so
    that planning is not timed); (the call, its relative error against float64), or None where nvmath-python
    is not installed. cuBLASLt's bias is one value per row of the result (length M)."""
    try:
        from nvmath.linalg.advanced import Matmul, MatmulEpilog
    except ImportError:
        return None
    except Exception as exc:  # noqa: BLE001  (installed but not loadable here: say why, time the rest)
        print(f"  nvmath-python does not load: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
        return None
    mm = Matmul(a, b)
    mm.plan(epilog=MatmulEpilog.GELU_BIAS, epilog_inputs={"bias": bias_rows})
    got = mm.execute()
    want = torch.nn.functional.gelu(a.double() @ b.double() + bias_rows.double()[:, None], approximate="tanh")
    return mm.execute, ((got.double() - want).norm() / want.norm()).item()


def timings(torch, gemmlab, sizes, variants, budget_ms, tf32=False, suite=False, bt=False,
            compile_mode: str = "", dtype: str = "bfloat16", rounds: int = 10, mma_sync: bool = True,
            sk_compare: bool = False) -> list[dict]:
    import cupy as cp


    from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved

    rows = []
    side = cp.cuda.Stream(non_blocking=True)
    for shape in sizes:
        m, n, k = shape
        dt = getattr(torch, dtype)
        a = torch.randn(m, k, device="cuda").to(dt)
        # --bt: B is the transpose of an N x K weight (column-major K x N), as in x @ w.t()
        b = torch.randn(shape[1], k, device="cuda").to(dt).t() if bt else torch.randn(k, shape[1], device="cuda").to(dt)
        out = torch.empty(m, n, device="cuda", dtype=dt)
        flops = 2.0 * m * n * k
        name = "x".join(map(str, shape)) if len(set(shape)) > 1 else m
        cands = [("cublas", lambda: torch.matmul(a, b, out=out))]
        if suite:  # the shape suite: cuBLAS against kernel="auto" only
            cands.append(("gemmlab auto", lambda: gemmlab.matmul(a, b, out)))
            variants_here, fused_here = [], False
        else:
            if mma_sync:
                cands.append(("mma_sync", lambda: gemmlab.matmul(a, b, out, kernel="mma_sync")))
            variants_here, fused_here = [{}] + variants, True
        for params in variants_here:
            label = "wgmma" + ("" if not params else " " + ",".join(f"{k}={v}" for k, v in params.items()))
            cands.append((label, lambda p=params: gemmlab.matmul(a, b, out, kernel="wgmma", **p)))
        # Fused GEMM + bias + GELU(tanh), BF16 out: torch eager (three kernels) against one gemmlab launch.
        bias = torch.randn(shape[1], device="cuda").to(dt)
        bias32 = bias.float()
        if fused_here:
            cands.append(("torch eager mm+bias+gelu", lambda: torch.nn.functional.gelu(torch.matmul(a, b) + bias,
                                                                                       approximate="tanh")))
            cands.append(("gemmlab fused mm+bias+gelu", lambda: gemmlab.matmul(a, b, out, bias=bias32,
                                                                               activation="gelu_tanh")))
            if compile_mode:  # the same layer through torch.compile (Inductor), compiled before any timing
                layer = torch.compile(lambda x, w, v: torch.nn.functional.gelu(x @ w + v, approximate="tanh"),
                                      mode=compile_mode)
                cands.append((f"torch.compile ({compile_mode})", lambda: layer(a, b, bias)))
        if fused_here:  # cuBLASLt's own fused epilogue, where nvmath-python is installed (bias per row there)
            bias_rows = torch.randn(m, device="cuda").to(dt)
            nv = nvmath_gelu_bias(torch, a, b, bias_rows)
            if nv is None:
                print(f"  {name!s:>5} nvmath-python is not installed: no cuBLASLt fused epilogue to compare", flush=True)
            else:
                print(f"  {name!s:>5} cuBLASLt GELU_BIAS relative error {nv[1]:.2e}", flush=True)
                rows32 = bias_rows.float().reshape(m, 1)
                cands.append(("cuBLASLt GELU_BIAS (nvmath), row bias", nv[0]))
                cands.append(("gemmlab fused, row bias", lambda: gemmlab.matmul(a, b, out, bias=rows32,
                                                                                activation="gelu_tanh")))
        if sk_compare and fused_here:
            cands.append(("wgmma, STREAM_K=1", lambda: gemmlab.matmul(a, b, out, kernel="wgmma", STREAM_K=1)))
            cands.append(("fused, STREAM_K=1", lambda: gemmlab.matmul(a, b, out, bias=bias32, activation="gelu_tanh",
                                                                      kernel="wgmma", STREAM_K=1)))
        for params in variants if fused_here else []:
            label = "wgmma fused " + ",".join(f"{k}={v}" for k, v in params.items())
            cands.append((label, lambda p=params: gemmlab.matmul(a, b, out, bias=bias32, activation="gelu_tanh",
                                                                 kernel="wgmma", **p)))
        if tf32:  # fp32 inputs: cuBLAS with TF32 allowed (only here) against gemmlab precision="tf32"
            a32 = a.float()
            b32 = b.t().float().t() if bt else b.float()  # keep B's layout
            out32 = torch.empty(m, n, device="cuda")

            def cublas_tf32():
                torch.backends.cuda.matmul.allow_tf32 = True
                try:
                    torch.matmul(a32, b32, out=out32)
                finally:
                    torch.backends.cuda.matmul.allow_tf32 = False

            cands = [("cublas", cublas_tf32),
                     ("gemmlab tf32 (auto)", lambda: gemmlab.matmul(a32, b32, out32, precision="tf32"))]
            if not bt:  # the same B given transposed (read K-major in place), in the same rounds
                b32t = b32.t().contiguous().t()
                cands.append(("gemmlab tf32, B^T given", lambda: gemmlab.matmul(a32, b32t, out32, precision="tf32")))
            if sk_compare:
                cands.append(("tf32, STREAM_K=1", lambda: gemmlab.matmul(a32, b32, out32, precision="tf32",
                                                                          kernel="wgmma", STREAM_K=1)))
            for params in variants:
                label = "wgmma tf32 " + ",".join(f"{k}={v}" for k, v in params.items())
                cands.append((label, lambda p=params: gemmlab.matmul(a32, b32, out32, precision="tf32", kernel="wgmma", **p)))
        with side, torch.cuda.stream(torch.cuda.ExternalStream(side.ptr)):
            # Every candidate is checked to run, then all are timed interleaved (alternating rounds, one
            # clock and thermal history), so the ratios to cuBLAS are fair.
            ok = {}
            for label, fn in cands:
                try:
                    fn()
                    ok[label] = TimedCall(fn, graph=False)
                except Exception as exc:  # noqa: BLE001
                    rows.append({"n": name, "kernel": label, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
                    print(f"  {name!s:>5} {label:32s} ERROR {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            res = time_interleaved(ok, TimingOptions(budget_ms=budget_ms * len(ok), rounds=rounds))
            base = flops / (res["cublas"].median_ms * 1e-3) / 1e12 if "cublas" in res else None
            for label, t in res.items():
                tf = flops / (t.median_ms * 1e-3) / 1e12
                rows.append({"n": name, "kernel": label, "tflops": tf, "ratio": tf / base if base else None,
                             "spread": t.iqr_ms / t.median_ms if t.median_ms else None})
                print(f"  {name!s:>5} {label:32s} {tf:7.1f} TFLOP/s  {tf / base if base else 0:.3f} x cuBLAS", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4096,8192", help="N (square) or MxNxK, comma-separated")
    ap.add_argument("--variants", default="")
    ap.add_argument("--no-correctness", action="store_true")
    ap.add_argument("--tf32", action="store_true", help="time precision='tf32' against cuBLAS TF32 instead")
    ap.add_argument("--suite", action="store_true", help="cuBLAS against kernel='auto' only, and the geometric mean")
    ap.add_argument("--bt", action="store_true", help="B given as the transpose of an N x K matrix (x @ w.t())")
    ap.add_argument("--budget-ms", type=float, default=300.0)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"), help="input and output type of the timings")
    ap.add_argument("--rounds", type=int, default=10, help="least interleaved rounds (one batch per candidate each)")
    ap.add_argument("--no-mma-sync", action="store_true", help="leave rung 11 out of the timed candidates")
    ap.add_argument("--sk-compare", action="store_true", help="also time rung 15 with STREAM_K=1 (where its rule takes it)")
    ap.add_argument("--compile", default="", metavar="MODE",
                    help="also time the GEMM + bias + GELU layer through torch.compile in this mode (e.g. default)")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    import torch

    import gemmlab

    torch.backends.cuda.matmul.allow_tf32 = False
    variants = parse_variants(args.variants)
    result: dict = {}
    t0 = time.time()
    if not args.no_correctness:
        try:
            result["failures"] = correctness(torch, gemmlab, variants)
        except Exception:  # noqa: BLE001
            result["failures"] = [traceback.format_exc()]
        print(f"correctness: {len(result['failures'])} failures ({time.time() - t0:.0f} s)")
        for f in result["failures"][:30]:
            print("  FAIL", f)
    shapes = [tuple(int(x) for x in s.split("x")) if "x" in s else (int(s),) * 3 for s in args.sizes.split(",") if s]
    result["timings"] = timings(torch, gemmlab, shapes, variants, args.budget_ms, args.tf32, args.suite, args.bt,
                                args.compile, args.dtype, args.rounds, not args.no_mma_sync, args.sk_compare)
    ratios = [r["ratio"] for r in result["timings"] if r.get("ratio") and r["kernel"] != "cublas"]
    if args.suite and ratios:
        import math

        result["geomean"] = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"geometric mean over {len(ratios)} shapes: {result['geomean']:.3f} x cuBLAS")
    (OUT / "wgmma.json").write_text(json.dumps(result, indent=1))
    print("\n| N | kernel | TFLOP/s | x cuBLAS |\n|---|---|---|---|")
    for r in result["timings"]:
        if "error" in r:
            print(f"| {r['n']} | {r['kernel']} | error | {r['error'][:60]} |")
        else:
            print(f"| {r['n']} | {r['kernel']} | {r['tflops']:.1f} | {r['ratio']:.3f} |")
    return 0 if not result.get("failures") else 1


if __name__ == "__main__":
    sys.exit(main())
