"""gemmlab inside PyTorch programs: the custom operator `torch.ops.gemmlab.matmul` (with a fake
implementation, so torch.compile traces it without a graph break), its autograd formula, and the router
that sends a `gemmlab.matmul` call on torch tensors through them only where they are needed (under
autograd, or while torch.compile traces); a plain eager call never pays the operator's dispatch.

The operator is functional: `c` is an input and the result a new tensor; `gemmlab.matmul`'s BLAS
semantics (C overwritten) are kept around it by copying the result into C.

Autograd. With z = alpha·A·B + beta·C + bias and out = act(z) + R:
    dR = dOut,  dz = dOut · act'(z),  dA = alpha · dz · Bᵀ,  dB = alpha · Aᵀ · dz,
    dbias = the sum of dz over rows (per-column bias) or columns (per-row bias),  dC = beta · dz.
dA and dB run on gemmlab's kernels: Bᵀ is a transposed view of B, which rung 15 reads in place (K-major);
Aᵀ is copied row-major by torch (M x K elements, a small share of the product). In a batch the same holds
per product; the gradient of an operand the products share (2-D, or a batch of one) is the sum over them. With an activation, the
forward under autograd keeps z: it runs the product with bias and beta·C fused (z, M x N of the output
dtype: the same memory torch's own unfused layer keeps for its activation) and applies the activation
with torch; the backward then needs no second product. Without autograd (inference, or torch.compile
with no grad) the whole epilogue stays fused in the one kernel.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..api import call as _call
from ..formats import check_activation, dtype_label

# ----------------------------------------------------------------------------------------- the operator


def params_text(params: dict) -> str:
    """Kernel parameters as the operator's one string argument ("BM=128 BN=256")."""
    for name, v in params.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"kernel parameter {name} must be an integer, got {v!r}")
    return " ".join(f"{k}={v}" for k, v in sorted(params.items()))


def _parse(text: str) -> dict:
    return {k: int(v) for k, v in (item.split("=") for item in text.split())} if text else {}


@torch.library.custom_op("gemmlab::matmul", mutates_args=())
def matmul_op(a: torch.Tensor, b: torch.Tensor, c: Optional[torch.Tensor], bias: Optional[torch.Tensor],
              residual: Optional[torch.Tensor], alpha: float, beta: float, activation: Optional[str],
              out_dtype: Optional[torch.dtype], precision: Optional[str], kernel: str, params: str) -> torch.Tensor:
    """act(alpha·A·B + beta·C + bias) + R as a new tensor, on gemmlab's kernels (see gemmlab.matmul)."""
    if c is not None:
        c = c.clone()  # functional: the caller's C is read, never written
    return _call.matmul(a, b, c, alpha=alpha, beta=beta, kernel=kernel, bias=bias, activation=activation,
                          residual=residual, out_dtype=out_dtype, precision=precision, **_parse(params))


@matmul_op.register_fake
def _matmul_fake(a, b, c, bias, residual, alpha, beta, activation, out_dtype, precision, kernel, params):
    torch._check(a.dim() in (2, 3) and b.dim() in (2, 3), lambda: "gemmlab.matmul: A and B must be 2-D or 3-D")
    torch._check(a.shape[-1] == b.shape[-2],
                 lambda: f"gemmlab.matmul: inner dimensions differ: A is {tuple(a.shape)}, B is {tuple(b.shape)}")
    dtype = out_dtype if out_dtype is not None else c.dtype if c is not None else a.dtype
    if a.dim() == 2 and b.dim() == 2:
        return a.new_empty((a.shape[0], b.shape[1]), dtype=dtype)
    return a.new_empty((_batch_of(a, b), a.shape[-2], b.shape[-1]), dtype=dtype)


@torch.library.custom_op("gemmlab::scaled_matmul", mutates_args=())
def scaled_matmul_op(a: torch.Tensor, b: torch.Tensor, scale_a: Optional[torch.Tensor], scale_b: Optional[torch.Tensor],
                     c: Optional[torch.Tensor], bias: Optional[torch.Tensor], residual: Optional[torch.Tensor],
                     alpha: float, beta: float, activation: Optional[str], out_dtype: Optional[torch.dtype],
                     kernel: str, params: str) -> torch.Tensor:
    """act(alpha·(scale_a·A)·(scale_b·B) + beta·C + bias) + R for 8-bit A and B, as a new tensor (see
    gemmlab.matmul; scales given as numbers are folded into alpha before the operator). No autograd: the
    8-bit values are not differentiable, as for torch._scaled_mm."""
    if c is not None:
        c = c.clone()
    return _call.matmul(a, b, c, alpha=alpha, beta=beta, kernel=kernel, bias=bias, activation=activation,
                        residual=residual, out_dtype=out_dtype, scale_a=scale_a, scale_b=scale_b, **_parse(params))


@scaled_matmul_op.register_fake
def _scaled_matmul_fake(a, b, scale_a, scale_b, c, bias, residual, alpha, beta, activation, out_dtype, kernel, params):
    torch._check(a.dim() == 2 and b.dim() == 2, lambda: "gemmlab.matmul: 8-bit inputs run one 2-D product per call")
    torch._check(a.shape[1] == b.shape[0],
                 lambda: f"gemmlab.matmul: inner dimensions differ: A is {tuple(a.shape)}, B is {tuple(b.shape)}")
    dtype = out_dtype if out_dtype is not None else c.dtype if c is not None else torch.bfloat16
    return a.new_empty((a.shape[0], b.shape[1]), dtype=dtype)


@torch.library.custom_op("gemmlab::grouped_matmul", mutates_args=())
def grouped_matmul_op(a: torch.Tensor, b: torch.Tensor, groups: torch.Tensor, masked: bool,
                      bias: Optional[torch.Tensor], scale_a: Optional[torch.Tensor], scale_b: Optional[torch.Tensor],
                      alpha: float, activation: Optional[str], out_dtype: Optional[torch.dtype], kernel: str,
                      params: str) -> torch.Tensor:
    """Grouped products as a new tensor (see gemmlab.grouped_matmul): `groups` the ends, or with `masked` the
    counts. No autograd (the gradient of each group's weight is a product grouped along K, not built)."""
    from ..api.grouped import grouped_matmul

    return grouped_matmul(a, b, None if masked else groups, counts=groups if masked else None, bias=bias,
                          activation=activation, alpha=alpha, out_dtype=out_dtype, scale_a=scale_a,
                          scale_b=scale_b, kernel=kernel, **_parse(params))


@grouped_matmul_op.register_fake
def _grouped_matmul_fake(a, b, groups, masked, bias, scale_a, scale_b, alpha, activation, out_dtype, kernel, params):
    torch._check(b.dim() == 3, lambda: f"gemmlab.grouped_matmul: B must be G x K x N, got {tuple(b.shape)}")
    torch._check(a.dim() == (3 if masked else 2),
                 lambda: f"gemmlab.grouped_matmul: A must be {'G x R x K' if masked else 'T x K'}, got "
                         f"{tuple(a.shape)}")
    torch._check(a.shape[-1] == b.shape[1],
                 lambda: f"gemmlab.grouped_matmul: inner dimensions differ: A is {tuple(a.shape)}, B is "
                         f"{tuple(b.shape)}")
    fp8 = a.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
    dtype = out_dtype if out_dtype is not None else torch.bfloat16 if fp8 else a.dtype
    return a.new_empty((*a.shape[:-1], b.shape[2]), dtype=dtype)


def grouped_call(a, b, offsets=None, *, counts=None, out=None, bias=None, activation=None, alpha=1.0, out_dtype=None,
                 scale_a=None, scale_b=None, kernel="auto", stream=None, **params):
    """gemmlab.grouped_matmul on torch tensors: under torch.compile through `grouped_matmul_op` (groups given as
    a list become a tensor); where an input needs grad, refused by name (no autograd); else straight to the
    API."""
    from ..api.grouped import grouped_matmul

    needs = [name for name, x in (("A", a), ("B", b), ("bias", bias))
             if isinstance(x, torch.Tensor) and x.requires_grad]
    if needs and torch.is_grad_enabled():
        raise ValueError(f"gemmlab.grouped_matmul has no autograd; {', '.join(needs)} require grad (run it under "
                         "torch.no_grad() or detach them)")
    if not torch.compiler.is_compiling():
        return grouped_matmul(a, b, offsets, counts=counts, out=out, bias=bias, activation=activation, alpha=alpha,
                              out_dtype=out_dtype, scale_a=scale_a, scale_b=scale_b, kernel=kernel, stream=stream,
                              **params)
    if stream is not None:
        raise ValueError("gemmlab.grouped_matmul: stream= is not taken under torch.compile; enter "
                         "torch.cuda.stream(s) around the compiled call instead")
    if (offsets is None) == (counts is None):
        raise ValueError("pass exactly one of offsets and counts")
    groups = offsets if offsets is not None else counts
    if not isinstance(groups, torch.Tensor):
        groups = torch.tensor(list(groups), dtype=torch.int32, device=a.device)
    folded, sa, sb = _call.fold_scales(alpha, scale_a, scale_b)
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        out_dtype = getattr(torch, dtype_label(out_dtype))
    y = grouped_matmul_op(a, b, groups, counts is not None, bias, sa, sb, float(folded), check_activation(activation),
                          out_dtype, kernel, params_text(params))
    if out is not None:
        out.copy_(y)
        return out
    return y


def _batch_of(a, b):
    """The products of a batched call: A's or B's leading dimension (a 2-D operand, or a batch of one, is
    shared by all)."""
    ba = a.shape[0] if a.dim() == 3 else 1
    bb = b.shape[0] if b.dim() == 3 else 1
    torch._check(ba == bb or ba == 1 or bb == 1,
                 lambda: f"gemmlab.matmul: batch sizes differ: A is {tuple(a.shape)}, B is {tuple(b.shape)}")
    return ba if bb == 1 else bb


def _to_shape(g: torch.Tensor, shape) -> torch.Tensor:
    """A batched gradient summed over the products that shared an operand of `shape` (2-D, or a batch of one)."""
    if g.dim() == 3 and len(shape) == 2:
        return g.sum(0)
    if g.dim() == 3 and shape[0] == 1 and g.shape[0] != 1:
        return g.sum(0, keepdim=True)
    return g


# ----------------------------------------------------------------------------------------- autograd

def _activation_grad(dy: torch.Tensor, z: torch.Tensor, activation: str) -> torch.Tensor:
    """dOut · act'(z), in fp32."""
    dy, z = dy.float(), z.float()
    if activation == "relu":
        return torch.ops.aten.threshold_backward(dy, z, 0)
    if activation == "gelu_tanh":
        return torch.ops.aten.gelu_backward(dy, z, approximate="tanh")
    if activation == "gelu_erf":
        return torch.ops.aten.gelu_backward(dy, z)
    return torch.ops.aten.silu_backward(dy, z)


def activate(z: torch.Tensor, activation: str | None) -> torch.Tensor:
    """The activations of gemmlab's epilogue, in torch (computed in fp32, one rounding to z's dtype)."""
    if activation is None:
        return z
    x = z.float()
    if activation == "relu":
        y = torch.relu(x)
    elif activation == "gelu_tanh":
        y = torch.nn.functional.gelu(x, approximate="tanh")
    elif activation == "gelu_erf":
        y = torch.nn.functional.gelu(x)
    else:
        y = torch.nn.functional.silu(x)
    return y.to(z.dtype)


class _Matmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, c, bias, residual, alpha, beta, activation, out_dtype, precision, kernel, params):
        if activation is None:
            y = matmul_op(a, b, c, bias, residual, alpha, beta, None, out_dtype, precision, kernel, params)
            z = None
        else:  # keep the pre-activation z for the backward (module docstring)
            z = matmul_op(a, b, c, bias, None, alpha, beta, None, out_dtype, precision, kernel, params)
            y = activate(z, activation)
            if residual is not None:
                y = y + residual
        ctx.save_for_backward(a, b, z)
        ctx.alpha, ctx.beta, ctx.activation = alpha, beta, activation
        ctx.precision, ctx.kernel, ctx.params = precision, kernel, params
        ctx.bias_shape = None if bias is None else tuple(bias.shape)
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.bias_row = bias is not None and (tuple(bias.shape) == (a.shape[-2], 1) or
                                             (bias.dim() == 1 and bias.shape[0] != b.shape[-1]))
        ctx.residual_shape = None if residual is None else tuple(residual.shape)
        return y

    @staticmethod
    def backward(ctx, dy):
        a, b, z = ctx.saved_tensors
        need = ctx.needs_input_grad
        dz = dy if ctx.activation is None else _activation_grad(dy, z, ctx.activation).to(dy.dtype)
        da = db = dc = dbias = dres = None
        g = dz.to(a.dtype)
        if need[0]:  # dA = alpha dz B^T (B^T: a view, read K-major in place where the rung can)
            da = matmul_op(g, b.transpose(-1, -2), None, None, None, ctx.alpha, 0.0, None, a.dtype, ctx.precision,
                           "auto", "")
            da = _to_shape(da, a.shape)
        if need[1]:  # dB = alpha A^T dz
            db = matmul_op(a.transpose(-1, -2), g, None, None, None, ctx.alpha, 0.0, None, b.dtype, ctx.precision,
                           "auto", "")
            db = _to_shape(db, b.shape)
        if need[2]:
            dc = (ctx.beta * dz.float()).to(dz.dtype)
        if need[3]:  # summed over the products and the rows (per-column bias) or the columns (per-row)
            lead = tuple(range(dz.dim() - 2))
            s = dz.float().sum(dim=(*lead, dz.dim() - 1 if ctx.bias_row else dz.dim() - 2))
            dbias = s.reshape(ctx.bias_shape).to(ctx.bias_dtype)
        if need[4]:
            dres = _to_shape(dy, ctx.residual_shape)
        return da, db, dc, dbias, dres, None, None, None, None, None, None, None


# ----------------------------------------------------------------------------------------- the router

class Router:
    """Sends a gemmlab.matmul call on torch tensors through the operator where autograd or torch.compile
    needs it; the API asks `wants` first on every call (a few hundred nanoseconds)."""

    def __init__(self):
        self._compiling = torch.compiler.is_compiling
        self._grad = torch.is_grad_enabled
        self._tensor = torch.Tensor

    def wants(self, a, b, c, bias, residual) -> bool:
        """Whether this call goes through the operator: torch tensors under torch.compile or needing grad."""
        if not isinstance(a, self._tensor):
            return False
        if self._compiling():
            return True
        return self._grad() and self.needs_grad(a, b, c, bias, residual)

    def needs_grad(self, a, b, c, bias, residual) -> bool:
        return (a.requires_grad or b.requires_grad or (c is not None and c.requires_grad)
                or (bias is not None and getattr(bias, "requires_grad", False))
                or (residual is not None and getattr(residual, "requires_grad", False)))

    def dispatch(self, a, b, c=None, **kwargs):
        """gemmlab.matmul: through the operator where it is wanted, else straight to the API's product."""
        if self.wants(a, b, c, kwargs.get("bias"), kwargs.get("residual")):
            return self.call(a, b, c, **kwargs)
        return _call.matmul(a, b, c, **kwargs)

    def call(self, a, b, c=None, *, alpha=1.0, beta=0.0, kernel="auto", stream=None, bias=None, activation=None,
             residual=None, out_dtype=None, precision=None, **params):
        compiling = self._compiling()
        if stream is not None:
            if compiling:
                raise ValueError("gemmlab.matmul: stream= is not taken under torch.compile; enter "
                                 "torch.cuda.stream(s) around the compiled call instead")
            from .. import arrays

            with arrays.home(arrays.TORCH_CUDA).stream_scope(stream, a.device.index):
                return self.call(a, b, c, alpha=alpha, beta=beta, kernel=kernel, bias=bias, activation=activation,
                                 residual=residual, out_dtype=out_dtype, precision=precision, **params)
        if c is not None and c.requires_grad and self._grad():
            raise ValueError("gemmlab.matmul: C requires grad, so it cannot be overwritten (BLAS semantics); pass "
                             "beta·C as the residual instead, or detach C")
        act = check_activation(activation)
        if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
            out_dtype = getattr(torch, dtype_label(out_dtype))
        args = (a, b, c, bias, residual, float(alpha), float(beta), act, out_dtype, precision, kernel,
                params_text(params))
        if self._grad() and self.needs_grad(a, b, None, bias, residual):
            y = _Matmul.apply(*args)
        else:
            y = matmul_op(*args)
        if c is not None:
            c.copy_(y)
            return c
        return y


    def call_scaled(self, a, b, c=None, *, scale_a=None, scale_b=None, alpha=1.0, beta=0.0, kernel="auto",
                    stream=None, bias=None, activation=None, residual=None, out_dtype=None, precision=None, **params):
        """An 8-bit product through `scaled_matmul_op` (under torch.compile): number scales folded into alpha."""
        if stream is not None:
            raise ValueError("gemmlab.matmul: stream= is not taken under torch.compile; enter torch.cuda.stream(s) "
                             "around the compiled call instead")
        if precision is not None:
            raise ValueError(f"precision={precision!r}: 8-bit inputs run at their own precision")
        alpha, scale_a, scale_b = _call.fold_scales(alpha, scale_a, scale_b)
        if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
            out_dtype = getattr(torch, dtype_label(out_dtype))
        y = scaled_matmul_op(a, b, scale_a, scale_b, c, bias, residual, float(alpha), float(beta),
                             check_activation(activation), out_dtype, kernel, params_text(params))
        if c is not None:
            c.copy_(y)
            return c
        return y


ROUTER = Router()
