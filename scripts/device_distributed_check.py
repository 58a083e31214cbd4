"""One command on a host of several GPUs for the tensor-parallel products; a summary table is printed last.

    PYTHONPATH=src python3 scripts/device_distributed_check.py [--gpus 2,4] [--chunks 1,2,4] [--budget-ms 300]
        [--timeouts 600,300,900]

Steps (every log under $OUT, or ./out), NVLink multicast off in this process and every one it starts:
1. the two-GPU tests (tests/test_distributed_gpu.py);
2. `gemmlab micro --link W` for each W: the collectives' bus bandwidth by size, a peer copy;
3. `gemmlab bench --distributed W --chunks ...` for each W on the three reference shapes: gemmlab's rings
   against sequential NCCL + torch.matmul and torch's fused operators, the model beside them.
The table gives, per W, kind and shape: gemmlab against sequential, its share of the ideal bound, against
torch's fused operator, and the model's overlapped and sequential times over the measured ones.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("OUT", "out")).resolve()
ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def run(cmd: list[str], log: str, timeout: int) -> int:
    env = dict(os.environ, **ENV, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               COLUMNS="200")
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
    args = ap.parse_args()
    t_tests, t_link, t_bench = (int(v) for v in args.timeouts.split(","))
    os.environ.update(ENV)
    OUT.mkdir(parents=True, exist_ok=True)
    import torch

    have = torch.cuda.device_count()
    worlds = [w for w in (int(v) for v in args.gpus.split(",")) if w <= have]
    summary = []
    rc = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_distributed_gpu.py"],
             "tests.log", t_tests)
    summary.append(f"two-GPU tests: {'PASS' if rc == 0 else 'FAIL'}")
    for w in worlds:
        run([sys.executable, "-m", "gemmlab", "micro", "--link", str(w), "--out", str(OUT / f"link-{w}.json")],
            f"link-{w}.log", t_link)
        rc = run([sys.executable, "-m", "gemmlab", "bench", "--distributed", str(w), "--chunks", args.chunks,
                  "--budget-ms", args.budget_ms, "--out", str(OUT)], f"bench-{w}.log", t_bench)
        path = OUT / f"distributed-{w}-nccl.json"
        if rc or not path.exists():
            summary.append(f"bench --distributed {w}: FAIL (rc {rc})")
            continue
        for r in json.loads(path.read_text()):
            s, p = r["seconds"], r["predicted"]
            ours, seq, fused, ideal = s["gemmlab"], s["sequential"], s.get("torch_fused"), r["ideal"]
            best = min((v, c) for c, v in s.items() if c.startswith("gemmlab") and v)
            summary.append(
                f"W={w} {r['kind']:>14} {r['m']}x{r['n']}x{r['k']}: x sequential {seq / ours:.2f}, of ideal "
                f"{ideal / ours:.0%}, host {(s.get('host_gemmlab') or float('nan')) * 1e3:.2f} ms, x torch fused "
                f"{fused / ours if fused else float('nan'):.2f}, best chunks "
                f"{best[1]} ({ideal / best[0]:.0%} of ideal); model / measured overlapped "
                f"{p.get('overlapped', float('nan')) / ours:.2f}, sequential {p.get('sequential', float('nan')) / seq:.2f}")
    if not worlds:
        summary.append(f"no run: this host has {have} GPU(s)")
    print("\n".join(["", "SUMMARY", *summary]))
    (OUT / "summary.txt").write_text("\n".join(summary) + "\n")


if __name__ == "__main__":
    main()
