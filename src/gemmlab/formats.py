"""The one table of number formats: dtypes and their aliases, precisions, the kernels' type codes, the
fused epilogue's flags, and the verification tolerance of each format.

The API, the CLI, the harness, the torch operators and the tests read this module; nothing else keeps a
list of dtypes, precisions, activations or tolerances.

A *format* is the pair the API takes: an input dtype and a precision (`gemmlab.matmul(..., precision=)`):
- fp32: float32 in and out, strict fp32 arithmetic (every rung of the ladder; cuBLAS SGEMM);
- tf32: float32 in and out, products on the tensor cores with inputs rounded to TF32 (10-bit mantissa),
  fp32 accumulation; only where a caller asks for it;
- fp16 / bf16: 16-bit inputs, fp32 accumulation on the tensor cores, output of the input type unless
  `out_dtype` says otherwise;
- e4m3 / e5m2: 8-bit floats (torch.float8_e4m3fn, torch.float8_e5m2) with scales (`gemmlab.matmul`'s
  scale_a, scale_b), fp32 accumulation on Hopper's tensor cores, output bfloat16 unless `out_dtype` says
  float16 or float32. The values a kernel reads are the 8-bit values times their scales.

Tolerances are relative Frobenius errors against a float64 product of the very values the kernel reads:
1e-4 for fp32 (accumulation error up to K of about 16k), 1e-3 for tf32 (inputs rounded to 2^-11), 1e-2 for
the 16-bit types (bf16's own output rounding is 2^-9). FP8's reference is the float64 product of the
dequantized inputs (each 8-bit value times its scale), so the inputs' own rounding is not counted against
the kernel; what is left is the output's rounding (bf16: 2^-9) and the tensor cores' accumulation of 8-bit
products, which Hopper keeps in fewer than fp32's bits (about 2^-13 relative per k step of 32 at worst,
growing with sqrt(K / 32) for random signs): 1e-2, as the 16-bit types.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# ------------------------------------------------------------------------------------------------ dtypes

# The dtypes the GPU kernels take, with the precision each runs at unless the caller asks for another.
NATIVE_PRECISION = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16",
                    "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
# 8-bit inputs: their products take scales and write a wider output (bfloat16 unless out_dtype says).
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
FP8_OUT_DEFAULT = "bfloat16"
# Precisions a caller may ask for instead of the native one, with the input dtype they apply to. Never a default.
REDUCED_PRECISIONS = {"tf32": "float32"}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1}

DTYPE_ALIASES = {"float32": "float32", "fp32": "float32", "float": "float32", "single": "float32",
                 "float16": "float16", "fp16": "float16", "half": "float16",
                 "bfloat16": "bfloat16", "bf16": "bfloat16", "float64": "float64", "double": "float64",
                 "float8_e4m3fn": "float8_e4m3fn", "e4m3": "float8_e4m3fn", "fp8": "float8_e4m3fn",
                 "float8_e5m2": "float8_e5m2", "e5m2": "float8_e5m2"}

# Per input dtype: its own precision first (the default), then those a caller may ask for instead.
PRECISIONS_OF = {dt: (own, *(p for p, d in REDUCED_PRECISIONS.items() if d == dt))
                 for dt, own in NATIVE_PRECISION.items()}
ALL_PRECISIONS = tuple(sorted({p for ps in PRECISIONS_OF.values() for p in ps}))


def dtype_label(dt) -> str:
    """'float32' / 'float16' / 'bfloat16' / ... for a name, alias, numpy dtype or torch dtype; the text
    itself (lower-cased) for anything unknown, so that errors can name it."""
    if isinstance(dt, (type, np.dtype)):
        try:
            text = np.dtype(dt).name
        except TypeError:
            text = str(dt)
    else:
        text = str(dt).replace("torch.", "")
    return DTYPE_ALIASES.get(text.lower(), text)


def resolve_precision(a_dtype: str, b_dtype: str, precision: str | None) -> str:
    """'fp32', 'tf32', 'fp16' or 'bf16' for A and B of these dtypes; raises naming the operand or `precision`."""
    if a_dtype != b_dtype:
        raise TypeError(f"A and B must have one dtype: A is {a_dtype}, B is {b_dtype} (convert one with .astype)")
    allowed = PRECISIONS_OF.get(a_dtype)
    if allowed is None:
        raise TypeError(f"the GPU kernels take {', '.join(NATIVE_PRECISION)}; A and B are {a_dtype} "
                        "(convert with .astype('float32'))")
    if precision is None:
        return allowed[0]
    if precision not in ALL_PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of {', '.join(repr(p) for p in ALL_PRECISIONS)}")
    if precision not in allowed:
        raise ValueError(f"precision={precision!r} does not fit {a_dtype} inputs (allowed: "
                         f"{', '.join(repr(x) for x in allowed)}); convert A and B to change precision")
    return precision


def element_type(dtype: str, precision: str) -> str:
    """The input element type a kernel instantiates: the dtype, or "tf32" for fp32 storage at tf32."""
    return precision if precision in REDUCED_PRECISIONS else dtype


def is_fp8(dtype: str) -> bool:
    return dtype in FP8_DTYPES


def element_bytes(element: str) -> int:
    """Bytes per stored input element of an element type (tf32 is stored as fp32)."""
    return 4 if element in ("float32", "tf32") else ITEMSIZE[element]


# ------------------------------------------------------------------------------------------------ type codes
# Shared with kernels/cuda/epilogue.cuh (from 1: template parameters are positive).
A_TYPES = {"float16": 1, "bfloat16": 2}          # the 16-bit inputs every tensor-core rung takes
TF32 = 3
INPUT_TYPES = {**A_TYPES, "tf32": TF32}
STRICT_FP32 = 4                                   # strict fp32 on the CUDA cores (rung 16's fp32 path)
FP8_TYPES = {"float8_e4m3fn": 5, "float8_e5m2": 6}  # 8-bit floats (Hopper's wgmma)
ELEMENT_TYPES = {**INPUT_TYPES, "float32": STRICT_FP32, **FP8_TYPES}  # every element type a rung takes
C_TYPES = {"float32": 1, "float16": 2, "bfloat16": 3}
TYPE_PARAMS = ("A_TYPE", "C_TYPE")


def type_code_problems(params, inputs) -> list[str]:
    """What is wrong with a rung's A_TYPE and C_TYPE: A_TYPE must be one of `inputs` (name -> code, e.g.
    A_TYPES or INPUT_TYPES), C_TYPE one of C_TYPES; each message names the codes allowed."""
    def codes(table) -> str:
        return ", ".join(f"{code} {NATIVE_PRECISION.get(name, name)}" for name, code in table.items())

    errs = []
    if params["A_TYPE"] not in inputs.values():
        errs.append(f"A_TYPE = {params['A_TYPE']} is not an input type code of this rung ({codes(inputs)})")
    if params["C_TYPE"] not in C_TYPES.values():
        errs.append(f"C_TYPE = {params['C_TYPE']} is not an output type code ({codes(C_TYPES)})")
    return errs


# ------------------------------------------------------------------------------------------------ epilogue
# The `epilogue` kernel argument: bias mode in bits 0-1, activation in bits 2-4, residual in bit 5, and for
# 8-bit inputs the scale of A in bits 6-7 and of B in bits 8-9 (0 none, 1 one per tensor, 2 one per row of A
# / column of B, 3 one per block: 1 x 128 of A, 128 x 128 of B).
BIAS_MODES = {None: 0, "row": 1, "col": 2}
SCALE_MODES = {None: 0, "tensor": 1, "row": 2, "col": 2, "block": 3}  # block: 1 x 128 of A, 128 x 128 of B
SCALE_A_SHIFT, SCALE_B_SHIFT = 6, 8
ACTIVATION_CODES = {None: 0, "none": 0, "relu": 1, "gelu_tanh": 2, "gelu_erf": 3, "silu": 4}
ACTIVATIONS = ("relu", "gelu_tanh", "gelu_erf", "silu")
ACT_SHIFT = 2
RESIDUAL_FLAG = 32


def epilogue_flags(bias_mode: str | None, activation: str | None, residual: bool, scale_a: str | None = None,
                   scale_b: str | None = None) -> int:
    return (BIAS_MODES[bias_mode] | (ACTIVATION_CODES[activation] << ACT_SHIFT) | (RESIDUAL_FLAG if residual else 0)
            | (SCALE_MODES[scale_a] << SCALE_A_SHIFT) | (SCALE_MODES[scale_b] << SCALE_B_SHIFT))


def check_activation(activation) -> str | None:
    """None for no activation, else the name; ValueError for anything not in ACTIVATIONS."""
    if activation is None or activation == "none":
        return None
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r} is not one of None, {', '.join(repr(x) for x in ACTIVATIONS)}")
    return activation


# ------------------------------------------------------------------------------------------------ formats

@dataclass(frozen=True)
class NumberFormat:
    name: str                 # "fp32", "tf32", "fp16", "bf16"
    dtype: str                # the operands' and the output's dtype
    precision: str | None     # what gemmlab.matmul's precision= gets (None: the dtype's own)
    itemsize: int             # bytes per element of A and B (and of C, but for 8-bit inputs: out_dtype's)
    verify_tol: float         # largest accepted ||C - ref|| / ||ref|| against the float64 product
    grad_tol: float           # largest accepted relative error of a gradient against torch autograd in float64
    cublas: str               # what the cuBLAS peer runs, in words

    @property
    def is_fp32(self) -> bool:
        return self.name == "fp32"

    @property
    def needs_torch(self) -> bool:
        """bfloat16 and 8-bit operands are torch tensors: CuPy has no such arrays."""
        return self.dtype == "bfloat16" or self.is_fp8

    @property
    def is_fp8(self) -> bool:
        return self.dtype in FP8_DTYPES

    @property
    def out_dtype(self) -> str:
        """The output's dtype by default: the inputs', or bfloat16 for 8-bit inputs."""
        return FP8_OUT_DEFAULT if self.is_fp8 else self.dtype

    @property
    def tensor_cores(self) -> bool:
        return not self.is_fp32


FORMATS: dict[str, NumberFormat] = {
    f.name: f for f in (
        NumberFormat("fp32", "float32", None, 4, 1e-4, 1e-4, "cublasSgemm, strict fp32 (no TF32)"),
        NumberFormat("tf32", "float32", "tf32", 4, 1e-3, 1e-2, "cublasGemmEx, fp32 with TF32 tensor cores"),
        NumberFormat("fp16", "float16", None, 2, 1e-2, 1e-2, "cublasGemmEx, fp16 in and out, fp32 accumulation"),
        NumberFormat("bf16", "bfloat16", None, 2, 1e-2, 1e-2, "cublasGemmEx, bf16 in and out, fp32 accumulation"),
        NumberFormat("e4m3", "float8_e4m3fn", None, 1, 1e-2, 1e-2,
                     "torch._scaled_mm (cuBLASLt), e4m3 in with scales, bf16 out, fp32 accumulation"),
        NumberFormat("e5m2", "float8_e5m2", None, 1, 1e-2, 1e-2,
                     "torch._scaled_mm (cuBLASLt), e5m2 in with scales, bf16 out, fp32 accumulation"),
    )
}
FP32 = FORMATS["fp32"]


def number_format(dtype: str = "float32", precision: str | None = None) -> NumberFormat:
    """The format of `dtype` inputs at `precision` (None or the dtype's own: the native one); ValueError
    names what does not combine."""
    dtype = dtype_label(dtype)
    if dtype not in NATIVE_PRECISION:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(NATIVE_PRECISION)}")
    if precision is None or precision == NATIVE_PRECISION[dtype]:
        return FORMATS[NATIVE_PRECISION[dtype]]
    if REDUCED_PRECISIONS.get(precision) != dtype:
        allowed = [p for p, d in REDUCED_PRECISIONS.items() if d == dtype]
        raise ValueError(f"precision {precision!r} does not apply to {dtype} inputs"
                         + (f" (it takes {', '.join(allowed)})" if allowed else " (they run at their own precision)"))
    return FORMATS[precision]


def format_named(name: str) -> NumberFormat:
    """FORMATS[name], or a ValueError listing the formats."""
    if name not in FORMATS:
        raise ValueError(f"number format {name!r} is not one of {', '.join(FORMATS)}")
    return FORMATS[name]


def tolerance(dtype: str, precision: str | None = None) -> float:
    """The verification tolerance of `dtype` inputs at `precision`."""
    return number_format(dtype, precision).verify_tol
