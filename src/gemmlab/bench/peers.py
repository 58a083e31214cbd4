"""Reference implementations the ladder is measured against.

cuBLAS is called through CuPy's raw binding of `cublasSgemm`, not `cupy.matmul`, so the precision is
explicit: the handle's math mode is set to CUBLAS_DEFAULT_MATH (strict fp32, no TF32) for the call,
whatever CUPY_TF32 says, and alpha/beta and an in-place C follow BLAS semantics exactly.
"""

from __future__ import annotations

import numpy as np

from ..runtime.device import require_cupy

CUBLAS_DEFAULT_MATH = 0


def cublas_sgemm(a, b, c=None, alpha: float = 1.0, beta: float = 0.0):
    """C = alpha*A@B + beta*C for C-contiguous float32 CuPy arrays, strict fp32. Returns C."""
    cp = require_cupy()
    from cupy_backends.cuda.libs import cublas

    m, k = a.shape
    n = b.shape[1]
    if c is None:
        c = cp.empty((m, n), dtype=cp.float32)
    for name, x in (("A", a), ("B", b), ("C", c)):
        if x.dtype != cp.float32 or not x.flags.c_contiguous:
            raise ValueError(f"cublas_sgemm needs C-contiguous float32 arrays; {name} is {x.dtype}")
    if m == 0 or n == 0:
        return c
    handle = cp.cuda.device.get_cublas_handle()
    cublas.setStream(handle, cp.cuda.get_current_stream().ptr)
    cublas.setMathMode(handle, CUBLAS_DEFAULT_MATH)
    al = np.array(alpha, dtype=np.float32)
    be = np.array(beta, dtype=np.float32)
    # Row-major C = A B is column-major C^T = B^T A^T: swap the operands, no transposes.
    cublas.sgemm(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, n, m, k,
                 al.ctypes.data, b.data.ptr, max(n, 1), a.data.ptr, max(k, 1),
                 be.ctypes.data, c.data.ptr, max(n, 1))
    return c
