"""Analysis: the models that explain the numbers, and their checks against measurement.

Models (no GPU; plain functions of M, N, K, parameters, device facts and compiled resources):
  models.model_kernel   everything about one rung at one size: FLOPs, requested traffic, accesses per
                        thread, intensity and work / span, occupancy, tile and wave
                        quantization, L1 requests, L2 and DRAM traffic through the caches
  bounds.predict        time bounds from the ceilings (micro) and the limiter
  quantization          the tile / wave model and the sawtooth fit
  cliff                 the L2 cliff
  explain               numbers, model against measurement, and a paragraph
  report                the report section (Table 1, Table 2 and the figures)
Measurement (GPU): measure (sweeps and calibrations through bench.measure, the harness's records with the SM
clock), ncu (hardware counters).
"""

from .bounds import Bound, Prediction, predict, verdict
from .explain import Explanation, explain
from .models import KernelModel, model_kernel, next_rung
from .quantization import Quantization, quantize
from .report import Section, analysis_section

__all__ = ["Bound", "Explanation", "KernelModel", "Prediction", "Quantization", "Section", "analysis_section",
           "explain", "model_kernel", "next_rung", "predict", "quantize", "verdict"]
