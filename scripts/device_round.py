"""Several parts in one call on a GPU machine, each under its own time limit, so that one part's overrun costs
that part alone: every part is a shell command run from the checkout with PYTHONPATH set, its output kept in
$OUT/round_<n>.log (tail on the console), and a table last: part, exit status, seconds, its last line.

    PYTHONPATH=src python3 scripts/device_round.py --total 560 \
        "150:python3 scripts/parallel_tests.py tests/test_wgmma_split_gpu.py --workers 15" \
        "90:python3 scripts/split_probe.py --groups narrow" \
        "120:python3 scripts/shape_suite.py --dtypes bfloat16 --only llm,long_k"

A part is "SECONDS:COMMAND". A part whose limit would pass the round's --total (seconds from the start) is
given what is left, and parts with less than --min-seconds left are not started (said in the table).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_part(text: str) -> tuple[float, str]:
    """'SECONDS:COMMAND' -> (seconds, command); a clear error for anything else."""
    head, sep, command = text.partition(":")
    try:
        seconds = float(head)
    except ValueError:
        seconds = -1.0
    if not sep or seconds <= 0 or not command.strip():
        raise SystemExit(f"device_round: a part is 'SECONDS:COMMAND' with SECONDS > 0, got {text!r}")
    return seconds, command.strip()


def run_part(i: int, seconds: float, command: str, out: Path, env: dict[str, str], tail: int) -> tuple[str, float, str]:
    """(status, seconds taken, last line) of one part; its whole output in out/round_<i>.log."""
    log = out / f"round_{i}.log"
    start = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.Popen(["bash", "-c", command], cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)  # its own process group: a part's children stop with it
        try:
            status = f"rc {proc.wait(timeout=seconds)}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = f"over {seconds:.0f} s"
    took = time.monotonic() - start
    lines = log.read_text(errors="replace").splitlines()
    print(f"== part {i}: {command} ({status}, {took:.0f} s)")
    print("\n".join(lines[-tail:]), flush=True)
    last = next((ln for ln in reversed(lines) if ln.strip()), "")
    return status, took, last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="+", help="'SECONDS:COMMAND', run in order")
    ap.add_argument("--total", type=float, default=570.0, help="seconds for the whole round")
    ap.add_argument("--min-seconds", type=float, default=20.0, help="do not start a part with less left")
    ap.add_argument("--tail", type=int, default=15, help="lines of each part's output shown")
    args = ap.parse_args()
    parts = [parse_part(p) for p in args.parts]
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT / "scripts"),
                                                      env.get("PYTHONPATH", "")]))
    start = time.monotonic()
    rows = []
    for i, (seconds, command) in enumerate(parts):
        left = args.total - (time.monotonic() - start)
        if left < args.min_seconds:
            rows.append((i, command, "not started", 0.0, f"{left:.0f} s left of the round"))
            continue
        status, took, last = run_part(i, min(seconds, left), command, out, env, args.tail)
        rows.append((i, command, status, took, last))
    print("\n| part | command | status | s | last line |\n|---|---|---|---|---|")
    for i, command, status, took, last in rows:
        print(f"| {i} | {command[:60]} | {status} | {took:.0f} | {last[:100]} |")
    sys.exit(0 if all(r[2] == "rc 0" for r in rows) else 1)


if __name__ == "__main__":
    main()
