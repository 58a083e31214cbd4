"""Grouped products, as a mixture-of-experts layer runs them: G groups (experts), each a product of its own
rows of A with its own matrix of B, all in one launch (`grouped_matmul`).

Two layouts of the rows:
- contiguous (`offsets`): A is T x K with the rows of each group one after another; offsets[g] is where group
  g ends (cumulative, torch._grouped_mm's `offs`), so group g owns rows offsets[g - 1] ... offsets[g] - 1 (from
  row 0 for g = 0). Groups may be empty. The result is T x N.
- masked (`counts`): A is G x R x K, a fixed R rows of room per group of which the first counts[g] are valid
  (decoding under CUDA graphs, where the routing changes but the shapes must not). The result is G x R x N.

Rows no group owns (past offsets[-1], or past a group's count) are not written: a new output holds whatever
the allocator gave there, and `out` keeps its values. The offsets or counts may live on the GPU, where they are
read by the kernel and never copied to the host (a decreasing end is taken as the one before it, ends past T
as T, counts outside [0, R] as the nearest bound), or on the host (a list or numpy array), where they are
checked and copied to the GPU per call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import arrays, formats
from ..runtime import device
from . import call, checks, launch, plan
from .checks import AUTO, INT32_MAX, fmt_shape

_CACHE_MAX = 256
_plans: dict[tuple, plan.Plan] = {}  # repeat calls: the plan by the arrays' shapes, strides, dtypes and options


def grouped_matmul(a, b, offsets=None, *, counts=None, out=None, bias=None, activation: str | None = None,
                   alpha: float = 1.0, out_dtype=None, scale_a=None, scale_b=None, kernel: str = AUTO,
                   stream: Any = None, **params):
    """out[rows of g] = activation(alpha * A[rows of g] @ B[g] + bias[g]) for every group g, in one launch.

    a: T x K (with `offsets`) or G x R x K (with `counts`); b: G x K x N, one matrix per group (an expert's
    N x K weight W given as W.transpose(1, 2) is read in place); offsets or counts: G integers (int32 on
    the GPU is used as it is). bias: N floats (one for all groups) or G x N (one per group); activation:
    None, "relu", "gelu_tanh", "gelu_erf" or "silu"; out_dtype: the output's dtype (default: the inputs',
    bfloat16 for 8-bit inputs); out: where to write (T x N, or G x R x N, of the output dtype).

    Inputs: float16, bfloat16, or 8-bit (float8_e4m3fn / float8_e5m2 torch tensors, B read K-major, so
    given as W.transpose(1, 2)), with scales: scale_a a number, one element, or one per row of A (T, or G x
    R in the masked layout); scale_b a number, one element, one per group (G) or one per group and column
    (G x N). torch tensors run on torch's current stream, CuPy arrays on CuPy's; `stream` overrides it.
    """
    mode = _mode(offsets, counts)
    sig = call._signatures.get(type(a), call._learn_signature)
    if sig is call._learn_signature:
        sig = call._learn_signature(a)
    key = None
    if sig is not None:
        try:
            key = (mode, sig(a), sig(b), None if out is None else sig(out), None if bias is None else sig(bias),
                   activation, out_dtype, kernel, tuple(params.items()), call._scale_key(sig, scale_a),
                   call._scale_key(sig, scale_b))
        except (AttributeError, TypeError):
            key = None
    p = _plans.get(key) if key is not None else None
    groups_arg = offsets if mode == "ends" else counts
    if p is None:
        req = check_grouped(a, b, groups_arg, mode, out, bias, activation, alpha, out_dtype, scale_a, scale_b,
                            kernel, params)
    else:
        req = p.request
        _check_groups(groups_arg, mode, req.batch, req.m, req.group_rows)
    alpha, sa, sb = call.fold_scales(alpha, scale_a, scale_b)
    checks.check_scalars(alpha, 0.0)
    device.require_cupy()
    home = arrays.home(arrays.TORCH_CUDA if sig is call._torch_sig else arrays.kind_of(a))
    dev = home.device_of(a)
    if p is None:
        for name, x in (("B", b), ("out", out), ("bias", bias), ("offsets" if mode == "ends" else "counts",
                                                                 groups_arg)):
            if x is None or isinstance(x, (list, tuple)) or arrays.is_host(arrays.kind_of(x)):
                continue
            where = home.device_of(arrays.adopt(x, home))
            if where != dev:
                raise ValueError(f"{name} is on device {where}, A on device {dev}; move them to one device")
        b = arrays.adopt(b, home)
    a2 = a if mode == "ends" else a.reshape(req.m, req.k)
    if out is None:
        out_new = home.empty((req.m, req.n), req.out, dev)
        c2 = out_new
    else:
        out = arrays.adopt(out, home)
        c2 = out if mode == "ends" else _rows_view(out, req.m, req.n)
    groups = _device_groups(home, groups_arg, dev, req)
    with call._on_device(dev):
        scope = home.stream_scope(stream, dev) if stream is not None else call._NO_SCOPE
        with scope:
            if p is None:
                p = plan.make_plan(req, home, dev, a2, b, c2, bias, None)
                if key is not None:
                    if len(_plans) >= _CACHE_MAX:
                        _plans.clear()
                    _plans[key] = p
            result = launch.run(p, home, a2, b, c2, bias, None, float(alpha), 0.0, home.stream(dev), sa, sb,
                                groups=groups)
    if out is not None:
        return out
    return result if mode == "ends" else result.reshape(req.batch, req.group_rows, req.n)


def _mode(offsets, counts) -> str:
    if (offsets is None) == (counts is None):
        raise ValueError("pass exactly one of offsets (the groups' cumulative row ends, A of T x K) and counts "
                         "(the valid rows of each group, A of G x R x K)")
    return "ends" if offsets is not None else "counts"


def _rows_view(x, rows: int, cols: int):
    """A G x R x N output as the T x N matrix of its rows, without a copy (the kernel writes into it)."""
    s = arrays.strides_in_elements(x)
    if len(x.shape) == 3 and x.shape[1] > 1 and s[0] != x.shape[1] * s[1]:
        raise ValueError(f"out (shape {fmt_shape(x.shape)}) must hold its groups' rows one after another "
                         f"(strides {s} in elements): the kernel writes it as {rows} x {cols} rows")
    return x.reshape(rows, cols)


def _device_groups(home: arrays.Home, g, dev: int, req: checks.Request):
    """The groups' ends or counts as int32 on the GPU: a device int32 vector as it is, other device integers
    converted, host values checked (check_grouped) and copied."""
    kind = arrays.kind_of(g) if not isinstance(g, (list, tuple)) else arrays.NUMPY
    if not arrays.is_host(kind):
        x = arrays.adopt(g, home)
        if arrays.dtype_name(x) == "int32" and arrays.strides_in_elements(x)[0] == 1:
            return x
        if home.name == "torch":
            return x.to(dtype=home.torch.int32).contiguous()
        return home.cp.ascontiguousarray(x.astype(home.cp.int32))
    host = np.ascontiguousarray(np.asarray(g.numpy() if kind == arrays.TORCH_CPU else g, dtype=np.int32).reshape(-1))
    if home.name == "torch":
        return home.torch.from_numpy(host).to(f"cuda:{dev}", non_blocking=False)
    with home.cp.cuda.Device(dev):
        return home.cp.asarray(host)


def check_grouped(a, b, groups, mode: str, out, bias, activation, alpha, out_dtype, scale_a, scale_b, kernel,
                  params) -> checks.Request:
    """Everything wrong with a grouped call, as one error naming the shape, dtype or argument at fault; else
    its Request (M: the rows of all groups, batch: the groups)."""
    checks.check_kernel_name(kernel, {})
    checks.check_param_names(params)
    checks.check_scalars(alpha, 0.0)
    if kernel != AUTO:
        plan.grouped_rung(kernel)
    if len(b.shape) != 3:
        raise ValueError(f"B must be G x K x N (one matrix per group), got shape {fmt_shape(b.shape)}")
    g_count, k, n = (int(v) for v in b.shape)
    if mode == "ends":
        if len(a.shape) != 2:
            raise ValueError(f"with offsets, A must be T x K (the groups' rows one after another), got shape "
                             f"{fmt_shape(a.shape)}; a G x R x K A goes with counts")
        rows, ka = int(a.shape[0]), int(a.shape[1])
        room = 0
    else:
        if len(a.shape) != 3:
            raise ValueError(f"with counts, A must be G x R x K (R rows of room per group), got shape "
                             f"{fmt_shape(a.shape)}; a T x K A goes with offsets")
        if int(a.shape[0]) != g_count:
            raise ValueError(f"A holds {a.shape[0]} groups, B {g_count}: A is {fmt_shape(a.shape)}, B is "
                             f"{fmt_shape(b.shape)}")
        room, ka = int(a.shape[1]), int(a.shape[2])
        rows = g_count * room
    if ka != k:
        raise ValueError(f"inner dimensions differ: A is {fmt_shape(a.shape)}, B is {fmt_shape(b.shape)} (A's "
                         "columns must equal B's rows)")
    if g_count == 0:
        raise ValueError(f"B holds no groups (shape {fmt_shape(b.shape)}); a grouped product needs at least one")
    for name, v in (("the rows", rows), ("N", n), ("K", k), ("the groups", g_count)):
        if v > INT32_MAX:
            raise ValueError(f"{name} = {v} exceed the kernels' 32-bit index range")
    _check_groups(groups, mode, g_count, rows, room)
    dt_a, dt_b = arrays.dtype_name(a), arrays.dtype_name(b)
    if dt_a != dt_b:
        raise TypeError(f"A and B must have one dtype, got {dt_a} and {dt_b}")
    if dt_a not in ("float16", "bfloat16") and not formats.is_fp8(dt_a):
        raise TypeError(f"grouped products take float16, bfloat16 or 8-bit (float8_e4m3fn, float8_e5m2) inputs; "
                        f"A and B are {dt_a}")
    precision = formats.resolve_precision(dt_a, dt_b, None)
    res = checks.result_type(out_dtype, out, dt_a)
    if out is not None:
        want = (rows, n) if mode == "ends" else (g_count, room, n)
        if tuple(out.shape) != want:
            raise ValueError(f"out must be {fmt_shape(want)}, got {fmt_shape(out.shape)}")
        if arrays.dtype_name(out) != res:
            raise TypeError(f"out is {arrays.dtype_name(out)} but the output dtype is {res} (out_dtype)")
        if arrays.is_host(arrays.kind_of(out)):
            raise TypeError("out must be on the GPU, as A and B are")
    group_bias = False
    if bias is not None:
        shape = tuple(bias.shape)
        if shape in ((g_count, n),) and g_count > 1:
            group_bias = True
        elif shape not in ((n,), (1, n)):
            raise ValueError(f"bias must be N = {n} floats (one for every group) or G x N = {g_count} x {n} (one "
                             f"per group), got shape {fmt_shape(shape)}")
        if arrays.dtype_name(bias) not in checks.SCALE_DTYPES:
            raise TypeError(f"bias must be a float vector, got {arrays.dtype_name(bias)}")
    act = formats.check_activation(activation)
    mode_a, mode_b = _scale_modes(scale_a, scale_b, dt_a, rows, room, g_count, n)
    if kernel == AUTO and params:
        raise ValueError(f"parameters {sorted(params)} need a named kernel, not kernel='auto'")
    for name, x in (("A", a), ("B", b)):
        kd = arrays.kind_of(x)
        if arrays.is_host(kd):
            raise TypeError(f"grouped products run on the GPU: {name} must be a torch CUDA tensor or a CuPy array, "
                            f"got a host array ({kd})")
    ptuple = tuple(sorted(params.items()))
    req = checks.Request(rows, n, k, dt_a, precision, res, kernel, ptuple, "col" if bias is not None else None, act,
                         False, out is not None, g_count, False, mode_a, mode_b, grouped=mode, group_rows=room,
                         group_bias=group_bias)
    if kernel != AUTO:
        checks.check_named(req)
    return req


def _check_groups(groups, mode: str, g_count: int, rows: int, room: int) -> None:
    what = "offsets" if mode == "ends" else "counts"
    if isinstance(groups, (list, tuple)):
        host = np.asarray(groups)
    else:
        kd = arrays.kind_of(groups)
        if not arrays.is_host(kd):
            shape = tuple(groups.shape)
            if shape != (g_count,):
                raise ValueError(f"{what} must hold one integer per group ({g_count}), got shape {fmt_shape(shape)}")
            if not arrays.dtype_name(groups).startswith(("int", "uint")):
                raise TypeError(f"{what} must be integers (int32), got {arrays.dtype_name(groups)}")
            return  # on the GPU: read by the kernel, which clamps (the module's note)
        host = arrays.to_host_numpy(groups, kd)
    if host.shape != (g_count,):
        raise ValueError(f"{what} must hold one integer per group ({g_count}), got shape {fmt_shape(host.shape)}")
    if host.size and not np.issubdtype(host.dtype, np.integer):
        raise TypeError(f"{what} must be integers, got {host.dtype}")
    if mode == "ends":
        if host.size and (np.any(np.diff(host) < 0) or host[0] < 0 or host[-1] > rows):
            raise ValueError(f"offsets must not decrease and must lie in [0, {rows}] (A's rows), got "
                             f"{_short(host)}")
    elif host.size and (host.min() < 0 or host.max() > room):
        raise ValueError(f"counts must lie in [0, {room}] (A's rows per group), got {_short(host)}")


def _short(v: np.ndarray) -> str:
    return str(v.tolist()) if v.size <= 12 else f"[{', '.join(str(x) for x in v[:12].tolist())}, ...]"


def _scale_modes(scale_a, scale_b, dtype: str, rows: int, room: int, g_count: int, n: int):
    """The 8-bit scales' kinds: A's None (a number), "tensor" or "row"; B's None, "tensor" (one element, or one
    per group) or "col" (per group and column)."""
    modes = []
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        shape = checks.scale_shape(name, s, dtype)
        if shape is None:
            modes.append(None)
            continue
        count = int(np.prod(shape)) if shape else 1
        if count == 1:
            modes.append("tensor")
        elif name == "scale_a" and (shape in ((rows,), (rows, 1)) or (room and shape in ((g_count, room),
                                                                                           (g_count, room, 1)))):
            modes.append("row")
        elif name == "scale_b" and shape in ((g_count,), (g_count, 1)):
            modes.append("tensor")
        elif name == "scale_b" and shape in ((g_count, n), (g_count, 1, n)):
            modes.append("col")
        else:
            want = (f"one element or one per row of A ({rows})" if name == "scale_a"
                    else f"one element, one per group ({g_count}) or one per group and column ({g_count} x {n})")
            raise ValueError(f"{name} must be {want}; got shape {fmt_shape(shape)}")
    return tuple(modes)


__all__ = ["grouped_matmul"]
