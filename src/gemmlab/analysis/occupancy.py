"""Resident blocks per SM from a kernel's resources and the device's limits (the occupancy calculator).

Four limits, the smallest wins:
  threads    max_threads_per_sm / (warps per block x 32)
  registers  registers are allocated per warp in units of 256: a warp of a thread using r registers
             takes ceil(32 r / 256) x 256, inside one of the SM's four sub-partitions (a quarter of the
             register file each), so the SM holds 4 x floor(regs_per_sm / 4 / that) warps, in whole blocks;
             a block whose warps (rounded up to 4) need more than regs_per_block cannot launch at all
  shared     smem_per_sm / (the block's static + dynamic shared memory + the 1 KiB the driver reserves)
  blocks     the architecture's cap on resident blocks (32 on sm_80 and sm_90)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..runtime.device import DeviceInfo
from .facts import REG_ALLOC_UNIT, SUB_PARTITIONS, max_blocks_per_sm, reserved_smem_per_block


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    limited_by: str              # "threads", "registers", "shared memory" or "blocks"
    warps_per_block: int
    by_threads: int
    by_registers: int
    by_smem: int
    by_blocks: int
    max_warps_per_sm: int
    registers_known: bool = True

    @property
    def warps_per_sm(self) -> int:
        return self.blocks_per_sm * self.warps_per_block

    @property
    def fraction(self) -> float:
        """Theoretical occupancy: resident warps over the SM's maximum (ncu's 'Theoretical Occupancy')."""
        return self.warps_per_sm / self.max_warps_per_sm if self.max_warps_per_sm else 0.0


def occupancy(threads_per_block: int, registers_per_thread: int | None, smem_per_block: int,
              device: DeviceInfo) -> Occupancy:
    """Blocks per SM. `registers_per_thread` None (not compiled) leaves registers out of the limits."""
    if threads_per_block < 1:
        raise ValueError(f"threads_per_block must be positive, got {threads_per_block}")
    big = 1 << 30
    warps = -(-threads_per_block // device.warp_size)
    max_warps = device.max_threads_per_sm // device.warp_size
    by_threads = max_warps // warps
    if registers_per_thread:
        per_warp = -(-registers_per_thread * device.warp_size // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
        parts = SUB_PARTITIONS
        if per_warp * (-(-warps // parts) * parts) > device.regs_per_block:
            by_regs = 0
        else:
            by_regs = (device.regs_per_sm // parts // per_warp) * parts // warps
    else:
        by_regs = big
    need = smem_per_block + reserved_smem_per_block(device.compute_capability) if smem_per_block else 0
    by_smem = device.smem_per_sm // need if need else big
    by_blocks = max_blocks_per_sm(device.compute_capability)
    limits = {"threads": by_threads, "registers": by_regs, "shared memory": by_smem, "blocks": by_blocks}
    name = min(limits, key=lambda k: limits[k])
    return Occupancy(
        blocks_per_sm=max(0, limits[name]), limited_by=name, warps_per_block=warps,
        by_threads=by_threads, by_registers=by_regs, by_smem=by_smem, by_blocks=by_blocks,
        max_warps_per_sm=max_warps, registers_known=bool(registers_per_thread),
    )
