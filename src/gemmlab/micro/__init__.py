"""Microbenchmarks: the ceilings the models divide by, measured on the user's GPU.

Peak fp32 FMA rate, tensor-core rate (mma.sync), DRAM streaming read / write / copy, L2, shared-memory and
L1-hit bandwidth, each beside the datasheet figure derived from the device's properties and clocks
(`datasheet`) and the SM clock sampled while it ran (`runtime.clocks`). `Ceilings` (plain data, no GPU needed)
carries the results to `analysis`. Running them needs a GPU: `run_micro`.
"""

from .ceilings import Ceilings, MicroResult, cache_path, load_cached
from .datasheet import Datasheet

__all__ = ["Ceilings", "Datasheet", "MicroResult", "cache_path", "load_cached", "run_micro"]


def run_micro(*args, **kwargs):
    """See `gemmlab.micro.bench.run_micro` (imported on use, so this package loads without a GPU)."""
    from .bench import run_micro as _run

    return _run(*args, **kwargs)
