"""The shape suite as Markdown rows: `gemmlab bench --suite`'s measurement (gemmlab.bench.suite), kernel="auto"
against cuBLAS (torch.matmul), FP32 (TF32 off) and BF16, L2 flushed, each call as a torch user makes it.

    PYTHONPATH=src python3 scripts/shape_suite.py [--dtypes bfloat16,float32] [--quick] [--only llm]

Prints one row per shape and dtype as it is measured, then per dtype the geometric mean of cuBLAS time /
gemmlab time and the worst shape (a shape that failed verification counts as 0.000). The shapes, operands,
tolerances and timing are the harness's (`gemmlab.bench.suite`); this script only formats them.
"""

from __future__ import annotations

import argparse

from gemmlab.bench import suite

HEADER = ("| dtype | group | M | N | K | B | torch ms | gemmlab ms | gemmlab TFLOP/s | x cuBLAS | rel. error |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")


def row(pair: suite.Pair) -> str:
    """One shape's Markdown row; a shape that failed shows FAILED and its error."""
    g = pair.gemmlab
    group = suite.group_of(g.shape)
    head = f"| {g.dtype} | {group} | {g.m} | {g.n} | {g.k} | {suite.b_layout(group)} |"
    err = f"{g.rel_error:.1e}" if g.rel_error is not None else g.note
    if pair.ratio is None:
        return f"{head} | | | FAILED | {err} |"
    return (f"{head} {pair.torch.median_ms:.4f} | {g.median_ms:.4f} | {g.tflops:.1f} | {pair.ratio:.3f} | "
            f"{err} |")


def summary_line(s: suite.Summary) -> str:
    """The summary line of one dtype; a failed shape is the worst, at 0.000."""
    worst, at = (0.0, min(s.failures)) if s.failures else (s.worst, s.worst_shape)
    geo = s.geomean if s.geomean is not None else 0.0
    where = " x ".join(map(str, at)) if at else "-"
    return f"{s.dtype}: {s.count} shapes, geometric mean x cuBLAS {geo:.3f}, worst {worst or 0.0:.3f} at {where}"


def main() -> None:
    ap = argparse.ArgumentParser(description="the shape suite (gemmlab bench --suite) as Markdown rows")
    ap.add_argument("--dtypes", default="bfloat16,float32", help="bfloat16, float32, comma-separated, or both")
    ap.add_argument("--only", default="", help="groups, comma-separated: " + ", ".join(suite.GROUPS))
    ap.add_argument("--quick", action="store_true", help="every third shape")
    ap.add_argument("--budget-ms", type=float, default=suite.DEFAULT_BUDGET_MS / 2,
                    help="each call is sampled for up to twice this per shape")
    args = ap.parse_args()
    try:
        dtypes, groups = suite.parse_dtypes(args.dtypes), suite.parse_groups(args.only)
    except ValueError as exc:
        ap.error(str(exc))

    print(HEADER)
    res = suite.measure(dtypes, groups, args.quick, 2 * args.budget_ms, on_shape=lambda p: print(row(p), flush=True),
                        command="scripts/shape_suite.py")
    for s in suite.summarize(res).values():
        print(summary_line(s))


if __name__ == "__main__":
    main()
