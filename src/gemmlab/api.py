"""`matmul`: check the inputs, pick a kernel, allocate, launch, return.

C = alpha * A @ B + beta * C, with BLAS naming: A is M x K, B is K x N, C is M x N.
"""

from __future__ import annotations

import contextlib
import math
import operator
from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from . import arrays
from .kernels import KernelSpec, registry
from .kernels.spec import NATIVE_PRECISION, REDUCED_PRECISIONS
from .runtime import compiler, device, launch
from .tune.cache import STORES as _TUNE_STORES

AUTO = "auto"
INT32_MAX = 2**31 - 1


@dataclass
class _Prepared:
    """A loaded kernel instantiation, cached per (kernel, params, device) so repeat calls cost ~µs."""

    spec: KernelSpec
    params: dict[str, int]
    kernel: launch.LoadedKernel
    compile_seconds: float
    after: launch.LoadedKernel | None = None  # the rung's second kernel (extra["after"]), from the same module
    module: compiler.CompiledModule | None = None  # what both were loaded from


def loaded(kernel: str) -> list[_Prepared]:
    """The loaded instantiations of `kernel` under the compile options in force (compiler.added_options)."""
    opts = compiler.added_options()
    return [p for key, p in _prepared.items() if p.spec.name == kernel and key[2] == opts]


def forget_launches() -> None:
    """Drop the remembered launches (loaded kernels, repeat-call plans): the next calls look everything up
    again. For a switch of build (compiler.options_added) in the middle of a process."""
    _prepared.clear()
    _fast_plans.clear()
    _tensor_plans.clear()


_prepared: dict[tuple, _Prepared] = {}


def _cpu_baselines():
    from .cpu import BASELINES

    return BASELINES


# ----------------------------------------------------------------------------------------- dispatch
# kernel="auto": the highest rung that runs the inputs' dtype at the asked precision, on this device's
# compute capability (min_cc, and exact targets such as sm_90a), with a fused epilogue when one is asked
# for, and whose operand rules (extra["operand_problems"]) the arrays meet. Nothing here names a rung: a
# new rung is chosen wherever its spec says it fits. `explain_choice` returns the whole decision as data.


@dataclass(frozen=True)
class Candidate:
    """One rung as kernel="auto" saw it: whether it fits the call, and why (not)."""

    name: str
    rung: int
    min_cc: tuple[int, int]
    fits: bool
    reason: str


@dataclass(frozen=True)
class KernelChoice:
    """What a GEMM runs and why: the rung (with every rung considered) and, given a problem shape, its
    parameters and where they came from. `gemmlab run --explain` prints `describe()`."""

    dtype: str
    precision: str
    cc: tuple[int, int] | None
    epilogue: bool
    candidates: tuple[Candidate, ...]
    spec: KernelSpec
    named: bool = False                  # the caller named the kernel (no choice was made)
    shape: tuple[int, int, int] | None = None
    params: dict[str, int] | None = None  # the full parameter set it runs (validated)
    params_source: str | None = None      # "given", "tuned", "heuristic" or "defaults"
    params_detail: str = ""

    def describe(self) -> str:
        where = f"compute capability {self.cc[0]}.{self.cc[1]}" if self.cc else "an unknown compute capability"
        what = f"{self.dtype} inputs at {self.precision}" + (" with a fused epilogue" if self.epilogue else "")
        head = (f"kernel {self.spec.name} (named) for {what} on {where}" if self.named else
                f'kernel="auto" for {what} on {where}: {self.spec.name} (rung {self.spec.rung:02d})')
        lines = [head, f"  {'rung':4s}  {'kernel':14s}  {'min cc':6s}  verdict"]
        for c in self.candidates:
            lines.append(f"  {c.rung:02d}    {c.name:14s}  {c.min_cc[0]}.{c.min_cc[1]:<4d}  {c.reason}")
        if self.params is not None:
            m, n, k = self.shape
            lines.append(f"parameters for M x N x K = {m} x {n} x {k}: {self.params_source} ({self.params_detail})")
            lines.append("  " + " ".join(f"{key}={v}" for key, v in self.params.items()))
        return "\n".join(lines)


_ranked_memo: dict[tuple, tuple[tuple[KernelSpec, str | None], ...]] = {}


def _ranked(dtype: str, precision: str, cc: tuple[int, int] | None, epilogue: bool):
    """Every rung with None (it fits) or the reason it does not, before any operand rule. Memoised."""
    key = (dtype, precision, cc, epilogue, id(registry.REGISTRY), len(registry.REGISTRY))
    hit = _ranked_memo.get(key)
    if hit is None:
        out = []
        for s in registry.all_specs():
            why = None
            if not registry.takes(s, dtype, precision):
                runs = [f"{d} at {NATIVE_PRECISION.get(d, d)}" for d in s.dtypes]
                runs += [f"{REDUCED_PRECISIONS[p]} at {p}" for p in s.precisions if p in REDUCED_PRECISIONS]
                why = f"runs {' / '.join(runs)}, not {dtype} at {precision}"
            elif cc is not None:
                why = registry.cc_problem(s, cc)
            if why is None and epilogue and not s.extra.get("epilogue"):
                why = "takes no fused epilogue (bias, activation, residual)"
            out.append((s, why))
        hit = _ranked_memo[key] = tuple(out)
    return hit


def _operand_problems(spec: KernelSpec, operands, element_bytes: int) -> list[str]:
    check = spec.extra.get("operand_problems")
    if check is None or operands is None:
        return []
    return list(check(*operands, element_bytes))


def _decide(dtype: str, precision: str, cc, epilogue: bool, operands=None) -> tuple[KernelSpec | None, tuple[Candidate, ...]]:
    ranked = _ranked(dtype, precision, cc, epilogue)
    element_bytes = 4 if dtype == "float32" else 2
    verdicts: list[tuple[KernelSpec, str | None]] = list(ranked)
    chosen = None
    for i in range(len(verdicts) - 1, -1, -1):  # from the top rung down: the first that fits is taken
        s, why = verdicts[i]
        if why is not None:
            continue
        problems = _operand_problems(s, operands, element_bytes)
        if problems:
            verdicts[i] = (s, "operands: " + "; ".join(problems))
            continue
        chosen = s
        break
    cands = []
    for s, why in verdicts:
        if s is chosen:
            reason = "chosen: the highest rung that fits"
        elif why is None:
            reason = "fits; a higher rung is chosen" if chosen is not None and s.rung < chosen.rung else "fits"
        else:
            reason = why
        cands.append(Candidate(s.name, s.rung, tuple(s.min_cc), why is None, reason))
    return chosen, tuple(cands)


def _no_kernel(dtype: str, precision: str, cc, epilogue: bool) -> TypeError:
    where = "" if cc is None else f" on compute capability {cc[0]}.{cc[1]}"
    at = "" if precision == NATIVE_PRECISION.get(dtype) else f" at precision {precision!r}"
    with_epi = " with a fused epilogue" if epilogue else ""
    return TypeError(f"no GPU kernel supports dtype {dtype}{at}{with_epi}{where}")


def choose_kernel(dtype: str = "float32", cc: tuple[int, int] | None = None, precision: str | None = None, *,
                  epilogue: bool = False, operands: tuple | None = None) -> KernelSpec:
    """The kernel `kernel="auto"` runs: the highest rung that runs `dtype` at `precision` (None: the dtype's
    own) on compute capability `cc` (None: any), with a fused epilogue when `epilogue`, and whose operand
    rules (a_ptr, lda, b_ptr, ldb) the arrays meet when `operands` are given. TypeError if none does."""
    precision = precision or NATIVE_PRECISION.get(dtype, "fp32")
    spec, _ = _decide(dtype, precision, tuple(cc) if cc is not None else None, epilogue, operands)
    if spec is None:
        raise _no_kernel(dtype, precision, cc, epilogue)
    return spec


def explain_choice(dtype: str = "float32", precision: str | None = None, *, shape: tuple[int, int, int] | None = None,
                   cc: tuple[int, int] | None = None, info: device.DeviceInfo | None = None,
                   sm_count: int | None = None, epilogue: bool = False, kernel: str = AUTO,
                   params: Mapping[str, int] | None = None, out_dtype=None,
                   activation: str | None = None) -> KernelChoice:
    """The decision `matmul` makes, as data: which rung (every rung with its verdict) and, with `shape`,
    which parameters and why (given, this device's tuned entry, the spec's heuristic, or its defaults).

    info: the device (its compute capability, SM count and tuned entries); without one, `cc` and
    `sm_count` stand in and no tuned entries are read. Raises as matmul does for a bad dtype/precision."""
    precision = _resolve_precision(dtype, dtype, precision)
    if cc is None and info is not None:
        cc = info.compute_capability
    cc = tuple(cc) if cc is not None else None
    if info is not None and cc != tuple(info.compute_capability):
        info = None  # a what-if for another device: this one's tuned entries do not apply
    if kernel == AUTO:
        spec, cands = _decide(dtype, precision, cc, epilogue)
        if spec is None:
            raise _no_kernel(dtype, precision, cc, epilogue)
    else:
        spec = registry.get(kernel)
        why = next(w for s, w in _ranked(dtype, precision, cc, epilogue) if s.name == spec.name)
        cands = (Candidate(spec.name, spec.rung, tuple(spec.min_cc), why is None, why or "named by the caller"),)
    choice = KernelChoice(dtype, precision, cc, epilogue, cands, spec, named=kernel != AUTO)
    if shape is None:
        return choice
    m, n, k = shape
    element = _element(dtype, precision)
    partial, source, detail = resolve_params(spec, m, n, k, info, element=element, given=params,
                                             sm_count=sm_count if info is None else None)
    out_label = _dtype_label(out_dtype) if out_dtype is not None else dtype
    for_epilogue = _epilogue_params(spec, activation, params)
    if for_epilogue:
        detail += f"; for {activation}: {_fmt_params(for_epilogue)} (the rung's preference for that epilogue)"
    full = spec.validate({**partial, **for_epilogue, **_type_params(spec, element, out_label)})
    return replace(choice, shape=(m, n, k), params=full, params_source=source, params_detail=detail)


def _epilogue_params(spec: KernelSpec, activation: str | None, given: Mapping[str, int] | None) -> dict[str, int]:
    """Parameters the rung prefers for this activation (extra["epilogue_params"]), except those the caller named."""
    pref = spec.extra.get("epilogue_params", {}).get(activation or "none", {})
    return {name: v for name, v in pref.items() if name not in (given or {})}


def _element(dtype: str, precision: str) -> str:
    """The input element type a kernel instantiates: the dtype, or "tf32" for fp32 storage at tf32."""
    return precision if precision in REDUCED_PRECISIONS else dtype


def _type_params(spec: KernelSpec, element: str, out_label: str, b_transposed: bool = False) -> dict[str, int]:
    """A_TYPE / C_TYPE (and B_LAYOUT where the rung has it) for rungs whose element types and operand
    layout are template parameters (extra["type_params"]). B_LAYOUT 2: B read K-major in place, because it
    is given transposed (column-major); 3: tf32 on a row-major B (which tf32 cannot read N-major from shared
    memory), computed as C^T = B^T A^T."""
    names = spec.extra.get("type_params")
    if not names:
        return {}
    from .kernels.rungs import mma_sync as tc

    out = {"A_TYPE": tc.INPUT_TYPES[element], "C_TYPE": tc.C_TYPES[out_label]}
    if "B_LAYOUT" in names:
        out["B_LAYOUT"] = 2 if b_transposed else 3 if element == "tf32" else 1
    return out


def _transposed_view(db):
    """A row-major view of B^T, in place, when B (K x N) is column-major (e.g. a transposed N x K weight);
    None otherwise."""
    if db.ndim != 2 or db.shape[0] <= 1 or db.shape[1] <= 1:
        return None
    s0, s1 = db.strides
    if s0 != db.itemsize or s1 < db.shape[0] * db.itemsize or s1 % db.itemsize:
        return None
    return arrays.row_major(db.T)


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
_plans_epoch = [0]  # the tuned-entry store count the remembered launches were made under


def tuned_cache(info: device.DeviceInfo):
    """The device's tuned-parameter store, read once per process."""
    from .tune.cache import TunedCache

    key = f"{info.name}/{info.compute_capability}/{info.sm_count}"
    cache = _tuned.get(key)
    if cache is None:
        cache = TunedCache.for_device(info.name, info.compute_capability, info.sm_count)
        _tuned[key] = cache
    return cache


def default_params(spec: KernelSpec, m: int, n: int, k: int, info: device.DeviceInfo,
                   element: str = "float32") -> dict[str, int]:
    """What a call that names no parameters runs: this device's tuned entry for the problem's shape
    class, else the spec's heuristic, else its defaults (those of `element`, where the spec has
    extra["type_defaults"]). A partial set: validate() fills in the rest."""
    return resolve_params(spec, m, n, k, info, element=element)[0]


def _resident_blocks(spec: KernelSpec, p: dict[str, int], kernel, geo, sm_count: int) -> int:
    """Blocks of a persistent kernel (one per SM) that run at once, in whole clusters: the driver's count
    of clusters that fit (SMs group into GPCs, and a cluster never spans two), or the SM count rounded
    down to whole clusters where it cannot say."""
    cluster = spec.extra["cluster"](p) if spec.extra.get("cluster") else 1
    if cluster == 1:
        return sm_count
    fit = kernel.max_active_clusters(cluster, geo.block, geo.smem)
    return cluster * (fit if fit else sm_count // cluster)


def resolve_params(spec: KernelSpec, m: int, n: int, k: int, info: device.DeviceInfo | None, *,
                   element: str = "float32", given: Mapping[str, int] | None = None,
                   sm_count: int | None = None) -> tuple[dict[str, int], str, str]:
    """(parameters, source, detail): the caller's (`given`), else the device's tuned entry for the
    shape class (keyed by kernel and element type), else the spec's heuristic (for info's SM count, or
    `sm_count` without a device), else the defaults. The element type's defaults
    (extra["type_defaults"]) sit under all of them."""
    base = dict(spec.extra.get("type_defaults", {}).get(element, {}))
    under = f"; under them the {element} defaults {_fmt_params(base)}" if base else ""
    if given:  # the caller's parameters complete the spec's defaults, not a schedule chosen for them
        return {**base, **given}, "given", "named by the caller" + under
    if info is not None:
        from .tune.cache import shape_class

        cache = tuned_cache(info)
        key = cache.entry_key(spec.name, element, shape_class(m, n, k))
        tuned = cache.lookup(spec.name, m, n, k, dtype=element)
        if tuned is not None:
            return {**base, **tuned}, "tuned", f"entry {key} in {cache.path}"
        miss = f"no tuned entry {key} in {cache.path}"
        sm_count = info.sm_count
    else:
        miss = "no device to read tuned entries from"
    if spec.heuristic is not None and sm_count:
        return {**base, **spec.heuristic(m, n, k, sm_count)}, "heuristic", f"{miss}; {spec.name}'s shape heuristic for {sm_count} SMs{under}"
    why = "has no heuristic" if spec.heuristic is None else "has a heuristic but no SM count was given"
    return base, "defaults", f"{miss}; {spec.name} {why}{under}"


def _fmt_params(p: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items())


def prepare(spec: KernelSpec, params: Mapping[str, Any] | None = None) -> _Prepared:
    """Validate, compile (or fetch from the cache) and load one instantiation on the current device."""
    key, p = validated_params(spec, params)
    cupy = device.require_cupy()
    dev = cupy.cuda.Device().id
    raw_key = (key, dev, compiler.added_options())
    hit = _prepared.get(raw_key)
    if hit is not None:
        return hit
    info = device.device_info(dev)
    if info.compute_capability < spec.min_cc:
        raise ValueError(f"kernel {spec.name} needs compute capability {spec.min_cc}, the device is {info.compute_capability}")
    after = spec.extra.get("after")
    module = compiler.compile_file(spec.source_path, registry.module_names(spec, p), spec.require_target(info.arch))
    kern = launch.load(module, spec.name_expression(p))
    prepared = _Prepared(spec, p, kern, module.compile_seconds, launch.load(module, after) if after else None,
                         module)
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

    Precision is explicit: float32 inputs run in strict fp32 (precision None or "fp32") unless the caller
    asks for precision="tf32": then they run on the tensor cores, rounded to tf32 (10-bit mantissa) with
    fp32 accumulation (relative error about 1e-3 instead of 1e-6). float16 / bfloat16 inputs run on the
    tensor cores with fp32 accumulation (precision None, or "fp16" / "bf16" matching the inputs).

    Fused epilogue, applied to the fp32 accumulator before the one store (tensor-core rungs, and the fp32
    rungs whose spec declares extra["epilogue"], such as sgemm, which kernel="auto" picks):
        out = activation(alpha * A @ B + beta * C + bias) + residual, cast to out_dtype
    bias: fp32 (or any float) vector, per column when its length is N (or shape 1 x N), per row when its
    length is M != N (or shape M x 1); activation: None, "relu", "gelu_tanh", "gelu_erf", "silu";
    residual: an M x N array of the output dtype; out_dtype: "float32", "float16" or "bfloat16" (default:
    C's dtype when C is given, else the inputs' dtype; strict fp32 writes float32 only). With split-K the
    epilogue runs once, on the reduced sums. A named kernel without an epilogue refuses these arguments.

    `explain_choice` (and `gemmlab run --explain`) shows what kernel="auto" picks and why.
    """
    if _plans_epoch[0] != _TUNE_STORES[0]:  # a tuned entry was stored: remembered launches may be stale
        _fast_plans.clear()
        _tensor_plans.clear()
        _plans_epoch[0] = _TUNE_STORES[0]
    if bias is None and activation is None and residual is None and out_dtype is None and precision is None:
        plan = _fast_plans.get(_fast_key(a, b, c, kernel, params)) if type(a) is _fast_type[0] else None
        if plan is not None and plan.accepts(a, b, c, alpha, beta):
            return plan.launch(a, b, c, alpha, beta, stream)
    tkey = None  # the repeat-call key, computed only where a tensor-core plan may exist or be made
    if c is not None and _tensor_plans:
        tkey = _tensor_key(a, b, c, bias, residual, kernel, params, activation, out_dtype, precision)
        tplan = _tensor_plans.get(tkey) if tkey is not None else None
        if tplan is not None and _real(alpha) and _real(beta):
            return tplan.launch(c, alpha, beta, stream)

    kinds = [arrays.kind_of(a), arrays.kind_of(b), arrays.kind_of(c) if c is not None else None]
    m, n, k, dts = _check_common(a, b, c, kinds, alpha, beta)
    if beta != 0 and c is None:
        raise ValueError(f"beta = {beta} needs a C to scale; pass c (an M x N = {m} x {n} array) or beta = 0")

    extras = {"bias": bias, "activation": activation, "residual": residual, "out_dtype": out_dtype}
    if kernel in _cpu_baselines():
        for name, v in extras.items():
            if v is not None:
                raise ValueError(f"{name} is a fused epilogue of the GPU kernels; CPU kernel {kernel} takes none")
        return _matmul_cpu(kernel, a, b, c, kinds, dts, alpha, beta, params)

    host = [arrays.is_host(kd) for kd in kinds if kd is not None]
    if any(host) and not all(host):
        raise TypeError(f"A, B and C must all be host arrays or all device arrays, got {', '.join(kd for kd in kinds if kd)}")
    resolved = _resolve_precision(dts["A"], dts["B"], precision)
    if resolved != "fp32":
        if tkey is None and c is not None:
            tkey = _tensor_key(a, b, c, bias, residual, kernel, params, activation, out_dtype, precision)
        return _matmul_tensor(a, b, c, kinds, dts, m, n, k, alpha, beta, kernel, stream, bias, activation,
                              residual, out_dtype, params, resolved, plan_key=tkey)
    if out_dtype is not None and _dtype_label(out_dtype) != "float32":
        raise ValueError(f"out_dtype={out_dtype!r}: strict fp32 kernels write float32; a float16 / bfloat16 output "
                         "needs precision='tf32' or 16-bit inputs")
    for name, dt in dts.items():
        if dt != "float32":
            raise TypeError(f"the GPU kernels take float32; {name} is {dt} (convert with .astype('float32'))")

    epilogue = _wants_epilogue(bias, activation, residual)
    spec = None if kernel == AUTO else registry.get(kernel)
    if spec is not None:
        if "float32" not in spec.dtypes:
            also = "".join(f" (float32 with precision={p!r})" for p in spec.precisions)
            raise TypeError(f"kernel {spec.name} takes {' or '.join(spec.dtypes)} inputs{also}; A and B are float32 "
                            "(use kernel='auto' or an fp32 rung)")
        if epilogue and not spec.extra.get("epilogue"):
            raise ValueError(f"kernel {spec.name} takes no fused epilogue (bias, activation, residual); fp32 kernels "
                             f"that do: {', '.join(_epilogue_rungs('float32')) or 'none'} (or kernel='auto')")
    if kernel == AUTO and params:
        raise ValueError(f"parameters {sorted(params)} need a named kernel, not kernel='auto'")
    for name, v in (("M", m), ("N", n), ("K", k)):
        if v > INT32_MAX:
            raise ValueError(f"{name} = {v} exceeds the kernels' 32-bit index range")
    if spec is not None:
        validated_params(spec, params)  # parameter errors are reported before any GPU is needed
    _check_epilogue(bias, activation, residual, m, n, "float32")

    cp = device.require_cupy()
    dev_ctx = _device_of(a, kinds[0], cp)
    with dev_ctx, _on_stream(stream):
        info = device.device_info(cp.cuda.Device().id)
        if spec is None:
            spec = choose_kernel("float32", info.compute_capability, epilogue=epilogue)
        chosen = params or default_params(spec, m, n, k, info)
        prepared = prepare(spec, chosen)
        epi = _epilogue_args(spec, bias, activation, residual, m, n, "float32", cp)
        out = _launch_gpu(prepared, a, b, c, kinds, m, n, k, alpha, beta, stream, cp, epi)
    if not epilogue and kinds[0] == arrays.CUPY and all(kd in (None, arrays.CUPY) for kd in kinds) and m and n:
        _remember_fast_plan(prepared, a, b, c, kernel, params, m, n, k, cp)
    return out


# ----------------------------------------------------------------------------------------- workspace
# Scratch memory for kernels that declare it (split-K partial sums and per-tile counters). One grow-only
# pair per (device, stream): launches on one stream run in order, so they may share it; the counters
# start at zero and every kernel that uses them leaves them at zero.

_scratch: dict[tuple[int, int], dict[str, Any]] = {}
_NULL = np.uint64(0)
# The fused-epilogue arguments (bias, R, ldr, flags) of a call without one.
_NO_EPILOGUE = (_NULL, _NULL, np.int32(0), np.int32(0))


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
    tail: tuple = ()  # arguments after the workspace: "no epilogue" for kernels that take one
    after: tuple | None = None  # the rung's second kernel: (function, grid, block, SPLIT_K as np.int32)

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
        alpha, beta = np.float32(alpha), np.float32(beta)
        self.function(self.grid, self.block,
                      (self.m, self.n, self.k, alpha, a, self.k, b, self.n, beta, out, self.n, *extra, *self.tail),
                      shared_mem=self.smem, stream=stream)
        if self.after is not None:
            function, grid, block, split = self.after
            function(grid, block, (self.m, self.n, split, alpha, beta, out, self.n, extra[0], *self.tail),
                     stream=stream)
        return out


def _contiguity_test(x):
    """CuPy keeps C-contiguity as a plain attribute; `flags` builds an object on every access (~0.4 µs)."""
    try:
        if isinstance(x._c_contiguous, bool):
            return operator.attrgetter("_c_contiguous")
    except AttributeError:
        pass
    return lambda y: y.flags.c_contiguous


def _after_launch(spec: KernelSpec, p: dict[str, int], m: int, n: int, k: int):
    """The geometry of the rung's second kernel for these parameters (extra["after_geometry"]), or None."""
    geometry = spec.extra.get("after_geometry")
    return geometry(m, n, k, p) if geometry is not None else None


def _remember_fast_plan(prepared: _Prepared, a, b, c, kernel, params, m, n, k, cp) -> None:
    if not (a.flags.c_contiguous and b.flags.c_contiguous and (c is None or c.flags.c_contiguous)):
        return
    stage = _stages(prepared.spec, m, n, k, prepared.params)
    if any(x in stage and not arrays.rows_aligned(arrays.row_major(v)) for x, v in (("A", a), ("B", b))):
        return  # this call's operands were staged; the plan launches on the caller's arrays as they are
    if len(_fast_plans) > 4096:
        _fast_plans.clear()
    geo = prepared.spec.launch(m, n, k, prepared.params)
    prepared.kernel.ensure_dynamic_smem(geo.smem)
    spec, p = prepared.spec, prepared.params
    scratch = None
    if spec.workspace is not None:
        scratch = lambda stream: _workspace_args(spec, p, m, n, k, stream, cp)  # noqa: E731
    after = _after_launch(spec, p, m, n, k)
    _fast_plans[_fast_key(a, b, c, kernel, params)] = _FastPlan(
        prepared.kernel.function, geo.grid, geo.block, geo.smem, a.data.device_id,
        np.int32(m), np.int32(n), np.int32(k), cp.empty, cp.cuda.runtime.getDevice, scratch,
        _contiguity_test(a), _NO_EPILOGUE if spec.extra.get("epilogue") else (),
        None if after is None else (prepared.after.function, after.grid, after.block, np.int32(p["SPLIT_K"])),
    )
    _fast_type[0] = cp.ndarray


def _device_of(a, kind: str, cp):
    if kind == arrays.CUPY:
        return a.device
    if kind == arrays.TORCH_CUDA:
        return cp.cuda.Device(a.device.index)
    return cp.cuda.Device()  # host inputs (and foreign arrays) run on the current device


def _on_stream(stream):
    """The caller's CuPy stream as the current one while a call stages its operands (copies, conversions,
    transposes), so that they are ordered before the kernel launched on it; no-op without one."""
    return stream if stream is not None and hasattr(stream, "__enter__") else contextlib.nullcontext()


def _stages(spec: KernelSpec, m: int, n: int, k: int, params: Mapping[str, int] | None = None) -> str:
    """The operands (letters) the rung has staged for a product of this size and these parameters:
    extra["stage_operands"] (or what it returns for the parameters, when it is a function), for products
    of at least extra["stage_min_macs"] multiply-adds (below that the copy costs more than the rung's
    checked path loses)."""
    if m * n * k < spec.extra.get("stage_min_macs", 0):
        return ""
    stage = spec.extra.get("stage_operands") or ""
    return stage({**spec.defaults, **(params or {})}) if callable(stage) else stage


def _staged(spec: KernelSpec, va, vb, m: int, n: int, k: int, params: Mapping[str, int] | None = None):
    """A and B, each copied into 16-byte aligned rows where the rung stages it (_stages) and it is not
    aligned already (arrays.aligned_rows returns an aligned operand itself)."""
    stage = _stages(spec, m, n, k, params)
    return (arrays.aligned_rows(va) if "A" in stage else va), (arrays.aligned_rows(vb) if "B" in stage else vb)


def _launch_gpu(prepared: _Prepared, a, b, c, kinds, m, n, k, alpha, beta, stream, cp, epilogue_args: tuple = ()):
    da = arrays.to_cupy(a, kinds[0])
    db = arrays.to_cupy(b, kinds[1])
    dev = cp.cuda.Device().id
    for name, x in (("A", da), ("B", db)):
        if x.device.id != dev:
            raise ValueError(f"{name} is on device {x.device.id}, the kernel runs on device {dev}; move them to one device")
    va, vb = _staged(prepared.spec, arrays.row_major(da), arrays.row_major(db), m, n, k, prepared.params)

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
        scratch = _workspace_args(spec, p, m, n, k, stream, cp)
        args = (np.int32(m), np.int32(n), np.int32(k), np.float32(alpha), va.array, np.int32(va.ld),
                vb.array, np.int32(vb.ld), np.float32(beta), vc.array, np.int32(vc.ld), *scratch, *epilogue_args)
        prepared.kernel(geo.grid, geo.block, args, smem=geo.smem, stream=stream)
        after = _after_launch(spec, p, m, n, k)
        if after is not None:  # the rung's second kernel: (M, N, SPLIT_K, alpha, beta, C, ldc, workspace, epilogue)
            prepared.after(after.grid, after.block,
                           (np.int32(m), np.int32(n), np.int32(p["SPLIT_K"]), np.float32(alpha), np.float32(beta),
                            vc.array, np.int32(vc.ld), scratch[0], *(epilogue_args or _NO_EPILOGUE)), stream=stream)

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
# fp16 / bf16 inputs, and fp32 inputs at precision "tf32": precision resolved from the dtypes (tf32 only when
# asked for), element types passed as the rung's type parameters (A_TYPE, C_TYPE), the epilogue as flags.
# bfloat16 has no CuPy dtype everywhere, so 16-bit operands travel to the kernel as int16 views of the
# same memory; fp32 operands as they are.

# Per input dtype: its own precision first (the default), then those a caller may ask for instead.
_PRECISIONS = {dt: (own, *(p for p, d in REDUCED_PRECISIONS.items() if d == dt)) for dt, own in NATIVE_PRECISION.items()}
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


def _wants_epilogue(bias, activation, residual) -> bool:
    return bias is not None or residual is not None or activation not in (None, "none")


def _epilogue_rungs(dtype: str) -> list[str]:
    return [s.name for s in registry.specs_for_dtype(dtype) if s.extra.get("epilogue")]


def _check_epilogue(bias, activation, residual, m, n, out_label) -> str | None:
    """Check the epilogue arguments without touching a GPU; return the bias mode (None, "row", "col")."""
    if activation is not None and activation not in _ACTIVATIONS and activation != "none":
        raise ValueError(f"activation={activation!r} is not one of None, {', '.join(repr(x) for x in _ACTIVATIONS)}")
    mode = None
    if bias is not None:
        kind = arrays.kind_of(bias)
        shape = tuple(bias.shape)
        if shape in ((n,), (1, n)):
            mode = "col"
        elif shape in ((m,), (m, 1)):
            mode = "row"
        else:
            raise ValueError(f"bias must have N = {n} elements (per column) or M = {m} (per row), got shape {_fmt(shape)}")
        if arrays.dtype_name(bias, kind) not in ("float32", "float16", "float64", "bfloat16"):
            raise TypeError(f"bias must be a float vector, got {arrays.dtype_name(bias, kind)}")
        if kind not in (arrays.TORCH_CUDA, arrays.TORCH_CPU) and arrays.dtype_name(bias, kind) == "bfloat16":
            raise TypeError("a bfloat16 bias must be a torch tensor (or convert it to float32)")
    if residual is not None:
        kind = arrays.kind_of(residual)
        if tuple(residual.shape) != (m, n):
            raise ValueError(f"residual must be M x N = {m} x {n}, got {_fmt(residual.shape)}")
        if arrays.dtype_name(residual, kind) != out_label:
            raise TypeError(f"residual must have the output dtype {out_label}, got {arrays.dtype_name(residual, kind)}")
    return mode


def _epilogue_inputs(bias, activation, residual, m, n, out_label, cp):
    """(bias as fp32 CuPy vector or None, bias mode) after checking them; raises naming each."""
    mode = _check_epilogue(bias, activation, residual, m, n, out_label)
    vec = None
    if bias is not None:
        kind = arrays.kind_of(bias)
        if kind in (arrays.TORCH_CUDA, arrays.TORCH_CPU):
            bias = bias.detach().float()
        vec = cp.ascontiguousarray(arrays.to_cupy(bias, kind).reshape(-1), dtype=cp.float32)
    return vec, mode


def _epilogue_args(spec: KernelSpec, bias, activation, residual, m, n, out_label, cp) -> tuple:
    """The kernel's fused-epilogue arguments (bias, R, ldr, flags) for a spec that takes them (on the
    current device), else (). Residuals of 16-bit types travel as their bits."""
    if not spec.extra.get("epilogue"):
        return ()
    if not _wants_epilogue(bias, activation, residual):
        return _NO_EPILOGUE
    from .kernels.rungs import mma_sync as tc

    vec, mode = _epilogue_inputs(bias, activation, residual, m, n, out_label, cp)
    dev = cp.cuda.Device().id
    vr = None
    if residual is not None:
        vr = arrays.row_major(_bits16(residual, arrays.kind_of(residual), cp))
        if vr.array.device.id != dev:
            raise ValueError(f"residual is on device {vr.array.device.id}, the kernel runs on device {dev}; "
                             "move them to one device")
        if vr.ld > INT32_MAX:
            raise ValueError(f"ldr = {vr.ld} exceeds the kernels' 32-bit index range")
    flags = tc.epilogue_flags(mode, None if activation == "none" else activation, vr is not None)
    return (vec if vec is not None else _NULL, vr.array if vr is not None else _NULL,
            np.int32(vr.ld if vr is not None else 0), np.int32(flags))


# A repeat tensor-core call on the same arrays (same memory, shapes, strides, dtypes) with the same kernel,
# parameters and epilogue skips conversion, checks, dispatch and tensor-map encoding: the arguments of the
# last launch are reused with the new alpha and beta. Only arrays whose memory the kernel reads and writes
# directly qualify, or A and B staged into row-padded copies (operands whose rows the copy engine cannot
# read), which the plan refreshes from the caller's arrays before every launch (see the end of
# _matmul_tensor), so a plan can never run on a stale copy. (Without the staged case, an odd K such as
# 1023 paid the whole Python path, about 350 us of host time, on every call.)

_TENSOR_PLANS_MAX = 64
_ALPHA, _BETA = 3, 8  # positions of alpha and beta in the kernel's argument list


class _TensorPlan:
    """A remembered tensor-core launch: its arguments packed once (runtime.launch.PackedLaunch), alpha and
    beta rewritten in place, the staged copies (if any) refreshed first."""

    def __init__(self, kernel, grid, block, smem: int, args: tuple, device_id: int, copies: tuple = ()):
        self.packed = launch.PackedLaunch(kernel, grid, block, args, smem)
        self.device = device_id
        # (caller's operand, its staged row-padded copy), as row-major views: held so that the memory the
        # pointers below name stays alive as long as the plan
        self.copies = copies
        # each refresh as one pitched copy: (dst, dst pitch, src, src pitch, row bytes, rows), in bytes
        self._copy_args = tuple((int(d.array.data.ptr), d.ld * d.array.itemsize, int(s.array.data.ptr),
                                 s.ld * s.array.itemsize, s.cols * s.array.itemsize, s.rows) for s, d in copies)

    def launch(self, c, alpha, beta, stream):
        cp = device.require_cupy()
        self.packed.set_float(_ALPHA, alpha)
        self.packed.set_float(_BETA, beta)
        with cp.cuda.Device(self.device):
            ptr = stream.ptr if stream is not None else cp.cuda.get_current_stream().ptr
            for dst, dpitch, src, spitch, width, rows in self._copy_args:  # before the kernel, same stream
                cp.cuda.runtime.memcpy2DAsync(dst, dpitch, src, spitch, width, rows,
                                              cp.cuda.runtime.memcpyDeviceToDevice, ptr)
            self.packed(ptr)
        return c


_tensor_plans: dict[tuple, _TensorPlan] = {}


def _real(v) -> bool:
    return isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool) and math.isfinite(float(v))


def _ptr(x) -> int | None:
    if x is None:
        return None
    if hasattr(x, "data_ptr"):  # torch
        return int(x.data_ptr())
    data = getattr(x, "data", None)
    return int(data.ptr) if data is not None and hasattr(data, "ptr") else None


def _array_sig(x):
    """What identifies a device array's memory and layout, cheaply; None for anything else (host arrays)."""
    if x is None:
        return ()
    if hasattr(x, "data_ptr") and getattr(x, "is_cuda", False):
        # (device addresses are unique across a process's GPUs: unified addressing)
        return ("torch", x.data_ptr(), x.shape, x.stride(), x.dtype)
    data = getattr(x, "data", None)
    if data is not None and hasattr(data, "ptr") and hasattr(x, "strides"):
        return ("cupy", data.ptr, x.shape, x.strides, x.dtype.str, x.device.id)
    return None


def _tensor_key(a, b, c, bias, residual, kernel, params, activation, out_dtype, precision):
    sigs = tuple(_array_sig(x) for x in (a, b, c, bias, residual))
    if any(sg is None for sg in sigs):
        return None
    try:
        return (sigs, kernel, tuple(sorted(params.items())), activation, str(out_dtype), precision)
    except TypeError:  # unhashable parameter values: no plan
        return None


def _matmul_tensor(a, b, c, kinds, dts, m, n, k, alpha, beta, kernel, stream, bias, activation, residual,
                   out_dtype, params, precision=None, plan_key=None):
    from .kernels.rungs import mma_sync as tc

    in_label = dts["A"]
    precision = precision or NATIVE_PRECISION[in_label]
    element = _element(in_label, precision)  # "float16", "bfloat16" or "tf32"
    out_label = _dtype_label(out_dtype) if out_dtype is not None else dts.get("C", in_label)
    if out_label not in tc.C_TYPES:
        raise ValueError(f"out_dtype={out_dtype!r} is not one of 'float32', 'float16', 'bfloat16'")
    if c is not None and dts["C"] != out_label:
        raise TypeError(f"C is {dts['C']} but the output dtype is {out_label} (out_dtype); pass C of the output dtype")
    if kernel == AUTO and params:
        raise ValueError(f"parameters {sorted(params)} need a named kernel, not kernel='auto'")
    for name in (*tc.TYPE_PARAMS, "B_LAYOUT"):
        if name in params:
            raise ValueError(f"parameter {name} is set from the arrays' dtypes, layout, precision and out_dtype; "
                             "do not pass it")
    spec = None if kernel == AUTO else registry.get(kernel)
    if spec is not None and not registry.takes(spec, in_label, precision):
        if precision == NATIVE_PRECISION[in_label]:
            raise TypeError(f"kernel {spec.name} takes {' or '.join(spec.dtypes)} inputs; A and B are {in_label} "
                            "(use kernel='auto' or a tensor-core rung)")
        offer = [s.name for s in registry.specs_for(in_label, precision)]
        raise TypeError(f"kernel {spec.name} has no precision={precision!r} mode for {in_label} inputs (kernels "
                        f"that do: {', '.join(offer) or 'none'}; or kernel='auto')")
    for name, v in (("M", m), ("N", n), ("K", k)):
        if v > INT32_MAX:
            raise ValueError(f"{name} = {v} exceeds the kernels' 32-bit index range")
    if spec is not None:  # parameter errors before any GPU is needed
        validated_params(spec, {**resolve_params(spec, m, n, k, None, element=element, given=params)[0],
                                **_type_params(spec, element, out_label)})
    _check_epilogue(bias, activation, residual, m, n, out_label)

    cp = device.require_cupy()
    with _device_of(a, kinds[0], cp), _on_stream(stream):
        dev = cp.cuda.Device().id
        info = device.device_info(dev)
        va, db = arrays.row_major(_bits16(a, kinds[0], cp)), _bits16(b, kinds[1], cp)
        for name, x in (("A", va.array), ("B", db)):
            if x.device.id != dev:
                raise ValueError(f"{name} is on device {x.device.id}, the kernel runs on device {dev}; move them to one device")
        # A column-major B (a transposed N x K weight) is read in place, K-major, by rungs that take B_LAYOUT;
        # the others get a row-major copy.
        vbt = _transposed_view(db)
        vb = vbt if vbt is not None else arrays.row_major(db)
        # Operands a rung's copy engine cannot read (extra["operand_problems"]: rows or base not 16-byte
        # aligned) are copied into row-padded arrays for rungs that say so (extra["stage_operands"]): a copy
        # of A and B costs far less than falling back to a lower rung.
        eb = 4 if element == "tf32" else 2
        copies: tuple = ()  # (the caller's operand, its staged copy)
        ideal = spec or choose_kernel(in_label, info.compute_capability, precision,
                                      epilogue=_wants_epilogue(bias, activation, residual))
        if ideal.extra.get("stage_operands") and _operand_problems(
                ideal, (int(va.array.data.ptr), va.ld, int(vb.array.data.ptr), vb.ld), eb):
            staged_from = (va, vb)
            va, vb = _staged(ideal, va, vb, m, n, k)
            copies = tuple((x0, x) for x0, x in zip(staged_from, (va, vb)) if x.array is not x0.array)
        if spec is None:  # the operands are known now: rungs with operand rules (extra["operand_problems"]) are checked
            spec = choose_kernel(in_label, info.compute_capability, precision,
                                 epilogue=_wants_epilogue(bias, activation, residual),
                                 operands=(int(va.array.data.ptr), va.ld, int(vb.array.data.ptr), vb.ld))
        b_transposed = vbt is not None and "B_LAYOUT" in spec.extra.get("type_params", ())
        if vbt is not None and not b_transposed:
            vb = arrays.row_major(db)
        types = _type_params(spec, element, out_label, b_transposed)
        chosen = resolve_params(spec, m, n, k, info, element=element, given=params)[0]
        chosen.update(_epilogue_params(spec, activation, params))
        chosen.update(types)
        prepared = prepare(spec, chosen)
        vec, mode = _epilogue_inputs(bias, activation, residual, m, n, out_label, cp)
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
            grid = geo.grid
            keep = None  # a temporary the extra arguments point into, alive until the launch is queued
            if spec.extra.get("host_args") is not None:  # e.g. TMA tensor maps, passed by value
                more, keep = spec.extra["host_args"](va, vb, m, n, k, p, b_transposed, vc)
                args += more
            if spec.extra.get("persistent"):  # blocks walk the tiles: no more than can be resident at once
                grid = (min(grid[0], _resident_blocks(spec, p, prepared.kernel, geo, info.sm_count)), 1, 1)
            if spec.extra.get("workspace") is not None:  # e.g. stream-K's partial sums, sized by the grid
                more, _ = spec.extra["workspace"](m, n, k, p, grid[0])
                args += more  # (the arrays stay alive in args, and in a remembered launch's)
            prepared.kernel(grid, geo.block, args, smem=geo.smem, stream=stream)
            # Remember the launch for a repeat call on the same arrays, when every array the kernel reads
            # or writes is the caller's own memory, or (A, B) a staged copy of it that the plan refreshes.
            refresh = {id(dst.array): int(src.array.data.ptr) for src, dst in copies}

            def callers(x, ptr) -> bool:  # x is the caller's memory at ptr, or a staged copy of it
                return int(x.data.ptr) == ptr or refresh.get(id(x)) == ptr

            if (keep is None and c is not None and dc is not None and not arrays.is_host(kinds[2])
                    and int(vc.array.data.ptr) == _ptr(c) == int(dc.data.ptr)
                    and all(not arrays.is_host(kd) for kd in kinds[:2])
                    and callers(va.array, _ptr(a)) and callers(vb.array, _ptr(b))
                    and (vec is None or int(vec.data.ptr) == _ptr(bias))
                    and (vr is None or int(vr.array.data.ptr) == _ptr(residual))):
                if plan_key is not None:
                    if len(_tensor_plans) >= _TENSOR_PLANS_MAX:
                        _tensor_plans.clear()
                    used = tuple((src, dst) for src, dst in copies if dst.array is va.array or dst.array is vb.array)
                    _tensor_plans[plan_key] = _TensorPlan(prepared.kernel, grid, geo.block, geo.smem, args, dev,
                                                          used)

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
