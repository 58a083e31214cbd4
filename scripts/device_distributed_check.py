"""One command on a host of several GPUs for the tensor-parallel products; a summary table is printed last.

    PYTHONPATH=src python3 scripts/device_distributed_check.py [--gpus 2,4] [--chunks 1,2,4] [--budget-ms 300]
        [--timeouts 600,300,900] [--shapes MxNxK,...] [--balanced] [--no-link] [--spread 4]

Steps (every log under $OUT, or ./out), NVLink multicast off in this process and every one it starts:
1. the two-GPU tests (tests/test_distributed_gpu.py);
2. `gemmlab micro --link W` for each W: the collectives' bus bandwidth by size, a peer copy;
3. `gemmlab bench --distributed W --chunks ...` for each W on the three reference shapes: gemmlab's rings
   against sequential NCCL + torch.matmul and torch's fused operators, the model beside them.
4. with --spread G: the shape suite (`gemmlab bench --suite`) over G GPUs with an empty kernel cache, then over
   one GPU and over G with it warm, each timed on the host.
The table gives, per W, kind and shape: the form gemmlab's default call took, gemmlab against sequential (and
each form by name), its share of the ideal bound and comm / GEMM, against torch's fused operator, and the
model's times over the measured ones; then per W the verdict lines (`bench.distributed.verdict`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from gemmlab.bench import distributed as tp  # noqa: E402  (the rows and their verdict lines)
from gemmlab.bench.records import load  # noqa: E402

OUT = Path(os.environ.get("OUT", "out")).resolve()
ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def run(cmd: list[str], log: str, timeout: int, **extra: str) -> int:
    env = dict(os.environ, **ENV, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               COLUMNS="200", **extra)
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as exc:
        rc, text = 124, f"timed out after {timeout} s\n{exc.stdout or ''}{exc.stderr or ''}"
    (OUT / log).write_text(text)
    print(text[-3000:], flush=True)
    return rc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="2,4")
    ap.add_argument("--chunks", default="1,2,4")
    ap.add_argument("--budget-ms", default="300")
    ap.add_argument("--timeouts", default="600,300,900", help="seconds for the tests, each link and each bench")
    ap.add_argument("--shapes", default="", help="full products M x N x K, comma-separated (default: the bench's)")
    ap.add_argument("--balanced", action="store_true", help="also the bench's balanced products (--balanced)")
    ap.add_argument("--no-link", action="store_true", help="leave out gemmlab micro --link")
    ap.add_argument("--no-tests", action="store_true", help="leave out the two-GPU tests")
    ap.add_argument("--spread", type=int, default=0, help="time the suite over this many GPUs against one")
    args = ap.parse_args()
    t_tests, t_link, t_bench = (int(v) for v in args.timeouts.split(","))
    os.environ.update(ENV)
    OUT.mkdir(parents=True, exist_ok=True)
    import torch

    have = torch.cuda.device_count()
    worlds = [w for w in (int(v) for v in args.gpus.split(",")) if w <= have]
    summary = []
    if not args.no_tests:
        rc = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_distributed_gpu.py"],
                 "tests.log", t_tests)
        summary.append(f"two-GPU tests: {'PASS' if rc == 0 else 'FAIL'}")
    shapes = [a for v in args.shapes.split(",") if v.strip() for a in ("--shape", v.strip())]
    for w in worlds:
        if not args.no_link:
            run([sys.executable, "-m", "gemmlab", "micro", "--link", str(w), "--out", str(OUT / f"link-{w}.json")],
                f"link-{w}.log", t_link)
        rc = run([sys.executable, "-m", "gemmlab", "bench", "--distributed", str(w), "--chunks", args.chunks,
                  *(["--balanced"] if args.balanced else []),
                  "--budget-ms", args.budget_ms, "--out", str(OUT), *shapes], f"bench-{w}.log", t_bench)
        path = OUT / "results.json"  # (each world size's rows merge into it, in its runs: bench.distributed)
        rows = [r for r in tp.rows_of(load([path])) if r.world == w] if path.exists() else []
        if rc or not rows:
            summary.append(f"bench --distributed {w}: FAIL (rc {rc})")
            continue
        for r in (row.to_dict() for row in rows):
            s, p = r["seconds"], r["predicted"]
            ours, seq, fused, ideal = s["gemmlab"], s["sequential"], s.get("torch_fused"), r["ideal"]
            best = min((v, c) for c, v in s.items() if c.startswith("gemmlab") and v)
            forms = ", ".join(f"{c[8:]} {seq / v:.2f}" for c, v in s.items()
                              if c in ("gemmlab_copy", "gemmlab_sequential", "gemmlab_ring", "gemmlab_copy_pieces") and v)
            hosts = ", ".join(f"{c[13:]} {v * 1e3:.2f}" for c, v in s.items() if c.startswith("host_gemmlab_") and v)
            summary.append(
                f"W={w} {r['kind']:>14} {r['m']}x{r['n']}x{r['k']} [{r.get('transport') or '-'}]: x sequential "
                f"{seq / ours:.2f} (by name: {forms}), of ideal {ideal / ours:.0%} (comm / GEMM "
                f"{r.get('balance') or float('nan'):.2f}{', within 2x' if r.get('balanced') else ''}), host "
                f"{(s.get('host_gemmlab') or float('nan')) * 1e3:.2f} ms ({hosts}), x torch fused "
                f"{fused / ours if fused else float('nan'):.2f}, best {best[1]} ({ideal / best[0]:.0%} of ideal); "
                f"model / measured gemmlab {p.get('gemmlab', p.get('overlapped', float('nan'))) / ours:.2f}, "
                f"sequential {p.get('sequential', float('nan')) / seq:.2f}, slots sum "
                f"{(s.get('slots_sum') or float('nan')) * 1e3:.3f} ms")
        summary += tp.verdict(rows)
    if args.spread > 1 and have >= args.spread:
        cache = tempfile.mkdtemp(prefix="gemmlab-spread-cache-")
        took = {}
        for label, g in (("cold", args.spread), ("one", 1), ("warm", args.spread)):
            t0 = time.perf_counter()
            cmd = [sys.executable, "-m", "gemmlab", "bench", "--suite", "--out", str(OUT / f"suite-{label}")]
            rc = run(cmd + (["--gpus", str(g)] if g > 1 else []), f"suite-{label}.log", t_bench,
                     GEMMLAB_CACHE_DIR=cache)
            took[label] = (time.perf_counter() - t0, rc)
        (c, rc_c), (o, rc_o), (wm, rc_w) = took["cold"], took["one"], took["warm"]
        summary.append(f"suite over {args.spread} GPUs, empty cache: {c:.1f} s (rc {rc_c}); one GPU {o:.1f} s (rc "
                       f"{rc_o}); {args.spread} GPUs {wm:.1f} s (rc {rc_w}): {wm / o:.2f} of one GPU's time")
    if not worlds:
        summary.append(f"no run: this host has {have} GPU(s)")
    print("\n".join(["", "SUMMARY", *summary]))
    (OUT / "summary.txt").write_text("\n".join(summary) + "\n")


if __name__ == "__main__":
    main()
