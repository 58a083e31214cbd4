"""The kernel ladder: specs (parameters, geometry, models) and their CUDA sources."""

from .registry import (REGISTRY, all_specs, cc_problem, compile_spec, get, resources, specs_for,
                       specs_for_dtype, takes)
from .spec import KernelSpec, Launch, Param, Traffic, cdiv, gemm_flops

__all__ = ["REGISTRY", "KernelSpec", "Launch", "Param", "Traffic", "all_specs", "cc_problem", "cdiv", "compile_spec",
           "gemm_flops", "get", "resources", "specs_for", "specs_for_dtype", "takes"]
