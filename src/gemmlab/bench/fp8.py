"""8-bit products (e4m3 / e5m2) with their scales, timed as a torch user calls them, against torch._scaled_mm.

The problem: M x N x K with A quantized from a float32 M x K and B from an N x K weight (passed as W.t(), the
K-major B both libraries read), at one scale granularity (`gemmlab.quantize`): "tensor", "row" (A per row, B
per column) or "block" (A per 1 x 128, B per 128 x 128). The calls, bf16 out:
- gemmlab at that granularity;
- torch._scaled_mm (cuBLASLt) at that granularity where it takes it (per tensor and per row; block scales it
  refuses on the H100, and the call is then left out with the reason in the run's notes);
- for block scales also gemmlab per tensor on the same shape: what the block scales cost.
Every call is verified against the float64 product of its own dequantized inputs (each 8-bit value times its
scale), within the format's tolerance (formats: 1e-2 with a bf16 output), then all are timed interleaved with
the L2 flushed (`verified.verify_then_time_torch`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .formats import number_format
from .verified import TorchCall

GRANULARITIES = ("tensor", "row", "block")
QUANTIZE = {"tensor": ("tensor", "tensor"), "row": ("row", "row"), "block": ("1x128", "128x128")}
GEMMLAB, SCALED_MM = "gemmlab", "torch_scaled_mm"


@dataclass(frozen=True)
class Problem:
    m: int
    n: int
    k: int
    dtype: str = "float8_e4m3fn"
    scales: str = "tensor"

    def check(self) -> None:
        """ValueError naming the parameter at fault."""
        if min(self.m, self.n, self.k) < 1:
            raise ValueError(f"M, N and K must be positive, got {self.m} x {self.n} x {self.k}")
        if not number_format(self.dtype).is_fp8:
            raise ValueError(f"--dtype {self.dtype!r}: the 8-bit bench takes float8_e4m3fn or float8_e5m2 (e4m3, e5m2)")
        if self.scales not in GRANULARITIES:
            raise ValueError(f"--scales {self.scales!r} is not one of {', '.join(GRANULARITIES)}")
        if self.k % 16:
            raise ValueError(f"K = {self.k}: 8-bit rows of K must be whole 16-byte pieces (K a multiple of 16), as "
                             "torch._scaled_mm and the copy engine take them")

    def describe(self) -> str:
        return f"{self.m} x {self.n} x {self.k} {number_format(self.dtype).name}, scales per {self.scales}"


def build(problem: Problem, torch, gemmlab, *, seed: int = 0) -> tuple[list[TorchCall], list[str]]:
    """The calls (each with its float64 reference) and notes on the calls left out."""
    problem.check()
    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator(device=dev).manual_seed(seed)
    m, n, k = problem.m, problem.n, problem.k
    x = torch.randn(m, k, generator=g, device=dev)
    w = torch.randn(n, k, generator=g, device=dev) / k ** 0.5
    notes: list[str] = []

    def quantized(kind: str):
        ga, gb = QUANTIZE[kind]
        qa, sa = gemmlab.quantize(x, problem.dtype, ga)
        qw, sw = gemmlab.quantize(w, problem.dtype, gb)
        ref = gemmlab.dequantize(qa, sa).double() @ gemmlab.dequantize(qw, sw).double().t()
        return qa, sa, qw, sw.t(), ref

    spec = gemmlab.choose_kernel(problem.dtype, _cc(), None, shape=(m, n, k), b_kmajor=True)
    held: dict[str, Any] = {}

    def ours(name, qa, sa, qw, sb):
        def call():
            held[name] = gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb)
        return call

    qa, sa, qw, sb, ref = quantized(problem.scales)
    calls = [TorchCall(spec.name, f"gemmlab {spec.name} ({problem.scales})", "gpu",
                     f"gemmlab.matmul(qa, qw.t(), scale_a, scale_b), scales per {problem.scales}, bf16 out",
                     ours("ours", qa, sa, qw, sb), lambda: held["ours"], reference=ref, rung=spec.rung,
                     params={"scales": problem.scales})]
    if problem.scales == "block":
        ta, tsa, tw, tsb, tref = quantized("tensor")
        calls.append(TorchCall(spec.name, f"gemmlab {spec.name} (tensor)", "gpu",
                             "the same product with one scale per tensor: what the block scales cost",
                             ours("tensor", ta, tsa, tw, tsb), lambda: held["tensor"], reference=tref, rung=spec.rung,
                             params={"scales": "tensor"}))
        theirs = (ta, tsa.reshape(()), tw, tsb.reshape(()), tref)
        notes.append("torch._scaled_mm takes no block scales on this build and GPU: timed per tensor beside them")
    else:
        theirs = (qa, sa.reshape(()) if problem.scales == "tensor" else sa, qw,
                  sb.reshape(()) if problem.scales == "tensor" else sb, ref)
    pa, psa, pw, psb, pref = theirs

    def scaled_mm():
        held["torch"] = torch._scaled_mm(pa, pw.t(), scale_a=psa, scale_b=psb, out_dtype=torch.bfloat16)

    calls.append(TorchCall(SCALED_MM, "torch._scaled_mm" + (" (tensor)" if problem.scales == "block" else ""),
                         "gpu_peer", "cuBLASLt's scaled 8-bit product (torch._scaled_mm), bf16 out", scaled_mm,
                         lambda: held["torch"], reference=pref, params={"scales": "tensor" if problem.scales == "block"
                                                              else problem.scales}))
    return calls, notes


def _cc():
    from ..runtime import device

    return device.device_info().compute_capability


def measure(problem: Problem, *, budget_ms: float = 300.0, seed: int = 0, command: str = "",
            on_progress: Callable[[str], None] | None = None):
    """Verify, then time every call of `build` interleaved; one record per call, as `Results`. A call that
    raises or fails its check gets an "error" or "failed" record and is not timed."""
    import torch

    from .. import api as gemmlab
    from ..runtime import device
    from .records import Results
    from .verified import torch_call_run, verify_then_time_torch

    problem.check()
    device.require_cupy()
    fmt = number_format(problem.dtype)
    run, record, finish = torch_call_run(
        command, ("fp8", {"m": problem.m, "n": problem.n, "k": problem.k, "dtype": problem.dtype,
                          "scales": problem.scales}),
        dtype=problem.dtype, m=problem.m, n=problem.n, k=problem.k, fmt=fmt,
        peak=device.device_info().peak_tensor_tflops(problem.dtype))

    if on_progress:
        on_progress("quantizing the operands")
    calls, notes = build(problem, torch, gemmlab, seed=seed)
    run["notes"] += notes

    def drop_references():
        for c in calls:
            c.reference = None

    records = verify_then_time_torch(calls, lambda c: c.reference, fmt.verify_tol, record, budget_ms, on_progress,
                                     before_timing=drop_references)
    finish()
    return Results(records, [run])
