"""A fused GEMM layer, C = act(A @ B + bias), against the ways to get the same layer without writing a kernel.

The calls, all on the same 16-bit operands (uniform in [-1, 1), rounded once) and the same bias values:
- gemmlab: one launch, the bias and the activation applied to the accumulator before the one store;
- torch eager: `act(torch.matmul(a, b) + bias)`, three kernels, C written and read back twice;
- torch.compile (with a mode): Inductor's code for the same expression, compiled before any timing;
- cuBLASLt's own fused epilogue, where nvmath-python is installed: bias, ReLU + bias or GELU (tanh) + bias
  (cuBLASLt has no erf GELU and no SiLU); its bias runs along the rows of its result, so a per-column bias
  is computed as the transposed problem, C^T = B^T A^T;
- cuBLAS's bare product (torch.matmul), the yardstick: not the same work, verified as a product.

Every call is verified against the layer in float64 on the same values (the bare product against the
float64 product), then all are timed interleaved with the L2 flushed (`verified.verify_then_time`); the
ratios are measured side by side. Records carry the
layer's epilogue (`Record.epilogue`), so the report shows them apart from plain products.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .formats import number_format

ACTIVATIONS = ("gelu_tanh", "gelu_erf", "relu", "silu", "none")
BIASES = ("column", "row", "none")
EAGER, COMPILE, CUBLASLT, BARE, GEMMLAB = "torch_eager", "torch_compile", "cublaslt_fused", "cublas", "gemmlab"
_ACT_WORDS = {"gelu_tanh": "GELU (tanh)", "gelu_erf": "GELU (erf)", "relu": "ReLU", "silu": "SiLU", "none": ""}


@dataclass(frozen=True)
class Layer:
    """The problem: A is M x K, B is K x N, both of `dtype`; a bias per column (length N), per row (length M)
    or none; then the activation; C is M x N of `dtype`."""

    m: int
    n: int
    k: int
    dtype: str = "bfloat16"
    bias: str = "column"
    activation: str = "gelu_tanh"

    def check(self) -> None:
        """ValueError naming the parameter at fault."""
        if min(self.m, self.n, self.k) < 1:
            raise ValueError(f"M, N and K must be positive, got {self.m} x {self.n} x {self.k}")
        if self.dtype not in ("bfloat16", "float16"):
            raise ValueError(f"--dtype {self.dtype!r}: the fused layer is measured in bfloat16 or float16")
        if self.bias not in BIASES:
            raise ValueError(f"--bias {self.bias!r} is not one of {', '.join(BIASES)}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"--activation {self.activation!r} is not one of {', '.join(ACTIVATIONS)}")
        if self.bias == "none" and self.activation == "none":
            raise ValueError("--bias none with --activation none leaves no epilogue to fuse; that is a plain "
                             "product (gemmlab bench)")

    @property
    def epilogue(self) -> str:
        """The record's name for it: 'bias_col+gelu_tanh', 'bias_row', 'relu', ..."""
        parts = ([f"bias_{'col' if self.bias == 'column' else 'row'}"] if self.bias != "none" else [])
        return "+".join(parts + ([self.activation] if self.activation != "none" else []))

    def describe(self) -> str:
        parts = [f"bias per {self.bias}"] if self.bias != "none" else []
        if self.activation != "none":
            parts.append(_ACT_WORDS[self.activation])
        return ", then ".join(parts)


@dataclass
class LayerCall:
    kernel: str                       # the record's kernel name
    label: str
    family: str                       # "gpu" (gemmlab) or "gpu_peer"
    idea: str
    fn: Callable[[], object]
    output: Callable[[], Any]         # the result of the last fn() (a torch tensor)
    layer_work: bool = True           # False: the bare product (checked against the product)
    rung: int | None = None
    params: dict = field(default_factory=dict)


def _activation(torch, name: str):
    F = torch.nn.functional
    return {"gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "gelu_erf": F.gelu, "relu": torch.relu,
            "silu": F.silu, "none": lambda x: x}[name]


def _nvmath_epilog(layer: Layer):
    """cuBLASLt's epilogue for the layer, or (None, why not)."""
    try:
        from nvmath.linalg.advanced import MatmulEpilog
    except ImportError:
        return None, "nvmath-python is not installed (pip install nvmath-python): no cuBLASLt fused epilogue"
    except Exception as exc:  # noqa: BLE001  (installed, but its libraries do not load here)
        return None, f"nvmath-python does not load ({type(exc).__name__}: {str(exc)[:120]})"
    table = {("bias", "none"): "BIAS", ("bias", "relu"): "RELU_BIAS", ("bias", "gelu_tanh"): "GELU_BIAS",
             ("none", "relu"): "RELU", ("none", "gelu_tanh"): "GELU"}
    name = table.get(("none" if layer.bias == "none" else "bias", layer.activation))
    if name is None:
        return None, f"cuBLASLt has no fused {_ACT_WORDS[layer.activation]} epilogue"
    return getattr(MatmulEpilog, name), ""


def build(layer: Layer, torch, gemmlab, *, compile_mode: str | None = None, seed: int = 0,
          notes: list[str] | None = None) -> tuple[list[LayerCall], Any, Any, list[Callable[[], None]]]:
    """The calls, the float64 layer and the float64 product (torch tensors on the GPU), and what to free."""
    layer.check()
    notes = notes if notes is not None else []
    dt = getattr(torch, layer.dtype)
    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator(device=dev).manual_seed(seed)

    def uniform(*shape):
        return (torch.rand(*shape, generator=g, device=dev) * 2 - 1).to(dt)

    m, n, k = layer.m, layer.n, layer.k
    a, b = uniform(m, k), uniform(k, n)
    bias_t = None
    if layer.bias == "column":
        bias_t = uniform(n)
    elif layer.bias == "row":
        bias_t = uniform(m, 1)
    act = _activation(torch, layer.activation)
    product64 = a.double() @ b.double()
    ref64 = act(product64 + bias_t.double() if bias_t is not None else product64)

    out = torch.empty(m, n, device=dev, dtype=dt)
    bias32 = bias_t.float() if bias_t is not None else None  # the same values, as gemmlab's fp32 bias
    gl_act = None if layer.activation == "none" else layer.activation
    choice = gemmlab.explain_choice(layer.dtype, shape=(m, n, k), epilogue=True, info=_device_info(),
                                    activation=gl_act)
    calls = [LayerCall(choice.spec.name, f"gemmlab {choice.spec.name}", "gpu",
                       f"one launch: {layer.describe()} applied to the accumulator before the one store",
                       lambda: gemmlab.matmul(a, b, out, bias=bias32, activation=gl_act), lambda: out,
                       rung=choice.spec.rung, params=dict(choice.params or {}))]

    held: dict[str, Any] = {}

    def eager():
        y = torch.matmul(a, b)
        held[EAGER] = act(y + bias_t if bias_t is not None else y)

    calls.append(LayerCall(EAGER, "torch eager", "gpu_peer", "torch.matmul, then the bias, then the activation: "
                           "three kernels, C written and read back twice", eager, lambda: held[EAGER]))
    if compile_mode:
        fn = torch.compile(lambda x, w, v: act(x @ w + v) if v is not None else act(x @ w), mode=compile_mode)

        def compiled():
            held[COMPILE] = fn(a, b, bias_t)

        calls.append(LayerCall(COMPILE, f"torch.compile ({compile_mode})", "gpu_peer",
                               f"Inductor's code for the same expression (mode {compile_mode!r})", compiled,
                               lambda: held[COMPILE]))
    free: list[Callable[[], None]] = []
    epilog, why = _nvmath_epilog(layer)
    if epilog is None:
        notes.append(f"cuBLASLt fused epilogue skipped: {why}")
    else:
        from nvmath.linalg.advanced import Matmul

        # cuBLASLt's bias runs along the rows of its result: a per-column bias is the transposed problem.
        transposed = layer.bias == "column"
        mm = Matmul(b.t(), a.t()) if transposed else Matmul(a, b)
        inputs = {"bias": bias_t.reshape(-1)} if bias_t is not None else None
        mm.plan(epilog=epilog, epilog_inputs=inputs)
        free.append(mm.free)

        def cublaslt():
            held[CUBLASLT] = mm.execute()

        calls.append(LayerCall(CUBLASLT, "cuBLASLt fused (nvmath)", "gpu_peer",
                               f"cuBLASLt's own epilogue {epilog.name}" + (", computed as C^T = B^T A^T (its bias runs "
                                                                          "along rows)" if transposed else ""),
                               cublaslt, (lambda: held[CUBLASLT].t()) if transposed else (lambda: held[CUBLASLT])))
    plain = torch.empty(m, n, device=dev, dtype=dt)
    calls.append(LayerCall(BARE, "cuBLAS product alone", "gpu_peer",
                           "torch.matmul without the bias and activation: the yardstick, not the same work",
                           lambda: torch.matmul(a, b, out=plain), lambda: plain, layer_work=False))
    return calls, ref64, product64, free


def _device_info():
    from ..runtime import device

    return device.device_info()


def tolerance(layer: Layer) -> float:
    return number_format(layer.dtype).verify_tol


def measure(layer: Layer, *, compile_mode: str | None = None, budget_ms: float = 300.0, seed: int = 0,
            command: str = "", on_progress: Callable[[str], None] | None = None):
    """Verify, then time every call of `build` interleaved; the records (one per call) as `Results`.
    A call that raises or fails the check gets an "error" or "failed" record and is not timed."""
    import secrets
    from datetime import datetime, timezone

    import torch

    from .. import api as gemmlab
    from ..runtime import device
    from . import environment
    from .records import COMPUTE, OK, Record, Results, derive
    from .verified import verify_then_time_torch

    layer.check()
    device.require_cupy()
    now = lambda: datetime.now(timezone.utc).isoformat(timespec="seconds")  # noqa: E731
    run_id = datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)
    notes: list[str] = []
    env = environment.record_fields()
    fmt = number_format(layer.dtype)
    peak = device.device_info().peak_tensor_tflops(layer.dtype)
    run = {"run_id": run_id, "started_at": now(), "finished_at": None, "interrupted": False, "command": command,
           "layer": {"m": layer.m, "n": layer.n, "k": layer.k, "dtype": layer.dtype, "bias": layer.bias,
                     "activation": layer.activation, "compile": compile_mode or ""},
           "notes": notes, "environment": env}
    fields = set(Record.__dataclass_fields__)

    def record(c: LayerCall, *, status=OK, err=None, note="", t=None) -> Record:
        td = t.as_dict() if t is not None else {}
        rec = Record(kernel=c.kernel, label=c.label, family=c.family, rung=c.rung, idea=c.idea, params=dict(c.params),
                     dtype=layer.dtype, m=layer.m, n=layer.n, k=layer.k, alpha=1.0, beta=0.0, mode=COMPUTE,
                     l2=td.get("l2", "cold"), pinned=None, precision=fmt.name,
                     epilogue=layer.epilogue if c.layer_work else "", status=status, rel_error=err,
                     verify_tol=fmt.verify_tol, note=note, peak_tflops=peak, run_id=run_id, measured_at=now(),
                     **{k: v for k, v in td.items() if k in fields and k != "l2"},
                     **{k: v for k, v in env.items() if k in fields})
        return derive(rec)

    if on_progress:
        on_progress("building the calls" + (" (torch.compile compiles at the first call)" if compile_mode else ""))
    calls, ref64, product64, free = build(layer, torch, gemmlab, compile_mode=compile_mode, seed=seed, notes=notes)
    refs = {"layer": ref64, "product": product64}
    del ref64, product64  # (held by refs alone: freed before the timings)
    try:
        records = verify_then_time_torch(calls, lambda c: refs["layer" if c.layer_work else "product"],
                                         fmt.verify_tol, record, budget_ms, on_progress, before_timing=refs.clear)
    finally:
        for f in free:
            f()
    run["finished_at"] = now()
    return Results(records, [run])
