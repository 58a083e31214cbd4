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
from .errors import GemmlabError

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
        """Raise the kernel's dynamic shared-memory limit when a launch asks for more than the default: 48 KiB
        less the kernel's static shared memory (a launch of exactly 48 KiB with a static `__shared__` int
        beside it is refused unless the limit is raised)."""
        default = 48 * 1024 - int(getattr(self.function, "shared_size_bytes", 0) or 0)
        if nbytes > default and nbytes > self.max_dynamic_smem:
            self.function.max_dynamic_shared_size_bytes = int(nbytes)
            self.max_dynamic_smem = int(nbytes)

    def max_active_blocks(self, block: tuple[int, int, int], smem: int) -> int | None:
        """How many blocks of this kernel one SM holds at once (the driver's occupancy answer: registers,
        shared memory, threads), or None where the driver cannot say."""
        key = ("blocks", tuple(block), smem)
        if key not in self._clusters:
            self.ensure_dynamic_smem(smem)
            handle = self._handle()
            threads = int(block[0]) * int(block[1]) * int(block[2])
            self._clusters[key] = _max_active_blocks(handle, threads, smem) if handle else None
        return self._clusters[key]

    def _handle(self) -> int | None:
        """The driver's handle of the function (a CuPy Function's .ptr or a RawKernel's .kernel.ptr), if any."""
        f = self.function
        handle = getattr(f, "ptr", None) or getattr(getattr(f, "kernel", None), "ptr", None)
        return int(handle) if handle else None

    def max_active_clusters(self, cluster: int, block: tuple[int, int, int], smem: int) -> int | None:
        """How many clusters of `cluster` blocks of this kernel the GPU can hold at once (the driver's
        occupancy answer, which knows how SMs group into GPCs), or None where the driver cannot say."""
        key = (cluster, tuple(block), smem)
        if key not in self._clusters:
            self.ensure_dynamic_smem(smem)
            handle = self._handle()
            self._clusters[key] = _max_active_clusters(handle, cluster, block, smem) if handle else None
        return self._clusters[key]

    def __call__(self, grid: tuple[int, int, int], block: tuple[int, int, int], args: Sequence[Any],
                 smem: int = 0, stream: Any = None) -> None:
        if smem:
            self.ensure_dynamic_smem(smem)
        self.function(grid, block, tuple(args), shared_mem=smem, stream=stream)


class ArgPack:
    """A kernel's arguments packed once into the driver's form (a pointer per argument to its bytes), with
    slots rewritten in place between launches: a launch is then one cuLaunchKernel, where CuPy's launcher
    packs every argument again on every call (more host time than a small GEMM takes on the GPU).

    Values: np.int32 / np.float32 / np.uint64 (device addresses) / np.int64 scalars, and by-value structs
    (numpy void scalars, e.g. tensor maps), in the kernel's parameter order. Not thread-safe: a caller that
    shares a pack across threads holds a lock from the first `set` to `launch`."""

    _CTYPES = {np.dtype(np.int32): ctypes.c_int32, np.dtype(np.float32): ctypes.c_float,
               np.dtype(np.uint64): ctypes.c_uint64, np.dtype(np.int64): ctypes.c_int64}

    def __init__(self, values: Sequence[Any]):
        self.slots: list = []
        for i, v in enumerate(values):
            if not isinstance(v, np.generic):
                raise TypeError(f"argument {i} ({type(v).__name__}) cannot be packed: use np.int32, np.float32, "
                                "np.uint64 for an address, or a numpy struct")
            ct = self._CTYPES.get(v.dtype)
            if ct is not None:
                self.slots.append(ct(v.item()))
            else:
                raw = v.tobytes()
                self.slots.append((ctypes.c_ubyte * len(raw)).from_buffer_copy(raw))
        self._pointers = (ctypes.c_void_p * max(1, len(self.slots)))(*[ctypes.addressof(v) for v in self.slots])
        self.address = ctypes.addressof(self._pointers)

    def set_bytes(self, index: int, raw: bytes) -> None:
        ctypes.memmove(self.slots[index], raw, len(raw))


def driver_launch():
    """cuLaunchKernel(function, grid x/y/z, block x/y/z, shared bytes, stream, params, extra), as CuPy binds it."""
    return require_cupy().cuda.driver.launchKernel


def function_handle(kernel: LoadedKernel) -> int:
    handle = kernel._handle()
    if not handle:
        raise TypeError("this kernel object exposes no driver handle to launch directly")
    return handle


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem_bytes", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: its id, padding, a 64-byte value union
    _fields_ = [("id", ctypes.c_uint), ("pad", ctypes.c_ubyte * 4), ("value", ctypes.c_int * 16)]


_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


@functools.lru_cache(maxsize=1)
def _launch_ex_fn():
    fn = getattr(libcuda(), "cuLaunchKernelEx", None)
    if fn is not None:
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.POINTER(_LaunchConfig), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return fn


class DependentLaunch:
    """A kernel launched as the programmatic dependent of the kernel before it on the stream (cuLaunchKernelEx
    with programmatic stream serialisation): it may be scheduled while that kernel's last blocks run, and
    waits (griddepcontrol.wait) before reading what they write. The configuration is built once; a launch
    sets the stream and the packed arguments. Where the driver has no cuLaunchKernelEx, an ordinary launch
    (the kernel's wait is then a no-op)."""

    def __init__(self, function: int, grid: Sequence[int], block: Sequence[int], smem: int):
        self.function = function
        self._attr = _LaunchAttribute(_PROGRAMMATIC_STREAM_SERIALIZATION)
        self._attr.value[0] = 1
        self._config = _LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), smem, None,
                                     ctypes.addressof(self._attr), 1)
        self._grid, self._block, self._smem = tuple(grid), tuple(block), smem
        self._fn = _launch_ex_fn()

    def __call__(self, stream: int, params_address: int) -> None:
        fn = self._fn
        if fn is None:
            driver_launch()(self.function, *self._grid, *self._block, self._smem, stream, params_address, 0)
            return
        self._config.stream = stream or None
        rc = fn(ctypes.byref(self._config), self.function, params_address, None)
        if rc != 0:
            raise GemmlabError(f"cuLaunchKernelEx failed ({rc}) for a dependent launch of grid {self._grid}, "
                               f"block {self._block}")


@functools.lru_cache(maxsize=1)
def _occupancy_fn():
    fn = getattr(libcuda(), "cuOccupancyMaxActiveClusters", None)
    if fn is not None:
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(_LaunchConfig)]
    return fn


@functools.lru_cache(maxsize=1)
def _blocks_fn():
    fn = getattr(libcuda(), "cuOccupancyMaxActiveBlocksPerMultiprocessor", None)
    if fn is not None:
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    return fn


def _max_active_blocks(function: int, threads: int, smem: int) -> int | None:
    fn = _blocks_fn()
    if fn is None:
        return None
    out = ctypes.c_int(0)
    rc = fn(ctypes.byref(out), ctypes.c_void_p(function), int(threads), int(smem))
    return int(out.value) if rc == 0 and out.value > 0 else None


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


# ----------------------------------------------------------------------------------------- stream memory operations

@functools.lru_cache(maxsize=None)
def _memop(name: str):
    lib = libcuda()
    fn = None if lib is None else getattr(lib, name + "_v2", None) or getattr(lib, name, None)
    if fn is None:
        raise GemmlabError(f"the CUDA driver has no {name} (stream memory operations)")
    fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


@functools.lru_cache(maxsize=1)
def _copy_fn():
    lib = libcuda()
    fn = None if lib is None else getattr(lib, "cuMemcpyDtoDAsync_v2", None) or getattr(lib, "cuMemcpyDtoDAsync", None)
    if fn is None:
        raise GemmlabError("the CUDA driver has no cuMemcpyDtoDAsync")
    fn.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def stream_copy(stream: int, dst: int, src: int, nbytes: int) -> None:
    """Copy `nbytes` from device address `src` to `dst` in the order of `stream` (cuMemcpyDtoDAsync: the copy
    engine, also between GPUs whose memory is mapped into this one's address space); one driver call, no
    framework dispatch."""
    if nbytes <= 0:
        return
    rc = _copy_fn()(dst, src, nbytes, stream)
    if rc:
        raise GemmlabError(f"cuMemcpyDtoDAsync failed ({rc}): {nbytes} bytes 0x{src:x} -> 0x{dst:x}")


def stream_write_value(stream: int, address: int, value: int) -> None:
    """Write the 32-bit `value` at device `address` once the work queued before it on `stream` is done, after a
    memory barrier (cuStreamWriteValue32): a flag that no SM has to run, so it cannot wait on a busy GPU."""
    rc = _memop("cuStreamWriteValue32")(stream, address, value & 0xFFFFFFFF, 0)
    if rc:
        raise GemmlabError(f"cuStreamWriteValue32 failed ({rc}) at 0x{address:x}")


def stream_wait_value(stream: int, address: int, value: int) -> None:
    """Hold the work queued after this on `stream` until the 32-bit flag at `address` has reached `value`
    ((int32)(flag - value) >= 0, so a count may wrap) (cuStreamWaitValue32, GEQ)."""
    rc = _memop("cuStreamWaitValue32")(stream, address, value & 0xFFFFFFFF, 0)
    if rc:
        raise GemmlabError(f"cuStreamWaitValue32 failed ({rc}) at 0x{address:x}")
