"""Which rung runs a call, and with which parameters, as data.

kernel="auto": the highest rung that runs the inputs' dtype at the asked precision, on this device's
compute capability (min_cc, and exact targets such as sm_90a), built for the shape (`spec.fits_shape`, for
rungs built for some shapes only), with a fused epilogue when one is asked for, and whose operand rules
(`spec.operand_rules`) the arrays meet or whose staging fixes them. Nothing here names a rung: a new rung is
chosen wherever its spec says it fits.

Parameters: the caller's (a named kernel), else this device's tuned entry for the shape class, else the
spec's heuristic, else its defaults; under all of them the element type's defaults (`spec.type_defaults`),
then the epilogue's preferences (an activation's or a residual's, `spec.epilogue_params`) unless the caller
named them, then the type parameters set from the arrays (A_TYPE, C_TYPE, B_LAYOUT). `explain_choice`
returns the whole decision.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from .. import formats
from ..formats import NATIVE_PRECISION, REDUCED_PRECISIONS
from ..kernels import KernelSpec, registry
from ..runtime import device
from .checks import AUTO, type_params


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
    transposed: bool = False              # computed as C^T = B^T A^T (computes_transposed): params for N x M x K

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
            if self.transposed:
                lines.append(f"computed as C^T = B^T A^T (B given transposed, read in place as the swapped product's "
                             f"A; faster for {self.spec.name} here than copying B): the product of {n} x {m} x {k}")
                m, n = n, m
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
            if why is None and epilogue and not s.epilogue:
                why = "takes no fused epilogue (bias, activation, residual)"
            out.append((s, why))
        hit = _ranked_memo[key] = tuple(out)
    return hit


def operand_problems(spec: KernelSpec, operands, element_bytes: int) -> list[str]:
    """What keeps the operands (a_ptr, lda, b_ptr, ldb) from the rung as they are; empty when nothing does."""
    if spec.operand_rules is None or operands is None:
        return []
    return list(spec.operand_rules(*operands, element_bytes))


def layout_problem(spec: KernelSpec, element: str, b_kmajor: bool) -> str | None:
    """Why the rung cannot read B as it is laid out (its B_LAYOUT choices lack the one the call sets), or None."""
    if "B_LAYOUT" not in spec.type_params:
        return None
    layout = type_params(spec, element, "float32", b_kmajor)["B_LAYOUT"]
    choices = next(p.choices for p in spec.params if p.name == "B_LAYOUT")
    if layout in choices:
        return None
    return ("reads B only given transposed (N x K, K contiguous: a linear layer's weight W as W.t())"
            if choices == (2,) else f"cannot read B as laid out here (B_LAYOUT {layout})")


def _decide(dtype: str, precision: str, cc, epilogue: bool, operands=None, shape=None, batched: bool = False,
            b_kmajor: bool = False):
    ranked = _ranked(dtype, precision, cc, epilogue)
    element = formats.element_type(dtype, precision)
    element_bytes = formats.element_bytes(element)
    verdicts: list[tuple[KernelSpec, str | None]] = list(ranked)
    chosen = None
    for i in range(len(verdicts) - 1, -1, -1):  # from the top rung down: the first that fits is taken
        s, why = verdicts[i]
        if why is not None:
            continue
        if batched and not s.batched:
            verdicts[i] = (s, "runs one product per launch, not a batch")
            continue
        layout = layout_problem(s, element, b_kmajor)
        if layout:
            verdicts[i] = (s, layout)
            continue
        off_shape = None
        if s.fits_shape is not None:  # a rung built for some shapes: taken only where a shape says so
            off_shape = s.fits_shape(*shape, dtype) if shape is not None else "built for some shapes; no shape given"
        if off_shape:
            verdicts[i] = (s, off_shape)
            continue
        problems = operand_problems(s, operands, element_bytes)
        if problems and s.staging is None:
            verdicts[i] = (s, "operands: " + "; ".join(problems))
            continue
        chosen = s
        break
    cands = []
    for s, why in verdicts:
        if s is chosen:
            reason = ("chosen: built for this shape" if s.fits_shape is not None else
                      "chosen: the highest rung that fits")
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
                  epilogue: bool = False, operands: tuple | None = None,
                  shape: tuple[int, int, int] | None = None, batched: bool = False,
                  b_kmajor: bool = False) -> KernelSpec:
    """The kernel `kernel="auto"` runs: the highest rung that runs `dtype` at `precision` (None: the dtype's
    own) on compute capability `cc` (None: any), with a fused epilogue when `epilogue`, built for `shape`
    (M, N, K; `spec.fits_shape`) when it is given, and whose operand rules (a_ptr, lda, b_ptr, ldb) the
    arrays meet, or which stages operands that do not, when `operands` are given; with `batched`, among the
    rungs that run a batch of products in one launch (`spec.batched`); `b_kmajor`: B is given transposed (N x
    K, K contiguous), which some rungs need (B_LAYOUT's choices). TypeError if none does."""
    precision = precision or NATIVE_PRECISION.get(dtype, "fp32")
    spec, _ = _decide(dtype, precision, tuple(cc) if cc is not None else None, epilogue, operands,
                      tuple(shape) if shape is not None else None, batched, b_kmajor)
    if spec is None:
        if batched:
            raise TypeError(f"no rung runs a batch of {dtype} products at {precision} in one launch on this device")
        raise _no_kernel(dtype, precision, cc, epilogue)
    return spec


def transposed_b(spec: KernelSpec, m: int, n: int, k: int, sms: int | None, may_swap: bool) -> str:
    """How the rung runs a call whose B is given transposed (N x K, K contiguous: a linear layer's weight as
    W.t()): "read" in place (B_LAYOUT 2), "copy" into a row-major B first, or "swap": computed as C^T = B^T A^T,
    B^T the swapped product's A, read in place (only where `may_swap`). The spec's own rule where it has one
    and the SM count is known (`spec.transposed_b`); else a rung with a B_LAYOUT reads B^T in place, and one
    without swaps where the swap's copies (A^T, M x K, as its B, and C, M x N, written back) are smaller than
    B, else copies B."""
    may_swap = may_swap and m * n * k > 0
    if spec.transposed_b is not None and sms:
        return spec.transposed_b(m, n, k, sms, may_swap)
    if "B_LAYOUT" in spec.type_params:
        return "read"
    return "swap" if may_swap and m * (k + n) < k * n else "copy"


def computes_transposed(spec: KernelSpec, m: int, n: int, k: int, b_transposed: bool, batched: bool,
                        sms: int | None = None) -> bool:
    """Whether kernel="auto" computes C = A B as C^T = B^T A^T (the operands' roles swapped, C written through
    its transpose; B^T the swapped product's A, read in place): where B is given transposed (a linear layer's
    weight, W.t()) and transposed_b says "swap" on `sms` SMs. One product only: `batched`, the call has batch
    dimensions (a batch of one included), is never swapped. Measured: docs/journal.md, "2026-11-27: a
    transposed weight in strict fp32"."""
    return bool(b_transposed) and not batched and transposed_b(spec, m, n, k, sms, True) == "swap"


def reads_b_transposed(spec: KernelSpec, m: int, n: int, k: int, b_transposed: bool, sms: int | None) -> bool:
    """Whether a product that is not swapped reads a B given transposed as it lies (B_LAYOUT 2) rather than a
    row-major copy of it (transposed_b, the swap set aside)."""
    if not b_transposed or "B_LAYOUT" not in spec.type_params:
        return False
    return transposed_b(spec, m, n, k, sms, False) == "read"


def explain_choice(dtype: str = "float32", precision: str | None = None, *, shape: tuple[int, int, int] | None = None,
                   cc: tuple[int, int] | None = None, info: device.DeviceInfo | None = None,
                   sm_count: int | None = None, epilogue: bool = False, kernel: str = AUTO,
                   params: Mapping[str, int] | None = None, out_dtype=None,
                   activation: str | None = None, b_kmajor: bool = False, residual: bool = False) -> KernelChoice:
    """The decision `matmul` makes, as data: which rung (every rung with its verdict) and, with `shape`,
    which parameters and why (given, this device's tuned entry, the spec's heuristic, or its defaults).

    info: the device (its compute capability, SM count and tuned entries); without one, `cc` and
    `sm_count` stand in and no tuned entries are read. Raises as matmul does for a bad dtype/precision."""
    dtype = formats.dtype_label(dtype)
    precision = formats.resolve_precision(dtype, dtype, precision)
    if cc is None and info is not None:
        cc = info.compute_capability
    cc = tuple(cc) if cc is not None else None
    if info is not None and cc != tuple(info.compute_capability):
        info = None  # a what-if for another device: this one's tuned entries do not apply
    if kernel == AUTO:
        spec, cands = _decide(dtype, precision, cc, epilogue, shape=tuple(shape) if shape is not None else None,
                              b_kmajor=b_kmajor)
        if spec is None:
            raise _no_kernel(dtype, precision, cc, epilogue)
    else:
        spec = registry.get(kernel)
        why = next(w for s, w in _ranked(dtype, precision, cc, epilogue) if s.name == spec.name)
        cands = (Candidate(spec.name, spec.rung, tuple(spec.min_cc), why is None, why or "named by the caller"),)
    choice = KernelChoice(dtype, precision, cc, epilogue, cands, spec, named=kernel != AUTO)
    if shape is None or not cands[0].fits and kernel != AUTO:
        return choice  # (a named rung that does not run these inputs has no parameters for them)
    m, n, k = shape
    element = formats.element_type(dtype, precision)
    out = formats.dtype_label(out_dtype) if out_dtype is not None else formats.number_format(dtype, precision).out_dtype
    sms = info.sm_count if info is not None else sm_count
    swap = kernel == AUTO and computes_transposed(spec, m, n, k, b_kmajor, False, sms)
    # (the swapped product's B, A^T, is given transposed: read in place or copied by the same rule)
    pm, pn = (n, m) if swap else (m, n)
    kmajor = reads_b_transposed(spec, pm, pn, k, swap or b_kmajor, sms)
    full, source, detail = full_params(spec, pm, pn, k, info, element, out, params, activation, kmajor,
                                       sm_count=sm_count if info is None else None, residual=residual)
    if (swap or b_kmajor) and not kmajor and "B_LAYOUT" in spec.type_params:
        detail += (f"; {'its B, A^T,' if swap else 'B'} given transposed is copied into a row-major B (at this shape "
                   "the copy costs less than reading it in place loses)")
    return replace(choice, shape=(m, n, k), params=full, params_source=source, params_detail=detail,
                   transposed=swap)


def full_params(spec: KernelSpec, m: int, n: int, k: int, info, element: str, out: str,
                given: Mapping[str, int] | None, activation: str | None, b_kmajor: bool,
                sm_count: int | None = None, residual: bool = False, batch: int = 1,
                block_scales: bool = False, grouped: bool = False) -> tuple[dict[str, int], str, str]:
    """The validated parameter set a call runs, where it came from, and why (resolve_params, then the
    epilogue's preferences, then a batch's, then block scales', then the type parameters). A batch of `batch`
    products is tuned as one product of batch x M rows: the tiles it has to spread over the SMs; grouped
    products (`grouped`: M the rows of all groups) as one product of M rows, with a batch's parameters."""
    partial, source, detail = resolve_params(spec, m * (1 if grouped else batch), n, k, info, element=element,
                                             given=given, sm_count=sm_count, b_kmajor=b_kmajor)
    for_epilogue = epilogue_params(spec, activation, given, residual)
    if for_epilogue:
        what = " and ".join(w for w in (activation, "a residual" if residual else None) if w)
        detail += f"; for {what}: {_fmt_params(for_epilogue)} (the rung's preference for that epilogue)"
    for_batch = ({name: v for name, v in spec.batch_params.items() if name not in (given or {})}
                 if batch > 1 or grouped else {})
    if grouped and spec.group_params is not None:  # the groups' own rule (their rows, not all of them)
        for_batch.update({name: v for name, v in spec.group_params(m // max(batch, 1), n, k,
                                                                  {**partial, **for_batch}).items()
                          if name not in (given or {})})
    if for_batch:
        detail += f"; for {'groups' if grouped else 'a batch'}: {_fmt_params(for_batch)}"
    for_blocks = ({name: v for name, v in spec.epilogue_params.get("block_scales", {}).items()
                   if name not in (given or {})} if block_scales else {})
    if for_blocks:
        detail += f"; for block scales: {_fmt_params(for_blocks)}"
    _, full = validated_params(spec, {**partial, **for_epilogue, **for_batch, **for_blocks,
                                      **type_params(spec, element, out, b_kmajor, batched=batch > 1,
                                                    block_scales=block_scales, grouped=grouped)})
    return full, source, detail


def epilogue_params(spec: KernelSpec, activation: str | None, given: Mapping[str, int] | None,
                    residual: bool = False) -> dict[str, int]:
    """Parameters the rung prefers for this activation and, with a residual, for that (spec.epilogue_params,
    keys an activation's name or "residual"), except those the caller named."""
    pref = dict(spec.epilogue_params.get(activation or "none", {}))
    if residual:
        pref.update(spec.epilogue_params.get("residual", {}))
    return {name: v for name, v in pref.items() if name not in (given or {})}


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
    return key, dict(hit)


_tuned: dict[str, Any] = {}


def tuned_cache(info: device.DeviceInfo):
    """The device's tuned-parameter store, read once per process."""
    from ..tuned import TunedCache

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
    type_defaults). A partial set: validate() fills in the rest."""
    return resolve_params(spec, m, n, k, info, element=element)[0]


def resolve_params(spec: KernelSpec, m: int, n: int, k: int, info: device.DeviceInfo | None, *,
                   element: str = "float32", given: Mapping[str, int] | None = None,
                   sm_count: int | None = None, b_kmajor: bool = False) -> tuple[dict[str, int], str, str]:
    """(parameters, source, detail): the caller's (`given`), else the device's tuned entry for the
    shape class (keyed by kernel and element type), else the spec's heuristic (for info's SM count, or
    `sm_count` without a device, and B's layout: `b_kmajor`, read transposed), else the defaults. The
    element type's defaults (spec.type_defaults) sit under all of them."""
    base = dict(spec.type_defaults.get(element, {}))
    under = f"; under them the {element} defaults {_fmt_params(base)}" if base else ""
    if given:  # the caller's parameters complete the spec's defaults, not a schedule chosen for them
        return {**base, **given}, "given", "named by the caller" + under
    if info is not None:
        from ..tuned import shape_class

        cache = tuned_cache(info)
        key = cache.entry_key(spec.name, element, shape_class(m, n, k))
        tuned = cache.lookup(spec.name, m, n, k, dtype=element)
        if tuned is not None:
            chosen, detail = {**base, **tuned}, f"entry {key} in {cache.path}"
            if spec.follows is not None and not spec.problems(chosen):  # what follows from this shape's
                # alignment, over the class's entry (an entry with problems is left for the launch to refuse)
                fixed = spec.follows(m, n, k, {**spec.defaults, **chosen})
                moved = {p: v for p, v in fixed.items() if chosen.get(p, spec.defaults[p]) != v}
                if moved:
                    chosen.update(moved)
                    detail += f"; {_fmt_params(moved)} from this shape"
            return chosen, "tuned", detail
        miss = f"no tuned entry {key} in {cache.path}"
        sm_count = info.sm_count
    else:
        miss = "no device to read tuned entries from"
    if spec.heuristic is not None and sm_count:
        return ({**base, **spec.heuristic(m, n, k, sm_count, element, b_kmajor)}, "heuristic",
                f"{miss}; {spec.name}'s shape heuristic for {sm_count} SMs{under}")
    why = "has no heuristic" if spec.heuristic is None else "has a heuristic but no SM count was given"
    return base, "defaults", f"{miss}; {spec.name} {why}{under}"


def _fmt_params(p: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items())
