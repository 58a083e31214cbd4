"""Arrays in and out: numpy (host), CuPy, torch and anything with __cuda_array_interface__ or DLPack; and
which stream and which allocator an array belongs to.

Rules, in one place:
- Host arrays are moved to the GPU first (numpy through CuPy, CPU torch tensors through torch) and the
  result moved back.
- Device arrays are used where they lie, without copies, when each row is contiguous (unit stride along
  columns) and rows are evenly spaced: the row spacing becomes the BLAS leading dimension. Any other
  layout (a transposed view, Fortran order, a negative or zero stride) is copied to a row-major buffer
  first; a column-major B is read as Bᵀ in place by the rungs that can.
- Every array belongs to a *home*, the framework whose allocator and streams it follows: torch tensors to
  torch (outputs and scratch from `torch.empty`, work on torch's current stream of the tensor's device),
  CuPy and foreign device arrays to CuPy (its pool and its current stream).
- The result comes back as the type that came in: numpy for numpy, CuPy for CuPy, torch for torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .formats import dtype_label
from .runtime.device import require_cupy

NUMPY, CUPY, TORCH_CUDA, TORCH_CPU, FOREIGN_CUDA = "numpy", "cupy", "torch_cuda", "torch_cpu", "foreign_cuda"


def kind_of(x: Any) -> str:
    """Classify an array without importing the library it came from."""
    if isinstance(x, np.ndarray):
        return NUMPY
    mod = type(x).__module__.split(".")[0]
    if mod == "cupy":
        return CUPY
    if mod == "torch":
        if not hasattr(x, "is_cuda"):
            raise TypeError(f"expected an array, got torch's {type(x).__name__}")
        return TORCH_CUDA if x.is_cuda else TORCH_CPU
    if hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack__"):
        return FOREIGN_CUDA
    raise TypeError(
        f"expected a numpy, CuPy or torch array (or one with __cuda_array_interface__ / DLPack), got {type(x).__name__}"
    )


def is_host(kind: str) -> bool:
    return kind in (NUMPY, TORCH_CPU)


def dtype_name(x: Any, kind: str | None = None) -> str:
    """'float32', 'float16', 'bfloat16', ... for any supported array type."""
    return dtype_label(x.dtype)


def to_host_numpy(x: Any, kind: str) -> np.ndarray:
    if kind == TORCH_CPU:
        return x.detach().numpy()
    return x


def writable(x: Any) -> bool:
    """Whether an array may be written (numpy's writeable flag; device arrays always may)."""
    flags = getattr(x, "flags", None)
    return bool(getattr(flags, "writeable", True)) if flags is not None and not callable(flags) else True


def strides_in_elements(x: Any) -> tuple[int, ...]:
    """Strides in elements for a torch tensor or a numpy / CuPy array."""
    if callable(getattr(x, "stride", None)):
        return tuple(x.stride())
    item = x.itemsize
    return tuple(s // item if s % item == 0 else s / item for s in x.strides)


def row_pitch(shape: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """The leading dimension (elements) of a 2-D array that the kernels can read in place as row-major: unit
    stride along columns and evenly spaced, non-overlapping rows; None for any other layout."""
    rows, cols = shape
    s0, s1 = strides
    if not (s1 == 1 or cols <= 1):
        return None
    if rows <= 1:
        return max(cols, 1)
    if not isinstance(s0, int) or s0 < max(cols, 1):
        return None
    return s0


def rows_fold(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether every dimension but the last folds into one index of rows without a copy (a reshape to
    (rows, last) is a view): each leading dimension steps over the whole of the ones inside it. Dimensions
    of size 1 step over nothing; an empty array folds."""
    if 0 in shape:
        return True
    expected = None
    for size, stride in reversed(list(zip(shape[:-1], strides[:-1]))):
        if size == 1:
            continue
        if expected is not None and stride != expected:
            return False
        expected = stride * size
    return True


def column_pitch(shape: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """The leading dimension of the transpose of a 2-D array that is column-major (each column contiguous,
    columns evenly spaced): what a rung that reads Bᵀ in place needs; None otherwise (and for vectors)."""
    rows, cols = shape
    if rows <= 1 or cols <= 1:
        return None
    return row_pitch((cols, rows), (strides[1], strides[0]))


# ------------------------------------------------------------------------------------------------ homes

class Home:
    """What a framework lends a call: its current stream on a device, its allocator, its copies. Kept small:
    the launch layer needs pointers, a stream handle and memory, and nothing else of an array."""

    name = ""

    def ptr(self, x) -> int:
        raise NotImplementedError

    def stream(self, device: int) -> int:
        """The raw handle of the framework's current stream on `device`."""
        raise NotImplementedError

    def empty(self, shape: tuple[int, ...], label: str, device: int):
        """Uninitialised memory of `label` ('float32', 'bfloat16', 'int32', ...) from the framework's allocator."""
        raise NotImplementedError

    def contiguous(self, x):
        raise NotImplementedError

    def copy_into(self, dst, src) -> None:
        raise NotImplementedError

    def stream_scope(self, stream, device: int):
        """A context in which `stream` (a torch or CuPy stream, or a raw handle) is the framework's current
        stream on `device`, so that its allocations and copies are ordered with the launch."""
        raise NotImplementedError

    def device_of(self, x) -> int:
        raise NotImplementedError


def stream_handle(stream) -> int:
    """The raw handle of a torch stream, a CuPy stream or an int."""
    if isinstance(stream, (int, np.integer)) and not isinstance(stream, bool):
        return int(stream)
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        v = getattr(stream, attr, None)
        if isinstance(v, (int, np.integer)):
            return int(v)
    raise TypeError(f"stream must be a torch.cuda.Stream, a CuPy stream or a raw stream handle (int), "
                    f"got {type(stream).__name__}")


class TorchHome(Home):
    name = "torch"

    def __init__(self):
        import torch

        self.torch = torch
        self._raw_stream = torch._C._cuda_getCurrentRawStream
        self._dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                        "int32": torch.int32, "int16": torch.int16, "uint8": torch.uint8, "float64": torch.float64}
        self._empty = torch.empty
        self._devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]

    def ptr(self, x) -> int:
        return x.data_ptr()

    def stream(self, device: int) -> int:
        return self._raw_stream(device)

    def empty(self, shape, label, device):
        return self._empty(shape, dtype=self._dtypes[label], device=self._devices[device])

    def contiguous(self, x):
        return x.contiguous()

    def copy_into(self, dst, src) -> None:
        dst.copy_(src)

    def stream_scope(self, stream, device):
        torch = self.torch
        if isinstance(stream, torch.cuda.Stream):
            if stream.device.index != device:
                raise ValueError(f"stream= is on cuda:{stream.device.index}, the operands on cuda:{device}")
            return torch.cuda.stream(stream)
        return torch.cuda.stream(torch.cuda.ExternalStream(stream_handle(stream), device=f"cuda:{device}"))

    def device_of(self, x) -> int:
        return x.device.index


class CupyHome(Home):
    name = "cupy"

    def __init__(self):
        cp = require_cupy()
        self.cp = cp
        self._get_stream = cp.cuda.get_current_stream
        self._dtypes = {"float32": cp.float32, "float16": cp.float16, "bfloat16": cp.int16, "int16": cp.int16,
                        "int32": cp.int32, "uint8": cp.uint8, "float64": cp.float64}

    def ptr(self, x) -> int:
        return x.data.ptr

    def stream(self, device: int) -> int:
        return self._get_stream().ptr

    def empty(self, shape, label, device):
        with self.cp.cuda.Device(device):
            return self.cp.empty(shape, dtype=self._dtypes[label])

    def contiguous(self, x):
        return self.cp.ascontiguousarray(x)

    def copy_into(self, dst, src) -> None:
        dst[...] = src

    def stream_scope(self, stream, device):
        cp = self.cp
        if isinstance(stream, cp.cuda.Stream) or isinstance(stream, getattr(cp.cuda, "ExternalStream", ())):
            return stream
        return cp.cuda.ExternalStream(stream_handle(stream), device)

    def device_of(self, x) -> int:
        return x.data.device_id


_homes: dict[str, Home] = {}


def home(kind: str) -> Home:
    """The home of device arrays of `kind` (torch tensors: torch; the others: CuPy)."""
    name = "torch" if kind == TORCH_CUDA else "cupy"
    h = _homes.get(name)
    if h is None:
        h = _homes[name] = TorchHome() if name == "torch" else CupyHome()
    return h


def device_array(x, kind: str):
    """A device array of the home's type for `x`: x itself for torch and CuPy, a zero-copy CuPy view of a
    foreign device array, a device copy of a host array (numpy through CuPy, CPU torch through torch)."""
    if kind in (CUPY, TORCH_CUDA):
        return x
    if kind == TORCH_CPU:
        return x.detach().cuda()
    cp = require_cupy()
    if kind == FOREIGN_CUDA:
        return cp.asarray(x) if hasattr(x, "__cuda_array_interface__") else cp.from_dlpack(x)
    if dtype_label(x.dtype) == "bfloat16":  # a numpy bfloat16 (ml_dtypes): moved as its bits
        return cp.asarray(np.ascontiguousarray(x).view(np.int16))
    return cp.asarray(x)


def adopt(x, home: Home):
    """A zero-copy view of device array `x` in `home`'s array type (a CuPy view of a torch tensor, or the
    reverse), so that one call may mix the two libraries; 16-bit torch tensors travel as int16 bits."""
    kind = kind_of(x)
    if (kind == TORCH_CUDA) == (home.name == "torch"):
        return x
    if home.name == "torch":
        return home.torch.as_tensor(x, device=f"cuda:{x.data.device_id}")
    if dtype_label(x.dtype) == "bfloat16":
        import torch

        x = x.view(torch.int16)
    return home.cp.asarray(x.detach())


def host_result(result, kind: str, label: str):
    """A device result returned to the caller's host type (numpy or CPU torch), or as it is."""
    if kind == TORCH_CPU:
        return result.cpu()
    if kind == NUMPY:
        host = result.get()
        if label == "bfloat16":
            return _bfloat16_view(host)
        return host
    if kind == CUPY and label == "bfloat16":
        return _bfloat16_view(result)
    return result


def host_bits(x) -> np.ndarray:
    """A device array copied to a numpy array of the same bits (16-bit floats as int16)."""
    if kind_of(x) == TORCH_CUDA:
        if x.element_size() == 2:
            import torch

            x = x.view(torch.int16)
        return x.cpu().numpy()
    return x.get()


def _bfloat16_view(x):
    """int16 bits as ml_dtypes' bfloat16 where that package is there; the bits themselves otherwise."""
    try:
        import ml_dtypes

        return x.view(np.dtype(ml_dtypes.bfloat16))
    except (ImportError, TypeError, ValueError):
        return x


def overlaps(x: tuple[int, int], y: tuple[int, int]) -> bool:
    return x[0] < y[1] and y[0] < x[1] and x[0] != x[1] and y[0] != y[1]

