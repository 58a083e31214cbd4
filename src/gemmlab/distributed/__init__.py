"""Tensor-parallel products over torch.distributed, with the communication under the GEMM.

- `exchange`: the copy engines' push exchange in symmetric memory (the all-gather's default on NCCL);
- `schedule`: the ring's order of work (pure; what the ring products follow);
- `model`: sequential, ideal and overlapped times from measured link and GEMM rates;
- `ops`: `all_gather_matmul` (column-parallel) and `matmul_reduce_scatter` (row-parallel) on torch tensors;
- `linear`: `ColumnParallelLinear` and `RowParallelLinear`, the pair an MLP block splits into, with autograd.

Importing this package needs no torch; the products do.
"""

from .model import Link, Prediction, collective_seconds, predict
from .ops import all_gather_matmul, forget_exchanges, matmul_reduce_scatter
from .schedule import all_gather_order, all_gather_plan, pieces, reduce_scatter_order, reduce_scatter_plan, row_blocks



def __getattr__(name):
    if name in ("ColumnParallelLinear", "RowParallelLinear"):
        from . import linear

        return getattr(linear, name)
    raise AttributeError(f"module 'gemmlab.distributed' has no attribute {name!r}")


__all__ = ["ColumnParallelLinear", "RowParallelLinear", "Link", "Prediction", "all_gather_matmul", "all_gather_order",
           "all_gather_plan", "collective_seconds", "forget_exchanges", "matmul_reduce_scatter", "pieces", "predict",
           "reduce_scatter_order", "reduce_scatter_plan", "row_blocks"]
