"""`matmul`: check the inputs, pick a kernel, allocate, launch, return.

C = alpha * A @ B + beta * C, with BLAS naming: A is M x K, B is K x N, C is M x N.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from . import arrays
from .kernels import KernelSpec, registry
from .runtime import compiler, device, launch

AUTO = "auto"
INT32_MAX = 2**31 - 1


@dataclass
class _Prepared:
    """A loaded kernel instantiation, cached per (kernel, params, device) so repeat calls cost ~µs."""

    spec: KernelSpec
    params: dict[str, int]
    kernel: launch.LoadedKernel
    compile_seconds: float


_prepared: dict[tuple, _Prepared] = {}


def _cpu_baselines():
    from .cpu import BASELINES

    return BASELINES


def choose_kernel(dtype: str = "float32", cc: tuple[int, int] | None = None) -> KernelSpec:
    """The kernel `kernel="auto"` runs: the highest rung that supports the dtype and the device."""
    candidates = [s for s in registry.specs_for_dtype(dtype) if cc is None or cc >= s.min_cc]
    if not candidates:
        where = "" if cc is None else f" on compute capability {cc[0]}.{cc[1]}"
        raise TypeError(f"no GPU kernel supports dtype {dtype}{where}")
    return candidates[-1]


_validated: dict[tuple, dict[str, int]] = {}


def validated_params(spec: KernelSpec, params: Mapping[str, Any] | None) -> tuple[tuple, dict[str, int]]:
    """(cache key, full parameter set) for a rung; raises ValueError naming what is wrong. Memoised."""
    key = (spec.name, tuple(sorted((params or {}).items())))
    try:
        hit = _validated.get(key)
    except TypeError:  # an unhashable value: let validate() name it
        spec.validate(params or {})
        raise
    if hit is None:
        hit = spec.validate(params or {})
        _validated[key] = hit
    return key, hit


_tuned: dict[str, Any] = {}


def tuned_cache(info: device.DeviceInfo):
    """The device's tuned-parameter store, read once per process."""
    from .tune.cache import TunedCache

    key = f"{info.name}/{info.compute_capability}/{info.sm_count}"
    cache = _tuned.get(key)
    if cache is None:
        cache = TunedCache.for_device(info.name, info.compute_capability, info.sm_count)
        _tuned[key] = cache
    return cache


def default_params(spec: KernelSpec, m: int, n: int, k: int, info: device.DeviceInfo) -> dict[str, int]:
    """What a call that names no parameters runs: this device's tuned entry for the problem's shape
    class, else the spec's heuristic, else its defaults."""
    tuned = tuned_cache(info).lookup(spec.name, m, n, k)
    if tuned is not None:
        return tuned
    if spec.heuristic is not None:
        return spec.heuristic(m, n, k, info.sm_count)
    return {}


def prepare(spec: KernelSpec, params: Mapping[str, Any] | None = None) -> _Prepared:
    """Validate, compile (or fetch from the cache) and load one instantiation on the current device."""
    key, p = validated_params(spec, params)
    cupy = device.require_cupy()
    dev = cupy.cuda.Device().id
    raw_key = (key, dev)
    hit = _prepared.get(raw_key)
    if hit is not None:
        return hit
    info = device.device_info(dev)
    if info.compute_capability < spec.min_cc:
        raise ValueError(f"kernel {spec.name} needs compute capability {spec.min_cc}, the device is {info.compute_capability}")
    module = compiler.compile_file(spec.source_path, [spec.name_expression(p)], info.arch)
    kern = launch.load(module, spec.name_expression(p))
    prepared = _Prepared(spec, p, kern, module.compile_seconds)
    _prepared[raw_key] = prepared
    return prepared


def _shape_error(a_shape, b_shape, c_shape=None) -> str:
    text = f"A is {_fmt(a_shape)}, B is {_fmt(b_shape)}"
    if c_shape is not None:
        text += f", C is {_fmt(c_shape)}"
    return text


def _fmt(shape) -> str:
    return " x ".join(str(s) for s in shape) if len(shape) else "a scalar"


def _check_common(a, b, c, kinds, alpha, beta):
    for name, x in (("A", a), ("B", b), ("C", c)):
        if x is not None and len(x.shape) != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(x.shape)} ({len(x.shape)}-D)")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"inner dimensions differ: {_shape_error(a.shape, b.shape)} (A's columns must equal B's rows)")
    if c is not None and tuple(c.shape) != (m, n):
        raise ValueError(f"C must be {m} x {n} for {_shape_error(a.shape, b.shape)}, got {_fmt(c.shape)}")
    for name, v in (("alpha", alpha), ("beta", beta)):
        if not isinstance(v, (int, float, np.floating, np.integer)) or isinstance(v, bool):
            raise TypeError(f"{name} must be a real number, got {type(v).__name__}")
        if not math.isfinite(float(v)):
            raise ValueError(f"{name} must be finite, got {v}")
    dts = {nm: arrays.dtype_name(x, kd) for nm, x, kd in (("A", a, kinds[0]), ("B", b, kinds[1]), ("C", c, kinds[2])) if x is not None}
    return m, n, k, dts


def matmul(a, b, c=None, *, alpha: float = 1.0, beta: float = 0.0, kernel: str = AUTO, stream: Any = None,
           bias=None, activation: str | None = None, residual=None, out_dtype=None, precision: str | None = None,
           **params):
    """C = alpha * A @ B + beta * C.

    a: M x K, b: K x N, c: M x N or None. numpy arrays are copied to the GPU and back; CuPy and torch
    arrays (anything with __cuda_array_interface__ or DLPack) are used in place. The result has the type
    of `a`. When `c` is given it is overwritten with the result and returned (BLAS semantics); with
    beta == 0 its old contents are never read. `kernel` is a rung name (`gemmlab.kernels()`), a CPU
    baseline name (`cpu_naive`, ...; host arrays only) or "auto"; `params` are that rung's template
    parameters (e.g. BLOCK_DIM=16).

    Precision is explicit: float32 inputs run in strict fp32 (precision None or "fp32"; "tf32" has no
    kernel yet and is refused); float16 / bfloat16 inputs run on the tensor cores with fp32 accumulation
    (precision None, or "fp16" / "bf16" matching the inputs). Tensor-core calls take a fused epilogue,
    applied to the fp32 accumulator before the one store:
        out = activation(alpha * A @ B + beta * C + bias) + residual, cast to out_dtype
    bias: fp32 (or any float) vector, per column when its length is N (or shape 1 x N), per row when its
    length is M != N (or shape M x 1); activation: None, "relu", "gelu_tanh", "gelu_erf", "silu";
    residual: an M x N array of the output dtype; out_dtype: "float32", "float16" or "bfloat16" (default:
    C's dtype when C is given, else the inputs' dtype). The fp32 rungs take no epilogue yet.
    """
    if bias is None and activation is None and residual is None and out_dtype is None and precision is None:
        plan = _fast_plans.get(_fast_key(a, b, c, kernel, params)) if type(a) is _fast_type[0] else None
        if plan is not None and plan.accepts(a, b, c, alpha, beta):
            return plan.launch(a, b, c, alpha, beta, stream)

    kinds = [arrays.kind_of(a), arrays.kind_of(b), arrays.kind_of(c) if c is not None else None]
    m, n, k, dts = _check_common(a, b, c, kinds, alpha, beta)
    if beta != 0 and c is None:
        raise ValueError(f"beta = {beta} needs a C to scale; pass c (an M x N = {m} x {n} array) or beta = 0")

    extras = {"bias": bias, "activation": activation, "residual": residual, "out_dtype": out_dtype}
    if kernel in _cpu_baselines():
        for name, v in extras.items():
            if v is not None:
                raise ValueError(f"{name} is a fused epilogue of the tensor-core kernels; CPU kernel {kernel} takes none")
        return _matmul_cpu(kernel, a, b, c, kinds, dts, alpha, beta, params)

    host = [arrays.is_host(kd) for kd in kinds if kd is not None]
    if any(host) and not all(host):
        raise TypeError(f"A, B and C must all be host arrays or all device arrays, got {', '.join(kd for kd in kinds if kd)}")
    if _resolve_precision(dts["A"], dts["B"], precision) != "fp32":
        return _matmul_tensor(a, b, c, kinds, dts, m, n, k, alpha, beta, kernel, stream, bias, activation,
                              residual, out_dtype, params)
    for name, v in extras.items():
        if v is not None and not (name == "out_dtype" and _dtype_label(v) == "float32"):
            raise ValueError(f"{name} is a fused epilogue of the tensor-core kernels (float16 / bfloat16 inputs); "
                             "the fp32 rungs take none yet")
    for name, dt in dts.items():
        if dt != "float32":
            raise TypeError(f"the GPU kernels take float32; {name} is {dt} (convert with .astype('float32'))")

    spec = choose_kernel("float32") if kernel == AUTO else registry.get(kernel)
    if "float32" not in spec.dtypes:
        raise TypeError(f"kernel {spec.name} takes {' or '.join(spec.dtypes)} inputs; A and B are float32 "
                        "(use kernel='auto' or an fp32 rung)")
    if kernel == AUTO and params:
        raise ValueError(f"parameters {sorted(params)} need a named kernel, not kernel='auto'")
    for name, v in (("M", m), ("N", n), ("K", k)):
        if v > INT32_MAX:
            raise ValueError(f"{name} = {v} exceeds the kernels' 32-bit index range")
    validated_params(spec, params)  # parameter errors are reported before any GPU is needed

    cp = device.require_cupy()
    dev_ctx = _device_of(a, kinds[0], cp)
    with dev_ctx:
        chosen = params or default_params(spec, m, n, k, device.device_info(cp.cuda.Device().id))
        prepared = prepare(spec, chosen)
        out = _launch_gpu(prepared, a, b, c, kinds, m, n, k, alpha, beta, stream, cp)
    if kinds[0] == arrays.CUPY and all(kd in (None, arrays.CUPY) for kd in kinds) and m and n:
        _remember_fast_plan(prepared, a, b, c, kernel, params, m, n, k, cp)
    return out


# ----------------------------------------------------------------------------------------- workspace
# Scratch memory for kernels that declare it (split-K partial sums and per-tile counters). One grow-only
# pair per (device, stream): launches on one stream run in order, so they may share it; the counters
# start at zero and every kernel that uses them leaves them at zero.

_scratch: dict[tuple[int, int], dict[str, Any]] = {}
_NULL = np.uint64(0)


def _workspace_args(spec: KernelSpec, p: dict[str, int], m: int, n: int, k: int, stream, cp) -> tuple:
    if spec.workspace is None:
        return ()
    floats, ints = spec.workspace(m, n, k, p)
    if floats == 0 and ints == 0:
        return (_NULL, _NULL)
    s = stream if stream is not None else cp.cuda.get_current_stream()
    key = (cp.cuda.Device().id, int(s.ptr))
    slot = _scratch.setdefault(key, {"floats": cp.empty(0, cp.float32), "ints": cp.zeros(0, cp.int32)})
    if slot["floats"].size < floats:
        slot["floats"] = cp.empty(floats, cp.float32)
    if slot["ints"].size < ints:
        with s:
            slot["ints"] = cp.zeros(ints, cp.int32)
    return (slot["floats"], slot["ints"])


# ----------------------------------------------------------------------------------------- fast path
# A repeat call with CuPy arrays of the same shapes skips the general checks above: everything that
# does not depend on the arrays' contents was checked once and is kept in a plan; what can change
# between calls (dtype, layout, device, aliasing, the scalars) is re-checked in `accepts`, cheaply.

_fast_type: list = [None]  # cupy.ndarray once a plan exists; None keeps the fast path off
_fast_plans: dict[tuple, "_FastPlan"] = {}


def _fast_key(a, b, c, kernel, params) -> tuple:
    return (kernel, a.shape, b.shape, c is None, tuple(params.items()) if params else ())


@dataclass
class _FastPlan:
    function: Any
    grid: tuple
    block: tuple
    smem: int
    device: int
    m: Any
    n: Any
    k: Any
    empty: Any  # cupy.empty
    getdevice: Any
    scratch: Any = None  # stream -> the workspace arguments, for kernels that take them
    contiguous: Any = None  # array -> C-contiguous?, the cheapest test this CuPy offers

    def accepts(self, a, b, c, alpha, beta) -> bool:
        ta = type(a)
        if type(b) is not ta or (c is not None and type(c) is not ta):
            return False
        if type(alpha) is not float and type(alpha) is not int or type(beta) is not float and type(beta) is not int:
            return False
        if not (math.isfinite(alpha) and math.isfinite(beta)) or (beta != 0 and c is None):
            return False
        contiguous = self.contiguous
        for x in (a, b) if c is None else (a, b, c):
            if x.dtype.char != "f" or not contiguous(x) or x.data.device_id != self.device:
                return False
        if self.getdevice() != self.device:
            return False
        if c is not None:
            c0 = c.data.ptr
            c1 = c0 + c.nbytes
            for x in (a, b):
                x0 = x.data.ptr
                if x0 < c1 and c0 < x0 + x.nbytes:
                    return False
        return True

    def launch(self, a, b, c, alpha, beta, stream):
        out = self.empty((int(self.m), int(self.n)), dtype=np.float32) if c is None else c
        extra = self.scratch(stream) if self.scratch is not None else ()
        self.function(self.grid, self.block,
                      (self.m, self.n, self.k, np.float32(alpha), a, self.k, b, self.n, np.float32(beta), out, self.n,
                       *extra),
                      shared_mem=self.smem, stream=stream)
        return out


def _contiguity_test(x):
    """CuPy keeps C-contiguity as a plain attribute; `flags` builds an object on every access (~0.4 µs)."""
    try:
        if isinstance(x._c_contiguous, bool):
            return operator.attrgetter("_c_contiguous")
    except AttributeError:
        pass
    return lambda y: y.flags.c_contiguous


def _remember_fast_plan(prepared: _Prepared, a, b, c, kernel, params, m, n, k, cp) -> None:
    if not (a.flags.c_contiguous and b.flags.c_contiguous and (c is None or c.flags.c_contiguous)):
        return
    if len(_fast_plans) > 4096:
        _fast_plans.clear()
    geo = prepared.spec.launch(m, n, k, prepared.params)
    prepared.kernel.ensure_dynamic_smem(geo.smem)
    spec, p = prepared.spec, prepared.params
    scratch = None
    if spec.workspace is not None:
        scratch = lambda stream: _workspace_args(spec, p, m, n, k, stream, cp)  # noqa: E731
    _fast_plans[_fast_key(a, b, c, kernel, params)] = _FastPlan(
        prepared.kernel.function, geo.grid, geo.block, geo.smem, a.data.device_id,
        np.int32(m), np.int32(n), np.int32(k), cp.empty, cp.cuda.runtime.getDevice, scratch,
        _contiguity_test(a),
    )
    _fast_type[0] = cp.ndarray


def _device_of(a, kind: str, cp):
    if kind == arrays.CUPY:
        return a.device
    if kind == arrays.TORCH_CUDA:
        return cp.cuda.Device(a.device.index)
    return cp.cuda.Device()  # host inputs (and foreign arrays) run on the current device


def _launch_gpu(prepared: _Prepared, a, b, c, kinds, m, n, k, alpha, beta, stream, cp):
    da = arrays.to_cupy(a, kinds[0])
    db = arrays.to_cupy(b, kinds[1])
    dev = cp.cuda.Device().id
    for name, x in (("A", da), ("B", db)):
        if x.device.id != dev:
            raise ValueError(f"{name} is on device {x.device.id}, the kernel runs on device {dev}; move them to one device")
    va, vb = arrays.row_major(da), arrays.row_major(db)

    dc = None  # the caller's C on the device, when its old values are needed or it is written in place
    if c is None or (arrays.is_host(kinds[2]) and beta == 0):
        vc = arrays.RowMajorView(cp.empty((m, n), dtype=cp.float32), m, n, max(n, 1))
    else:
        dc = arrays.to_cupy(c, kinds[2])
        if dc.device.id != dev:
            raise ValueError(f"C is on device {dc.device.id}, A on device {dev}; move them to one device")
        if arrays.overlaps(dc, da) or arrays.overlaps(dc, db):
            raise ValueError("C shares memory with A or B; the result would overwrite its own inputs")
        vc = arrays.row_major(dc)  # a row-major copy when C's layout is not; written back below
    for name, v in (("lda", va.ld), ("ldb", vb.ld), ("ldc", vc.ld)):
        if v > INT32_MAX:
            raise ValueError(f"{name} = {v} exceeds the kernels' 32-bit index range")

    if m > 0 and n > 0:
        spec, p = prepared.spec, prepared.params
        geo = spec.launch(m, n, k, p)
        limit = device.device_info(dev).smem_per_block_optin
        if geo.smem > limit:
            raise ValueError(f"{spec.name} {p} needs {geo.smem} bytes of shared memory per block; "
                             f"this device allows {limit}")
        args = (np.int32(m), np.int32(n), np.int32(k), np.float32(alpha), va.array, np.int32(va.ld),
                vb.array, np.int32(vb.ld), np.float32(beta), vc.array, np.int32(vc.ld),
                *_workspace_args(spec, p, m, n, k, stream, cp))
        prepared.kernel(geo.grid, geo.block, args, smem=geo.smem, stream=stream)

    if c is None:
        return arrays.from_cupy(vc.array, kinds[0])
    if arrays.is_host(kinds[2]):
        arrays.to_host_numpy(c, kinds[2])[...] = vc.array.get()
    elif vc.array is not dc:
        dc[...] = vc.array
    return c


def _matmul_cpu(name, a, b, c, kinds, dts, alpha, beta, params):
    if not all(arrays.is_host(kd) for kd in kinds if kd is not None):
        raise TypeError(f"CPU kernel {name} takes host (numpy) arrays, got {', '.join(kd for kd in kinds if kd)}")
    an = np.ascontiguousarray(arrays.to_host_numpy(a, kinds[0]))
    bn = np.ascontiguousarray(arrays.to_host_numpy(b, kinds[1]))
    cn = None if c is None else np.ascontiguousarray(arrays.to_host_numpy(c, kinds[2]))
    if len(set(dts.values())) != 1 or dts["A"] not in ("float32", "float64"):
        raise TypeError(f"CPU kernels take float32 or float64 with one dtype for all; got {dts}")
    baseline = _cpu_baselines()[name]
    result = baseline.run(an, bn, cn if beta != 0 else None, float(alpha), float(beta), **params)
    if c is not None:
        host = arrays.to_host_numpy(c, kinds[2])
        host[...] = result
        return c
    if kinds[0] == arrays.TORCH_CPU:
        import torch

        return torch.from_numpy(result)
    return result


# ----------------------------------------------------------------------------------------- tensor cores
# fp16 / bf16 inputs: precision resolved from the dtypes, element types passed as the rung's type
# parameters (A_TYPE, C_TYPE), the epilogue as flags. bfloat16 has no CuPy dtype everywhere, so 16-bit
# operands travel to the kernel as int16 views of the same memory.

_PRECISIONS = {"float32": ("fp32", "tf32"), "float16": ("fp16",), "bfloat16": ("bf16",)}
_DTYPE_ALIASES = {"float32": "float32", "fp32": "float32", "float": "float32", "float16": "float16",
                  "fp16": "float16", "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}


def _dtype_label(dt) -> str:
    """'float32' / 'float16' / 'bfloat16' for a name, numpy dtype or torch dtype; the text itself otherwise."""
    if isinstance(dt, (type, np.dtype)):  # np.float16, np.dtype('float16')
        text = np.dtype(dt).name
    else:
        text = str(dt).replace("torch.", "")
    return _DTYPE_ALIASES.get(text.lower(), text)


def _resolve_precision(a_dtype: str, b_dtype: str, precision: str | None) -> str:
    """'fp32', 'tf32', 'fp16' or 'bf16'; raises naming `precision` or the operand at fault."""
    if a_dtype != b_dtype:
        raise TypeError(f"A and B must have one dtype: A is {a_dtype}, B is {b_dtype} (convert one with .astype)")
    allowed = _PRECISIONS.get(a_dtype)
    if allowed is None:
        raise TypeError(f"the GPU kernels take float32, float16 or bfloat16; A and B are {a_dtype} "
                        "(convert with .astype('float32'))")
    if precision is None:
        return allowed[0]
    if precision not in ("fp32", "tf32", "fp16", "bf16"):
        raise ValueError(f"precision={precision!r} is not one of 'fp32', 'tf32', 'fp16', 'bf16'")
    if precision not in allowed:
        raise ValueError(f"precision={precision!r} does not fit {a_dtype} inputs (allowed: "
                         f"{', '.join(repr(x) for x in allowed)}); convert A and B to change precision")
    if precision == "tf32":
        raise ValueError("precision='tf32' has no kernel yet (the tf32 mma_sync variant is future work); "
                         "use precision='fp32' or bfloat16 / float16 inputs")
    return precision


def _bits16(x, kind: str, cp):
    """A CuPy view of a 16-bit device array (bfloat16 as int16 bits), or a device copy of a host one."""
    dt = arrays.dtype_name(x, kind)
    if dt == "bfloat16":
        if kind in (arrays.TORCH_CUDA, arrays.TORCH_CPU):
            import torch

            x = x.detach().view(torch.int16)
        elif kind == arrays.NUMPY:
            x = x.view(np.int16)
    d = arrays.to_cupy(x, kind)
    return d.view(cp.int16) if str(d.dtype) == "bfloat16" else d


def _as_dtype(result, label: str, kind: str):
    """The int16 bits of a bfloat16 result, as the caller's array type with a bfloat16 dtype where it has one."""
    if label != "bfloat16":
        return arrays.from_cupy(result, kind)
    if kind in (arrays.TORCH_CUDA, arrays.TORCH_CPU):
        import torch

        t = torch.from_dlpack(result) if kind == arrays.TORCH_CUDA else torch.from_numpy(result.get())
        return t.view(torch.bfloat16)
    try:
        import ml_dtypes

        bf16 = np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        return arrays.from_cupy(result, kind)  # int16 bits: no bfloat16 dtype available here
    if kind == arrays.NUMPY:
        return result.get().view(bf16)
    try:
        return result.view(bf16)
    except (TypeError, ValueError):
        return result


_ACTIVATIONS = ("relu", "gelu_tanh", "gelu_erf", "silu")


def _epilogue_inputs(bias, activation, residual, m, n, out_label, cp):
    """(bias as fp32 CuPy vector or None, bias mode, residual kind) after checking them; raises naming each."""
    if activation is not None and activation not in _ACTIVATIONS and activation != "none":
        raise ValueError(f"activation={activation!r} is not one of None, {', '.join(repr(x) for x in _ACTIVATIONS)}")
    mode, vec = None, None
    if bias is not None:
        kind = arrays.kind_of(bias)
        shape = tuple(bias.shape)
        if shape in ((n,), (1, n)):
            mode = "col"
        elif shape in ((m,), (m, 1)):
            mode = "row"
        else:
            raise ValueError(f"bias must have N = {n} elements (per column) or M = {m} (per row), got shape {_fmt(shape)}")
        if kind in (arrays.TORCH_CUDA, arrays.TORCH_CPU):
            bias = bias.detach().float()
        elif arrays.dtype_name(bias, kind) not in ("float32", "float16", "float64"):
            raise TypeError(f"bias must be a float vector, got {arrays.dtype_name(bias, kind)}")
        vec = cp.ascontiguousarray(arrays.to_cupy(bias, kind).reshape(-1), dtype=cp.float32)
    if residual is not None:
        kind = arrays.kind_of(residual)
        if tuple(residual.shape) != (m, n):
            raise ValueError(f"residual must be M x N = {m} x {n}, got {_fmt(residual.shape)}")
        if arrays.dtype_name(residual, kind) != out_label:
            raise TypeError(f"residual must have the output dtype {out_label}, got {arrays.dtype_name(residual, kind)}")
    return vec, mode


def _matmul_tensor(a, b, c, kinds, dts, m, n, k, alpha, beta, kernel, stream, bias, activation, residual,
                   out_dtype, params):
    from .kernels.rungs import mma_sync as tc

    in_label = dts["A"]
    out_label = _dtype_label(out_dtype) if out_dtype is not None else dts.get("C", in_label)
    if out_label not in tc.C_TYPES:
        raise ValueError(f"out_dtype={out_dtype!r} is not one of 'float32', 'float16', 'bfloat16'")
    if c is not None and dts["C"] != out_label:
        raise TypeError(f"C is {dts['C']} but the output dtype is {out_label} (out_dtype); pass C of the output dtype")
    if kernel == AUTO and params:
        raise ValueError(f"parameters {sorted(params)} need a named kernel, not kernel='auto'")
    for name in tc.TYPE_PARAMS:
        if name in params:
            raise ValueError(f"parameter {name} is set from the arrays' dtypes and out_dtype; do not pass it")
    spec = None if kernel == AUTO else registry.get(kernel)
    if spec is not None and in_label not in spec.dtypes:
        raise TypeError(f"kernel {spec.name} takes {' or '.join(spec.dtypes)} inputs; A and B are {in_label} "
                        "(use kernel='auto' or a tensor-core rung)")
    for name, v in (("M", m), ("N", n), ("K", k)):
        if v > INT32_MAX:
            raise ValueError(f"{name} = {v} exceeds the kernels' 32-bit index range")
    types = {"A_TYPE": tc.A_TYPES[in_label], "C_TYPE": tc.C_TYPES[out_label]}
    if spec is not None:
        validated_params(spec, {**params, **types})  # parameter errors before any GPU is needed
    if activation is not None and activation not in _ACTIVATIONS and activation != "none":
        raise ValueError(f"activation={activation!r} is not one of None, {', '.join(repr(x) for x in _ACTIVATIONS)}")

    cp = device.require_cupy()
    with _device_of(a, kinds[0], cp):
        dev = cp.cuda.Device().id
        info = device.device_info(dev)
        if spec is None:
            spec = choose_kernel(in_label, info.compute_capability)
        chosen = dict(params or default_params(spec, m, n, k, info))
        chosen.update(types)
        prepared = prepare(spec, chosen)
        vec, mode = _epilogue_inputs(bias, activation, residual, m, n, out_label, cp)

        va, vb = arrays.row_major(_bits16(a, kinds[0], cp)), arrays.row_major(_bits16(b, kinds[1], cp))
        for name, x in (("A", va.array), ("B", vb.array)):
            if x.device.id != dev:
                raise ValueError(f"{name} is on device {x.device.id}, the kernel runs on device {dev}; move them to one device")
        out_cp = cp.float32 if out_label == "float32" else cp.float16 if out_label == "float16" else cp.int16
        dc = None
        if c is None or (arrays.is_host(kinds[2]) and beta == 0):
            vc = arrays.RowMajorView(cp.empty((m, n), dtype=out_cp), m, n, max(n, 1))
        else:
            dc = _bits16(c, kinds[2], cp)
            if dc.device.id != dev:
                raise ValueError(f"C is on device {dc.device.id}, A on device {dev}; move them to one device")
            if arrays.overlaps(dc, va.array) or arrays.overlaps(dc, vb.array):
                raise ValueError("C shares memory with A or B; the result would overwrite its own inputs")
            vc = arrays.row_major(dc)
        vr = None
        if residual is not None:
            vr = arrays.row_major(_bits16(residual, arrays.kind_of(residual), cp))
            if vr.array.device.id != dev:
                raise ValueError(f"residual is on device {vr.array.device.id}, A on device {dev}; move them to one device")
        for name, v in (("lda", va.ld), ("ldb", vb.ld), ("ldc", vc.ld), ("ldr", vr.ld if vr else 0)):
            if v > INT32_MAX:
                raise ValueError(f"{name} = {v} exceeds the kernels' 32-bit index range")

        if m > 0 and n > 0:
            p = prepared.params
            geo = spec.launch(m, n, k, p)
            if geo.smem > info.smem_per_block_optin:
                raise ValueError(f"{spec.name} {p} needs {geo.smem} bytes of shared memory per block; "
                                 f"this device allows {info.smem_per_block_optin}")
            flags = tc.epilogue_flags(mode, None if activation == "none" else activation, vr is not None)
            args = (np.int32(m), np.int32(n), np.int32(k), np.float32(alpha), va.array, np.int32(va.ld),
                    vb.array, np.int32(vb.ld), np.float32(beta), vc.array, np.int32(vc.ld),
                    vec if vec is not None else _NULL, vr.array if vr is not None else _NULL,
                    np.int32(vr.ld if vr is not None else 0), np.int32(flags))
            prepared.kernel(geo.grid, geo.block, args, smem=geo.smem, stream=stream)

    if c is None:
        return _as_dtype(vc.array, out_label, kinds[0])
    if arrays.is_host(kinds[2]):
        arrays.to_host_numpy(c, kinds[2])[...] = vc.array.get().view(arrays.to_host_numpy(c, kinds[2]).dtype)
    elif vc.array is not dc:
        dc[...] = vc.array
    return c


def kernels() -> list[KernelSpec]:
    """The GPU ladder, in rung order."""
    return registry.all_specs()
