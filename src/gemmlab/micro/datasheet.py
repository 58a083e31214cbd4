"""Datasheet ceilings: what a device's properties and clocks say its units can do at most.

Each figure is a product of counts the hardware reports (SMs, bus width, memory clock) and per-clock
rates of the architecture (FP32 lanes, shared-memory banks, tensor-core FLOPs per clock), at a given SM
clock: the boost clock of the device attribute unless a measured clock is passed. Where NVIDIA publishes
no per-clock rate (the L2 of most chips) the figure is labelled as a nominal estimate and says how it
was made. No GPU is needed: the functions take a `DeviceInfo`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..runtime.device import DeviceInfo, fp32_lanes_per_sm, tensor_flop_per_clk_per_sm

# Shared memory: 32 banks x 4 bytes per clock per SM, the same on every architecture since Maxwell.
SMEM_BYTES_PER_CLK_PER_SM = 128
# L1 data path for hits: 128 bytes per clock per SM (the unified L1 / shared-memory data stage).
L1_BYTES_PER_CLK_PER_SM = 128
# L2: the A100 whitepaper gives 5120 bytes per clock for the whole chip. For other chips NVIDIA
# publishes no figure; the nominal estimate is 64 bytes per clock per SM (each SM's L1 <-> L2 port),
# which is an upper bound the slices may not sustain.
L2_BYTES_PER_CLK = {(8, 0): 5120}
L2_BYTES_PER_CLK_PER_SM_NOMINAL = 64
# Tensor-core instructions. Where wgmma exists (sm_90) the dense rate per clock is wgmma's; the warp-level
# mma.sync reaches only a share of it. That share is measured, not published: on the reference H100 the
# mma.sync peak microbenchmark ran at 659 TFLOP/s (BF16) against wgmma's 987 at 1980 MHz, 0.67
# (docs/journal.md, rung 15). Elsewhere mma.sync is the tensor cores' own instruction and runs at the rate.
TENSOR_INSTRUCTIONS = ("wgmma", "mma.sync")
MMA_SYNC_SHARE = {(9, 0): 0.67}


@dataclass(frozen=True)
class Datasheet:
    """One datasheet ceiling: value per second, its unit, and how it was derived."""

    name: str
    value: float          # FLOP/s or bytes/s
    unit: str             # "FLOP/s" or "B/s"
    basis: str            # the formula, with the numbers put in
    clock_mhz: float | None = None  # the SM clock it assumes (None: does not depend on the SM clock)
    published: bool = True          # False for nominal estimates NVIDIA does not publish

    def as_dict(self) -> dict:
        return asdict(self)


def _clock(dev: DeviceInfo, clock_mhz: float | None) -> float:
    return float(clock_mhz) if clock_mhz else dev.sm_clock_khz / 1e3


def fp32_fma(dev: DeviceInfo, clock_mhz: float | None = None) -> Datasheet:
    """SMs x FP32 lanes x 2 FLOPs per FMA x clock."""
    mhz = _clock(dev, clock_mhz)
    lanes = fp32_lanes_per_sm(dev.compute_capability)
    value = dev.sm_count * lanes * 2 * mhz * 1e6
    return Datasheet("fp32 FMA", value, "FLOP/s", f"{dev.sm_count} SMs x {lanes} lanes x 2 x {mhz:.0f} MHz", mhz)


def tensor_flop_per_clk(dev: DeviceInfo, dtype: str, precision: str | None = None,
                        instruction: str = "wgmma") -> tuple[float, bool] | None:
    """(dense FLOPs per clock and SM, published) for `dtype` inputs at `precision` (float32 only at "tf32":
    half the 16-bit rate) through `instruction` ("wgmma" or "mma.sync"), fp32 accumulation; None where the
    architecture has no such path. mma.sync on sm_90 is the measured share MMA_SYNC_SHARE of the rate, so
    that figure is not a published one."""
    if instruction not in TENSOR_INSTRUCTIONS:
        raise ValueError(f"instruction must be one of {TENSOR_INSTRUCTIONS}, got {instruction!r}")
    per = tensor_flop_per_clk_per_sm(dev.compute_capability, dtype, precision)
    if per is None:
        return None
    share = MMA_SYNC_SHARE.get(tuple(dev.compute_capability)) if instruction == "mma.sync" else None
    return (per * share, False) if share else (float(per), True)


def tensor(dev: DeviceInfo, dtype: str, clock_mhz: float | None = None, precision: str | None = None,
           instruction: str = "wgmma") -> Datasheet | None:
    """Dense tensor-core rate for fp16 / bf16 inputs (float32 at precision "tf32") with fp32 accumulation,
    through `instruction` (tensor_flop_per_clk), at the SM clock: SMs x FLOP per clock x clock, so never
    above what the units can do at that clock. None where unknown or absent."""
    rate = tensor_flop_per_clk(dev, dtype, precision, instruction)
    if rate is None:
        return None
    per, published = rate
    mhz = _clock(dev, clock_mhz)
    value = dev.sm_count * per * mhz * 1e6
    label = precision if precision and dtype == "float32" else dtype
    note = f" ({instruction}: {MMA_SYNC_SHARE[tuple(dev.compute_capability)]:.2f} of wgmma's, measured)" if not published else ""
    return Datasheet(f"tensor {label}" + ("" if instruction == "wgmma" else f" {instruction}"), value, "FLOP/s",
                     f"{dev.sm_count} SMs x {per:.0f} FLOP/clk x {mhz:.0f} MHz{note}", mhz, published)


def dram(dev: DeviceInfo) -> Datasheet:
    """Memory clock x 2 (double data rate) x bus width in bytes."""
    value = dev.mem_clock_khz * 1e3 * 2 * dev.mem_bus_bits / 8
    return Datasheet("DRAM", value, "B/s",
                     f"{dev.mem_clock_khz / 1e3:.0f} MHz x 2 x {dev.mem_bus_bits} bit / 8", None)


def l2(dev: DeviceInfo, clock_mhz: float | None = None) -> Datasheet:
    mhz = _clock(dev, clock_mhz)
    per_clk = L2_BYTES_PER_CLK.get(tuple(dev.compute_capability))
    if per_clk is not None:
        return Datasheet("L2", per_clk * mhz * 1e6, "B/s", f"{per_clk} B/clk (whitepaper) x {mhz:.0f} MHz", mhz)
    per_clk = dev.sm_count * L2_BYTES_PER_CLK_PER_SM_NOMINAL
    return Datasheet("L2", per_clk * mhz * 1e6, "B/s",
                     f"nominal: {dev.sm_count} SMs x {L2_BYTES_PER_CLK_PER_SM_NOMINAL} B/clk x {mhz:.0f} MHz "
                     "(no published figure)", mhz, published=False)


def smem(dev: DeviceInfo, clock_mhz: float | None = None) -> Datasheet:
    mhz = _clock(dev, clock_mhz)
    return Datasheet("shared memory", dev.sm_count * SMEM_BYTES_PER_CLK_PER_SM * mhz * 1e6, "B/s",
                     f"{dev.sm_count} SMs x 32 banks x 4 B x {mhz:.0f} MHz", mhz)


def l1(dev: DeviceInfo, clock_mhz: float | None = None) -> Datasheet:
    mhz = _clock(dev, clock_mhz)
    return Datasheet("L1 hits", dev.sm_count * L1_BYTES_PER_CLK_PER_SM * mhz * 1e6, "B/s",
                     f"{dev.sm_count} SMs x {L1_BYTES_PER_CLK_PER_SM} B/clk x {mhz:.0f} MHz", mhz)


def for_benchmark(name: str, dev: DeviceInfo, clock_mhz: float | None = None) -> Datasheet | None:
    """The datasheet figure a microbenchmark is compared with (see `micro.bench.BENCHMARKS`)."""
    if name == "fp32_fma":
        return fp32_fma(dev, clock_mhz)
    if name in ("tensor_fp16", "tensor_fp16_wgmma"):
        return tensor(dev, "float16", clock_mhz)
    if name in ("tensor_bf16", "tensor_bf16_wgmma"):
        return tensor(dev, "bfloat16", clock_mhz)
    if name.startswith("dram_") or name == "memcpy_d2d":
        return dram(dev)
    if name == "l2_read":
        return l2(dev, clock_mhz)
    if name == "smem_read":
        return smem(dev, clock_mhz)
    if name == "l1_read":
        return l1(dev, clock_mhz)
    return None
