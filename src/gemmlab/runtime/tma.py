"""Tensor maps for the copy engine (TMA): encoded on the host by the CUDA driver, passed to kernels by value.

A tensor map (`CUtensorMap`, 128 opaque bytes, 64-byte aligned) describes a matrix in global memory and
the box one bulk copy moves. Only the driver can encode one (`cuTensorMapEncodeTiled`); it is reached
here through ctypes, so no extra binding package is needed wherever CuPy itself runs. The result goes to
the kernel as a by-value argument: a NumPy structured scalar of 128 bytes with 64-byte alignment, which
CuPy copies into the kernel's parameter space like any other struct.

Kernel-agnostic: callers say what matrix and what box; nothing here knows about a particular rung.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from .device import libcuda

TENSOR_MAP_BYTES = 128
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}            # CU_TENSOR_MAP_SWIZZLE_NONE / 32B / 64B / 128B
_DATA_TYPES = {1: 0, 2: 1, 4: 2}                   # element bytes -> UINT8 / UINT16 / UINT32 (raw bits)
L2_PROMOTIONS = {0: 0, 64: 1, 128: 2, 256: 3}      # CU_TENSOR_MAP_L2_PROMOTION_NONE / 64B / 128B / 256B
LINE_BYTES = 128
STRADDLING_PROMOTION = 128  # bytes an L2 fill is widened to for rows that straddle 128-byte lines
_INTERLEAVE_NONE = 0
_OOB_FILL_ZERO = 0


class TensorMapError(ValueError):
    pass


@functools.lru_cache(maxsize=1)
def _driver():
    lib = libcuda()
    if lib is None:
        raise TensorMapError("the CUDA driver library (libcuda) is not loadable: tensor maps need an NVIDIA driver")
    fn = lib.cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                   ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                   ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    err = lib.cuGetErrorString
    err.restype = ctypes.c_int
    err.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return fn, err


@functools.lru_cache(maxsize=1)
def _arg_dtype() -> np.dtype:
    """128 bytes aligned to 64, as CuPy lays out a struct argument."""
    base = np.dtype([("opaque", np.uint64, (16,))])
    try:
        import cupy

        return cupy.make_aligned_dtype(base, alignment=64)
    except (ImportError, AttributeError):  # no CuPy: the bytes are still right, the alignment is CuPy's job
        return base


def l2_promotion(row_bytes: int) -> int:
    """The L2 fill width (bytes) of a map whose rows are `row_bytes` apart: 256 where every row starts on a
    128-byte line, STRADDLING_PROMOTION where rows straddle lines. With 256-byte fills on rows that straddle
    (3000 bf16 elements: 6,000 bytes), each 128-byte box row pulls two wide fills, and rung 15's main loop
    took 1,187 cycles per k step at 3000^3 against 807 at 3072^3. Measured, BF16 x cuBLAS, flushed
    (docs/journal.md, "2026-11-27: rows that straddle lines"): 3000^3 0.74 -> 0.85 with 128-byte fills,
    5000^3 0.81 -> 0.91 (no promotion: 0.84, 0.92); on whole lines 256-byte fills stay ahead (5000^3 in
    padded rows 0.91 against 0.86 with 128-byte ones)."""
    return 256 if row_bytes % LINE_BYTES == 0 else STRADDLING_PROMOTION


def check_2d(ptr: int, elem_bytes: int, rows: int, cols: int, row_stride: int, box_rows: int, box_cols: int,
             swizzle: int) -> list[str]:
    """Everything TMA would refuse about this matrix and box, as messages (empty when encodable)."""
    errs = []
    if elem_bytes not in _DATA_TYPES:
        errs.append(f"element size {elem_bytes} bytes (1, 2 or 4)")
    if ptr % 16:
        errs.append(f"base address {ptr:#x} is not 16-byte aligned")
    if (row_stride * elem_bytes) % 16 or row_stride * elem_bytes >= 1 << 40:
        errs.append(f"row stride {row_stride} elements ({row_stride * elem_bytes} bytes) is not a multiple of 16 bytes")
    if not (1 <= box_rows <= 256 and 1 <= box_cols <= 256):
        errs.append(f"box {box_rows} x {box_cols} (each side 1..256)")
    if swizzle not in SWIZZLES:
        errs.append(f"swizzle {swizzle} (0, 32, 64 or 128 bytes)")
    elif swizzle and box_cols * elem_bytes > swizzle:
        errs.append(f"box rows of {box_cols * elem_bytes} bytes exceed the {swizzle}-byte swizzle span")
    if rows < 1 or cols < 1 or rows >= 1 << 32 or cols >= 1 << 32:
        errs.append(f"matrix {rows} x {cols}")
    return errs


def check_depth(depth: int, depth_stride: int, elem_bytes: int) -> list[str]:
    """What TMA would refuse about a third dimension of `depth` matrices `depth_stride` elements apart."""
    errs = []
    if not 1 <= depth < 1 << 32:
        errs.append(f"depth {depth} (1 .. 2^32 - 1 matrices)")
    if depth > 1 and ((depth_stride * elem_bytes) % 16 or not 0 < depth_stride * elem_bytes < 1 << 40):
        errs.append(f"matrices {depth_stride} elements ({depth_stride * elem_bytes} bytes) apart, not a positive "
                    "multiple of 16 bytes")
    return errs


def encode_2d(ptr: int, elem_bytes: int, rows: int, cols: int, row_stride: int, box_rows: int, box_cols: int,
              swizzle: int = 128) -> bytes:
    """The tensor map of a row-major rows x cols matrix (row stride in elements) read in box_rows x box_cols
    boxes, written to shared memory with the given swizzle; out-of-range elements read as zero."""
    return encode(ptr, elem_bytes, rows, cols, row_stride, box_rows, box_cols, swizzle=swizzle)


def encode(ptr: int, elem_bytes: int, rows: int, cols: int, row_stride: int, box_rows: int, box_cols: int, *,
           swizzle: int = 128, depth: int = 1, depth_stride: int = 0, rank: int = 2) -> bytes:
    """As encode_2d; with rank 3, a batch of `depth` such matrices `depth_stride` elements apart (boxes one
    matrix deep; a kernel addresses the matrix by the third coordinate). Rank 3 with depth 1 describes one
    matrix for a kernel that gives every copy a third coordinate (always 0 for it)."""
    errs = check_2d(ptr, elem_bytes, rows, cols, row_stride, box_rows, box_cols, swizzle)
    if rank == 3:
        errs += check_depth(depth, depth_stride, elem_bytes)
    elif rank != 2:
        errs.append(f"rank {rank} (2 or 3)")
    if errs:
        raise TensorMapError("cannot describe the matrix for TMA: " + "; ".join(errs))
    fn, err = _driver()
    out = (ctypes.c_uint64 * 16)()
    # innermost first; the third dimension's stride, where it has one matrix, is any legal value
    step = depth_stride * elem_bytes if depth > 1 else -(-max(rows * row_stride * elem_bytes, 16) // 16) * 16
    dims = (ctypes.c_uint64 * rank)(*([cols, rows, depth][:rank]))
    strides = (ctypes.c_uint64 * (rank - 1))(*([row_stride * elem_bytes, step][:rank - 1]))
    box = (ctypes.c_uint32 * rank)(*([box_cols, box_rows, 1][:rank]))
    elem_strides = (ctypes.c_uint32 * rank)(*([1] * rank))
    rc = fn(ctypes.addressof(out), _DATA_TYPES[elem_bytes], rank, ctypes.c_void_p(ptr), dims, strides, box,
            elem_strides, _INTERLEAVE_NONE, SWIZZLES[swizzle], L2_PROMOTIONS[l2_promotion(row_stride * elem_bytes)],
            _OOB_FILL_ZERO)
    if rc != 0:
        text = ctypes.c_char_p()
        err(rc, ctypes.byref(text))
        raise TensorMapError(f"cuTensorMapEncodeTiled failed ({rc}: {(text.value or b'?').decode()}) for a "
                             f"{rows} x {cols} matrix, row stride {row_stride}, box {box_rows} x {box_cols}")
    return bytes(out)


def kernel_arg(raw: bytes) -> np.void:
    """A by-value kernel argument holding the 128 bytes of a tensor map."""
    if len(raw) != TENSOR_MAP_BYTES:
        raise TensorMapError(f"a tensor map is {TENSOR_MAP_BYTES} bytes, got {len(raw)}")
    return np.frombuffer(raw, dtype=_arg_dtype(), count=1)[0]
