"""gemmlab: make, measure and understand matrix multiplication on the GPU.

    >>> import gemmlab, numpy as np
    >>> a = np.random.rand(512, 256).astype(np.float32)
    >>> b = np.random.rand(256, 384).astype(np.float32)
    >>> c = gemmlab.matmul(a, b, kernel="smem_tiled", BLOCK_DIM=16)   # numpy in, numpy out

Importing gemmlab needs no GPU, CuPy or torch; GPU features raise GPUUnavailableError with the reason.
"""

import sys as _sys

from . import arrays as _arrays
from . import formats as _formats
from ._version import __version__
from .api import call as _call
from .api import choose_kernel, kernels
from .api import grouped as _grouped
from .api.quantize import dequantize, quantize
from .runtime.errors import CompileError, GemmlabError, GPUUnavailableError

_router: list = [None]
# Device array types seen in a plain product (torch tensors, CuPy arrays) -> their 8-bit dtypes: a repeat call
# on two 2-D arrays of such a type, not 8-bit, that the router does not want, goes straight to the product.
_plain: dict = {}


def matmul(a, b, c=None, *, alpha=1.0, beta=0.0, kernel="auto", stream=None, bias=None, activation=None,
           residual=None, out_dtype=None, precision=None, scale_a=None, scale_b=None, **params):
    eight = _plain.get(type(a))
    if eight is not None and scale_a is None and scale_b is None and a.ndim == 2 and getattr(b, "ndim", 0) == 2 \
            and a.dtype not in eight:
        router = _router[0]
        if router is None or not router.wants(a, b, c, bias, residual):
            return _call.product(a, b, c, alpha, beta, kernel, stream, bias, activation, residual, out_dtype, precision,
                                 params)
    kw = dict(alpha=alpha, beta=beta, kernel=kernel, stream=stream, bias=bias, activation=activation,
              residual=residual, out_dtype=out_dtype, precision=precision, **params)
    if scale_a is not None or scale_b is not None or _formats.is_fp8(_formats.dtype_label(getattr(a, "dtype", ""))):
        # 8-bit inputs: one product (no autograd through quantized values); torch.compile traces its operator
        if "torch" in _sys.modules:
            import torch

            if isinstance(a, torch.Tensor) and torch.compiler.is_compiling():
                from .torch.ops import ROUTER

                return ROUTER.call_scaled(a, b, c, scale_a=scale_a, scale_b=scale_b, **kw)
        return _call.matmul(a, b, c, scale_a=scale_a, scale_b=scale_b, **kw)
    nda, ndb = getattr(a, "ndim", 2), getattr(b, "ndim", 2)
    for name, x, nd in (("A", a, nda), ("B", b, ndb)):
        if isinstance(nd, int) and nd < 2:
            raise ValueError(f"{name} must be 2-D (or a batch of matrices), got shape {tuple(x.shape)} ({nd}-D)")
    if nda > 2 and ndb == 2:
        return _batched_rows(a, b, c, **kw)
    if nda > 3 or ndb > 3:
        return _batched_leading(a, b, c, **kw)
    return _product(a, b, c, **kw)


def _batched_leading(a, b, c, *, residual, **kw):
    """A (..., M, K) @ B (..., K, N) with more than one leading dimension: the leading dimensions, equal on
    both sides (or absent on one: a matrix every product shares), fold into one batch dimension, as views
    where the strides allow it (else copies, as torch.matmul makes); C and the residual must fold as views."""
    la = tuple(a.shape[:-2]) if a.ndim > 2 else ()
    lb = tuple(b.shape[:-2]) if b.ndim > 2 else ()
    if la and lb and la != lb:
        raise ValueError(f"A of shape {tuple(a.shape)} and B of shape {tuple(b.shape)}: the leading (batch) "
                         "dimensions must be equal, or one operand 2-D (shared by every product)")
    lead = la or lb
    batch = 1
    for d in lead:
        batch *= d
    a3 = _folded(a, (batch, *a.shape[-2:]), "A") if la else a
    b3 = _folded(b, (batch, *b.shape[-2:]), "B") if lb else b
    want = (*lead, a.shape[-2], b.shape[-1])
    folded = []
    for name, x in (("C", c), ("residual", residual)):
        if x is None:
            folded.append(None)
            continue
        if name == "residual" and tuple(x.shape) == want[-2:]:
            folded.append(x)  # one M x N residual for every product
            continue
        if tuple(x.shape) != want:
            raise ValueError(f"{name} must have the shape {want} of the batch x M x N, got {tuple(x.shape)}")
        if name == "C" and not _arrays.rows_fold(tuple(x.shape[:-1]), _arrays.strides_in_elements(x)[:-1]):
            raise ValueError(f"C of shape {tuple(x.shape)} does not fold into {batch} x {want[-2]} x {want[-1]} "
                             "without a copy (its strides); pass a contiguous C or none")
        folded.append(x.reshape(batch, *want[-2:]))
    out = _product(a3, b3, folded[0], residual=folded[1], **kw)
    return c if c is not None else out.reshape(want)


def _folded(x, shape, name):
    """x reshaped to `shape`: a view where its strides allow one, else a copy, which for a host array must fit
    in memory (a broadcast view of a huge batch is refused by size, not materialised)."""
    if _arrays.is_host(_arrays.kind_of(x)) and not _arrays.rows_fold(tuple(x.shape[:-1]),
                                                                   _arrays.strides_in_elements(x)[:-1]):
        from .runtime import device

        device.check_host_memory(int(x.nbytes), f"{name} of shape {tuple(x.shape)}, copied to fold into {shape},")
    return x.reshape(shape)


def _batched_rows(a, b, c, *, residual, **kw):
    """x @ W for x of shape (..., T, K) and a 2-D W: one product of all rows, (batch x T) x K times K x N, in
    one launch, the epilogue on every row; the result (or `c`) has shape (..., T, N). A's leading dimensions
    are folded into its rows as a view where its strides allow it (else a copy, as torch.matmul does); C and
    the residual must fold as views or copies of the same shape."""
    lead, k = tuple(a.shape[:-1]), a.shape[-1]
    if k != b.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {' x '.join(map(str, a.shape))}, B is "
                         f"{b.shape[0]} x {b.shape[1]} (A's last dimension must equal B's rows)")
    rows = 1
    for d in lead:
        rows *= d
    a2 = _folded(a, (rows, k), "A")
    n = b.shape[1]
    want = (*lead, n)
    for name, x in (("C", c), ("residual", residual)):
        if x is not None and tuple(x.shape) != want:
            raise ValueError(f"{name} must have the shape {want} of A's batch x N, got {tuple(x.shape)}")
    if c is not None and not _arrays.rows_fold(tuple(c.shape), _arrays.strides_in_elements(c)):
        raise ValueError(f"C of shape {tuple(c.shape)} does not fold into {rows} x {n} rows without a copy "
                         "(its strides); pass a contiguous C or none")
    c2 = c.reshape(rows, n) if c is not None else None
    r2 = residual.reshape(rows, n) if residual is not None else None
    out = _product(a2, b, c2, residual=r2, **kw)
    return c if c is not None else out.reshape(want)


def _learn_plain(a) -> None:
    """Remember a's type for matmul's direct route where it is a device array type: torch.Tensor (and its
    subclasses, each by itself) with its float8 dtypes, which take the checks of 8-bit inputs; CuPy arrays."""
    kind = _arrays.kind_of(a) if hasattr(a, "ndim") else None
    if kind == _arrays.TORCH_CUDA and _router[0] is not None:
        import torch

        _plain[type(a)] = frozenset(getattr(torch, n) for n in dir(torch) if n.startswith("float8_"))
    elif kind == _arrays.CUPY and type(a).__module__.startswith("cupy"):
        _plain[type(a)] = frozenset()


def _product(a, b, c=None, *, alpha=1.0, beta=0.0, kernel="auto", stream=None, bias=None, activation=None,
              residual=None, out_dtype=None, precision=None, **params):
    router = _router[0]
    if router is None and "torch" in _sys.modules:  # torch is in use: its operator carries autograd and compile
        from .torch.ops import ROUTER as router

        _router[0] = router
    if router is not None and router.wants(a, b, c, bias, residual):
        return router.call(a, b, c, alpha=alpha, beta=beta, kernel=kernel, stream=stream, bias=bias,
                           activation=activation, residual=residual, out_dtype=out_dtype, precision=precision,
                           **params)
    if type(a) not in _plain:
        _learn_plain(a)
    return _call.matmul(a, b, c, alpha=alpha, beta=beta, kernel=kernel, stream=stream, bias=bias,
                        activation=activation, residual=residual, out_dtype=out_dtype, precision=precision, **params)


def grouped_matmul(a, b, offsets=None, *, counts=None, out=None, bias=None, activation=None, alpha=1.0,
                   out_dtype=None, scale_a=None, scale_b=None, kernel="auto", stream=None, **params):
    if "torch" in _sys.modules:  # torch tensors: through the operator under torch.compile, refused under autograd
        import torch

        if isinstance(a, torch.Tensor):
            from .torch.ops import grouped_call

            return grouped_call(a, b, offsets, counts=counts, out=out, bias=bias, activation=activation, alpha=alpha,
                                out_dtype=out_dtype, scale_a=scale_a, scale_b=scale_b, kernel=kernel, stream=stream,
                                **params)
    return _grouped.grouped_matmul(a, b, offsets, counts=counts, out=out, bias=bias, activation=activation,
                                   alpha=alpha, out_dtype=out_dtype, scale_a=scale_a, scale_b=scale_b, kernel=kernel,
                                   stream=stream, **params)


grouped_matmul.__doc__ = _grouped.grouped_matmul.__doc__ + """
    torch.compile traces it as the operator `torch.ops.gemmlab.grouped_matmul` (no graph break); it has no
    autograd, and an input that requires grad is refused by name.
    """

matmul.__doc__ = _call.matmul.__doc__ + """
    Leading dimensions beyond three fold into one batch: A (..., M, K) @ B (..., K, N) with equal leading
    dimensions (or a 2-D operand on one side) is a batch of products, the result (..., M, N). A of shape
    (..., M, K) with a 2-D B is one product of all of A's rows (x @ W for x of shape batch x T x K, as
    torch.matmul broadcasts W), one launch.
    """

__all__ = ["CompileError", "GPUUnavailableError", "GemmlabError", "__version__", "choose_kernel", "dequantize",
           "grouped_matmul", "kernels", "matmul", "quantize"]
