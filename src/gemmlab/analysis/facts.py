"""Device facts for the models: the real GPU's when there is one, a named preset when there is not.

The models are plain functions of (M, N, K, params, device facts); on a machine with no GPU they run on a
preset. `H100_SXM` is the project's reference GPU (docs/performance.md). Per-architecture limits that
CUDA's device properties do not report (resident blocks per SM, shared memory the driver reserves per
block) live here too, from NVIDIA's occupancy tables.
"""

from __future__ import annotations

from ..runtime.device import DeviceInfo

H100_SXM = DeviceInfo(
    index=-1,
    name="NVIDIA H100 80GB HBM3 (preset)",
    compute_capability=(9, 0),
    sm_count=132,
    l2_bytes=50 * 2**20,
    global_mem_bytes=80 * 2**30,
    smem_per_block=48 * 1024,
    smem_per_block_optin=227 * 1024,
    smem_per_sm=228 * 1024,
    regs_per_block=65536,
    regs_per_sm=65536,
    max_threads_per_block=1024,
    max_threads_per_sm=2048,
    warp_size=32,
    sm_clock_khz=1_980_000,
    mem_clock_khz=2_619_000,
    mem_bus_bits=5120,
    driver_version=13000,
    runtime_version=13000,
)

PRESETS = {"h100": H100_SXM}

# Resident blocks per SM (CUDA occupancy tables); 32 unless listed.
_MAX_BLOCKS = {(7, 5): 16, (8, 6): 16, (8, 7): 16, (8, 9): 24, (12, 0): 24}
# Registers are allocated per warp in units of 256.
REG_ALLOC_UNIT = 256
# An SM's register file and warp schedulers are split into four sub-partitions (Volta onwards).
SUB_PARTITIONS = 4
# An FMA's dependent-issue latency in cycles (Volta onwards).
FMA_LATENCY_CYCLES = 4
L1_LINE = 128   # bytes
SECTOR = 32     # bytes
# SMs per TPC (texture processing cluster), Volta onwards. Blocks 2j and 2j+1 of a launch start on the two
# SMs of one TPC, and what the two read together (within a few microseconds) L2 looks up once: on the H100
# two SMs of a TPC streaming the same bytes cost half the L2 sectors, SMs of neighbouring TPCs the full
# count (scripts/l2_merge_probe.py; docs/analysis.md).
SMS_PER_TPC = 2


def max_blocks_per_sm(cc: tuple[int, int]) -> int:
    return _MAX_BLOCKS.get(tuple(cc), 16 if tuple(cc) < (7, 0) else 32)


def reserved_smem_per_block(cc: tuple[int, int]) -> int:
    """Shared memory the driver keeps per resident block (1 KiB from sm_80 on)."""
    return 1024 if tuple(cc) >= (8, 0) else 0


def resolve(device: DeviceInfo | str | None = None) -> tuple[DeviceInfo, bool]:
    """(device facts, is_preset): the given facts, a named preset, the current GPU, or the H100 preset."""
    if isinstance(device, DeviceInfo):
        return device, device.index < 0
    if isinstance(device, str):
        try:
            return PRESETS[device.lower()], True
        except KeyError:
            raise ValueError(f"unknown device preset {device!r}; known: {', '.join(PRESETS)}") from None
    from ..runtime import device as rt

    if rt.gpu_available():
        return rt.device_info(), False
    return H100_SXM, True
