"""Launch one GEMM a few times so that ncu can profile one launch (run under ncu).

    ncu --clock-control none -k regex:wgmma --launch-skip 2 --launch-count 1 --section SpeedOfLight \
        python3 scripts/ncu_once.py --kernel wgmma --dtype bfloat16 --n 4096 BN=128 STAGES=6
    ncu --clock-control none -k regex:sgemm --launch-skip 2 --launch-count 1 --section WarpStateStats \
        python3 scripts/ncu_once.py --kernel sgemm --dtype float32 --n 4096
    ncu --clock-control none -k regex:gemm --launch-skip 2 --launch-count 1 --section SpeedOfLight \
        python3 scripts/ncu_once.py --kernel cublas --dtype bfloat16 --n 4096
    ncu --clock-control none -k regex:"wgmma|nvjet" --launch-skip 2 --launch-count 1 --section SpeedOfLight \
        python3 scripts/ncu_once.py --kernel cublas --batch 96 --shape 2048x2048x128
    ncu --clock-control none -k regex:wgmma --launch-skip 2 --launch-count 1 --section WarpStateStats \
        python3 scripts/ncu_once.py --dtype e4m3 --scales block --shape 4096x7168x16384
"""

import argparse

import cupy as cp

import gemmlab

ap = argparse.ArgumentParser()
ap.add_argument("--kernel", default="wgmma", help="a rung, or cublas (torch.matmul for bfloat16, else CuPy)")
ap.add_argument("--dtype", default="bfloat16", choices=("float32", "float16", "bfloat16", "e4m3"))
ap.add_argument("--scales", default="tensor", help="e4m3: tensor, row or block (1 x 128 of A, 128 x 128 of W)")
ap.add_argument("--n", type=int, default=4096)
ap.add_argument("--shape", default="", help="MxNxK (instead of --n)")
ap.add_argument("--batch", type=int, default=0, help="a batch of this many products (bfloat16; cublas: torch.bmm)")
ap.add_argument("--weight", action="store_true", help="B as a linear layer's weight, W.t() with W of N x K (bfloat16)")
ap.add_argument("--pitch", action="store_true", help="A and B in rows padded to whole 128-byte lines (bfloat16)")
ap.add_argument("--act", default="", help="fused bias (per column) and this activation ('none': bias alone)")
ap.add_argument("params", nargs="*", help="the rung's parameters, NAME=VALUE")
args = ap.parse_args()
params = {k: int(v) for k, v in (p.split("=") for p in args.params)}
m, n, k = (int(x) for x in args.shape.split("x")) if args.shape else (args.n,) * 3
if args.dtype == "e4m3":  # 8-bit: W (N x K) quantized, B = W.t(); torch._scaled_mm per tensor as the reference
    import torch

    kinds = {"tensor": ("tensor", "tensor"), "row": ("row", "row"), "block": ("1x128", "128x128")}[args.scales]
    qa, sa = gemmlab.quantize(torch.randn(m, k, device="cuda"), "e4m3", kinds[0])
    qw, sw = gemmlab.quantize(torch.randn(n, k, device="cuda") / k**0.5, "e4m3", kinds[1])
    for _ in range(4):
        if args.kernel == "cublas":
            torch._scaled_mm(qa, qw.t(), scale_a=sa.reshape(()), scale_b=sw.reshape(()), out_dtype=torch.bfloat16)
        else:
            gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sw.t(), kernel=args.kernel, **params)
    torch.cuda.synchronize()
    raise SystemExit(0)
if args.batch:  # a batch of equal products, bf16 torch tensors: torch.bmm against gemmlab.matmul
    import torch

    a = torch.randn(args.batch, m, k, device="cuda").bfloat16()
    b = torch.randn(args.batch, k, n, device="cuda").bfloat16()
    for _ in range(4):
        if args.kernel == "cublas":
            torch.bmm(a, b)
        else:
            gemmlab.matmul(a, b, kernel=args.kernel, **params)
    torch.cuda.synchronize()
    raise SystemExit(0)
if args.dtype == "bfloat16":  # CuPy has no bfloat16 everywhere: torch tensors
    import torch

    a = torch.randn(m, k, device="cuda").bfloat16()
    b = torch.randn(n, k, device="cuda").bfloat16().t() if args.weight else torch.randn(k, n, device="cuda").bfloat16()
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    if args.pitch:  # the same values, each row starting on a 128-byte line (views into wider arrays)
        def _lines(x):
            wide = torch.empty(x.shape[0], -(-x.shape[1] // 64) * 64, device="cuda", dtype=x.dtype)
            wide[:, :x.shape[1]] = x
            return wide[:, :x.shape[1]]

        a, b = _lines(a), _lines(b.t()).t() if args.weight else _lines(b)
else:
    a = cp.random.rand(m, k, dtype=cp.float32).astype(args.dtype)
    b = cp.random.rand(k, n, dtype=cp.float32).astype(args.dtype)
    c = cp.empty((m, n), args.dtype)
extra = {}
if args.act:
    extra = dict(bias=cp.asarray(cp.random.rand(n, dtype=cp.float32)), activation=args.act)
for _ in range(4):
    if args.kernel == "cublas":  # the reference, for a side-by-side profile (torch for bf16, else CuPy)
        if args.dtype == "bfloat16":
            torch.matmul(a, b, out=c)
        else:
            cp.matmul(a, b, out=c)
    else:
        gemmlab.matmul(a, b, c, kernel=args.kernel, **extra, **params)
cp.cuda.Device().synchronize()
