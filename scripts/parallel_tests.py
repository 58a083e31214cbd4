"""GPU test files run as many pytest processes at once, one per test function (its parametrizations together,
so they share the compiled kernels), on a machine with more cores than one process's compiles use.

    PYTHONPATH=src python3 scripts/parallel_tests.py tests/test_fp8_gpu.py tests/test_torch_gpu.py [--workers 12]

One line per function (passed, failed, skipped counts and seconds) is printed and appended to
$OUT/tests_summary.txt (or ./out) as each finishes, so a run cut short still leaves what finished; every
function's log goes into one file, $OUT/tests_logs.txt, failures first. Exit status 1 when any failed.
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


def run_one(node: str) -> tuple[str, dict[str, int], float, int, str]:
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
                          capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    last = text.strip().splitlines()[-1] if text.strip() else ""
    counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in COUNTS.findall(last)}
    return node, counts, time.time() - t0, proc.returncode, text


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--workers", type=int, default=12)
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    summary = out / "tests_summary.txt"
    summary.write_text("")
    nodes = functions(args.files)
    t0 = time.time()
    total: dict[str, int] = {}
    failed, passed = [], []
    with cf.ThreadPoolExecutor(args.workers) as ex:
        for fut in cf.as_completed([ex.submit(run_one, n) for n in nodes]):
            node, counts, secs, rc, text = fut.result()
            for kind, n in counts.items():
                total[kind] = total.get(kind, 0) + n
            (failed if rc not in (0, 5) else passed).append((node, text))  # 5: every test skipped or deselected
            line = f"{node:90s} {' '.join(f'{n} {k}' for k, n in counts.items()) or f'exit {rc}'} {secs:5.0f} s"
            print(line, flush=True)
            with summary.open("a") as f:
                f.write(line + "\n")
    last = (f"total: {' '.join(f'{n} {k}' for k, n in total.items())} in {time.time() - t0:.0f} s; "
            f"{len(failed)} function(s) not passed")
    print(last, flush=True)
    with summary.open("a") as f:
        f.write(last + "\n")
    (out / "tests_logs.txt").write_text("".join(f"===== {node}\n{text}\n" for node, text in failed + passed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
