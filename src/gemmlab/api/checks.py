"""Checking a call: shapes, dtypes, scalars, the epilogue's arguments and a named kernel's parameters, all
before any GPU is touched. The result is a `Request`: everything about the call that does not depend on
the values in the arrays, which the dispatcher turns into a plan.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from .. import arrays, formats
from ..kernels import KernelSpec, registry

AUTO = "auto"
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Request:
    m: int
    n: int
    k: int
    dtype: str                 # A's and B's dtype
    precision: str             # resolved: "fp32", "tf32", "fp16", "bf16"
    out: str                   # the output dtype
    kernel: str                # a rung's name or "auto"
    params: tuple              # the caller's parameters, sorted (name, value) pairs
    bias: str | None           # None, "row" or "col"
    activation: str | None
    residual: bool
    has_c: bool
    batch: int = 1             # products in the call (A's and B's leading dimension; one of them may be shared)
    batched: bool = False      # the call's operands have a batch dimension (the output is batch x M x N)
    scale_a: str | None = None  # 8-bit inputs' scales read by the kernel: None, "tensor", "row" (A), "col" (B), "block"
    scale_b: str | None = None
    # Grouped products (gemmlab.grouped_matmul; `batch` is then the groups): "ends" (cumulative row ends, one
    # per group) or "counts" (the masked layout: `group_rows` rows per group, a count of valid ones each);
    # group_bias: a bias per group (G x N) rather than one for all.
    grouped: str | None = None
    group_rows: int = 0
    group_bias: bool = False

    @property
    def element(self) -> str:
        return formats.element_type(self.dtype, self.precision)

    @property
    def epilogue(self) -> bool:
        return self.bias is not None or self.activation is not None or self.residual

    @property
    def block_scales(self) -> bool:
        """Whether a scale is per block (the kernel then adds each k step's sums into fp32 times its scales)."""
        return "block" in (self.scale_a, self.scale_b)

    @property
    def flags(self) -> int:
        """The kernel's flags: the epilogue's, and the scales' kinds above them."""
        return formats.epilogue_flags(self.bias, self.activation, self.residual, self.scale_a, self.scale_b)

    @property
    def epilogue_flags(self) -> int:
        """The epilogue's flags alone (for split-K's second launch: its sums are already scaled)."""
        return formats.epilogue_flags(self.bias, self.activation, self.residual)


def fmt_shape(shape) -> str:
    return " x ".join(str(s) for s in shape) if len(shape) else "a scalar"


def _shape_error(a_shape, b_shape) -> str:
    return f"A is {fmt_shape(a_shape)}, B is {fmt_shape(b_shape)}"


def check_scalars(alpha, beta) -> None:
    for name, v in (("alpha", alpha), ("beta", beta)):
        if not isinstance(v, (int, float, np.floating, np.integer)) or isinstance(v, bool):
            raise TypeError(f"{name} must be a real number, got {type(v).__name__}")
        if not math.isfinite(float(v)):
            raise ValueError(f"{name} must be finite, got {v}")


def check_shapes(a, b, c) -> tuple[int, int, int]:
    for name, x in (("A", a), ("B", b), ("C", c)):
        if x is not None and len(x.shape) != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(x.shape)} ({len(x.shape)}-D)")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"inner dimensions differ: {_shape_error(a.shape, b.shape)} (A's columns must equal B's rows)")
    if c is not None and tuple(c.shape) != (m, n):
        raise ValueError(f"C must be {m} x {n} for {_shape_error(a.shape, b.shape)}, got {fmt_shape(c.shape)}")
    return int(m), int(n), int(k)


def check_batched_shapes(a, b, c) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of a product whose A (batch x M x K or M x K) and B (batch x K x N or K x N) are 2-D or
    3-D, as torch.bmm / torch.matmul take them: a 2-D operand, or a batch of one, is shared by every product.
    C, where given, is batch x M x N. Raises naming the shapes at fault."""
    for name, x in (("A", a), ("B", b)):
        if len(x.shape) not in (2, 3):
            raise ValueError(f"{name} must be 2-D or 3-D (a batch of matrices), got shape {tuple(x.shape)} "
                             f"({len(x.shape)}-D)")
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    if k != k2:
        raise ValueError(f"inner dimensions differ: {_shape_error(a.shape, b.shape)} (A's columns must equal B's rows)")
    ba = a.shape[0] if len(a.shape) == 3 else 1
    bb = b.shape[0] if len(b.shape) == 3 else 1
    if ba != bb and 1 not in (ba, bb):
        raise ValueError(f"batch sizes differ: {_shape_error(a.shape, b.shape)} (equal batches, or one operand "
                         "2-D or a batch of one, shared by every product)")
    batch = ba if bb == 1 else bb
    want = (batch, m, n)
    if c is not None and tuple(c.shape) != want:
        raise ValueError(f"C must be {fmt_shape(want)} for {_shape_error(a.shape, b.shape)}, got {fmt_shape(c.shape)}")
    return int(batch), int(m), int(n), int(k)


def is_batched(a, b) -> bool:
    """Whether a call's A or B has a batch dimension (3-D)."""
    return len(getattr(a, "shape", ())) == 3 or len(getattr(b, "shape", ())) == 3


def result_type(out_dtype, c, dt_a: str) -> str:
    """The output's element type: `out_dtype` (refused by name where no kernel writes it), else the given C's,
    else the inputs' (bfloat16 for 8-bit inputs)."""
    if out_dtype is not None:
        out = formats.dtype_label(out_dtype)
        if out not in formats.C_TYPES:
            raise ValueError(f"out_dtype={out_dtype!r} is not one of {', '.join(repr(x) for x in formats.C_TYPES)}")
        return out
    return arrays.dtype_name(c) if c is not None else (formats.FP8_OUT_DEFAULT if formats.is_fp8(dt_a) else dt_a)


def bias_mode(bias, m: int, n: int) -> str | None:
    """None, "col" (length N, or 1 x N) or "row" (length M != N, or M x 1); raises naming the shape or dtype."""
    if bias is None:
        return None
    shape = tuple(bias.shape)
    if shape in ((n,), (1, n)):
        mode = "col"
    elif shape in ((m,), (m, 1)):
        mode = "row"
    else:
        raise ValueError(f"bias must have N = {n} elements (per column) or M = {m} (per row), got shape {fmt_shape(shape)}")
    kind = arrays.kind_of(bias)
    dt = arrays.dtype_name(bias)
    if dt not in ("float32", "float16", "float64", "bfloat16"):
        raise TypeError(f"bias must be a float vector, got {dt}")
    if kind not in (arrays.TORCH_CUDA, arrays.TORCH_CPU) and dt == "bfloat16":
        raise TypeError("a bfloat16 bias must be a torch tensor (or convert it to float32)")
    return mode


def check_residual(residual, m: int, n: int, out: str, batch: int | None = None) -> None:
    """R is M x N, or for a batched call batch x M x N (one per product) or M x N (shared by all)."""
    if residual is None:
        return
    shape = tuple(residual.shape)
    if batch is None and shape != (m, n):
        raise ValueError(f"residual must be M x N = {m} x {n}, got {fmt_shape(shape)}")
    if batch is not None and shape not in ((batch, m, n), (m, n)):
        raise ValueError(f"residual must be batch x M x N = {batch} x {m} x {n} (or M x N = {m} x {n}, shared by "
                         f"the batch), got {fmt_shape(shape)}")
    if arrays.dtype_name(residual) != out:
        raise TypeError(f"residual must have the output dtype {out}, got {arrays.dtype_name(residual)}")


SCALE_DTYPES = ("float32", "float16", "bfloat16", "float64")


def is_number(x) -> bool:
    return isinstance(x, (int, float, np.floating, np.integer)) and not isinstance(x, bool)


def scale_shape(name: str, s, dtype: str) -> tuple | None:
    """An 8-bit product's scale checked as such: None where it is absent or a number (folded into alpha by the
    caller), else its shape (a float tensor on the GPU); raises naming the scale, its type or dtype, or the
    inputs that take no scales."""
    if s is None:
        return None
    if not formats.is_fp8(dtype):
        raise ValueError(f"{name} applies to 8-bit inputs (float8_e4m3fn, float8_e5m2); A and B are {dtype}")
    if is_number(s):
        if not math.isfinite(float(s)):
            raise ValueError(f"{name} must be finite, got {s}")
        return None
    if arrays.kind_of(s) != arrays.TORCH_CUDA:
        raise TypeError(f"{name} must be a number or a torch tensor on the GPU (as torch._scaled_mm takes it), got "
                        f"{type(s).__name__}")
    if arrays.dtype_name(s) not in SCALE_DTYPES:
        raise TypeError(f"{name} must be a float tensor (float32 preferred), got {arrays.dtype_name(s)}")
    return tuple(getattr(s, "shape", ()))


def scale_mode(name: str, s, rows: int, cols: int, dtype: str, k: int) -> str | None:
    """The kind of an 8-bit product's scale: None (absent, or a number, which the call folds into alpha),
    "tensor" (one element), "row" (scale_a: M x 1 or M elements), "col" (scale_b: 1 x N or N elements) or
    "block" (scale_a: M x ceil(K / 128), one per row and 128 k; scale_b: ceil(K / 128) x ceil(N / 128)).
    Where shapes coincide (K <= 128, say) the kinds mean the same product and the first above is taken.
    Raises naming the operand, the shape or the dtype at fault."""
    shape = scale_shape(name, s, dtype)
    if shape is None:
        return None
    count = int(np.prod(shape)) if shape else 1
    a_side = name == "scale_a"
    if count == 1 and len(shape) <= 2:
        return "tensor"
    vector = ((rows,), (rows, 1)) if a_side else ((cols,), (1, cols))
    if shape in vector:
        return "row" if a_side else "col"
    blocks = (rows, -(-k // 128)) if a_side else (-(-k // 128), -(-cols // 128))
    if shape == blocks:
        return "block"
    want = (f"one element, M x 1 = {rows} x 1 (one per row of A), or M x ceil(K / 128) = {blocks[0]} x {blocks[1]} "
            "(one per 1 x 128 block of A)" if a_side
            else f"one element, 1 x N = 1 x {cols} (one per column of B), or ceil(K / 128) x ceil(N / 128) = "
                 f"{blocks[0]} x {blocks[1]} (one per 128 x 128 block of B)")
    raise ValueError(f"{name} must be {want}; got shape {fmt_shape(shape)}")


def epilogue_rungs(dtype: str) -> list[str]:
    return [s.name for s in registry.specs_for_dtype(dtype, ladder=False) if s.epilogue]


def check_call(a, b, c, kinds, alpha, beta, kernel, bias, activation, residual, out_dtype, precision,
               params, scale_a=None, scale_b=None) -> Request:
    """Everything wrong with a GPU call, as one clear error naming the shape, dtype or parameter at fault;
    else the call's Request. `scale_a` / `scale_b`: 8-bit inputs' scales as the kernel reads them (numbers
    already folded into alpha by the caller, or None)."""
    check_scalars(alpha, beta)
    batched = is_batched(a, b)
    if batched:
        batch, m, n, k = check_batched_shapes(a, b, c)
    else:
        batch, (m, n, k) = 1, check_shapes(a, b, c)
    if beta != 0 and c is None:
        what = f"a batch x M x N = {batch} x {m} x {n}" if batched else f"an M x N = {m} x {n}"
        raise ValueError(f"beta = {beta} needs a C to scale; pass c ({what} array) or beta = 0")
    host = [arrays.is_host(kd) for kd in kinds if kd is not None]
    if any(host) and not all(host):
        raise TypeError(f"A, B and C must all be host arrays or all device arrays, got {', '.join(kd for kd in kinds if kd)}")
    dt_a, dt_b = arrays.dtype_name(a), arrays.dtype_name(b)
    resolved = formats.resolve_precision(dt_a, dt_b, precision)
    out = result_type(out_dtype, c, dt_a)
    mode_a = scale_mode("scale_a", scale_a, m, n, dt_a, k)
    mode_b = scale_mode("scale_b", scale_b, m, n, dt_a, k)
    if formats.is_fp8(dt_a) and batched:
        raise ValueError(f"8-bit inputs run one product per call; A is {fmt_shape(a.shape)}, B is {fmt_shape(b.shape)}")
    if resolved == "fp32" and out != "float32":
        raise ValueError(f"out_dtype={out_dtype!r}: strict fp32 kernels write float32; a float16 / bfloat16 output "
                         "needs precision='tf32' or 16-bit inputs")
    if c is not None and arrays.dtype_name(c) != out:
        raise TypeError(f"C is {arrays.dtype_name(c)} but the output dtype is {out} (out_dtype); pass C of the output dtype")
    if out not in formats.C_TYPES:
        raise TypeError(f"C is {out}; the kernels write {', '.join(formats.C_TYPES)} (8-bit inputs write bfloat16 by "
                        "default)")
    act = formats.check_activation(activation)
    mode = bias_mode(bias, m, n)
    check_residual(residual, m, n, out, batch if batched else None)
    for name, v in (("M", m), ("N", n), ("K", k), ("the batch", batch)):
        if v > INT32_MAX:
            raise ValueError(f"{name} = {v} exceeds the kernels' 32-bit index range")
    if kernel == AUTO and params:
        raise ValueError(f"parameters {sorted(params)} need a named kernel, not kernel='auto'")
    try:
        ptuple = tuple(sorted(params.items()))
        hash(ptuple)
    except TypeError:
        raise TypeError(f"kernel parameters must be integers, got {params!r}") from None
    req = Request(m, n, k, dt_a, resolved, out, kernel, ptuple, mode, act, residual is not None, c is not None,
                  batch, batched, mode_a, mode_b)
    if kernel != AUTO:
        check_named(req)
    return req


def check_kernel_name(kernel, baselines) -> None:
    """`kernel` is "auto", a rung or a CPU baseline; else a ValueError listing both."""
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be a name (a string), got {type(kernel).__name__}")
    if kernel != AUTO and kernel not in baselines and kernel not in registry.REGISTRY:
        raise ValueError(f"unknown kernel {kernel!r}; GPU rungs: {', '.join(registry.REGISTRY)}; CPU baselines: "
                         f"{', '.join(baselines)}; or 'auto'")


_PARAM_NAME = re.compile(r"[A-Z][A-Z0-9_]*\Z")


def check_param_names(params) -> None:
    """Keyword arguments beyond matmul's own are a rung's parameters, named in capitals (BM, BLOCK_DIM); any
    other name is a mistaken argument, named as such."""
    for name in params:
        if not _PARAM_NAME.match(name):
            hint = "; the output is C, the third argument (matmul(a, b, c))" if name in ("out", "output") else ""
            raise TypeError(f"matmul() got an unexpected keyword argument {name!r}{hint}")


def check_named(req: Request) -> None:
    """A named rung must run the inputs' dtype at the precision, take an epilogue if one is asked for, and
    accept the caller's parameters (named after the rung), before any GPU is needed."""
    spec = registry.get(req.kernel)
    if not registry.takes(spec, req.dtype, req.precision):
        if req.precision == formats.NATIVE_PRECISION[req.dtype]:
            also = "".join(f" (float32 with precision={p!r})" for p in spec.precisions)
            raise TypeError(f"kernel {spec.name} takes {' or '.join(spec.dtypes)} inputs{also}; A and B are "
                            f"{req.dtype} (use kernel='auto' or a rung that takes them)")
        offer = [s.name for s in registry.specs_for(req.dtype, req.precision, ladder=False)]
        raise TypeError(f"kernel {spec.name} has no precision={req.precision!r} mode for {req.dtype} inputs (kernels "
                        f"that do: {', '.join(offer) or 'none'}; or kernel='auto')")
    if req.batch > 1 and not spec.batched:
        offer = [s.name for s in registry.specs_for(req.dtype, req.precision, ladder=False) if s.batched]
        raise ValueError(f"kernel {spec.name} runs one product per launch; a batch of {req.batch} runs on "
                         f"{', '.join(offer) or 'no rung for these inputs'} (or kernel='auto')")
    if req.epilogue and not spec.epilogue:
        raise ValueError(f"kernel {spec.name} takes no fused epilogue (bias, activation, residual); kernels "
                         f"that do: {', '.join(epilogue_rungs(req.dtype)) or 'none'} (or kernel='auto')")
    given = dict(req.params)
    for name in spec.type_params:
        if name in given:
            raise ValueError(f"parameter {name} is set from the arrays' dtypes, layout, precision and out_dtype; "
                             "do not pass it")
    # B's layout is known only with the arrays (the plan checks the set again for it): here the parameters
    # must suit one of the layouts the rung reads.
    layouts = (False, True) if "B_LAYOUT" in spec.type_params else (False,)
    if "B_LAYOUT" in spec.type_params and spec.defaults["B_LAYOUT"] == 2:
        layouts = (True, False)  # a rung that reads B transposed by default: its problems there first
    # (block scales bring the rung's preferences for them, as the plan applies them, under the caller's)
    prefs = dict(spec.epilogue_params.get("block_scales", {})) if req.block_scales else {}
    problems = [spec.problems({**spec.type_defaults.get(req.element, {}), **prefs, **given,
                               **type_params(spec, req.element, req.out, kmajor, batched=req.batch > 1,
                                             block_scales=req.block_scales, grouped=bool(req.grouped))})
                for kmajor in layouts]
    if all(problems):
        raise ValueError("; ".join(problems[0]))


def type_params(spec: KernelSpec, element: str, out: str, b_kmajor: bool = False,
                batched: bool = False, block_scales: bool = False, grouped: bool = False) -> dict[str, int]:
    """A_TYPE / C_TYPE (and B_LAYOUT, BATCHED, PROMOTE where the rung has them) for rungs whose element types,
    operand layout, batching and scales are template parameters. B_LAYOUT 2: B read K-major in place, because
    it is given transposed (column-major); 3: tf32 on a row-major B (which tf32 cannot read N-major from shared
    memory), computed as C^T = B^T A^T; 1: B row-major as it is. BATCHED 1: a batch of products in one
    launch, 2 (grouped): grouped products. PROMOTE 1: 8-bit inputs with block scales, each k step's sums
    promoted into fp32 on their own."""
    out_p = {}
    if "A_TYPE" in spec.type_params:
        out_p["A_TYPE"] = formats.ELEMENT_TYPES[element]
    if "C_TYPE" in spec.type_params:
        out_p["C_TYPE"] = formats.C_TYPES[out]
    if "B_LAYOUT" in spec.type_params:
        out_p["B_LAYOUT"] = 2 if b_kmajor else 3 if element == "tf32" else 1
    if "BATCHED" in spec.type_params:
        out_p["BATCHED"] = 2 if grouped else int(batched)
    if "PROMOTE" in spec.type_params:
        out_p["PROMOTE"] = int(block_scales)
    return out_p
