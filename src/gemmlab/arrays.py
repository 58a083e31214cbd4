"""Arrays in and out: numpy (host), CuPy, torch and anything with __cuda_array_interface__ or DLPack.

Rules, in one place:
- Host arrays (numpy, CPU torch tensors) are copied to the GPU and the result copied back.
- Device arrays are used where they lie, without copies, when each row is contiguous (unit stride
  along columns) and rows are evenly spaced: the row spacing becomes the BLAS leading dimension.
  Any other layout (a transposed view, Fortran order, a negative or zero stride) is copied to a
  C-contiguous buffer first.
- The result comes back as the type that came in: numpy for numpy, CuPy for CuPy, torch for torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .runtime.device import require_cupy

NUMPY, CUPY, TORCH_CUDA, TORCH_CPU, FOREIGN_CUDA = "numpy", "cupy", "torch_cuda", "torch_cpu", "foreign_cuda"


def kind_of(x: Any) -> str:
    """Classify an array without importing the library it came from."""
    if isinstance(x, np.ndarray):
        return NUMPY
    mod = type(x).__module__.split(".")[0]
    if mod == "cupy":
        return CUPY
    if mod == "torch":
        return TORCH_CUDA if x.is_cuda else TORCH_CPU
    if hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack__"):
        return FOREIGN_CUDA
    raise TypeError(
        f"expected a numpy, CuPy or torch array (or one with __cuda_array_interface__ / DLPack), got {type(x).__name__}"
    )


def is_host(kind: str) -> bool:
    return kind in (NUMPY, TORCH_CPU)


def dtype_name(x: Any, kind: str) -> str:
    """'float32', 'float16', 'bfloat16', ... for any supported array type."""
    if kind in (TORCH_CUDA, TORCH_CPU):
        return str(x.dtype).replace("torch.", "")
    return str(x.dtype)


def to_host_numpy(x: Any, kind: str) -> np.ndarray:
    if kind == TORCH_CPU:
        return x.detach().numpy()
    return x


def to_cupy(x: Any, kind: str):
    """A CuPy view of a device array (no copy), or a device copy of a host array."""
    cp = require_cupy()
    if kind == CUPY:
        return x
    if kind == TORCH_CUDA:
        return cp.asarray(x.detach())  # zero-copy through __cuda_array_interface__
    if kind == FOREIGN_CUDA:
        if hasattr(x, "__cuda_array_interface__"):
            return cp.asarray(x)
        return cp.from_dlpack(x)
    return cp.asarray(to_host_numpy(x, kind))


def from_cupy(result, kind: str, like: Any = None):
    """Return `result` (a CuPy array) as the array type the caller used."""
    if kind == CUPY or kind == FOREIGN_CUDA:
        return result
    if kind == TORCH_CUDA:
        import torch

        return torch.from_dlpack(result)
    host = result.get()
    if kind == TORCH_CPU:
        import torch

        return torch.from_numpy(host)
    return host


@dataclass(frozen=True)
class RowMajorView:
    """A device matrix as the kernels see it: base array, rows, columns, leading dimension (elements)."""

    array: Any
    rows: int
    cols: int
    ld: int


def row_major(x) -> RowMajorView:
    """Describe a 2-D CuPy array as (rows, cols, ld), copying it only when its layout needs it."""
    cp = require_cupy()
    rows, cols = x.shape
    item = x.itemsize
    s0, s1 = x.strides
    unit_cols = s1 == item or cols <= 1
    spaced_rows = s0 > 0 and s0 % item == 0 and s0 // item >= cols or rows <= 1
    if not (unit_cols and spaced_rows):
        x = cp.ascontiguousarray(x)
        s0 = x.strides[0]
    ld = max(s0 // item, cols, 1) if rows > 1 else max(cols, 1)
    return RowMajorView(x, rows, cols, ld)


def rows_aligned(v: RowMajorView, align: int = 16) -> bool:
    """Whether the base address and the row pitch of `v` are multiples of `align` bytes (an empty matrix
    counts as aligned: nothing of it is read)."""
    return v.rows == 0 or v.cols == 0 or (v.array.data.ptr % align == 0 and (v.ld * v.array.itemsize) % align == 0)


def aligned_rows(v: RowMajorView, align: int = 16) -> RowMajorView:
    """`v` itself when its base address and row pitch are multiples of `align` bytes; otherwise a copy whose
    rows are padded to the next multiple (the padding is never read: the matrix keeps its column count)."""
    item = v.array.itemsize
    if rows_aligned(v, align):
        return v
    cp = require_cupy()
    step = max(align // item, 1)
    ld = -(-v.cols // step) * step
    out = cp.empty((v.rows, ld), dtype=v.array.dtype)[:, :v.cols]  # rows x cols, rows ld apart
    out[...] = v.array[:, :v.cols]
    return RowMajorView(out, v.rows, v.cols, ld)


def data_span(x) -> tuple[int, int]:
    """[start, end) byte addresses a CuPy array may touch, for overlap checks."""
    if x.size == 0:
        return (0, 0)
    ptr = x.data.ptr
    lo = ptr + sum(min(0, (n - 1) * s) for n, s in zip(x.shape, x.strides))
    hi = ptr + sum(max(0, (n - 1) * s) for n, s in zip(x.shape, x.strides)) + x.itemsize
    return lo, hi


def overlaps(x, y) -> bool:
    a0, a1 = data_span(x)
    b0, b1 = data_span(y)
    return a0 < b1 and b0 < a1 and a0 != a1 and b0 != b1
