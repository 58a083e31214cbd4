"""Time bounds from the ceilings, and the limiter: the resource whose bound is the longest.

Each bound is the least time a resource needs for the kernel's work on it, at the rate the ceilings give
(measured by the microbenchmarks, or the datasheet's on the model-only path):

  FMA        the busiest SM's share of the FMAs, padding of edge tiles included (tile and wave
             quantization), at its share of the FP32 rate
  tensor     instead of FMA for a format on the tensor cores (fp16, bf16, tf32): the same busiest-SM
             work at the tensor-core rate of the rung's instruction and format (compute_rate): the
             dense rate per clock per SM (wgmma; mma.sync at its measured share on sm_90; tf32 half the
             16-bit rate) x SMs x the clock, or the measured microbenchmark of that instruction and
             dtype scaled to the clock where the ceilings are measured ones
  DRAM       the modelled DRAM bytes (read and written) at the streaming rates
  L2         the modelled L1 <-> L2 bytes at the L2 rate
  L1/shared  the L1 / shared-memory data stage, which processes one wavefront per cycle per SM: the
             global-load wavefronts (one per distinct 128-byte line of a warp's request) plus the
             shared-memory wavefronts, on the busiest SM. This bound uses the hardware's per-cycle rate
             rather than a microbenchmark's, because a wavefront is the unit the hardware serialises
             whatever the access pattern; the L1 and shared microbenchmarks show how close a streaming
             pattern gets to it
  latency    the span: each output is a chain of K dependent FMAs (4 cycles apart), once per wave
             (FP32 formats only: the latency of a chain of tensor-core instructions is not modelled)

For rungs fed by TMA (rung 15) the L1/shared bound is left out: neither the copy engine's writes to
shared memory nor wgmma's reads of it go through the LSU pipe whose wavefronts it counts.

Rates that scale with the SM clock (FMA, L2, L1/shared, latency) are taken at the clock the kernel ran
at when one is given (`sm_clock_mhz`, sampled during its timing), scaled from the clock the ceilings
were measured at; DRAM does not scale.

A kernel can run no faster than its longest bound; how far the measured time is above it is what
latency, occupancy and issue overheads cost. A kernel measured *faster* than a bound shows the model is
too pessimistic there (e.g. the compiler merged broadcast shared loads into wider ones).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..micro import datasheet
from ..micro.ceilings import Ceilings
from .facts import FMA_LATENCY_CYCLES
from .models import Format, KernelModel

RESOURCES = ("FMA", "tensor", "promotion", "DRAM", "L2", "L1/shared", "latency")
# The microbenchmark (micro.bench) that measures each tensor-core instruction's peak, per input dtype.
TENSOR_BENCHMARKS = {("mma.sync", "float16"): "tensor_fp16", ("mma.sync", "bfloat16"): "tensor_bf16",
                     ("wgmma", "float16"): "tensor_fp16_wgmma", ("wgmma", "bfloat16"): "tensor_bf16_wgmma"}
WAVEFRONTS_PER_CLK_PER_SM = 1


@dataclass(frozen=True)
class Bound:
    resource: str
    seconds: float
    amount: float        # the work on this resource, in `unit`
    unit: str
    rate: float          # per second
    note: str


@dataclass
class Prediction:
    bounds: list[Bound]
    flops: int
    ceilings_source: str
    sm_clock_mhz: float | None
    compute_unit: str = "FP32 FMA"
    compute_peak: float = 0.0       # FLOP/s of the compute unit for the whole GPU at sm_clock_mhz
    compute_basis: str = ""         # how that peak is made

    @property
    def limiter(self) -> Bound:
        return max(self.bounds, key=lambda b: b.seconds)

    @property
    def seconds(self) -> float:
        return self.limiter.seconds

    @property
    def attainable_flops(self) -> float:
        return self.flops / self.seconds if self.seconds > 0 else 0.0

    def bound(self, resource: str) -> Bound:
        for b in self.bounds:
            if b.resource == resource:
                return b
        raise KeyError(resource)


def compute_rate(fmt: Format | None, dev, ceilings: Ceilings, mhz: float) -> tuple[str, float, str]:
    """(resource, FLOP/s at `mhz` MHz, basis) of the unit that does a format's products: the FP32 FMA
    ceiling scaled to the clock; for the tensor cores the measured benchmark of the instruction and dtype
    scaled from the clock it ran at to `mhz`, where the ceilings are measured and have it, else the
    datasheet rate per clock x SMs x `mhz`."""
    ref_mhz = ceilings.sm_clock_mhz or dev.sm_clock_khz / 1e3
    if fmt is None or not fmt.tensor_cores:
        rate = ceilings.fp32_flops * mhz / ref_mhz
        return "FMA", rate, f"FP32 FMA, {ceilings.source} {ceilings.fp32_flops / 1e12:.1f} TFLOP/s at {ref_mhz:.0f} MHz"
    name = TENSOR_BENCHMARKS.get((fmt.instruction, fmt.dtype)) if fmt.precision is None else None
    run = next((r for r in ceilings.results if r.name == name and r.value > 0), None)
    if ceilings.source == "measured" and run is not None:
        at = run.sm_clock_mhz or ref_mhz
        if run.pct_per_cycle is not None:  # its share of the peak per clock, counted in the SMs' cycles
            sheet = datasheet.for_benchmark(run.name, dev, mhz)
            if sheet is not None:
                return "tensor", sheet.value * run.pct_per_cycle / 100.0, (
                    f"{name} measured, {run.pct_per_cycle:.1f}% of the peak per clock (counted in the kernel)")
        return "tensor", run.value * mhz / at, f"{name} measured, {run.value / 1e12:.0f} TFLOP/s at {at:.0f} MHz"
    sheet = datasheet.tensor(dev, fmt.dtype, mhz, fmt.precision, fmt.instruction)
    if sheet is None:
        raise ValueError(f"{dev.name}: no tensor-core rate known for {fmt.name} through {fmt.instruction}")
    return "tensor", sheet.value, f"{fmt.name} through {fmt.instruction}: {sheet.basis}"


def predict(model: KernelModel, ceilings: Ceilings, sm_clock_mhz: float | None = None) -> Prediction:
    q, dev, geo = model.quant, model.device, model.geometry
    S = dev.sm_count
    ref_mhz = ceilings.sm_clock_mhz or dev.sm_clock_khz / 1e3
    mhz = sm_clock_mhz or ref_mhz
    f = mhz / ref_mhz
    resource, fp32, basis = compute_rate(model.fmt, dev, ceilings, mhz)
    l2_rate = ceilings.l2_bps * f
    # The busiest SM runs ceil(tiles / SMs) blocks; per-SM resources are bound by it.
    imbalance = 1.0 / q.balance_efficiency if q.tiles else 1.0
    if geo.tiled:
        fma_work = 2.0 * q.busiest_sm_blocks * geo.tile_m * geo.tile_n * q.k_per_block * S
    else:
        fma_work = float(model.flops)
    bounds = [Bound(resource, fma_work / fp32, fma_work, "FLOP", fp32,
                    f"{q.busiest_sm_blocks:g} tile(s) of {geo.tile_m}x{geo.tile_n} on the busiest SM "
                    f"(tile efficiency {100 * q.tile_efficiency:.0f}%, SM balance {100 * q.balance_efficiency:.0f}%)")]
    c = model.cache
    wr = ceilings.dram_write_bps or ceilings.dram_bps
    dram_s = c.dram_read_bytes / ceilings.dram_bps + c.dram_write_bytes / wr
    bounds.append(Bound("DRAM", dram_s, c.dram_bytes, "B", ceilings.dram_bps,
                        f"{c.dram_read_bytes / 1e6:.0f} MB read ({c.dram_read_bytes / max(c.compulsory_read_bytes, 1):.1f}x "
                        f"compulsory) + {c.dram_write_bytes / 1e6:.0f} MB written"))
    bounds.append(Bound("L2", c.l2_bytes / l2_rate, c.l2_bytes, "B", l2_rate,
                        f"L1 misses {c.l2_load_bytes / 1e9:.2f} GB + stores {c.l2_store_bytes / 1e9:.2f} GB"))
    l1 = model.l1
    pipe_rate = S * WAVEFRONTS_PER_CLK_PER_SM * mhz * 1e6
    pipe_s = l1.wavefronts / pipe_rate * imbalance
    if model.l1_modelled:
        bounds.append(Bound("L1/shared", pipe_s, l1.wavefronts, "wavefronts", pipe_rate,
                            f"{l1.global_load_wavefronts / 1e9:.2f} G global-load + "
                            f"{(l1.smem_load_wavefronts + l1.smem_store_wavefronts) / 1e9:.2f} G shared wavefronts "
                            f"({l1.smem_wavefront_source}), 1 per cycle per SM"))
    if model.params.get("PROMOTE") and geo.tiled:
        # 8-bit block scales: every k step of 128 adds its partial sums into the fp32 sums, one FMA per output
        # element on the CUDA cores. Those FMAs do not run under the tensor cores' work: measured with ncu at
        # 4096 x 7168 x 16384, they stall at dispatch while the other consumer's wgmmas run, and a consumer's
        # own wgmmas wait for its promotion, so the two times add (a k step took 1,512 cycles against 1,083 per
        # tensor). The bound is therefore the tensor cores' time plus the promotion's.
        steps = -(-int(q.k_per_block) // 128)
        promo = 2.0 * q.busiest_sm_blocks * geo.tile_m * geo.tile_n * steps * S
        rate = ceilings.fp32_flops * f
        bounds.append(Bound("promotion", bounds[0].seconds + promo / rate, promo, "FLOP", rate,
                            f"the {resource} bound plus {steps} k steps x {geo.tile_m}x{geo.tile_n} FMAs per tile on "
                            f"the CUDA cores ({100 * promo / max(fma_work, 1) * (fp32 / rate):.0f}% of the tensor "
                            f"time), which do not overlap it"))
    if resource == "FMA":
        kb = q.k_per_block  # a split block's chain is its slice of K
        span_s = q.full_waves * kb * FMA_LATENCY_CYCLES / (mhz * 1e6)
        bounds.append(Bound("latency", span_s, q.full_waves * kb * FMA_LATENCY_CYCLES, "cycles", mhz * 1e6,
                            f"{q.full_waves} wave(s) x {kb:.0f} dependent FMAs (K per block) x {FMA_LATENCY_CYCLES} cycles"))
    unit = model.fmt.unit if model.fmt is not None else "FP32 FMA"
    return Prediction(bounds, model.flops, ceilings.source, mhz, unit, fp32, basis)


def verdict(prediction: Prediction, measured_s: float | None, slack: float = 1.5) -> str:
    """What limits the kernel, given a measurement: the limiter when the time is within `slack` of its
    bound, else latency / occupancy (no throughput ceiling explains the time)."""
    lim = prediction.limiter
    if measured_s is None or measured_s <= 0:
        return lim.resource
    if measured_s < 0.9 * lim.seconds:
        return f"{lim.resource} (model pessimistic)"
    return lim.resource if measured_s <= slack * lim.seconds else "latency / occupancy"
