"""Measurement: the one way to measure a kernel (measure: verify, then time, a Record), timing discipline
(timing), what can be timed (runners, peers, triton_matmul), sweeps (sweep), result records (records,
environment).

Nothing here imports CuPy, torch or triton at import time; GPU work fails with GPUUnavailableError.
"""
