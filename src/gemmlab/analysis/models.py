"""One kernel's whole model at one size: `model_kernel(spec, M, N, K, params, device)`.

It gathers, for a rung of the registry: FLOPs; global loads and stores as the kernel requests them (the
spec's traffic model); accesses per thread (seed 001); arithmetic intensity (seed 000); work, span and
parallelism (seed 000); shared-memory traffic; the launch geometry read off the spec; occupancy from the
compiled resources and the device's limits; tile and wave quantization (seed 002); L1 requests; and the
traffic that reaches L2 and DRAM through the caches. `bounds.predict` turns it into time bounds.

Everything is a plain function of (M, N, K, params, device facts, compiled resources): no GPU. The
resources come from NVRTC when it is installed (it needs no GPU either); without them occupancy is
computed from threads and shared memory alone, and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..kernels import registry
from ..kernels.spec import KernelSpec, Traffic
from ..runtime import compiler
from ..runtime.compiler import Resources
from ..runtime.device import DeviceInfo
from ..runtime.errors import GemmlabError
from . import facts
from .facts import L1_LINE
from .caching import CacheTraffic, cache_traffic
from .counts import ELEM, L1Traffic, WorkSpan, accesses_per_thread, l1_traffic, operand_intensity, work_span
from .geometry import Geometry, infer
from .occupancy import Occupancy, occupancy
from .quantization import Quantization, quantize


@dataclass
class KernelModel:
    spec: KernelSpec
    params: dict[str, int]
    m: int
    n: int
    k: int
    device: DeviceInfo
    device_is_preset: bool
    resources: Resources | None
    geometry: Geometry
    occupancy: Occupancy
    quant: Quantization
    flops: int
    traffic: Traffic
    requested_bytes: int          # global bytes as the kernel requests them (loads of A, B, C; stores of C)
    operand_intensity: float      # FLOPs per byte of A and B requested (seed 000)
    intensity: float              # FLOPs per requested byte, C included
    accesses_per_thread: float    # global loads of A and B per computing thread (seed 001)
    work: WorkSpan
    l1: L1Traffic
    cache: CacheTraffic

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def shape(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def dram_intensity(self) -> float:
        return self.flops / self.cache.dram_bytes if self.cache.dram_bytes else math.inf

    @property
    def l2_intensity(self) -> float:
        return self.flops / self.cache.l2_bytes if self.cache.l2_bytes else math.inf

    @property
    def l1_intensity(self) -> float:
        """FLOPs per byte of L1 / shared-memory data-stage time: wavefronts x 128 bytes (a request that
        touches 16 lines costs 16 wavefronts however few of their bytes it uses)."""
        b = self.l1.wavefronts * L1_LINE
        return self.flops / b if b else math.inf


def kernel_resources(spec: KernelSpec, params: dict | None, arch: str) -> Resources | None:
    """The ptxas report for one instantiation (NVRTC, no GPU needed), or None where NVRTC is missing."""
    try:
        p = spec.validate(params or {})
        r = registry.resources(spec, p, arch)
        return r if r.known else None
    except GemmlabError:
        return None


def model_kernel(spec: KernelSpec | str, m: int, n: int, k: int, params: dict | None = None,
                 device: DeviceInfo | str | None = None, resources: Resources | None = None, *,
                 compile: bool = True, l2_fraction: float = 1.0, replacement: str = "lru",
                 stream: bool | None = None) -> KernelModel:
    """The model of one rung at (M, N, K). `device`: facts, a preset name, or None (this GPU, else H100).
    `replacement` and `stream` go to `caching.cache_traffic` (L2 policy; None: in-step waves or a stream of
    cohorts as the kernel's pacing decides)."""
    if isinstance(spec, str):
        spec = registry.get(spec)
    if not is_fp32(spec):
        raise ValueError(f"the analysis models the fp32 rungs (4-byte operands, FP32 FMA); {spec.name} takes "
                         f"{', '.join(spec.dtypes)}")
    dev, preset = facts.resolve(device)
    p = spec.validate(params or {})
    if resources is None and compile and compiler.nvrtc_available():
        resources = kernel_resources(spec, p, dev.arch)
    geo = infer(spec, m, n, k, p)
    smem = (resources.smem_static if resources else 0) + geo.smem_dynamic
    occ = occupancy(geo.threads_per_block, resources.registers if resources else None, smem, dev)
    blocks_per_sm = max(1, occ.blocks_per_sm)
    q = quantize(m, n, k, geo.tile_m, geo.tile_n, dev.sm_count, blocks_per_sm)
    t = spec.traffic(m, n, k, p)
    flops = spec.flops(m, n, k)
    l1 = l1_traffic(spec, m, n, k, p, geo)
    cache = cache_traffic(spec, m, n, k, p, geo, l1, dev, blocks_per_sm, l2_fraction, replacement, stream)
    return KernelModel(
        spec=spec, params=p, m=m, n=n, k=k, device=dev, device_is_preset=preset, resources=resources,
        geometry=geo, occupancy=occ, quant=q, flops=flops, traffic=t,
        requested_bytes=ELEM * t.global_elements, operand_intensity=operand_intensity(flops, t),
        intensity=spec.intensity(m, n, k, p),
        accesses_per_thread=accesses_per_thread(spec, m, n, k, p, geo) if m and n else 0.0,
        work=work_span(m, n, k, dev), l1=l1, cache=cache,
    )


def is_fp32(spec: KernelSpec) -> bool:
    return "float32" in spec.dtypes


def fp32_specs() -> list[KernelSpec]:
    """The fp32 ladder: the registry's rungs that take float32, in rung order (rungs built for some shapes
    only, such as skinny, are not steps of it)."""
    return registry.specs_for_dtype("float32")


def next_rung(spec: KernelSpec) -> KernelSpec | None:
    """The fp32 rung after `spec` in the registry's ladder order, or None at the top of the fp32 ladder or
    for a rung outside it."""
    specs = fp32_specs()
    names = [s.name for s in specs]
    if spec.name not in names:
        return None
    i = names.index(spec.name)
    return specs[i + 1] if i + 1 < len(specs) else None


def previous_rung(spec: KernelSpec) -> KernelSpec | None:
    """The fp32 rung before `spec`, or None at the bottom of the ladder or for a rung outside it."""
    specs = fp32_specs()
    names = [s.name for s in specs]
    if spec.name not in names:
        return None
    i = names.index(spec.name)
    return specs[i - 1] if i > 0 else None


def sawtooth_quants(spec: KernelSpec | str, params: dict | None, shapes: list[tuple[int, int, int]],
                    device: DeviceInfo | str | None = None) -> tuple[list[Quantization], Geometry, int]:
    """The quantization of every shape of a sweep at fixed parameters: (quants, geometry, blocks per SM)."""
    if isinstance(spec, str):
        spec = registry.get(spec)
    base = model_kernel(spec, *shapes[0], params, device)
    b = max(1, base.occupancy.blocks_per_sm)
    geo = base.geometry
    quants = [quantize(m, n, k, geo.tile_m, geo.tile_n, base.device.sm_count, b) for m, n, k in shapes]
    return quants, geo, b
