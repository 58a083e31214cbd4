"""The API: `matmul` and the decision behind it.

One job per module, arrows downwards:
- `checks`: a call's shapes, dtypes, scalars, epilogue and a named kernel's parameters, before any GPU is
  touched, into a `Request`;
- `dispatch`: which rung and which parameters (`choose_kernel`, `explain_choice`, `resolve_params`);
- `plan`: the decision made once per call signature (`make_plan` → `Plan`), and the loaded kernels;
- `launch`: `run`, the one function every GPU call goes through (copies, allocation, scratch, tensor
  maps, the packed launch);
- `matmul`: the public entry, with the one repeat-call cache in front of `launch.run`;
- `grouped`: `grouped_matmul`, the products of a mixture-of-experts layer in one launch (rows grouped by
  offsets, or a fixed room per group with counts), through the same plan and launch;
- `quantize`: 8-bit values and their scales (per tensor, row, column or block) from a wider tensor.
"""

from ..kernels import registry
from .checks import AUTO, INT32_MAX, Request
from .dispatch import (Candidate, KernelChoice, choose_kernel, default_params, epilogue_params, explain_choice,
                       resolve_params, tuned_cache, type_params, validated_params)
from .call import forget_launches, matmul
from .grouped import grouped_matmul
from .plan import CaptureError, Plan, Prepared, loaded, prepare, resident_blocks
from .quantize import dequantize, quantize


def kernels():
    """The GPU ladder, in rung order."""
    return registry.all_specs()


__all__ = ["AUTO", "INT32_MAX", "Candidate", "CaptureError", "KernelChoice", "Plan", "Prepared", "Request",
           "choose_kernel", "default_params", "dequantize", "epilogue_params", "explain_choice", "forget_launches",
           "grouped_matmul", "kernels", "loaded", "matmul", "prepare", "quantize", "registry", "resident_blocks",
           "resolve_params",
           "tuned_cache", "type_params", "validated_params"]
