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


# cublasGemmEx's data and compute types (library_types.h, cublas_api.h).
CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 = 68, 77
CUBLAS_GEMM_DEFAULT = -1
_GEMM_EX = {  # format -> (data type of A, B and C; compute type)
    "fp16": (CUDA_R_16F, CUBLAS_COMPUTE_32F),
    "bf16": (CUDA_R_16BF, CUBLAS_COMPUTE_32F),
    "tf32": (CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32),
}


def device_pointer(x) -> int:
    """The device address of a CuPy array or a torch tensor."""
    return int(x.data_ptr()) if hasattr(x, "data_ptr") else int(x.data.ptr)


def cublas_gemm_ex(a, b, c, alpha: float = 1.0, beta: float = 0.0, fmt: str = "bf16"):
    """C = alpha*A@B + beta*C through cublasGemmEx: fp16 or bf16 in and out with fp32 accumulation, or fp32
    with TF32 tensor cores (`fmt` "fp16", "bf16", "tf32"). A, B, C: C-contiguous CuPy arrays or torch
    tensors of the format's dtype (bf16 only as torch tensors); the call is enqueued on CuPy's current
    stream. The compute type is explicit, so neither CUPY_TF32 nor torch's reduced-precision switches
    change what runs. Returns C."""
    cp = require_cupy()
    from cupy_backends.cuda.libs import cublas

    if fmt not in _GEMM_EX:
        raise ValueError(f"cublas_gemm_ex runs {', '.join(_GEMM_EX)}, not {fmt!r}")
    data_type, compute = _GEMM_EX[fmt]
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return c
    handle = cp.cuda.device.get_cublas_handle()
    cublas.setStream(handle, cp.cuda.get_current_stream().ptr)
    cublas.setMathMode(handle, CUBLAS_DEFAULT_MATH)
    al = np.array(alpha, dtype=np.float32)  # the scale type of a 32F compute type is float
    be = np.array(beta, dtype=np.float32)
    # Row-major C = A B is column-major C^T = B^T A^T, as in cublas_sgemm.
    cublas.gemmEx(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, n, m, k,
                  al.ctypes.data, device_pointer(b), data_type, max(n, 1), device_pointer(a), data_type, max(k, 1),
                  be.ctypes.data, device_pointer(c), data_type, max(n, 1), compute, CUBLAS_GEMM_DEFAULT)
    return c


# ------------------------------------------------------------------------------------------ torch


def torch_unavailable_reason() -> str | None:
    """Why the torch peer cannot run here, or None when it can."""
    try:
        import torch
    except Exception as exc:
        return f"torch is not installed ({type(exc).__name__})"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return None


def triton_unavailable_reason() -> str | None:
    """Why the Triton peer cannot run here (it needs torch for streams and tensors), or None."""
    reason = torch_unavailable_reason()
    if reason:
        return f"the Triton peer needs torch: {reason}"
    try:
        import triton  # noqa: F401
    except Exception as exc:
        return f"triton is not installed ({type(exc).__name__})"
    return None


class StrictTorch:
    """Turns TF32 off for torch's matmuls (allow_tf32 = False, precision 'highest'); `restore` undoes it.
    With `tf32=True` it turns TF32 on instead (the tf32 format's torch peer)."""

    def __init__(self, tf32: bool = False):
        import torch

        self._torch = torch
        self._saved = (torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")

    def restore(self) -> None:
        self._torch.backends.cuda.matmul.allow_tf32 = self._saved[0]
        self._torch.set_float32_matmul_precision(self._saved[1])


def torch_on_cupy_stream(device):
    """A function returning a context in which torch issues its work on CuPy's current stream (torch's own
    default stream is not ordered with a non-blocking CuPy stream); `device` is a torch device."""
    import torch

    cp = require_cupy()
    streams: dict[int, object] = {}

    def on_current_stream():
        ptr = cp.cuda.get_current_stream().ptr
        s = streams.get(ptr)
        if s is None:
            s = streams[ptr] = torch.cuda.ExternalStream(ptr, device=device)
        return torch.cuda.stream(s)

    return on_current_stream


def _torch_views(a, b, c):
    """Zero-copy torch views of CuPy arrays, and a function giving torch the current CuPy stream."""
    import torch

    ta, tb, tc = (x if isinstance(x, torch.Tensor) else torch.from_dlpack(x) for x in (a, b, c))
    return ta, tb, tc, torch_on_cupy_stream(tc.device)


def bind_torch(a, b, c, alpha: float = 1.0, beta: float = 0.0):
    """A call computing C = alpha*A@B + beta*C with torch (cuBLAS underneath) on the current CuPy stream.

    The caller keeps TF32 off (`StrictTorch`). C is written in place, so no allocation happens in the
    call and it can be captured in a CUDA graph.
    """
    ta, tb, tc, on_stream = _torch_views(a, b, c)
    import torch

    if alpha == 1.0 and beta == 0.0:
        def call():
            with on_stream():
                torch.matmul(ta, tb, out=tc)
    else:
        def call():
            with on_stream():
                tc.addmm_(ta, tb, beta=beta, alpha=alpha)  # beta = 0: C is not read
    return call


def bind_triton(a, b, c, alpha: float = 1.0, beta: float = 0.0, tf32: bool = False):
    """A call to gemmlab's Triton matmul on the current CuPy stream: strict fp32 (`input_precision="ieee"`)
    for float32 operands, or with `tf32`; fp16 and bf16 operands on the tensor cores, fp32 accumulation."""
    from . import triton_matmul

    ta, tb, tc, on_stream = _torch_views(a, b, c)

    def call():
        with on_stream():
            triton_matmul.gemm(ta, tb, tc, alpha, beta, tf32=tf32)
    return call
