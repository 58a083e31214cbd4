"""What `gemmlab bench` with no arguments measures beyond the FP32 ladder, on a GPU with tensor cores: a BF16
section (the tensor-core rungs this GPU runs, from mma_sync up the Hopper steps, against cuBLAS, torch and
Triton at four squares, compute only) and one fused layer against torch eager. Sized so that the whole main
job stays under three minutes on an H100 (docs/harness.md has the measured time)."""

from __future__ import annotations

from ..formats import format_named
from ..kernels import registry
from ..runtime import device
from . import fused
from .records import COMPUTE, Results
from .runners import PEER_NAMES
from .sweep import Plan

TENSOR_SIZES = (1024, 2048, 4096, 8192)
# A transformer MLP's up projection with its bias and GELU, act(x W + b), one gemmlab launch against torch eager.
LAYER = fused.Layer(4096, 11008, 4096, dtype="bfloat16", bias="column", activation="gelu_tanh")


def why_not() -> str | None:
    """Why this machine gets no tensor-core section (no GPU, no tensor-core rung for it, no torch), or None."""
    from .peers import torch_unavailable_reason

    reason = device.gpu_unavailable_reason()
    if reason:
        return reason
    cc = device.device_info().compute_capability
    if not any(registry.cc_problem(s, cc) is None for s in registry.specs_for("bfloat16")):
        return f"no tensor-core rung runs on compute capability {cc[0]}.{cc[1]}"
    return torch_unavailable_reason()


def tensor_plan(budget_ms: float | None = None) -> Plan:
    """The BF16 section: the tensor rungs this GPU runs and the peers, TENSOR_SIZES, compute only."""
    cc = device.device_info().compute_capability
    rungs = [s.name for s in registry.specs_for("bfloat16") if registry.cc_problem(s, cc) is None]
    plan = Plan(shapes=[(s, s, s) for s in TENSOR_SIZES], gpu=[(n, {}) for n in rungs], peers=list(PEER_NAMES),
                modes=(COMPUTE,), fmt=format_named("bf16").name)
    if budget_ms is not None:
        plan.timing = plan.timing.with_(budget_ms=budget_ms)
    return plan


def measure_layer(command: str, budget_ms: float | None = None) -> Results:
    """The fused layer (LAYER) against torch eager and cuBLAS's product alone (bench.fused), verified first."""
    return fused.measure(LAYER, budget_ms=budget_ms or 150.0, command=command)
