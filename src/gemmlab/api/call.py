"""`matmul`: check → decide once (a Plan) → allocate → launch, with one repeat-call cache in front.

A repeat call whose arrays have the same shapes, strides, dtypes, devices and 16-byte alignment, with the
same kernel, parameters and epilogue, finds its plan by that key and goes straight to `launch.run`, the
launch every call goes through; a first call checks everything (`checks`), decides (`plan.make_plan`)
and then does the same. torch tensors that need autograd, or calls traced by torch.compile, go through
the custom operator in `gemmlab.torch` first (the public `gemmlab.matmul` routes them), which calls this
function for the product itself.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Any

import numpy as np

from .. import arrays, formats
from ..runtime import device
from ..tuned import STORES as _TUNE_STORES
from . import checks, launch, plan
from .checks import AUTO

_CACHE_MAX = 1024
_plans: dict[tuple, plan.Plan] = {}
_epoch = [0]  # the tuned-store count the cached plans were made under
_signatures: dict[type, Any] = {}  # array type -> its key function (torch.Tensor, nn.Parameter, cupy.ndarray)


def forget_launches() -> None:
    """Drop the remembered plans and loaded kernels: the next calls decide and load everything again.
    For a switch of build (compiler.options_added) in the middle of a process."""
    plan._prepared.clear()
    _plans.clear()
    launch.forget_scratch()


def _torch_sig(x):
    return (x.shape, x.stride(), x.dtype, x.get_device(), x.data_ptr() & 15)


def _cupy_sig(x):
    return (x.shape, x.strides, x.dtype, x.data.device_id, x.data.ptr & 15)


def _learn_signature(x):
    """The key function of x's array type (None for host and foreign arrays: no repeat-call key), learnt once
    per type; the first torch tensor also brings in gemmlab.torch, whose operator carries autograd."""
    try:
        kind = arrays.kind_of(x)
    except TypeError:
        return None  # not an array: the checks name it
    sig = None
    if kind == arrays.TORCH_CUDA:
        sig = _torch_sig
    elif kind == arrays.CUPY:
        sig = _cupy_sig
    if kind in (arrays.TORCH_CUDA, arrays.TORCH_CPU, arrays.CUPY, arrays.NUMPY):
        _signatures[type(x)] = sig
    return sig


def _key(sig, a, b, c, bias, residual, kernel, params, activation, out_dtype, precision, scale_a=None, scale_b=None):
    try:
        return (kernel, sig(a), sig(b), None if c is None else sig(c), None if bias is None else sig(bias),
                None if residual is None else sig(residual), activation, out_dtype, precision,
                tuple(params.items()) if params else (), None if scale_a is None else _scale_key(sig, scale_a),
                None if scale_b is None else _scale_key(sig, scale_b))
    except (AttributeError, TypeError):  # mixed array types, or unhashable options: no repeat-call key
        return None


def _scale_key(sig, s):
    return None if s is None else "number" if checks.is_number(s) else sig(s)


def fold_scales(alpha, scale_a, scale_b):
    """alpha times the scales given as numbers, and the scales the kernel reads (tensors; None for numbers)."""
    for s in (scale_a, scale_b):
        if s is not None and checks.is_number(s):
            alpha = alpha * float(s)
    return (alpha, None if scale_a is None or checks.is_number(scale_a) else scale_a,
            None if scale_b is None or checks.is_number(scale_b) else scale_b)


def matmul(a, b, c=None, *, alpha: float = 1.0, beta: float = 0.0, kernel: str = AUTO, stream: Any = None,
           bias=None, activation: str | None = None, residual=None, out_dtype=None, precision: str | None = None,
           scale_a=None, scale_b=None, **params):
    """C = alpha * A @ B + beta * C, with an optional fused epilogue.

    a: M x K, b: K x N, c: M x N or None; or a batch (torch.bmm's shapes): a: batch x M x K, b: batch x K x N
    (either one 2-D, or a batch of one: shared by every product), c: batch x M x N, one launch for the
    batch (the rungs with a batched form: `gemmlab.kernels()`), the epilogue per product (bias shared,
    residual batch x M x N or one M x N). numpy arrays are copied to the GPU and back; CuPy and torch
    arrays (anything with __cuda_array_interface__ or DLPack) are used in place. The result has the type
    of `a`. When `c` is given it is overwritten with the result and returned (BLAS semantics); with
    beta == 0 its old contents are never read. `kernel` is a rung name (`gemmlab.kernels()`), a CPU
    baseline name (`cpu_naive`, ...; host arrays only) or "auto"; `params` are that rung's template
    parameters (e.g. BLOCK_DIM=16). Without a GPU, kernel="auto" on host arrays runs the best CPU baseline
    and says so once.

    Streams and memory: torch tensors run on torch's current stream of their device and their outputs and
    scratch come from torch's allocator; CuPy arrays run on CuPy's current stream with CuPy's pool.
    `stream` (a torch.cuda.Stream, a CuPy stream or a raw handle) runs the call on that stream instead.
    Any call can be captured in a CUDA graph once the same call has run outside capture.

    Precision is explicit: float32 inputs run in strict fp32 unless the caller asks for precision="tf32"
    (tensor cores, inputs rounded to tf32, fp32 accumulation). float16 / bfloat16 inputs run on the
    tensor cores with fp32 accumulation.

    Fused epilogue, applied to the fp32 accumulator before the one store:
        out = activation(alpha * A @ B + beta * C + bias) + residual, cast to out_dtype
    bias: a float vector, per column when its length is N (or shape 1 x N), per row when its length is M
    (or shape M x 1); activation: None, "relu", "gelu_tanh", "gelu_erf", "silu"; residual: an M x N array
    of the output dtype; out_dtype: "float32", "float16" or "bfloat16" (default: C's dtype when C is given,
    else the inputs' (bfloat16 for 8-bit inputs); strict fp32 writes float32 only). torch tensors that
    require grad get a grad_fn.

    8-bit inputs (torch.float8_e4m3fn or float8_e5m2 tensors, both of one type; Hopper's rung 15) compute
    out = act(alpha * (scale_a * A) @ (scale_b * B) + beta * C + bias) + residual, with A row-major and B
    given K-major (an N x K weight W passed as W.t(), as torch._scaled_mm takes it). A scale is a number,
    a one-element tensor, or a tensor of one scale per row of A (M x 1) / per column of B (1 x N), float32
    on the GPU (torch._scaled_mm's layouts); `gemmlab.quantize` makes the values and scales.

    `explain_choice` (and `gemmlab run --explain`) shows what kernel="auto" picks and why.
    """
    return _matmul(a, b, c, alpha, beta, kernel, stream, bias, activation, residual, out_dtype, precision, scale_a,
                   scale_b, params)


def product(a, b, c, alpha, beta, kernel, stream, bias, activation, residual, out_dtype, precision, params):
    """`matmul` without 8-bit scales, every argument positional: gemmlab.matmul's direct route for two 2-D
    device arrays (the same call, without the keyword packing)."""
    return _matmul(a, b, c, alpha, beta, kernel, stream, bias, activation, residual, out_dtype, precision, None, None,
                   params)


def matmul_after(a, b, c=None, *, arrivals, stream: Any = None, bias=None, activation: str | None = None,
                 out_dtype=None, kernel: str = AUTO, **params):
    """`matmul` of an A whose row blocks other GPUs are still writing (gemmlab.distributed's all-gather): the
    kernel waits for each block's flag before it reads the block (`launch.Arrivals`), walking from block
    `arrivals.first` on; a plan whose kernel cannot wait has the stream wait for every block first. Never
    computed transposed (the flags are A's rows)."""
    return _matmul(a, b, c, 1.0, 0.0, kernel, stream, bias, activation, None, out_dtype, None, None, None, params,
                   arrivals)


def _matmul(a, b, c, alpha, beta, kernel, stream, bias, activation, residual, out_dtype, precision, scale_a, scale_b,
            params, arrivals=None):
    sig = _signatures.get(type(a), _learn_signature)
    if sig is _learn_signature:
        sig = _learn_signature(a)
    if _epoch[0] != _TUNE_STORES[0]:  # a tuned entry was stored: plans may have other parameters now
        _plans.clear()
        _epoch[0] = _TUNE_STORES[0]
    key = None
    if sig is not None:
        key = _key(sig, a, b, c, bias, residual, kernel, params, activation, out_dtype, precision, scale_a, scale_b)
        if key is not None and arrivals is not None:
            key = ("arrivals", key)  # (its plan is never a swapped one)
        p = _plans.get(key) if key is not None else None
        if p is not None and (type(alpha) is float or type(alpha) is int) and (type(beta) is float or type(beta) is int) \
                and alpha - alpha == 0 and beta - beta == 0 and (c is not None or beta == 0):
            home = arrays.home(arrays.TORCH_CUDA if sig is _torch_sig else arrays.CUPY)
            if scale_a is None and scale_b is None:
                return _run_cached(p, home, a, b, c, bias, residual, alpha, beta, stream, arrivals=arrivals)
            folded, sa, sb = fold_scales(alpha, scale_a, scale_b)
            if folded - folded == 0:
                return _run_cached(p, home, a, b, c, bias, residual, folded, beta, stream, sa, sb)
    return _first_call(a, b, c, alpha, beta, kernel, stream, bias, activation, residual, out_dtype, precision,
                       params, key, scale_a, scale_b, arrivals)


def _run_cached(p: plan.Plan, home: arrays.Home, a, b, c, bias, residual, alpha, beta, stream, scale_a=None,
                scale_b=None, arrivals=None):
    dev = p.device
    if stream is None and (_device_count[0] == 1 or _get_device[0][0]() == dev):  # (no switch: the common case)
        return launch.run(p, home, a, b, c, bias, residual, alpha, beta, home.stream(dev), scale_a, scale_b,
                          arrivals=arrivals)
    with _on_device(dev):
        if stream is None:
            return launch.run(p, home, a, b, c, bias, residual, alpha, beta, home.stream(dev), scale_a, scale_b,
                              arrivals=arrivals)
        with home.stream_scope(stream, dev):
            return launch.run(p, home, a, b, c, bias, residual, alpha, beta, home.stream(dev), scale_a, scale_b,
                              arrivals=arrivals)


_NO_SCOPE = contextlib.nullcontext()  # reusable: entering it does nothing
_get_device: list = []
_device_count = [0]  # the GPUs this process sees (1: the device is always current), known after the first call


def _on_device(dev: int):
    """The CUDA device `dev` made current for the call (the kernels are loaded per device); no-op when it is."""
    if not _get_device:
        cp = device.require_cupy()
        _get_device.append((cp.cuda.runtime.getDevice, cp.cuda.Device))
        _device_count[0] = cp.cuda.runtime.getDeviceCount()
    get, dev_cls = _get_device[0]
    return _NO_SCOPE if get() == dev else dev_cls(dev)


def _first_call(a, b, c, alpha, beta, kernel, stream, bias, activation, residual, out_dtype, precision, params, key,
                scale_a=None, scale_b=None, arrivals=None):
    from ..cpu import BASELINES

    checks.check_kernel_name(kernel, BASELINES)
    checks.check_param_names(params)
    kinds = [arrays.kind_of(a), arrays.kind_of(b), arrays.kind_of(c) if c is not None else None]
    if c is not None and not arrays.writable(c):
        raise ValueError("C is read-only (its writeable flag is off): the result is written into C; pass a "
                         "writable C or none")
    epilogue = {"bias": bias, "activation": activation, "residual": residual, "out_dtype": out_dtype}
    if kernel in BASELINES:
        if scale_a is not None or scale_b is not None:
            raise ValueError(f"scale_a and scale_b are for 8-bit inputs on the GPU; CPU kernel {kernel} takes none")
        checks.check_scalars(alpha, beta)
        checks.check_shapes(a, b, c)
        for name, v in epilogue.items():
            if v is not None:
                raise ValueError(f"{name} is a fused epilogue of the GPU kernels; CPU kernel {kernel} takes none")
        if precision not in (None, "fp32"):
            raise ValueError(f"precision={precision!r} is for the GPU kernels; CPU kernel {kernel} computes in "
                             "the arrays' own float32 or float64")
        return _matmul_cpu(kernel, a, b, c, kinds, alpha, beta, params)
    req = checks.check_call(a, b, c, kinds, alpha, beta, kernel, bias, activation, residual, out_dtype, precision,
                            params, scale_a, scale_b)
    alpha, scale_a, scale_b = fold_scales(alpha, scale_a, scale_b)
    checks.check_scalars(alpha, beta)
    if kernel == AUTO and not device.gpu_available() and all(arrays.is_host(kd) for kd in kinds if kd):
        return _cpu_fallback(req, a, b, c, kinds, alpha, beta, bias, residual)
    device.require_cupy()  # the one-line reason where there is no GPU
    da, db = arrays.device_array(a, kinds[0]), arrays.device_array(b, kinds[1])
    host_c = c is not None and arrays.is_host(kinds[2])
    dc = None
    if c is not None:
        dc = arrays.device_array(c, kinds[2]) if not host_c or beta != 0 else None
    kind = arrays.kind_of(da)
    home = arrays.home(kind)
    dev = home.device_of(da)
    dres = arrays.device_array(residual, arrays.kind_of(residual)) if residual is not None else None
    # (arrays of the other library are viewed in A's; such a call has no repeat-call key: _key gave none)
    db, dc, dres = (None if x is None else arrays.adopt(x, home) for x in (db, dc, dres))
    for name, x in (("B", db), ("C", dc), ("residual", dres)):
        if x is None:
            continue
        if home.device_of(x) != dev:
            raise ValueError(f"{name} is on device {home.device_of(x)}, A on device {dev}; move them to one device")
    if arrays.is_host(kinds[0]):
        key = None  # a CPU torch tensor's key (device -1) names no device plan
    with _on_device(dev):
        scope = home.stream_scope(stream, dev) if stream is not None else _NO_SCOPE
        with scope:
            p = plan.make_plan(req, home, dev, da, db, dc, bias, dres, may_swap=arrivals is None)
            if key is not None:
                if len(_plans) >= _CACHE_MAX:
                    _plans.clear()
                _plans[key] = p
            out = launch.run(p, home, da, db, dc, bias, dres, float(alpha), float(beta), home.stream(dev), scale_a,
                             scale_b, arrivals=arrivals)
    if c is None:
        return arrays.host_result(out, kinds[0], req.out)
    if host_c:  # the device result back into the caller's host C, as its bits
        bits = arrays.host_bits(out)
        if kinds[2] == arrays.TORCH_CPU:
            import torch

            c.copy_(torch.from_numpy(bits).view(c.dtype))
        else:
            c[...] = bits.view(c.dtype)
    return c


# ----------------------------------------------------------------------------------------- CPU

_warned_cpu = [False]


def _cpu_fallback(req: checks.Request, a, b, c, kinds, alpha, beta, bias, residual):
    """kernel="auto" on host arrays without a GPU: the best CPU baseline, with the epilogue in numpy; said once."""
    from ..cpu import BASELINES

    best = list(BASELINES.values())[-1]
    if not _warned_cpu[0]:
        warnings.warn(f"gemmlab: no GPU ({device.gpu_unavailable_reason()}); kernel='auto' runs the CPU baseline "
                      f"{best.name} instead", RuntimeWarning, stacklevel=3)
        _warned_cpu[0] = True
    if req.dtype == "bfloat16":
        raise TypeError("bfloat16 host arrays need a GPU (numpy has no bfloat16 arithmetic)")
    if formats.is_fp8(req.dtype):
        raise TypeError(f"{req.dtype} inputs need a GPU with 8-bit tensor cores (Hopper, compute capability 9.0)")
    if req.batched and req.m * req.n == 0:
        z = np.zeros((req.batch, req.m, req.n), np.float32)
    elif req.batched:  # product by product
        device.check_host_memory(req.batch * (req.m * req.k + req.k * req.n + 2 * req.m * req.n) * 4,
                                 f"a batch of {req.batch} products of {req.m} x {req.n} x {req.k} on the CPU")

        def item(x, kd, i):
            h = arrays.to_host_numpy(x, kd)
            return h[i] if h.ndim == 3 and h.shape[0] > 1 else h.reshape(h.shape[-2:])
        z = np.stack([_host_product(best.name, item(a, kinds[0], i), item(b, kinds[1], i),
                                    None if c is None else item(c, kinds[2], i), [arrays.NUMPY] * 3, alpha, beta,
                                    {}, np.float32) for i in range(req.batch)]).reshape(req.batch, req.m, req.n)
    else:
        z = _host_product(best.name, a, b, c, kinds, alpha, beta, {}, np.float32)
    if bias is not None:
        vec = np.asarray(arrays.to_host_numpy(bias, arrays.kind_of(bias)), dtype=np.float32).reshape(-1)
        z = z + (vec.reshape(-1, 1) if req.bias == "row" else vec.reshape(1, -1))
    z = _activate(z, req.activation)
    if residual is not None:
        z = z + np.asarray(arrays.to_host_numpy(residual, arrays.kind_of(residual)), dtype=np.float32)
    return _host_out(z.astype(np.dtype(req.out)), c, kinds)


def _host_product(name, a, b, c, kinds, alpha, beta, params, dtype=None) -> np.ndarray:
    """alpha A B + beta C by the CPU baseline `name`, on host copies (converted to `dtype` where given). An
    empty C is returned as it is; operands whose host copies would not fit in memory are refused by size."""
    from ..cpu import BASELINES

    (m, k), n = a.shape, b.shape[1]
    if m == 0 or n == 0:
        return np.zeros((m, n), dtype=dtype or a.dtype)
    device.check_host_memory((m * k + k * n + 2 * m * n) * np.dtype(dtype or a.dtype).itemsize,
                             f"{m} x {n} x {k} on the CPU (contiguous copies of the operands)")
    an, bn, cn = (None if x is None else np.ascontiguousarray(arrays.to_host_numpy(x, kd), dtype=dtype)
                  for x, kd in zip((a, b, c), kinds))
    return BASELINES[name].run(an, bn, cn if beta != 0 else None, float(alpha), float(beta), **params)


def _host_out(result: np.ndarray, c, kinds):
    """The result written into the caller's C, or returned as the caller's host array type."""
    if c is not None:
        arrays.to_host_numpy(c, kinds[2])[...] = result
        return c
    if kinds[0] == arrays.TORCH_CPU:
        import torch

        return torch.from_numpy(result)
    return result


def _activate(z: np.ndarray, activation: str | None) -> np.ndarray:
    if activation is None:
        return z
    if activation == "relu":
        return np.maximum(z, 0)
    if activation == "silu":
        return z / (1 + np.exp(-z))
    if activation == "gelu_tanh":
        return 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return (0.5 * z * (1 + erf(z / math.sqrt(2)))).astype(z.dtype)


def _matmul_cpu(name, a, b, c, kinds, alpha, beta, params):
    if not all(arrays.is_host(kd) for kd in kinds if kd is not None):
        raise TypeError(f"CPU kernel {name} takes host (numpy) arrays, got {', '.join(kd for kd in kinds if kd)}")
    dts = {nm: arrays.dtype_name(x) for nm, x in (("A", a), ("B", b), ("C", c)) if x is not None}
    if len(set(dts.values())) != 1 or dts["A"] not in ("float32", "float64"):
        raise TypeError(f"CPU kernels take float32 or float64 with one dtype for all; got {dts}")
    return _host_out(_host_product(name, a, b, c, kinds, alpha, beta, params), c, kinds)


__all__ = ["matmul", "matmul_after", "forget_launches", "formats"]
