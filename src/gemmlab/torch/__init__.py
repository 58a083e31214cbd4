"""gemmlab for PyTorch programs: the custom operator `torch.ops.gemmlab.matmul` (fake implementation and
autograd included, so torch.compile(fullgraph=True) and backward work) and `Linear`, a drop-in
`torch.nn.Linear` with the activation fused into the product.

`gemmlab.matmul` on torch tensors already runs on torch's current stream with torch's allocator and goes
through the operator by itself where autograd or torch.compile needs it; import this package for
`Linear`, or to call the operator directly.
"""

from .linear import Linear
from .ops import activate, matmul_op

__all__ = ["Linear", "activate", "matmul_op"]
