"""Everything a sweep can time, behind one shape: rungs of the ladder, GPU peers and CPU baselines.

GPU rungs come from the registry (`kernels.specs_for(dtype, precision)` of the sweep's number format,
`formats`), CPU baselines from `cpu.BASELINES` (fp32 only); the peers are cuBLAS (always there with
CuPy: SGEMM in strict fp32, GemmEx with an explicit compute type for the other formats), torch.matmul
and gemmlab's Triton matmul (each where installed). A GPU runner *binds* to device operands and returns a call that enqueues the
work on the current stream; a CPU runner binds to host arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .. import api, arrays
from ..cpu import BASELINES
from ..kernels import registry
from . import peers
from .formats import FP32, NumberFormat
from .records import CPU, GPU, GPU_PEER

CUBLAS, TORCH, TRITON = "cublas", "torch", "triton"
PEER_NAMES = (CUBLAS, TORCH, TRITON)


def _peer_idea(name: str, fmt: NumberFormat) -> str:
    if name == CUBLAS:
        return f"NVIDIA's cuBLAS ({fmt.cublas}): the reference every rung is measured against"
    if name == TORCH:
        return ("torch.matmul (cuBLAS underneath) with TF32 off: what a torch user gets" if fmt.is_fp32 else
                f"torch.matmul (cuBLAS underneath), {fmt.name}{' with TF32 allowed' if fmt.name == 'tf32' else ''}: "
                "what a torch user gets")
    return ("gemmlab's Triton matmul: 128x128 block tiles in pure Python, "
            + ("strict fp32 (ieee)" if fmt.is_fp32 else f"{fmt.name} on the tensor cores (tl.dot), fp32 accumulation"))


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


def rung_runner(name: str, params: Mapping[str, int] | None = None, fmt: NumberFormat = FP32) -> GpuRunner:
    spec = registry.get(name)
    if not registry.takes(spec, fmt.dtype, fmt.precision):
        raise Unavailable(f"rung {name} does not run {fmt.name} (it takes {', '.join(spec.dtypes)}"
                          + (f"; precisions {', '.join(spec.precisions)}" if spec.precisions else "") + ")")
    from ..runtime import device

    if device.gpu_available() and tuple(device.device_info().compute_capability) < tuple(spec.min_cc):
        cc = ".".join(map(str, device.device_info().compute_capability))
        raise Unavailable(f"rung {name} needs compute capability {'.'.join(map(str, spec.min_cc))} (this GPU: {cc})")
    given = dict(params or {})
    _, full = api.validated_params(spec, given)
    precision = fmt.precision

    def bind(a, b, c, alpha, beta):
        # compile and load now, not inside a timing (the first call also picks a 16-bit rung's tiling)
        if fmt.is_fp32:
            api.prepare(spec, given)
        def call():
            return api.matmul(a, b, c, alpha=alpha, beta=beta, kernel=name, precision=precision, **given)

        if arrays.kind_of(a) != arrays.TORCH_CUDA:
            return call  # CuPy operands run on CuPy's current stream, the sweep's
        on_stream = peers.torch_on_cupy_stream(a.device)  # torch operands follow torch's stream: make it CuPy's

        def on_cupy_stream():
            with on_stream():
                return call()
        return on_cupy_stream

    return GpuRunner(name, GPU, spec.rung, spec.idea, full, label_for(name, full, spec.defaults), bind)


def peer_runner(name: str, fmt: NumberFormat = FP32) -> GpuRunner:
    idea = _peer_idea(name, fmt)
    if name == CUBLAS:
        if fmt.is_fp32:
            return GpuRunner(CUBLAS, GPU_PEER, None, idea, {}, CUBLAS,
                             lambda a, b, c, alpha, beta: (lambda: peers.cublas_sgemm(a, b, c, alpha, beta)))
        return GpuRunner(CUBLAS, GPU_PEER, None, idea, {}, CUBLAS,
                         lambda a, b, c, alpha, beta: (lambda: peers.cublas_gemm_ex(a, b, c, alpha, beta, fmt.name)))
    if name == TORCH:
        reason = peers.torch_unavailable_reason()
        if reason:
            raise Unavailable(reason)
        switch = peers.StrictTorch(tf32=fmt.name == "tf32")
        return GpuRunner(TORCH, GPU_PEER, None, idea, {}, TORCH, peers.bind_torch, switch.restore)
    if name == TRITON:
        reason = peers.triton_unavailable_reason()
        if reason:
            raise Unavailable(reason)
        from . import triton_matmul

        params = {"BM": triton_matmul.BM, "BN": triton_matmul.BN, "BK": triton_matmul.BK}
        tf32 = fmt.name == "tf32"
        return GpuRunner(TRITON, GPU_PEER, None, idea, params, TRITON,
                         lambda a, b, c, alpha, beta: peers.bind_triton(a, b, c, alpha, beta, tf32=tf32))
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


def all_gpu_rungs(fmt: NumberFormat = FP32) -> list[str]:
    """The rungs that run `fmt`, in ladder order."""
    return [s.name for s in registry.specs_for(fmt.dtype, fmt.precision)]


def all_cpu() -> list[str]:
    return list(BASELINES)
