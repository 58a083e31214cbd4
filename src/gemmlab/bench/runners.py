"""Everything a sweep can time, behind one shape: rungs of the ladder, GPU peers and CPU baselines.

GPU rungs come from the registry (`kernels.specs_for_dtype("float32")`: the runners feed fp32 data), CPU baselines from `cpu.BASELINES`; the
peers are cuBLAS (strict fp32, always there with CuPy), torch.matmul and gemmlab's Triton matmul
(each where installed). A GPU runner *binds* to device operands and returns a call that enqueues the
work on the current stream; a CPU runner binds to host arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .. import api
from ..cpu import BASELINES
from ..kernels import registry
from . import peers
from .records import CPU, GPU, GPU_PEER

CUBLAS, TORCH, TRITON = "cublas", "torch", "triton"
PEER_NAMES = (CUBLAS, TORCH, TRITON)
_PEER_IDEAS = {
    CUBLAS: "NVIDIA's cuBLAS SGEMM in strict fp32 (no TF32): the reference every rung is measured against",
    TORCH: "torch.matmul (cuBLAS underneath) with TF32 off: what a torch user gets",
    TRITON: "gemmlab's Triton matmul: 128x128 block tiles in pure Python, strict fp32 (ieee)",
}


class Unavailable(Exception):
    """A runner that cannot run on this machine; the message says why in one line."""


def label_for(name: str, params: Mapping[str, Any], defaults: Mapping[str, Any]) -> str:
    """The kernel name, plus the parameters that differ from its defaults: `smem_tiled[BLOCK_DIM=16]`."""
    diff = {k: v for k, v in params.items() if defaults.get(k) != v}
    return f"{name}[{','.join(f'{k}={v}' for k, v in sorted(diff.items()))}]" if diff else name


@dataclass
class GpuRunner:
    kernel: str
    family: str
    rung: int | None
    idea: str
    params: dict
    label: str
    bind: Callable[..., Callable[[], object]]   # (a, b, c, alpha, beta) -> call
    close: Callable[[], None] = field(default=lambda: None)


@dataclass
class CpuRunner:
    kernel: str
    rung: int
    idea: str
    params: dict
    label: str
    max_cube: int
    run: Callable[..., Any]                     # (a, b, c, alpha, beta) -> result
    family: str = CPU


def rung_runner(name: str, params: Mapping[str, int] | None = None) -> GpuRunner:
    spec = registry.get(name)
    given = dict(params or {})
    _, full = api.validated_params(spec, given)

    def bind(a, b, c, alpha, beta):
        api.prepare(spec, given)  # compile and load now, not inside a timing
        return lambda: api.matmul(a, b, c, alpha=alpha, beta=beta, kernel=name, **given)

    return GpuRunner(name, GPU, spec.rung, spec.idea, full, label_for(name, full, spec.defaults), bind)


def peer_runner(name: str) -> GpuRunner:
    if name == CUBLAS:
        return GpuRunner(CUBLAS, GPU_PEER, None, _PEER_IDEAS[CUBLAS], {}, CUBLAS,
                         lambda a, b, c, alpha, beta: (lambda: peers.cublas_sgemm(a, b, c, alpha, beta)))
    if name == TORCH:
        reason = peers.torch_unavailable_reason()
        if reason:
            raise Unavailable(reason)
        strict = peers.StrictTorch()
        return GpuRunner(TORCH, GPU_PEER, None, _PEER_IDEAS[TORCH], {}, TORCH, peers.bind_torch, strict.restore)
    if name == TRITON:
        reason = peers.triton_unavailable_reason()
        if reason:
            raise Unavailable(reason)
        from . import triton_matmul

        params = {"BM": triton_matmul.BM, "BN": triton_matmul.BN, "BK": triton_matmul.BK}
        return GpuRunner(TRITON, GPU_PEER, None, _PEER_IDEAS[TRITON], params, TRITON, peers.bind_triton)
    raise ValueError(f"unknown peer {name!r}; known: {', '.join(PEER_NAMES)}")


def cpu_runner(name: str, params: Mapping[str, int] | None = None) -> CpuRunner:
    from ..cpu import get

    base = get(name)
    full = base.validate(dict(params or {}))
    return CpuRunner(name, base.rung, base.idea, full, label_for(name, full, base.params), base.max_cube,
                     lambda a, b, c, alpha, beta: base.run(a, b, c, alpha, beta, **full))


def kind_of(name: str) -> str:
    """'gpu', 'gpu_peer' or 'cpu' for a name a user may give; ValueError listing every known name."""
    if name in registry.REGISTRY:
        return GPU
    if name in PEER_NAMES:
        return GPU_PEER
    if name in BASELINES:
        return CPU
    known = [*registry.REGISTRY, *PEER_NAMES, *BASELINES]
    raise ValueError(f"unknown kernel {name!r}; known: {', '.join(known)}")


def all_gpu_rungs() -> list[str]:
    return [s.name for s in registry.specs_for_dtype("float32")]


def all_cpu() -> list[str]:
    return list(BASELINES)
