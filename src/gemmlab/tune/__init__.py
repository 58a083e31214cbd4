"""Self-tuning: search a rung's parameter space on this GPU and remember the winners per device.

    cache.py   the per-device store of tuned parameters (JSON, atomic writes, foreign entries ignored)
    search.py  candidates (valid, and compiling without local memory), timing, verification
"""

from ..tuned import TunedCache, shape_class
from .search import Candidate, TuneResult, candidates, tune

__all__ = ["Candidate", "TuneResult", "TunedCache", "candidates", "shape_class", "tune"]
