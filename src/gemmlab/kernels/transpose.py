"""A tiled transpose on the GPU (kernels/cuda/transpose.cu), for operands a rung reads in the other order.

CuPy's own copy of a transposed view reads or writes with a stride of a whole row and runs at a fraction
of the memory bandwidth; this one moves 32 x 32 tiles through shared memory, coalesced on both sides.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..runtime import compiler, device, launch

SOURCE = Path(__file__).parent / "cuda" / "transpose.cu"
_TYPES = {4: "unsigned int", 2: "unsigned short"}


def transpose_into(src, rows: int, cols: int, ldi: int, dst, ldo: int) -> None:
    """dst[:cols, :rows] = src[:rows, :cols].T on the current stream. src and dst are CuPy arrays of one
    4- or 2-byte element type, read and written as raw bits; ldi / ldo are their row pitches (elements)."""
    if src.itemsize != dst.itemsize or src.itemsize not in _TYPES:
        raise ValueError(f"transpose_into moves 4- or 2-byte elements of one size, got {src.itemsize} and {dst.itemsize}")
    if rows == 0 or cols == 0:
        return
    expr = f"transpose_tiles<{_TYPES[src.itemsize]}>"
    arch = device.device_info().arch
    kernel = launch.load(compiler.compile_file(SOURCE, [expr], arch), expr)
    grid = ((cols + 31) // 32, (rows + 31) // 32, 1)
    if grid[1] > 65535:
        raise ValueError(f"transpose_into: {rows} rows exceed the grid's 65535 x 32")
    kernel(grid, (32, 8, 1), (src, np.int32(rows), np.int32(cols), np.int64(ldi), dst, np.int64(ldo)))
