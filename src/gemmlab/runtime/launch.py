"""Load a compiled cubin into the current CUDA context through CuPy and launch its kernels.

Kernel-agnostic: callers hand over a `CompiledModule`, a name expression, the launch geometry and
already-typed arguments (``np.int32``, ``np.float32``, device arrays). A Python float would be passed
as a double, so untyped scalars are rejected here rather than silently mis-read by the kernel.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .compiler import CompiledModule, Resources
from .device import libcuda, require_cupy

_modules: dict[tuple[str, int], Any] = {}


@dataclass
class LoadedKernel:
    """A kernel function ready to launch, with what the loader read back about it."""

    name_expression: str
    function: Any                 # cupy.RawKernel-like function object
    resources: Resources
    max_dynamic_smem: int = 0
    _clusters: dict = field(default_factory=dict)

    def attributes(self) -> dict[str, int]:
        f = self.function
        return {
            "num_regs": int(f.num_regs),
            "local_size_bytes": int(f.local_size_bytes),
            "shared_size_bytes": int(f.shared_size_bytes),
            "max_threads_per_block": int(f.max_threads_per_block),
        }

    def loaded_resources(self) -> Resources:
        """Resources as the driver reports them for the loaded kernel: registers, static shared memory,
        local memory per thread (stack frame and spills together)."""
        f = self.function
        return Resources(registers=int(f.num_regs), smem_static=int(f.shared_size_bytes),
                         stack_frame=int(f.local_size_bytes), known=True)

    def ensure_dynamic_smem(self, nbytes: int) -> None:
        """Raise the kernel's dynamic shared-memory limit when a launch asks for more than 48 KiB."""
        if nbytes > 48 * 1024 and nbytes > self.max_dynamic_smem:
            self.function.max_dynamic_shared_size_bytes = int(nbytes)
            self.max_dynamic_smem = int(nbytes)

    def max_active_clusters(self, cluster: int, block: tuple[int, int, int], smem: int) -> int | None:
        """How many clusters of `cluster` blocks of this kernel the GPU can hold at once (the driver's
        occupancy answer, which knows how SMs group into GPCs), or None where the driver cannot say."""
        key = (cluster, tuple(block), smem)
        if key not in self._clusters:
            self.ensure_dynamic_smem(smem)
            f = self.function  # a CuPy RawKernel (the driver handle on its .kernel) or a Function
            handle = getattr(f, "ptr", None) or getattr(getattr(f, "kernel", None), "ptr", None)
            self._clusters[key] = _max_active_clusters(int(handle), cluster, block, smem) if handle else None
        return self._clusters[key]

    def __call__(self, grid: tuple[int, int, int], block: tuple[int, int, int], args: Sequence[Any],
                 smem: int = 0, stream: Any = None) -> None:
        if smem:
            self.ensure_dynamic_smem(smem)
        self.function(grid, block, tuple(args), shared_mem=smem, stream=stream)


class PackedLaunch:
    """One launch's arguments packed once into the driver's form (a pointer per argument to its bytes), for
    a call repeated many times: relaunching is one cuLaunchKernel, and a scalar can be changed in place
    (`set_float`). CuPy's launcher packs every argument again on every call, which costs more host time
    than a small tensor-core GEMM takes on the GPU.

    Arguments as for `LoadedKernel.__call__`: np.int32 / np.float32 (and other fixed-size numpy scalars,
    including by-value structs such as tensor maps) are copied; device arrays are passed as their address,
    and the caller keeps them alive (the plan holds `args`)."""

    def __init__(self, kernel: LoadedKernel, grid: tuple[int, int, int], block: tuple[int, int, int],
                 args: Sequence[Any], smem: int = 0):
        if smem:
            kernel.ensure_dynamic_smem(smem)
        f = kernel.function
        handle = getattr(f, "ptr", None) or getattr(getattr(f, "kernel", None), "ptr", None)
        if not handle:
            raise TypeError("this kernel object exposes no driver handle to launch directly")
        self.handle, self.grid, self.block, self.smem = int(handle), tuple(grid), tuple(block), int(smem)
        self.args = tuple(args)  # keeps the device arrays alive
        self._values = []
        for i, a in enumerate(self.args):
            if isinstance(a, np.generic):
                raw = a.tobytes()
                self._values.append((ctypes.c_ubyte * len(raw)).from_buffer_copy(raw))
            elif hasattr(a, "data") and hasattr(a.data, "ptr"):  # a CuPy array: its address
                self._values.append(ctypes.c_uint64(int(a.data.ptr)))
            else:
                raise TypeError(f"argument {i} ({type(a).__name__}) cannot be packed: use np.int32, np.float32, "
                                "a numpy struct or a device array")
        self._pointers = (ctypes.c_void_p * max(1, len(self._values)))(
            *[ctypes.addressof(v) for v in self._values])
        self._params = ctypes.addressof(self._pointers)
        self._launch = require_cupy().cuda.driver.launchKernel

    def set_float(self, index: int, value: float) -> None:
        """Argument `index` (an np.float32 when packed) becomes `value`."""
        raw = np.float32(value).tobytes()
        ctypes.memmove(self._values[index], raw, 4)

    def __call__(self, stream_ptr: int) -> None:
        self._launch(self.handle, *self.grid, *self.block, self.smem, int(stream_ptr), self._params, 0)


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem_bytes", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]


@functools.lru_cache(maxsize=1)
def _occupancy_fn():
    fn = getattr(libcuda(), "cuOccupancyMaxActiveClusters", None)
    if fn is not None:
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(_LaunchConfig)]
    return fn


def _max_active_clusters(function: int, cluster: int, block: tuple[int, int, int], smem: int) -> int | None:
    fn = _occupancy_fn()
    if fn is None:
        return None
    # The kernel declares its cluster shape (__cluster_dims__), so the configuration names none.
    cfg = _LaunchConfig((ctypes.c_uint * 3)(cluster, 1, 1), (ctypes.c_uint * 3)(*block), smem, None, None, 0)
    out = ctypes.c_int(0)
    rc = fn(ctypes.byref(out), ctypes.c_void_p(function), ctypes.byref(cfg))
    return int(out.value) if rc == 0 and out.value > 0 else None


def load(module: CompiledModule, name_expression: str) -> LoadedKernel:
    """Load `module` (once per device) and return the kernel for `name_expression`."""
    cupy = require_cupy()
    dev = cupy.cuda.Device().id
    key = (str(module.cubin_path), dev)
    raw = _modules.get(key)
    if raw is None:
        raw = cupy.RawModule(path=str(module.cubin_path))
        _modules[key] = raw
    fn = raw.get_function(module.lowered_names[name_expression])
    return LoadedKernel(name_expression, fn, module.resources.get(name_expression, Resources()))


def check_scalar_types(args: Sequence[Any]) -> None:
    for i, a in enumerate(args):
        if isinstance(a, (float, int)) and not isinstance(a, np.generic):
            raise TypeError(f"kernel argument {i} is a Python {type(a).__name__}; pass np.int32/np.float32 explicitly")


def module_global(module: CompiledModule, name: str):
    """The device memory of `__device__` variable `name` of `module`, as loaded on the current device
    (the same instance its kernels use), as a CuPy memory pointer."""
    cupy = require_cupy()
    key = (str(module.cubin_path), cupy.cuda.Device().id)
    raw = _modules.get(key)
    if raw is None:
        raise RuntimeError(f"{module.cubin_path.name} is not loaded on device {key[1]}; launch one of its kernels first")
    return raw.get_global(name)
