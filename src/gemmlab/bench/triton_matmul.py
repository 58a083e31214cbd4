"""gemmlab's Triton matmul: the block-tiling idea of the top rungs, written in Triton.

An optional peer (imported only where triton is installed). Each program computes a BM x BN tile of C:
it walks K in steps of BK, loading a BM x BK tile of A and a BK x BN tile of B (Triton stages them
through shared memory and pipelines the loads `num_stages` deep) and accumulates their product in
registers, as rung 05 does by hand. For float32 operands `input_precision="ieee"` keeps the products in
full fp32 (no TF32) unless TF32 is asked for; fp16 and bf16 operands go to the tensor cores with fp32
accumulation, and the result is rounded to C's type once, at the store.

Programs are ordered in groups of GROUP_M block-rows, so consecutive programs share panels of B while
they are still in L2 (with 8 rows per group, a wave of programs reads about 8x fewer distinct B panels
than a row-by-row order).

C = alpha * A @ B + beta * C on row-major torch tensors; indices are 32-bit (fine below 2^31 elements).
"""

from __future__ import annotations

import triton
import triton.language as tl

# One configuration for all sizes: 128 x 128 tiles, 32 deep, three stages (96 KiB of shared memory),
# 8 warps: each thread holds 64 accumulators.
BM, BN, BK, GROUP_M, NUM_WARPS, NUM_STAGES = 128, 128, 32, 8, 8, 3


@triton.jit
def _gemm_kernel(
    # pointers
    a_ptr, b_ptr, c_ptr,
    # sizes and leading dimensions (elements)
    M, N, K, lda, ldb, ldc,
    # epilogue scalars
    alpha, beta,
    # meta-parameters
    BETA_NONZERO: tl.constexpr, FP32_INPUTS: tl.constexpr, PRECISION: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    blocks_m = tl.cdiv(M, BM)
    blocks_n = tl.cdiv(N, BN)
    per_group = GROUP_M * blocks_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(blocks_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * lda + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * ldb + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] + k0 < K), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] + k0 < K) & (rn[None, :] < N), other=0.0)
        if FP32_INPUTS:
            acc = tl.dot(a, b, acc=acc, input_precision=PRECISION)
        else:
            acc = tl.dot(a, b, acc=acc)
        a_ptrs += BK
        b_ptrs += BK * ldb

    acc = acc * alpha
    c_ptrs = c_ptr + rm[:, None] * ldc + rn[None, :]
    in_c = (rm[:, None] < M) & (rn[None, :] < N)
    if BETA_NONZERO:
        acc += beta * tl.load(c_ptrs, mask=in_c, other=0.0).to(tl.float32)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=in_c)


def gemm(a, b, c, alpha: float = 1.0, beta: float = 0.0, tf32: bool = False):
    """C = alpha*A@B + beta*C in place for torch tensors of one dtype (float32, float16 or bfloat16) with
    unit column stride; float32 in strict fp32 unless `tf32`. Returns C."""
    m, k = a.shape
    n = b.shape[1]
    for name, x in (("A", a), ("B", b), ("C", c)):
        if x.stride(1) != 1 and x.shape[1] > 1:
            raise ValueError(f"the Triton matmul needs rows with unit stride; {name} has strides {x.stride()}")
    if not a.dtype == b.dtype == c.dtype:
        raise ValueError(f"the Triton matmul takes one dtype for A, B and C; got {a.dtype}, {b.dtype}, {c.dtype}")
    if m == 0 or n == 0:
        return c
    grid = (triton.cdiv(m, BM) * triton.cdiv(n, BN),)
    _gemm_kernel[grid](
        a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0), float(alpha), float(beta),
        BETA_NONZERO=beta != 0, FP32_INPUTS=a.element_size() == 4, PRECISION="tf32" if tf32 else "ieee", BM=BM, BN=BN, BK=BK, GROUP_M=GROUP_M,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return c
