"""Tensor-parallel products over torch.distributed, with the ring's communication under the GEMM.

- `schedule`: the ring's order of work (pure; what the products follow);
- `model`: sequential, ideal and overlapped times from measured link and GEMM rates;
- `ops`: `all_gather_matmul` (column-parallel) and `matmul_reduce_scatter` (row-parallel) on torch tensors.

Importing this package needs no torch; the products do.
"""

from .model import Link, Prediction, collective_seconds, predict
from .ops import all_gather_matmul, matmul_reduce_scatter
from .schedule import all_gather_order, pieces, reduce_scatter_order, row_blocks

__all__ = ["Link", "Prediction", "all_gather_matmul", "all_gather_order", "collective_seconds", "matmul_reduce_scatter",
           "pieces", "predict", "reduce_scatter_order", "row_blocks"]
