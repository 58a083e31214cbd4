"""CPU baselines of gemmlab (numba loops and numpy's BLAS); see baselines.py."""

from .baselines import BASELINES, CpuBaseline, get

__all__ = ["BASELINES", "CpuBaseline", "get"]
