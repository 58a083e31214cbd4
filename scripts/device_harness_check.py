"""One command on a GPU machine for the benchmark harness; a summary table of checks is printed last.

    PYTHONPATH=src python3 scripts/device_harness_check.py

Steps (about 5 minutes on an H100; every log and result lands under $OUT, or ./out):
1. the harness's GPU tests (pytest -m gpu on tests/test_harness*.py, test_bench*.py, test_report*.py);
2. `gemmlab bench` with no arguments (the main job), timed, its report checked for figures and tables;
3. a second run, compared with the first at N = 4096 (a full second bench when the first took under
   100 s, else `gemmlab sweep --sizes 4096` with the same defaults);
4. gemmlab's cuBLAS fp32 time at 4096 against triton.testing.do_bench on the same call (TF32 off).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("OUT", "out")).resolve()
checks: list[tuple[str, bool | None, str]] = []  # (what, passed (None: not run), detail)


def check(what: str, ok: bool | None, detail: str) -> None:
    checks.append((what, ok, detail))
    mark = {True: "PASS", False: "FAIL", None: "SKIP"}[ok]
    print(f"[{mark}] {what}: {detail}", flush=True)


def run(cmd: list[str], log: str, timeout: int) -> tuple[int, float, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               COLUMNS="160")
    t0 = time.time()
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as exc:
        rc, text = 124, f"{exc.stdout or ''}{exc.stderr or ''}\nTIMED OUT after {timeout} s"
    dt = time.time() - t0
    (OUT / log).write_text(text if isinstance(text, str) else text.decode(errors="replace"))
    return rc, dt, text if isinstance(text, str) else text.decode(errors="replace")


def tail(text: str, n: int) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def at_4096(results_dir: Path) -> dict[str, float]:
    doc = json.loads((results_dir / "results.json").read_text())
    return {r["label"]: r["median_ms"] for r in doc["records"]
            if r["m"] == r["n"] == r["k"] == 4096 and r["mode"] == "compute" and r["status"] == "ok"}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.time()
    import cupy as cp

    from gemmlab.runtime import device

    d = device.device_info()
    print(f"device: {d.name}, cc {d.compute_capability}, {d.sm_count} SMs, L2 {d.l2_bytes >> 20} MiB, "
          f"fp32 peak {d.peak_fp32_tflops:.1f} TFLOP/s, CuPy {cp.__version__}, clocks {device.clocks_now(d.index)}",
          flush=True)

    # 1. GPU tests
    tests = sorted(str(p.relative_to(ROOT)) for pat in ("test_harness*.py", "test_bench*.py", "test_report*.py")
                   for p in (ROOT / "tests").glob(pat))
    rc, dt, text = run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-s", "-rA", "-p", "no:cacheprovider",
                        *tests], "gpu_tests.log", 240)
    print(tail(text, 30), flush=True)
    summary_line = next((ln for ln in reversed(text.splitlines()) if " passed" in ln or " failed" in ln), "no summary")
    check("GPU tests of the harness", rc == 0, f"{summary_line.strip()} in {dt:.0f} s (log: gpu_tests.log)")
    for line in text.splitlines():  # the measured numbers the tests print
        if line.startswith(("device copy:", "cuBLAS 2048", "torch 256", "SM clock now")) or " cold: " in line:
            print("   ", line.strip())

    # 2. the main job
    bench1 = OUT / "bench1"
    rc, dt1, text = run([sys.executable, "-m", "gemmlab", "bench", "--out", str(bench1)], "bench1.log", 330)
    print(tail(text, 45), flush=True)
    check("gemmlab bench (no arguments) finishes", rc == 0, f"exit {rc} in {dt1:.0f} s (log: bench1.log)")
    check("gemmlab bench under 3 minutes", dt1 < 180 if rc in (0, 1) else False, f"{dt1:.0f} s")
    html = bench1 / "report.html"
    md = bench1 / "report.md"
    if html.exists() and md.exists():
        page, mdt = html.read_text(), md.read_text()
        n_img = page.count("data:image/png;base64,")
        wanted = ["Throughput against size", "Kernel only against end to end", "Table 1", "The GPU ladder",
                  "CPU and GPU", "% of cuBLAS"]
        missing = [w for w in wanted if w not in mdt]
        check("report has its figures and tables", n_img >= 4 and not missing,
              f"{n_img} embedded figures, {len(page) >> 10} KiB HTML; missing sections: {missing or 'none'}")
    else:
        check("report has its figures and tables", False, "report.html or report.md missing")

    # 3. a second run, compared at 4096
    first = at_4096(bench1) if (bench1 / "results.json").exists() else {}
    bench2 = OUT / "bench2"
    if dt1 < 100:
        how = "a second full gemmlab bench"
        cmd = [sys.executable, "-m", "gemmlab", "bench", "--out", str(bench2)]
    else:
        how = "gemmlab sweep --sizes 4096 (same defaults)"
        cmd = [sys.executable, "-m", "gemmlab", "sweep", "--sizes", "4096", "--no-cpu", "--modes", "compute",
               "--out", str(bench2)]
    rc2, dt2, text = run(cmd, "bench2.log", 300)
    second = at_4096(bench2) if (bench2 / "results.json").exists() else {}
    common = sorted(set(first) & set(second))
    diffs = {k: 100 * (second[k] / first[k] - 1) for k in common}
    worst = max(diffs.items(), key=lambda kv: abs(kv[1])) if diffs else ("-", float("nan"))
    print(f"run-to-run at 4096 ({how}, {dt2:.0f} s):")
    for k in common:
        print(f"    {k:24s} {first[k]:9.4f} ms  {second[k]:9.4f} ms  {diffs[k]:+6.2f}%")
    check("two runs agree within 3% at 4096", bool(common) and abs(worst[1]) < 3.0,
          f"{len(common)} kernels, worst {worst[0]} {worst[1]:+.2f}% ({how})")

    # 4. cuBLAS at 4096: gemmlab's harness against triton.testing.do_bench, same call, TF32 off
    try:
        import torch
        import triton.testing

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        from gemmlab.bench.peers import cublas_sgemm
        from gemmlab.bench.sweep import Plan
        from gemmlab.bench.timing import time_gpu

        n = 4096
        g = cp.random.default_rng(0)
        a = g.uniform(-1, 1, (n, n), dtype=cp.float32)
        b = g.uniform(-1, 1, (n, n), dtype=cp.float32)
        c = cp.empty((n, n), cp.float32)
        ta, tb, tc = (torch.from_dlpack(x) for x in (a, b, c))

        def cub():
            cublas_sgemm(a, b, c)

        def tor():
            torch.matmul(ta, tb, out=tc)

        opts = Plan(shapes=[]).timing
        ours, theirs, ours_t, theirs_t = [], [], [], []
        for _ in range(3):  # alternate, so clock drift falls on both
            ours.append(time_gpu(cub, options=opts).median_ms)
            theirs.append(triton.testing.do_bench(cub, warmup=25, rep=200, return_mode="median"))
            ours_t.append(time_gpu(tor, options=opts).median_ms)
            theirs_t.append(triton.testing.do_bench(tor, warmup=25, rep=200, return_mode="median"))
        o, t = sorted(ours)[1], sorted(theirs)[1]
        ot, tt = sorted(ours_t)[1], sorted(theirs_t)[1]
        fl = 2 * n**3 / 1e9
        print(f"cuBLAS 4096: gemmlab {o:.4f} ms ({fl / o:.1f} TFLOP/s), do_bench {t:.4f} ms ({fl / t:.1f} TFLOP/s)")
        print(f"torch.matmul 4096 (TF32 off): gemmlab {ot:.4f} ms, do_bench {tt:.4f} ms")
        rec = next((v for k, v in first.items() if k == "cublas"), None)
        extra = f"; the bench's own cuBLAS record {rec:.4f} ms ({100 * (rec / t - 1):+.1f}%)" if rec else ""
        check("cuBLAS fp32 at 4096 within 3% of triton do_bench", abs(o / t - 1) < 0.03,
              f"gemmlab {o:.4f} ms, do_bench {t:.4f} ms ({100 * (o / t - 1):+.2f}%){extra}")
        check("torch.matmul at 4096 within 3% of triton do_bench", abs(ot / tt - 1) < 0.03,
              f"gemmlab {ot:.4f} ms, do_bench {tt:.4f} ms ({100 * (ot / tt - 1):+.2f}%)")
    except ImportError as exc:
        check("cuBLAS fp32 at 4096 within 3% of triton do_bench", None, f"torch/triton missing: {exc}")

    # Summary, last.
    print("\n" + "=" * 118)
    print(f"gemmlab harness check on {d.name}: {time.time() - started:.0f} s in all; files under {OUT}")
    print(f"{'check':52s} {'result':6s} detail")
    for what, ok, detail in checks:
        print(f"{what:52s} {({True: 'PASS', False: 'FAIL', None: 'SKIP'}[ok]):6s} {detail}")
    if first:
        cub = first.get("cublas")
        print("\nat N = 4096, compute only (first bench): " + ", ".join(
            f"{k} {2 * 4096**3 / v / 1e9:.1f} TFLOP/s" + (f" ({100 * cub / v:.0f}% cuBLAS)" if cub else "")
            for k, v in sorted(first.items(), key=lambda kv: kv[1], reverse=True)))
    return 0 if all(ok is not False for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
