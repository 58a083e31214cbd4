"""One kernel's whole model at one size: `model_kernel(spec, M, N, K, params, device)`.

It gathers, for a rung of the registry: FLOPs; global loads and stores as the kernel requests them (the
spec's traffic model); accesses per thread; arithmetic intensity; work, span and
parallelism; shared-memory traffic; the launch geometry read off the spec; occupancy from the
compiled resources and the device's limits; tile and wave quantization; L1 requests; and the
traffic that reaches L2 and DRAM through the caches. `bounds.predict` turns it into time bounds.

Everything is a plain function of (M, N, K, params, device facts, compiled resources): no GPU. The
resources come from NVRTC when it is installed (it needs no GPU either); without them occupancy is
computed from threads and shared memory alone, and says so.

Every rung is modelled in every format it takes (`Format`): element sizes from the format (2 bytes for
fp16 / bf16, 4 for fp32 and tf32 inputs; C's from the output dtype, the input's by default), the
compute unit from the rung and the format (FP32 FMA, or the tensor cores through the rung's instruction:
wgmma for a rung built for sm_90a, else mma.sync), and the rung's type parameters (A_TYPE, C_TYPE and the
per-type defaults) set as `gemmlab.matmul` sets them. A persistent grid (spec.walks) is capped at the
blocks resident at once, in whole clusters: SMs x blocks per SM, rounded down to the cluster (the
launcher asks the driver, which may fit fewer clusters than that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import formats
from ..kernels import registry
from ..kernels.spec import KernelSpec, Traffic
from ..runtime import compiler
from ..runtime.compiler import Resources
from ..runtime.device import DeviceInfo
from ..runtime.errors import GemmlabError
from . import facts
from .facts import L1_LINE
from .caching import CacheTraffic, cache_traffic
from .counts import L1Traffic, WorkSpan, accesses_per_thread, l1_traffic, operand_intensity, work_span
from .geometry import Geometry, infer
from .occupancy import Occupancy, occupancy
from .quantization import Quantization, quantize


@dataclass(frozen=True)
class Format:
    """What a rung computes in: operand and output element sizes and the unit that does the products."""

    name: str                 # "fp32", "tf32", "fp16", "bf16"
    dtype: str                # the inputs' dtype
    precision: str | None     # "tf32", or None for the dtype's own
    out_dtype: str
    elem: int                 # bytes per element of A and B
    out_elem: int             # bytes per element of C
    instruction: str | None   # None: FP32 FMA on the CUDA cores; "wgmma" or "mma.sync": the tensor cores

    @property
    def tensor_cores(self) -> bool:
        return self.instruction is not None

    @property
    def element(self) -> str:
        """The input element type a kernel instantiates (formats.element_type): the dtype, or "tf32"."""
        return formats.element_type(self.dtype, self.precision or "")

    @property
    def unit(self) -> str:
        return f"tensor cores ({self.instruction})" if self.instruction else "FP32 FMA"


def default_dtype(spec: KernelSpec) -> str:
    """The dtype a rung is modelled in unless one is named: float32 for the fp32 ladder, else the dtype of
    the rung's default input type code (A_TYPE), else its first."""
    if "A_TYPE" in spec.defaults:
        for dt in spec.dtypes:
            if formats.ELEMENT_TYPES.get(dt) == spec.defaults["A_TYPE"]:
                return dt
    return spec.dtypes[0]


def model_format(spec: KernelSpec, dtype: str | None = None, precision: str | None = None,
                 out_dtype: str | None = None) -> Format:
    """The format of `spec` for `dtype` inputs at `precision` ("tf32" for float32 on the tensor cores);
    ValueError naming what the rung takes where it does not take this one."""
    dtype = formats.dtype_label(dtype) if dtype else default_dtype(spec)
    if dtype == "tf32":
        dtype, precision = "float32", "tf32"
    if not registry.takes(spec, dtype, precision):
        offered = [*spec.dtypes, *(f"{d} at {p}" for p in spec.precisions for d in (formats.REDUCED_PRECISIONS[p],))]
        raise ValueError(f"{spec.name} does not take {dtype}" + (f" at {precision}" if precision else "")
                         + f"; it takes {', '.join(offered)}")
    fmt = formats.number_format(dtype, precision)
    element = formats.element_type(dtype, fmt.precision or formats.NATIVE_PRECISION[dtype])
    out = formats.dtype_label(out_dtype) if out_dtype else fmt.out_dtype
    if out not in formats.C_TYPES:
        raise ValueError(f"out_dtype {out!r} is not one of {', '.join(formats.C_TYPES)}")
    instruction = None
    if element != "float32":  # strict fp32 runs on the CUDA cores, everything else on the tensor cores
        instruction = "wgmma" if "sm_90a" in spec.targets else "mma.sync"
    return Format(fmt.name, dtype, fmt.precision, out, formats.element_bytes(element), formats.ITEMSIZE[out],
                  instruction)


def typed_params(spec: KernelSpec, params: dict | None, fmt: Format) -> dict[str, int]:
    """`params` with the rung's type parameters set for `fmt` (as gemmlab.matmul sets them), checked. A
    rung whose default B layout does not take the format (rung 15's tf32 reads B K-major) gets the first of
    its other layouts that does (B^T given), unless the caller named one."""
    given = dict(params or {})
    element = formats.element_type(fmt.dtype, fmt.precision or formats.NATIVE_PRECISION[fmt.dtype])
    p = dict(given)
    if "A_TYPE" in spec.defaults:
        p.setdefault("A_TYPE", formats.ELEMENT_TYPES[element])
        p.setdefault("C_TYPE", formats.C_TYPES[fmt.out_dtype])
        for name, value in spec.type_defaults.get(element, {}).items():
            p.setdefault(name, value)
    if spec.problems(p) and "B_LAYOUT" in spec.defaults and "B_LAYOUT" not in given:
        for q in next(x for x in spec.params if x.name == "B_LAYOUT").choices:
            if not spec.problems({**p, "B_LAYOUT": q}):
                p["B_LAYOUT"] = q
                break
    return spec.validate(p)


def resident_blocks(spec: KernelSpec, params: dict, blocks_per_sm: int, sm_count: int) -> int | None:
    """Blocks of a persistent grid that run at once (None for a grid of one block per tile): SMs x blocks
    per SM, in whole clusters."""
    if not spec.walks(params):
        return None
    cluster = spec.cluster(params) if spec.cluster else 1
    return max(cluster, (sm_count * max(1, blocks_per_sm)) // cluster * cluster)


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
    operand_intensity: float      # FLOPs per byte of A and B requested
    intensity: float              # FLOPs per requested byte, C included
    accesses_per_thread: float    # global loads of A and B per computing thread
    work: WorkSpan
    l1: L1Traffic
    cache: CacheTraffic
    fmt: Format = None                # set by model_kernel
    resident: int | None = None       # a persistent grid's blocks at once; None: one block per tile
    l1_modelled: bool = True          # False: the operands reach shared memory by TMA (not the LSU pipe)

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
                 stream: bool | None = None, dtype: str | None = None, precision: str | None = None,
                 out_dtype: str | None = None) -> KernelModel:
    """The model of one rung at (M, N, K). `device`: facts, a preset name, or None (this GPU, else H100).
    `replacement` and `stream` go to `caching.cache_traffic` (L2 policy; None: in-step waves or a stream of
    cohorts as the kernel's pacing decides). `dtype`, `precision`, `out_dtype`: the format (model_format;
    default: the rung's own), which sets the type parameters in `params`.

    For the tensor-core rungs the L1 / shared-memory stage is counted for mma.sync (cp.async, ldmatrix: the
    LSU pipe, bytes / 128 wavefronts) but not for rungs fed by TMA (`tensor_maps`): the copy engine writes
    shared memory and wgmma reads it without LSU wavefronts, so that bound is left out (l1_modelled)."""
    if isinstance(spec, str):
        spec = registry.get(spec)
    fmt = model_format(spec, dtype, precision, out_dtype)
    dev, preset = facts.resolve(device)
    p = typed_params(spec, params, fmt)
    if resources is None and compile and compiler.nvrtc_available():
        resources = kernel_resources(spec, p, dev.arch)
    geo = infer(spec, m, n, k, p)
    smem = (resources.smem_static if resources else 0) + geo.smem_dynamic
    occ = occupancy(geo.threads_per_block, resources.registers if resources else None, smem, dev)
    blocks_per_sm = max(1, occ.blocks_per_sm)
    resident = resident_blocks(spec, p, blocks_per_sm, dev.sm_count) if geo.tiled else None
    q = quantize(m, n, k, geo.tile_m, geo.tile_n, dev.sm_count, blocks_per_sm, resident=resident,
                 tiles_launched=spec.launch(m, n, k, p).blocks if resident else None, splits=spec.slices_of_k(p),
                 last_parts=spec.parts_of_last_round(m, n, k, p, resident) if resident else 1)
    t = spec.traffic(m, n, k, p)
    flops = spec.flops(m, n, k)
    e, eo = fmt.elem, fmt.out_elem
    l1 = l1_traffic(spec, m, n, k, p, geo, e, eo)
    cache = cache_traffic(spec, m, n, k, p, geo, l1, dev, blocks_per_sm, l2_fraction, replacement, stream,
                          elem=e, out_elem=eo, resident=resident)
    requested = e * t.global_loads + (eo - e) * t.c_loads + eo * t.c_stores + 2 * 4 * t.scratch
    return KernelModel(
        spec=spec, params=p, m=m, n=n, k=k, device=dev, device_is_preset=preset, resources=resources,
        geometry=geo, occupancy=occ, quant=q, flops=flops, traffic=t,
        requested_bytes=requested, operand_intensity=operand_intensity(flops, t, e),
        intensity=flops / requested if requested else math.inf,
        accesses_per_thread=accesses_per_thread(spec, m, n, k, p, geo) if m and n else 0.0,
        work=work_span(m, n, k, dev), l1=l1, cache=cache, fmt=fmt, resident=resident,
        l1_modelled=spec.tensor_maps is None,
    )


def is_fp32(spec: KernelSpec) -> bool:
    return "float32" in spec.dtypes


def fp32_specs() -> list[KernelSpec]:
    """The fp32 ladder: the registry's rungs that take float32, in rung order (rungs built for some shapes
    only, such as skinny, are not steps of it)."""
    return registry.specs_for_dtype("float32")


def ladder(fmt: Format | None = None) -> list[KernelSpec]:
    """The ladder of a format: the registry's rungs that take it, in rung order, without the rungs built for
    some shapes only (fp32, or None: fp32_specs)."""
    if fmt is None or fmt.name == "fp32":
        return fp32_specs()
    return [s for s in registry.all_specs() if s.fits_shape is None and registry.takes(s, fmt.dtype, fmt.precision)]


def next_rung(spec: KernelSpec, fmt: Format | None = None) -> KernelSpec | None:
    """The rung after `spec` in the registry's ladder order of `fmt` (None: fp32), or None at the top of
    that ladder or for a rung outside it."""
    specs = ladder(fmt)
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
    spec = base.spec

    splits = spec.slices_of_k(base.params)

    def one(m: int, n: int, k: int) -> Quantization:
        if base.resident is None:
            return quantize(m, n, k, geo.tile_m, geo.tile_n, base.device.sm_count, b, splits=splits)
        return quantize(m, n, k, geo.tile_m, geo.tile_n, base.device.sm_count, b, resident=base.resident,
                        tiles_launched=spec.launch(m, n, k, base.params).blocks, splits=splits,
                        last_parts=spec.parts_of_last_round(m, n, k, base.params, base.resident))

    quants = [one(m, n, k) for m, n, k in shapes]
    return quants, geo, b
