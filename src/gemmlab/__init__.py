"""gemmlab: make, measure and understand matrix multiplication on the GPU.

    >>> import gemmlab, numpy as np
    >>> a = np.random.rand(512, 256).astype(np.float32)
    >>> b = np.random.rand(256, 384).astype(np.float32)
    >>> c = gemmlab.matmul(a, b, kernel="smem_tiled", BLOCK_DIM=16)   # numpy in, numpy out

Importing gemmlab needs no GPU; GPU features raise GPUUnavailableError with the reason.
"""

from ._version import __version__
from .api import choose_kernel, kernels, matmul
from .runtime.errors import CompileError, GemmlabError, GPUUnavailableError

__all__ = ["CompileError", "GPUUnavailableError", "GemmlabError", "__version__", "choose_kernel", "kernels", "matmul"]
