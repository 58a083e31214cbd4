"""GPU test files run as many pytest processes at once, one per test function (its parametrizations together,
so they share the compiled kernels), on a machine with more cores than one process's compiles use.

    PYTHONPATH=src python3 scripts/parallel_tests.py tests/test_fp8_gpu.py tests/test_torch_gpu.py [--workers 12]

Each function's log goes to $OUT/tests/<file>__<function>.log (or ./out); the last lines printed are one line
per function (passed, failed, skipped counts and seconds) and the total. Exit status 1 when any failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import re
import subprocess
import sys
import time
from pathlib import Path

COUNTS = re.compile(r"(\d+) (passed|failed|skipped|error|errors|xfailed|xpassed)")


def functions(files: list[str]) -> list[str]:
    """file::function ids in collection order, parametrizations folded into one."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                          capture_output=True, text=True)
    seen: dict[str, None] = {}
    for line in proc.stdout.splitlines():
        if "::" in line:
            seen[line.split("[", 1)[0]] = None
    if not seen:
        sys.exit(f"nothing collected from {files}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return list(seen)


def run_one(node: str, logs: Path) -> tuple[str, dict[str, int], float, int]:
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
                          capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    (logs / (node.replace("/", "_").replace("::", "__") + ".log")).write_text(text)
    last = text.strip().splitlines()[-1] if text.strip() else ""
    counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in COUNTS.findall(last)}
    return node, counts, time.time() - t0, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--workers", type=int, default=12)
    args = ap.parse_args()
    logs = Path(os.environ.get("OUT", "out")) / "tests"
    logs.mkdir(parents=True, exist_ok=True)
    nodes = functions(args.files)
    t0 = time.time()
    total: dict[str, int] = {}
    bad = 0
    with cf.ThreadPoolExecutor(args.workers) as ex:
        for node, counts, secs, rc in ex.map(lambda n: run_one(n, logs), nodes):
            for kind, n in counts.items():
                total[kind] = total.get(kind, 0) + n
            bad += rc not in (0, 5)  # 5: every test deselected or skipped at collection
            print(f"{node:90s} {' '.join(f'{n} {k}' for k, n in counts.items()) or f'exit {rc}'} {secs:5.0f} s",
                  flush=True)
    print(f"total: {' '.join(f'{n} {k}' for k, n in total.items())} in {time.time() - t0:.0f} s; "
          f"{bad} function(s) not passed", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
