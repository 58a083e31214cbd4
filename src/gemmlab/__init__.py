"""gemmlab: make, measure and understand matrix multiplication on the GPU.

    >>> import gemmlab, numpy as np
    >>> a = np.random.rand(512, 256).astype(np.float32)
    >>> b = np.random.rand(256, 384).astype(np.float32)
    >>> c = gemmlab.matmul(a, b, kernel="smem_tiled", BLOCK_DIM=16)   # numpy in, numpy out

Importing gemmlab needs no GPU, CuPy or torch; GPU features raise GPUUnavailableError with the reason.
"""

import sys as _sys

from ._version import __version__
from .api import call as _call
from .api import choose_kernel, kernels
from .runtime.errors import CompileError, GemmlabError, GPUUnavailableError

_router: list = [None]


def matmul(a, b, c=None, *, alpha=1.0, beta=0.0, kernel="auto", stream=None, bias=None, activation=None,
           residual=None, out_dtype=None, precision=None, **params):
    router = _router[0]
    if router is None and "torch" in _sys.modules:  # torch is in use: its operator carries autograd and compile
        from .torch.ops import ROUTER as router

        _router[0] = router
    if router is not None and router.wants(a, b, c, bias, residual):
        return router.call(a, b, c, alpha=alpha, beta=beta, kernel=kernel, stream=stream, bias=bias,
                           activation=activation, residual=residual, out_dtype=out_dtype, precision=precision,
                           **params)
    return _call.matmul(a, b, c, alpha=alpha, beta=beta, kernel=kernel, stream=stream, bias=bias,
                        activation=activation, residual=residual, out_dtype=out_dtype, precision=precision, **params)


matmul.__doc__ = _call.matmul.__doc__

__all__ = ["CompileError", "GPUUnavailableError", "GemmlabError", "__version__", "choose_kernel", "kernels", "matmul"]
