"""Errors the runtime raises; each carries one line a person can act on."""

from __future__ import annotations


class GemmlabError(Exception):
    """Base class for gemmlab's own errors."""


class GPUUnavailableError(GemmlabError, RuntimeError):
    """A GPU feature was asked for where no usable CUDA GPU (or CuPy) is present."""


class CompileError(GemmlabError, RuntimeError):
    """NVRTC rejected a kernel source; the message carries the compiler log."""


class CompilerUnavailableError(GemmlabError, RuntimeError):
    """NVRTC (cuda-bindings' nvrtc and NVIDIA's NVRTC library) cannot be loaded."""
