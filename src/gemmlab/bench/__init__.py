"""Measurement: timing discipline (timing), what can be timed (runners, peers, triton_matmul), sweeps
(sweep), result records (records, environment), and the first ladder benchmark (ladder).

Nothing here imports CuPy, torch or triton at import time; GPU work fails with GPUUnavailableError.
"""
