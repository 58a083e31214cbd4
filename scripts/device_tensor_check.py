"""One call on a GPU machine for the tensor-core rung: its GPU tests (and the fp32 epilogue tests),
compute-sanitizer memcheck on odd shapes, the SASS check for HMMA, then mma_sync against cuBLAS
(torch.matmul, same dtype) side by side, TF32 (precision="tf32") against cuBLAS TF32 side by side (torch
with allow_tf32 switched on only inside that measurement), GEMM + bias + GELU(tanh) in bf16 against torch
eager, and the fp32 fused-epilogue correctness runs (sgemm, split-K included). A short table last.

    PYTHONPATH=src python3 scripts/device_tensor_check.py [--sizes 4096,8192] [--no-tests] [--no-sanitizer]

Logs go under $OUT (or ./out). Budget: about 4 minutes on an H100.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SANITIZE = """
import sys, cupy as cp, torch, gemmlab
g = cp.random.default_rng(1)
for dt in (torch.float16, torch.bfloat16):
    for m, n, k in ((67, 45, 33), (129, 131, 17), (1, 7, 5)):
        a = torch.randn(m, k, device='cuda').to(dt); b = torch.randn(k, n, device='cuda').to(dt)
        c = torch.randn(m, n, device='cuda').to(dt); r = torch.randn(m, n, device='cuda').to(dt)
        bias = torch.randn(n, device='cuda')
        gemmlab.matmul(a, b, c, alpha=1.5, beta=0.5, bias=bias, activation='gelu_tanh', residual=r)
        gemmlab.matmul(a, b, out_dtype='float32')
        gemmlab.matmul(a[:, 1:] if k > 1 else a, b[1:] if k > 1 else b)  # unaligned rows: checked path
for m, n, k in ((67, 45, 33), (129, 131, 17), (1, 7, 5), (64, 64, 16384)):
    a = torch.randn(m, k, device='cuda'); b = torch.randn(k, n, device='cuda')
    c = torch.randn(m, n, device='cuda'); r = torch.randn(m, n, device='cuda'); bias = torch.randn(m, 1, device='cuda')
    gemmlab.matmul(a, b, c, alpha=1.5, beta=0.5, bias=bias, activation='silu', residual=r, precision='tf32')
    gemmlab.matmul(a[:, 1:] if k > 1 else a, b[1:] if k > 1 else b, precision='tf32')  # checked path, fp32
    gemmlab.matmul(a, b, c, alpha=1.5, beta=0.5, bias=bias, activation='gelu_erf', residual=r)  # sgemm epilogue
torch.cuda.synchronize(); print('sanitizer run done')
"""


def run(cmd, log: Path, timeout: int, env=None) -> tuple[int, str]:
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
        text, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as exc:
        text, rc = f"timed out after {timeout} s\n{exc.stdout or ''}{exc.stderr or ''}", 124
    log.write_text(text if isinstance(text, str) else str(text))
    print(f"[{time.time() - t0:5.0f} s] {' '.join(map(str, cmd[:6]))} ... exit {rc}", flush=True)
    return rc, text


def time_side_by_side(ours, theirs, budget_ms):
    """Time gemmlab and torch on one non-default stream: events, launches (and any capture) all on it."""
    import cupy as cp
    import torch

    from gemmlab.bench.timing import time_gpu

    side = cp.cuda.Stream(non_blocking=True)
    with side, torch.cuda.stream(torch.cuda.ExternalStream(side.ptr)):
        return (time_gpu(ours, budget_ms=budget_ms, graph=False), time_gpu(theirs, budget_ms=budget_ms, graph=False))


class TorchTF32:
    """cuBLAS TF32 for torch's fp32 matmuls inside the block only; the previous settings restored after."""

    def __enter__(self):
        import torch

        self.saved = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = True
        return self

    def __exit__(self, *exc):
        import torch

        torch.set_float32_matmul_precision(self.saved[0])
        torch.backends.cuda.matmul.allow_tf32 = self.saved[1]


def rel64(x, ref64) -> float:
    return float((x.double() - ref64).norm() / ref64.norm())


def fp32_epilogue_runs(torch, gemmlab) -> tuple[str, float, list[str]]:
    """sgemm's fused epilogue (what kernel="auto" runs for fp32 with bias / activation / residual) against
    float64, on odd shapes and on shapes split along K. Returns (verdict, worst error, failures)."""
    import math

    acts = {None: lambda x: x, "relu": torch.relu, "silu": lambda x: x * torch.sigmoid(x),
            "gelu_tanh": lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
            "gelu_erf": lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))}
    worst, failures = 0.0, []
    for m, n, k in ((133, 70, 90), (1000, 1000, 1000), (257, 129, 31), (64, 64, 16384), (100, 90, 20000)):
        a = torch.rand(m, k, device="cuda") * 2 - 1
        b = torch.rand(k, n, device="cuda") * 2 - 1
        r = torch.rand(m, n, device="cuda") * 2 - 1
        for act, fn in acts.items():
            for mode in ("row", "col"):
                bias = torch.rand(m, 1, device="cuda") if mode == "row" else torch.rand(n, device="cuda")
                c = torch.rand(m, n, device="cuda") * 2 - 1
                ref = fn(1.5 * (a.double() @ b.double()) - 0.5 * c.double() + bias.double()) + r.double()
                gemmlab.matmul(a, b, c, alpha=1.5, beta=-0.5, bias=bias, activation=act, residual=r)
                err = rel64(c, ref)
                worst = max(worst, err)
                if not err <= 1e-5:
                    failures.append(f"{m}x{n}x{k} {act} bias={mode}: {err:.1e}")
    return ("pass" if not failures else "FAIL"), worst, failures


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--no-tests", action="store_true")
    ap.add_argument("--no-sanitizer", action="store_true")
    ap.add_argument("--budget-ms", type=float, default=400.0)
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))

    import cupy as cp
    import torch

    import gemmlab
    from gemmlab import api
    from gemmlab.bench.timing import time_gpu
    from gemmlab.kernels import compile_spec, get
    from gemmlab.runtime import compiler, device

    d = device.device_info()
    facts = {"device": d.name, "cc": d.compute_capability, "sms": d.sm_count, "nvrtc": compiler.nvrtc_version(),
             "cupy": cp.__version__, "torch": torch.__version__}
    print(json.dumps(facts, default=str), flush=True)
    checks: list[tuple[str, str]] = []

    if not args.no_tests:
        rc, text = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_tensor_gpu.py",
                        "tests/test_tensor_cores.py", "tests/test_epilogue_gpu.py", "tests/test_dispatch.py"],
                       out / "tensor_tests.log", 420, env)
        tail = text.strip().splitlines()[-15:]
        print("\n".join(tail), flush=True)
        checks.append(("GPU tests (test_tensor_gpu, test_tensor_cores, test_epilogue_gpu, test_dispatch)",
                       f"exit {rc}: {tail[-1] if tail else ''}"))

    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not args.no_sanitizer and Path(sanitizer).exists():
        script = out / "sanitize_tensor.py"
        script.write_text(SANITIZE)
        rc, text = run([sanitizer, "--tool", "memcheck", "--error-exitcode", "9", sys.executable, str(script)],
                       out / "memcheck.log", 180, env)
        summary = [ln for ln in text.splitlines() if "ERROR SUMMARY" in ln]
        checks.append(("memcheck, odd shapes, fp16 + bf16 + tf32 + fp32 epilogue",
                       f"exit {rc}: {summary[-1] if summary else text[-200:]}"))
    else:
        checks.append(("memcheck", "skipped"))

    spec = get("mma_sync")
    tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if Path(tool).exists():
        mod = compile_spec(spec, {}, d.arch)
        sass = subprocess.run([tool, "-sass", str(mod.cubin_path)], capture_output=True, text=True).stdout
        (out / "mma_sync.sass").write_text(sass)
        n = sass.count("HMMA.16816")
        r = mod.resources[spec.name_expression(spec.defaults)]
        checks.append(("SASS", f"{n} HMMA.16816, {sass.count('LDSM')} LDSM, {sass.count('LDGSTS')} LDGSTS; "
                               f"{r.registers} regs, spills {r.spill_stores + r.spill_loads}"))
        tf32 = api.explain_choice("float32", "tf32", shape=(4096, 4096, 4096), info=d).params
        mod = compile_spec(spec, tf32, d.arch)
        sass = subprocess.run([tool, "-sass", str(mod.cubin_path)], capture_output=True, text=True).stdout
        (out / "mma_sync_tf32.sass").write_text(sass)
        r = mod.resources[spec.name_expression(tf32)]
        checks.append(("SASS tf32", f"{sass.count('HMMA.1688.F32.TF32')} HMMA.1688.F32.TF32, "
                                    f"{sass.count('LDSM.16.M88')} LDSM (A), {sass.count('LDS.')} LDS (B), "
                                    f"{sass.count('LDSM.16.MT88')} LDSM.MT (want 0); {r.registers} regs, "
                                    f"spills {r.spill_stores + r.spill_loads}"))

    rows = []
    for size in [int(s) for s in args.sizes.split(",") if s]:
        for dt in (torch.bfloat16, torch.float16):
            a = torch.randn(size, size, device="cuda").to(dt)
            b = torch.randn(size, size, device="cuda").to(dt)
            c = torch.empty(size, size, device="cuda", dtype=dt)
            c2 = torch.empty_like(c)
            ours = lambda: gemmlab.matmul(a, b, c, stream=cp.cuda.get_current_stream())  # noqa: E731
            theirs = lambda: torch.matmul(a, b, out=c2)  # noqa: E731
            ours()
            theirs()
            torch.cuda.synchronize()
            err = float((c.float() - c2.float()).norm() / c2.float().norm())
            t_ours, t_cub = time_side_by_side(ours, theirs, args.budget_ms)
            fl = 2 * size**3
            rows.append((f"{str(dt)[6:]} {size}^3", fl / t_ours.median_ms / 1e9, fl / t_cub.median_ms / 1e9, err))
            del a, b, c, c2

        # TF32: gemmlab's precision="tf32" (mma_sync, m16n8k8, cvt.rna) against cuBLAS TF32, side by side;
        # torch's TF32 switch is on only inside this measurement.
        try:
            a = torch.rand(size, size, device="cuda") * 2 - 1
            b = torch.rand(size, size, device="cuda") * 2 - 1
            c = torch.empty(size, size, device="cuda")
            c2 = torch.empty_like(c)
            ours = lambda: gemmlab.matmul(a, b, c, precision="tf32", stream=cp.cuda.get_current_stream())  # noqa: E731
            theirs = lambda: torch.matmul(a, b, out=c2)  # noqa: E731
            with TorchTF32():
                ours()
                theirs()
                torch.cuda.synchronize()
                t_ours, t_cub = time_side_by_side(ours, theirs, args.budget_ms)
            ref = a.double() @ b.double()
            e_ours, e_cub = rel64(c, ref), rel64(c2, ref)
            del ref
            fl = 2 * size**3
            rows.append((f"tf32 {size}^3", fl / t_ours.median_ms / 1e9, fl / t_cub.median_ms / 1e9,
                         float((c - c2).norm() / c2.norm())))
            verdict = "pass" if e_ours <= 1e-3 and e_cub > 1e-5 else "CHECK"
            checks.append((f"TF32 {size}^3 vs float64", f"{verdict}: gemmlab {e_ours:.1e} (bound 1e-3), cuBLAS TF32 "
                                                       f"{e_cub:.1e} (above 1e-5: TF32 was on); strict fp32 after: "
                                                       f"allow_tf32={torch.backends.cuda.matmul.allow_tf32}"))
            del a, b, c, c2
        except Exception as exc:  # report, do not hide the table
            checks.append((f"TF32 {size}^3", f"failed: {type(exc).__name__}: {exc}"))

    fused = None
    try:
        m = n = k = 8192
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        w = torch.randn(k, n, device="cuda").to(torch.bfloat16)
        bias_t = torch.randn(n, device="cuda").to(torch.bfloat16)
        bias32 = bias_t.float()
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ours = lambda: gemmlab.matmul(a, w, y, bias=bias32, activation="gelu_tanh",  # noqa: E731
                                      stream=cp.cuda.get_current_stream())
        eager = lambda: torch.nn.functional.gelu(torch.matmul(a, w) + bias_t, approximate="tanh")  # noqa: E731
        ours()
        ref = eager()
        torch.cuda.synchronize()
        ferr = float((y.float() - ref.float()).norm() / ref.float().norm())
        t_ours, t_eager = time_side_by_side(ours, eager, args.budget_ms)
        fused = (t_ours.median_ms, t_eager.median_ms, ferr)
    except Exception as exc:  # report, do not hide the table
        checks.append(("fused GEMM + bias + GELU", f"failed: {type(exc).__name__}: {exc}"))

    try:
        verdict, worst, failures = fp32_epilogue_runs(torch, gemmlab)
        checks.append(("fp32 fused epilogue (sgemm, split-K included) vs float64",
                       f"{verdict}: worst rel. error {worst:.1e} (bound 1e-5)" + (f"; {failures[:4]}" if failures else "")))
    except Exception as exc:
        checks.append(("fp32 fused epilogue", f"failed: {type(exc).__name__}: {exc}"))

    (out / "tensor_results.json").write_text(json.dumps({"facts": facts, "checks": checks, "rows": rows,
                                                          "fused": fused}, default=str, indent=1))
    print("\n== checks")
    for name, text in checks:
        print(f"  {name}: {text}")
    print("\n== mma_sync against cuBLAS (torch.matmul, same dtype; tf32 rows: cuBLAS TF32), side by side")
    print(f"  {'problem':16s} {'mma_sync TFLOP/s':>17s} {'cuBLAS TFLOP/s':>15s} {'% cuBLAS':>9s} {'rel diff':>9s}")
    for name, ours_tf, cub_tf, err in rows:
        print(f"  {name:16s} {ours_tf:17.1f} {cub_tf:15.1f} {100 * ours_tf / cub_tf:8.0f}% {err:9.1e}")
    if fused:
        print(f"  bf16 8192^3 GEMM+bias+GELU(tanh): mma_sync fused {fused[0]:.3f} ms, torch eager {fused[1]:.3f} ms, "
              f"speed-up {fused[1] / fused[0]:.2f}x, rel diff {fused[2]:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
