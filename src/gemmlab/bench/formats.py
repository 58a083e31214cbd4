"""Number formats a sweep can measure: what the operands are, how the product is computed, how close to
the float64 reference it must come.

A format is the pair the API takes, an input dtype and a precision (`gemmlab.matmul(..., precision=)`):
- fp32: float32 in and out, strict fp32 arithmetic (every rung of the ladder; cuBLAS SGEMM);
- tf32: float32 in and out, the products on the tensor cores with inputs rounded to TF32 (10-bit
  mantissa), fp32 accumulation; only where asked for;
- fp16 / bf16: 16-bit inputs and output, fp32 accumulation on the tensor cores.

Tolerances (relative Frobenius error against a float64 product of the very values the kernel reads):
1e-4 for fp32 (accumulation error up to K of about 16k), 1e-3 for tf32 (inputs rounded to 2^-11), 1e-2
for the 16-bit types (the output's own rounding is 2^-9 for bf16). The reference of a 16-bit run is
computed from the 16-bit operands, so only accumulation and the output's rounding count against it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..kernels.spec import NATIVE_PRECISION, REDUCED_PRECISIONS


@dataclass(frozen=True)
class NumberFormat:
    name: str                 # "fp32", "tf32", "fp16", "bf16"
    dtype: str                # the operands' and the output's dtype
    precision: str | None     # what gemmlab.matmul's precision= gets (None: the dtype's own)
    itemsize: int             # bytes per element of A, B and C
    verify_tol: float         # largest accepted ||C - ref|| / ||ref||
    cublas: str               # what the cublas peer runs, in words

    @property
    def is_fp32(self) -> bool:
        return self.name == "fp32"

    @property
    def needs_torch(self) -> bool:
        """bfloat16 operands are torch tensors: CuPy has no bfloat16 arrays."""
        return self.dtype == "bfloat16"

    @property
    def tensor_cores(self) -> bool:
        return not self.is_fp32


FORMATS: dict[str, NumberFormat] = {
    f.name: f for f in (
        NumberFormat("fp32", "float32", None, 4, 1e-4, "cublasSgemm, strict fp32 (no TF32)"),
        NumberFormat("tf32", "float32", "tf32", 4, 1e-3, "cublasGemmEx, fp32 with TF32 tensor cores"),
        NumberFormat("fp16", "float16", None, 2, 1e-2, "cublasGemmEx, fp16 in and out, fp32 accumulation"),
        NumberFormat("bf16", "bfloat16", None, 2, 1e-2, "cublasGemmEx, bf16 in and out, fp32 accumulation"),
    )
}
FP32 = FORMATS["fp32"]


def number_format(dtype: str = "float32", precision: str | None = None) -> NumberFormat:
    """The format of `dtype` inputs at `precision` (None or the dtype's own: the native one); ValueError
    names what does not combine."""
    if dtype not in NATIVE_PRECISION:
        raise ValueError(f"--dtype {dtype!r} is not one of {', '.join(NATIVE_PRECISION)}")
    if precision is None or precision == NATIVE_PRECISION[dtype]:
        return FORMATS[NATIVE_PRECISION[dtype]]
    if REDUCED_PRECISIONS.get(precision) != dtype:
        allowed = [p for p, d in REDUCED_PRECISIONS.items() if d == dtype]
        raise ValueError(f"--precision {precision!r} does not apply to {dtype} inputs"
                         + (f" (it takes {', '.join(allowed)})" if allowed else " (they run at their own precision)"))
    return FORMATS[precision]


def format_named(name: str) -> NumberFormat:
    """FORMATS[name], or a ValueError listing the formats."""
    if name not in FORMATS:
        raise ValueError(f"number format {name!r} is not one of {', '.join(FORMATS)}")
    return FORMATS[name]
