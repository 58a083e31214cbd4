"""Batched products against torch.bmm on the GPU, side by side (interleaved, L2 flushed): the suite's batch
shapes (BATCHES below: square batches, attention-like short K, N = 128, wide K, an odd size), BF16 and strict
FP32, through `gemmlab bench --batch`'s measurement (bench.batched.measure). Prints one line per shape, the
ratio to torch.bmm last.

    PYTHONPATH=src python scripts/batch_probe.py [--dtype bfloat16,float32] [--budget 200] [--variants]
    PYTHONPATH=src python scripts/batch_probe.py --variants --dtype float32 --kernel sgemm \
        --shapes 12x1000x3001x200 --sets "" "BN=128,MIN_BLOCKS=2" "B_COPY=16"
"""

import argparse

from gemmlab.bench import batched as bz

BATCHES = [(2, 4096, 4096, 4096), (8, 2048, 2048, 2048), (32, 1024, 1024, 128), (64, 512, 512, 64),
           (16, 4096, 128, 4096), (4, 8192, 1024, 8192), (96, 2048, 2048, 128), (12, 1000, 3001, 200)]

VARIANTS = [{}, {"CLUSTER": 1}, {"BN": 128, "CLUSTER": 1}, {"SCHEDULE": 2, "BN": 128, "STAGES": 5, "HELD": 2},
            {"SCHEDULE": 2, "BM": 64, "BN": 256, "STAGES": 4, "HELD": 2, "CLUSTER": 1},
            {"SCHEDULE": 2, "BN": 128, "STAGES": 5, "HELD": 2, "CLUSTER": 1}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16,float32")
    ap.add_argument("--budget", type=float, default=200.0)
    ap.add_argument("--shared", default="none")
    ap.add_argument("--variants", action="store_true", help="a rung's parameter sets on the shapes, against bmm")
    ap.add_argument("--kernel", default="wgmma", help="--variants: the rung named with each set")
    ap.add_argument("--shapes", nargs="*", default=[], help="--variants: BATCHxMxNxK instead of the suite's")
    ap.add_argument("--sets", nargs="*", default=None, help='--variants: "NAME=VALUE,..." sets (rung 15\'s own if none)')
    args = ap.parse_args()
    if args.variants:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes] or BATCHES
        sets = VARIANTS if args.sets is None else [
            {k: int(v) for k, v in (kv.split("=") for kv in s.split(",") if kv)} for s in args.sets]
        variants(shapes, sets, dtype=args.dtype.split(",")[0], budget=args.budget, kernel=args.kernel)
        return
    rows = []
    for dtype in args.dtype.split(","):
        for bt, m, n, k in BATCHES:
            res = bz.measure(bz.Batch(bt, m, n, k, dtype=dtype, shared=args.shared), budget_ms=args.budget)
            by = {r.kernel: r for r in res.records}
            gl = next(r for r in res.records if r.family == "gpu")
            bmm = by.get(bz.BMM)
            if not gl.ok:
                rows.append(f"{dtype:9s} {bt:3d} x {m}x{n}x{k}: gemmlab {gl.status} {gl.note}")
                continue
            ratio = bmm.median_ms / gl.median_ms if bmm and bmm.ok else float("nan")
            rows.append(f"{dtype:9s} {bt:3d} x {m:5d}x{n:5d}x{k:5d} {gl.kernel:8s} {gl.median_ms * 1e3:9.1f} us "
                        f"{gl.tflops:7.1f} TF | bmm {bmm.median_ms * 1e3:9.1f} us {bmm.tflops:7.1f} TF | x bmm {ratio:.3f}")
            print(rows[-1], flush=True)
    print("\n".join(["", "summary"] + rows))


def variants(shapes, configs, dtype="bfloat16", budget=150.0, kernel="wgmma"):
    """gemmlab with each parameter set in `configs` (and kernel="auto") against torch.bmm, interleaved (strict
    fp32: TF32 off)."""
    import torch

    from variant_timing import compare

    torch.backends.cuda.matmul.allow_tf32 = False
    dt = getattr(torch, dtype)
    for bt, m, n, k in shapes:
        a = (torch.rand(bt, m, k, device="cuda") * 2 - 1).to(dt)
        b = (torch.rand(bt, k, n, device="cuda") * 2 - 1).to(dt)
        compare(f"{bt} x {m}x{n}x{k} {dtype} (x torch.bmm)", a, b, lambda: torch.bmm(a, b), configs, budget,
                kernel=kernel, atol=2e-1)


if __name__ == "__main__":
    main()
