"""A batch of equal products, C[i] = A[i] @ B[i] (torch.bmm's shapes), in one gemmlab launch against torch.

The problem: `batch` products of M x N x K in `dtype` (bfloat16, float16, or float32 in strict fp32), with
no operand shared, or A or B shared by every product (x @ W[i], X[i] @ W: stride 0 along the batch). The
calls, on the same operands (uniform in [-1, 1), rounded once):
- gemmlab: `gemmlab.matmul(a, b, out)` on torch tensors, one launch over the batch;
- torch.bmm (a shared operand expanded to the batch, as a view);
- torch.matmul, which broadcasts a shared operand itself;
- a loop of torch.mm, one launch per product (the cost of not batching).
Every call is verified against the float64 products, then all are timed interleaved with the L2 flushed
(`verified.verify_then_time`), on the current stream, so the ratios are side by side. Records carry the batch
(`Record.batch`; their flops count every product).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .formats import number_format
from .verified import TorchCall

SHARED = ("none", "a", "b")
DTYPES = ("bfloat16", "float16", "float32")
GEMMLAB, BMM, MATMUL, LOOP = "gemmlab", "torch_bmm", "torch_matmul", "torch_mm_loop"
LOOP_MAX = 256  # products above which the loop of torch.mm is left out (its time is its launches)


@dataclass(frozen=True)
class Batch:
    """`batch` products of M x N x K; `shared`: "none", "a" (one A for all) or "b" (one B for all)."""

    batch: int
    m: int
    n: int
    k: int
    dtype: str = "bfloat16"
    shared: str = "none"

    def check(self) -> None:
        """ValueError naming the parameter at fault."""
        if self.batch < 1:
            raise ValueError(f"--batch {self.batch}: a batch has at least one product")
        if min(self.m, self.n, self.k) < 1:
            raise ValueError(f"M, N and K must be positive, got {self.m} x {self.n} x {self.k}")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype {self.dtype!r}: a batch is measured in {', '.join(DTYPES)}")
        if self.shared not in SHARED:
            raise ValueError(f"--shared {self.shared!r} is not one of {', '.join(SHARED)}")

    def describe(self) -> str:
        what = {"none": "", "a": ", one A for all", "b": ", one B for all"}[self.shared]
        return f"{self.batch} x ({self.m} x {self.n} x {self.k}) {self.dtype}{what}"


def build(problem: Batch, torch, gemmlab, *, seed: int = 0) -> tuple[list[TorchCall], Any]:
    """The calls and the float64 products (torch tensors on the GPU)."""
    problem.check()
    dt = getattr(torch, problem.dtype)
    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator(device=dev).manual_seed(seed)

    def uniform(*shape):
        return (torch.rand(*shape, generator=g, device=dev) * 2 - 1).to(dt)

    bt, m, n, k = problem.batch, problem.m, problem.n, problem.k
    a = uniform(m, k) if problem.shared == "a" else uniform(bt, m, k)
    b = uniform(k, n) if problem.shared == "b" else uniform(bt, k, n)
    ref64 = torch.matmul(a.double(), b.double())
    a3 = a.expand(bt, m, k) if a.dim() == 2 else a
    b3 = b.expand(bt, k, n) if b.dim() == 2 else b
    out = torch.empty(bt, m, n, device=dev, dtype=dt)
    precision = "fp32" if problem.dtype == "float32" else None
    info = _device_info()
    if problem.shared == "b":  # x @ W: one product of batch x M rows, as gemmlab.matmul runs it
        spec = gemmlab.choose_kernel(problem.dtype, info.compute_capability, precision, shape=(bt * m, n, k))
        rows, flat = a.reshape(bt * m, k), out.view(bt * m, n)
        fn = lambda: gemmlab.matmul(rows, b, flat)  # noqa: E731
        idea = "one launch: the batch's rows as one product (A's batch folded into its rows)"
    else:
        spec = gemmlab.choose_kernel(problem.dtype, info.compute_capability, precision, shape=(m, n, k),
                                     batched=bt > 1)
        fn = lambda: gemmlab.matmul(a, b, out)  # noqa: E731
        idea = "one launch over the batch" + (", one A read by every product" if problem.shared == "a" else "")
    calls = [TorchCall(spec.name, f"gemmlab {spec.name}", "gpu", idea, fn, lambda: out, rung=spec.rung)]
    held: dict[str, Any] = {}
    c_bmm = torch.empty(bt, m, n, device=dev, dtype=dt)
    calls.append(TorchCall(BMM, "torch.bmm", "gpu_peer", "cuBLAS's batched product (a shared operand expanded)",
                           lambda: torch.bmm(a3, b3, out=c_bmm), lambda: c_bmm))

    def matmul():
        held[MATMUL] = torch.matmul(a, b)

    calls.append(TorchCall(MATMUL, "torch.matmul", "gpu_peer", "torch.matmul, broadcasting a shared operand",
                           matmul, lambda: held[MATMUL]))
    if bt <= LOOP_MAX:
        c_loop = torch.empty(bt, m, n, device=dev, dtype=dt)

        def loop():
            for i in range(bt):
                torch.mm(a3[i], b3[i], out=c_loop[i])

        calls.append(TorchCall(LOOP, "loop of torch.mm", "gpu_peer", "one launch per product", loop,
                               lambda: c_loop))
    return calls, ref64


def _device_info():
    from ..runtime import device

    return device.device_info()


def measure(problem: Batch, *, budget_ms: float = 300.0, seed: int = 0, command: str = "",
            on_progress: Callable[[str], None] | None = None):
    """Verify, then time every call of `build` interleaved; the records (one per call) as `Results`. A call
    that raises or fails the check gets an "error" or "failed" record and is not timed. float32 runs with
    torch's TF32 off (strict fp32 on both sides), restored afterwards."""
    import torch

    from .. import api as gemmlab
    from ..runtime import device
    from .records import Results
    from .verified import torch_call_run, verify_then_time_torch

    problem.check()
    device.require_cupy()
    fmt = number_format(problem.dtype)
    peak = device.device_info().peak_tensor_tflops(problem.dtype) if problem.dtype != "float32" else None
    run, record, finish = torch_call_run(
        command, ("batch", {"batch": problem.batch, "m": problem.m, "n": problem.n, "k": problem.k,
                            "dtype": problem.dtype, "shared": problem.shared}),
        dtype=problem.dtype, m=problem.m, n=problem.n, k=problem.k, fmt=fmt, peak=peak, batch=problem.batch)

    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        if on_progress:
            on_progress("building the calls")
        calls, ref64 = build(problem, torch, gemmlab, seed=seed)
        refs = [ref64]
        del ref64
        records = verify_then_time_torch(calls, lambda c: refs[0], fmt.verify_tol, record, budget_ms, on_progress,
                                         before_timing=refs.clear)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    finish()
    return Results(records, [run])
