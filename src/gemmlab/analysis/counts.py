"""Counting models: accesses per thread, intensity and work / span, L1 and
shared-memory requests. Plain functions of (M, N, K, params, device facts); no GPU.

Units: traffic from the spec is in elements; everything here is converted to bytes (`elem` bytes per
input element: 4 for fp32 and tf32, 2 for fp16 / bf16; `out_elem` per element of C, the input's by default), sectors
(32 bytes, the unit L1 and L2 move) or wavefronts (what the L1 / shared-memory data stage processes per
cycle: one 128-byte line of a global request, or one conflict-free 128-byte access of shared memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..kernels.spec import KernelSpec, Traffic
from ..runtime.device import DeviceInfo, fp32_lanes_per_sm
from .facts import FMA_LATENCY_CYCLES, L1_LINE, SECTOR
from .geometry import Geometry

ELEM = 4  # bytes per fp32 element (the default element size)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ----------------------------------------------------------------------------------- counts and intensity


def active_threads(spec: KernelSpec, m: int, n: int, k: int, params: dict, geo: Geometry) -> int:
    """Threads that compute at least one element of C (launched threads past the edge return at once)."""
    launched = geo.blocks * geo.threads_per_block
    return max(1, min(launched, cdiv(m * n, geo.outputs_per_thread)))


def accesses_per_thread(spec: KernelSpec, m: int, n: int, k: int, params: dict, geo: Geometry) -> float:
    """Global loads of A and B per computing thread (a 4 x 4 product: 8 untiled and 4 with 2 x 2 tiles)."""
    t = spec.traffic(m, n, k, params)
    return (t.a_loads + t.b_loads) / active_threads(spec, m, n, k, params, geo)


def operand_intensity(flops: int, traffic: Traffic, elem: int = ELEM) -> float:
    """FLOPs per byte of A and B loaded (2N FLOPs over 8N bytes naive, BLOCK_DIM times more tiled)."""
    b = elem * (traffic.a_loads + traffic.b_loads)
    return flops / b if b else math.inf


@dataclass(frozen=True)
class WorkSpan:
    """Work / span / parallelism, with the machine's appetite for parallelism beside it."""

    work_fma: int          # M N K multiply-adds
    work_flops: int        # 2 M N K
    span_fma: int          # K: every rung accumulates an output's dot product as one chain of K FMAs
    span_tree: int         # 1 + ceil(log2 K): all products at once, then a tree of additions
    parallelism: float     # work / span = M N independent chains
    parallelism_tree: float
    machine_fmas_in_flight: int  # SMs x FP32 lanes x FMA latency: independent FMAs needed to fill the GPU

    @property
    def saturates(self) -> bool:
        return self.parallelism >= self.machine_fmas_in_flight


def work_span(m: int, n: int, k: int, device: DeviceInfo) -> WorkSpan:
    work = m * n * k
    span = max(1, k)
    tree = 1 + (math.ceil(math.log2(k)) if k > 1 else 0)
    need = device.sm_count * fp32_lanes_per_sm(device.compute_capability) * FMA_LATENCY_CYCLES
    return WorkSpan(work, 2 * work, span, tree, work / span if work else 0.0,
                    work / tree if work else 0.0, need)


# ----------------------------------------------------------------------------------- L1 and shared memory


@dataclass(frozen=True)
class L1Traffic:
    """Requests the kernel sends to the L1 / shared-memory unit, in the units ncu counts them."""

    global_load_sectors: float     # ncu l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
    global_load_wavefronts: float  # distinct 128-byte lines per warp request, summed
    global_store_sectors: float
    smem_load_wavefronts: float    # ncu l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum (no conflicts)
    smem_store_wavefronts: float
    smem_load_bytes: float         # element bytes x the spec's thread-level shared loads
    smem_wavefront_source: str     # "spec" (the rung's own count) or "bytes / 128"
    per_warp_request: str          # how one warp's loads fall on lines, in words

    @property
    def wavefronts(self) -> float:
        return self.global_load_wavefronts + self.smem_load_wavefronts + self.smem_store_wavefronts


def l1_traffic(spec: KernelSpec, m: int, n: int, k: int, params: dict, geo: Geometry, elem: int = ELEM,
               out_elem: int | None = None) -> L1Traffic:
    t = spec.traffic(m, n, k, params)
    out_elem = elem if out_elem is None else out_elem
    smem_bytes = float(elem * t.smem_loads)
    hook = spec.smem_wavefronts
    if callable(hook):
        smem_ld, source = float(hook(m, n, k, dict(params))), "spec"
    else:
        smem_ld, source = smem_bytes / L1_LINE, "bytes / 128"
    if geo.direct:
        # Every warp request of A touches one sector (and one line) per distinct row of its C patch; a
        # request of B reads warp_cols consecutive floats of one row of B.
        wr, wc = geo.warp_rows, geo.warp_cols
        warps = cdiv(m, wr) * cdiv(n, wc)
        a_sec = a_lines = wr
        b_sec = cdiv(wc * ELEM, SECTOR)
        b_lines = cdiv(wc * ELEM, L1_LINE)
        sectors = float(warps) * k * (a_sec + b_sec)
        wavefronts = float(warps) * k * (a_lines + b_lines)
        stores = float(warps) * wr * cdiv(wc * ELEM, SECTOR)
        words = (f"a warp covers {wr} row(s) x {wc} column(s) of C: per k its load of A touches {a_lines} "
                 f"line(s), its load of B {b_lines} line(s) ({b_sec} sector(s))")
        return L1Traffic(sectors, wavefronts, stores, 0.0, 0.0, 0.0, source, words)
    loaded = elem * (t.a_loads + t.b_loads)
    return L1Traffic(
        global_load_sectors=loaded / SECTOR,
        global_load_wavefronts=loaded / L1_LINE,
        global_store_sectors=(out_elem * t.c_stores + 4 * t.scratch) / SECTOR,
        smem_load_wavefronts=smem_ld,
        smem_store_wavefronts=loaded / L1_LINE,  # every staged element is written to shared memory once
        smem_load_bytes=smem_bytes,
        smem_wavefront_source=source,
        per_warp_request="tiles are loaded by consecutive threads from consecutive addresses (coalesced)",
    )
