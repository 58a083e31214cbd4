"""One call on a GPU machine for the tensor-core rung: its GPU tests, compute-sanitizer memcheck on an odd
shape, the SASS check for HMMA, then mma_sync against cuBLAS (torch.matmul, same dtype) side by side, and
GEMM + bias + GELU(tanh) in bf16 against torch eager. A short table last.

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
                        "tests/test_tensor_cores.py"], out / "tensor_tests.log", 240, env)
        tail = text.strip().splitlines()[-15:]
        print("\n".join(tail), flush=True)
        checks.append(("GPU tests (test_tensor_gpu, test_tensor_cores)", f"exit {rc}: {tail[-1] if tail else ''}"))

    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not args.no_sanitizer and Path(sanitizer).exists():
        script = out / "sanitize_tensor.py"
        script.write_text(SANITIZE)
        rc, text = run([sanitizer, "--tool", "memcheck", "--error-exitcode", "9", sys.executable, str(script)],
                       out / "memcheck.log", 180, env)
        summary = [ln for ln in text.splitlines() if "ERROR SUMMARY" in ln]
        checks.append(("memcheck, odd shapes, fp16 + bf16, epilogue", f"exit {rc}: {summary[-1] if summary else text[-200:]}"))
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

    (out / "tensor_results.json").write_text(json.dumps({"facts": facts, "checks": checks, "rows": rows,
                                                          "fused": fused}, default=str, indent=1))
    print("\n== checks")
    for name, text in checks:
        print(f"  {name}: {text}")
    print("\n== mma_sync against cuBLAS (torch.matmul, same dtype), side by side")
    print(f"  {'problem':16s} {'mma_sync TFLOP/s':>17s} {'cuBLAS TFLOP/s':>15s} {'% cuBLAS':>9s} {'rel diff':>9s}")
    for name, ours_tf, cub_tf, err in rows:
        print(f"  {name:16s} {ours_tf:17.1f} {cub_tf:15.1f} {100 * ours_tf / cub_tf:8.0f}% {err:9.1e}")
    if fused:
        print(f"  bf16 8192^3 GEMM+bias+GELU(tanh): mma_sync fused {fused[0]:.3f} ms, torch eager {fused[1]:.3f} ms, "
              f"speed-up {fused[1] / fused[0]:.2f}x, rel diff {fused[2]:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
