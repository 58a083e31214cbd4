"""Host time per call (what a repeat call costs the CPU): gemmlab.matmul beside torch.matmul on torch
tensors, fused bf16 (bias + gelu_tanh) beside torch.matmul alone and beside torch's eager ops, CuPy arrays
beside cupy.matmul, autograd-tracked inputs, and the custom operator called directly.

    PYTHONPATH=src python3 scripts/host_overhead.py [--calls 20] [--repeats 5] [--json PATH]

What is measured: the wall time of enqueuing `calls` calls with no synchronisation inside the loop, divided
by `calls`. The GPU is synchronised before each loop, so the launch queue starts empty: with at most 50
calls it never fills (it holds about 1024 launches; once full, an enqueue waits for the GPU, and a big
shape's GPU time would be counted as host time). A case's figure is the best of 5 medians, each the median
of `repeats` loops.
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import gemmlab

ROUNDS = 5  # best of this many medians
SHAPES = [(4096, 4096, 4096), (64, 4096, 4096), (256, 256, 256)]


def host_us(fn, calls: int, repeats: int) -> float:
    for _ in range(3):  # compile, plan and allocate before timing
        fn()
    medians = []
    for _ in range(ROUNDS):
        loops = []
        for _ in range(repeats):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            loops.append((time.perf_counter() - t0) / calls)
        medians.append(statistics.median(loops))
    torch.cuda.synchronize()
    return 1e6 * min(medians)


def _operands(dt, m, n, k, grad=False):
    a = torch.randn(m, k, device="cuda", dtype=dt, requires_grad=grad)
    b = torch.randn(k, n, device="cuda", dtype=dt, requires_grad=grad)
    bias = torch.randn(n, device="cuda", requires_grad=grad)  # fp32, as gemmlab takes it
    return a, b, bias


def _op_call(a, b):
    """A call of the custom operator with only A and B given (the rest at the schema's defaults), or
    (None, why) where there is none or its schema asks for arguments this script does not know."""
    try:
        import gemmlab.torch as gt
    except ImportError as e:
        return None, f"no gemmlab.torch ({e})"
    op = getattr(getattr(gt, "ops", None), "matmul_op", None)
    if op is None:
        return None, "gemmlab.torch.ops.matmul_op does not exist"
    try:
        schema = torch.ops.gemmlab.matmul.default._schema
    except (AttributeError, RuntimeError) as e:
        return None, f"no torch.ops.gemmlab.matmul ({e})"
    # A plain product's values for the arguments it may require ("params": no kernel parameters).
    known = {"c": None, "alpha": 1.0, "beta": 0.0, "bias": None, "activation": None, "residual": None,
             "out_dtype": None, "precision": None, "kernel": "auto", "params": ""}
    args = schema.arguments
    kw = {}
    for arg in args[2:]:  # A and B are the first two, whatever they are called
        if arg.has_default_value():
            continue
        if arg.name not in known:
            return None, f"unknown required argument {arg.name!r} in {schema}"
        kw[arg.name] = known[arg.name]
    return (lambda: op(a, b, **kw)), None


def cases():
    """(case, shape, gemmlab fn, baseline name, baseline fn) for every row; a row whose gemmlab fn is None
    carries a note instead."""
    for label, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        for m, n, k in SHAPES:
            a, b, _ = _operands(dt, m, n, k)
            yield label, (m, n, k), lambda a=a, b=b: gemmlab.matmul(a, b), "torch.matmul", \
                lambda a=a, b=b: torch.matmul(a, b)
    for grad in (False, True):
        tag = " autograd" if grad else ""
        for m, n, k in SHAPES:
            a, b, bias = _operands(torch.bfloat16, m, n, k, grad)
            bias16 = bias.detach().bfloat16().requires_grad_(grad)

            def fused(a=a, b=b, bias=bias):
                return gemmlab.matmul(a, b, bias=bias, activation="gelu_tanh")

            yield f"bf16 fused{tag}", (m, n, k), fused, "torch.matmul", lambda a=a, b=b: torch.matmul(a, b)
            yield f"bf16 fused{tag}", (m, n, k), fused, "torch eager ops", \
                lambda a=a, b=b, c=bias16: F.gelu(torch.matmul(a, b) + c, approximate="tanh")
    for m, n, k in SHAPES:
        a, b, _ = _operands(torch.bfloat16, m, n, k, grad=True)
        yield "bf16 autograd", (m, n, k), lambda a=a, b=b: gemmlab.matmul(a, b), "torch.matmul", \
            lambda a=a, b=b: torch.matmul(a, b)
    for m, n, k in SHAPES:
        a, b, _ = _operands(torch.bfloat16, m, n, k)
        fn, why = _op_call(a, b)
        yield "bf16 custom op", (m, n, k), fn or why, "torch.matmul", lambda a=a, b=b: torch.matmul(a, b)
    try:
        import cupy as cp
    except ImportError as e:
        yield "cupy", None, f"no CuPy ({e})", "cupy.matmul", None
        return
    for label, dt in (("cupy fp32", cp.float32), ("cupy fp16", cp.float16)):
        for m, n, k in SHAPES:
            a = cp.random.standard_normal((m, k), dtype=cp.float32).astype(dt)
            b = cp.random.standard_normal((k, n), dtype=cp.float32).astype(dt)
            yield label, (m, n, k), lambda a=a, b=b: gemmlab.matmul(a, b), "cupy.matmul", \
                lambda a=a, b=b: cp.matmul(a, b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20, help="calls enqueued per timed loop (at most 50)")
    ap.add_argument("--repeats", type=int, default=5, help="timed loops per median")
    ap.add_argument("--json", metavar="PATH", help="also write the rows to PATH as JSON")
    args = ap.parse_args()
    if not 1 <= args.calls <= 50:
        ap.error("--calls must be 1..50: more could fill the launch queue and time the GPU instead of the host")

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {args.calls} calls a loop, "
          f"best of {ROUNDS} medians of {args.repeats} loops")
    head = f"{'case':22s} {'shape':16s} {'gemmlab us':>10s} {'baseline us':>11s} {'ratio':>6s}  baseline"
    print(head + "\n" + "-" * len(head))
    rows = []
    for case, shape, fn, base_name, base in cases():
        shape_s = "x".join(map(str, shape)) if shape else "-"
        row = dict(case=case, shape=shape, baseline=base_name)
        if not callable(fn):
            print(f"{case:22s} {shape_s:16s} skipped: {fn}")
            rows.append(row | dict(note=fn))
            continue
        try:
            ours = host_us(fn, args.calls, args.repeats)
        except Exception as e:  # one unsupported case (say, autograd inputs) must not end the table
            print(f"{case:22s} {shape_s:16s} error: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
            rows.append(row | dict(note=f"{type(e).__name__}: {e}"))
            continue
        theirs = host_us(base, args.calls, args.repeats)
        row |= dict(gemmlab_us=ours, baseline_us=theirs, ratio=ours / theirs)
        rows.append(row)
        print(f"{case:22s} {shape_s:16s} {ours:10.1f} {theirs:11.1f} {ours / theirs:6.2f}  {base_name}")
    if any("ratio" in r for r in rows):
        w = max(rows, key=lambda r: r.get("ratio", 0))
        print(f"max ratio {w['ratio']:.2f} ({w['case']} {'x'.join(map(str, w['shape']))} vs {w['baseline']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, calls=args.calls,
                           repeats=args.repeats, rounds=ROUNDS, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
