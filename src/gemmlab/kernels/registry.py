"""The registry: every rung of the GPU ladder, discovered from `kernels/rungs/*.py`.

This is the one list of GPU kernels. The API, CLI, harness, tuner, tests and visualiser read it;
adding a rung is one `.cu` file under `kernels/cuda/` and one module under `kernels/rungs/` with `SPEC`.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Mapping

from ..runtime import compiler
from . import rungs as _rungs_pkg
from .spec import CUDA_DIR, NATIVE_PRECISION, REDUCED_PRECISIONS, KernelSpec


def _discover() -> dict[str, KernelSpec]:
    specs: list[KernelSpec] = []
    for info in pkgutil.iter_modules(_rungs_pkg.__path__):
        mod = importlib.import_module(f"{_rungs_pkg.__name__}.{info.name}")
        spec = getattr(mod, "SPEC", None)
        if isinstance(spec, KernelSpec):
            specs.append(spec)
    specs.sort(key=lambda s: s.rung)
    out: dict[str, KernelSpec] = {}
    rungs_seen: dict[int, str] = {}
    for s in specs:
        if s.name in out:
            raise RuntimeError(f"two kernel specs are named {s.name!r}")
        if s.rung in rungs_seen:
            raise RuntimeError(f"kernels {rungs_seen[s.rung]!r} and {s.name!r} share rung {s.rung}")
        if not s.source.startswith(f"{s.rung:02d}_"):
            raise RuntimeError(f"kernel {s.name!r} is rung {s.rung} but its source is {s.source!r}")
        if not (CUDA_DIR / s.source).exists():
            raise RuntimeError(f"kernel {s.name!r}: source {s.source} is missing from {CUDA_DIR}")
        out[s.name] = s
        rungs_seen[s.rung] = s.name
    return out


REGISTRY: dict[str, KernelSpec] = _discover()


def all_specs() -> list[KernelSpec]:
    return list(REGISTRY.values())


def specs_for_dtype(dtype: str, ladder: bool = True) -> list[KernelSpec]:
    """The rungs that take inputs of `dtype` ("float32", "float16", "bfloat16"), in rung order. Code that
    runs fp32 data over the ladder (benchmarks, sweeps, tuner, tests) iterates `specs_for_dtype("float32")`.
    `ladder`: leave out rungs built for some shapes only (`spec.fits_shape`, e.g. skinny for small M), which
    a sweep of general shapes, the tuner and the ablation would time where they are not meant to run."""
    return [s for s in REGISTRY.values() if dtype in s.dtypes and (s.fits_shape is None or not ladder)]


def takes(spec: KernelSpec, dtype: str, precision: str | None = None) -> bool:
    """Whether `spec` runs inputs of `dtype` at `precision` (None: the dtype's own)."""
    if precision is None or precision == NATIVE_PRECISION.get(dtype):
        return dtype in spec.dtypes
    return precision in spec.precisions and REDUCED_PRECISIONS.get(precision) == dtype


def specs_for(dtype: str, precision: str | None = None, ladder: bool = True) -> list[KernelSpec]:
    """The rungs that run `dtype` inputs at `precision` (None: the dtype's own), in rung order; `ladder` as
    for specs_for_dtype (rungs built for some shapes only are left out)."""
    return [s for s in REGISTRY.values() if takes(s, dtype, precision) and (s.fits_shape is None or not ladder)]


def cc_problem(spec: KernelSpec, cc: tuple[int, int]) -> str | None:
    """Why `spec` cannot run on a device of compute capability `cc`, or None when it can: below min_cc, or
    (for a rung built for exact targets, like sm_90a) no target for this architecture."""
    have = f"{cc[0]}.{cc[1]}"
    if tuple(cc) < tuple(spec.min_cc):
        return f"needs compute capability {spec.min_cc[0]}.{spec.min_cc[1]} or newer, the device is {have}"
    if spec.targets and spec.target_arch(f"sm_{cc[0]}{cc[1]}") is None:
        return f"built for {' / '.join(spec.targets)} only, the device is {have} (sm_{cc[0]}{cc[1]})"
    return None


def get(name: str) -> KernelSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown GPU kernel {name!r}; known: {', '.join(REGISTRY)}") from None


def resources(spec: KernelSpec, params: Mapping[str, int], arch: str) -> compiler.Resources:
    """The resource report of one instantiation for `arch`: from the compiler's log, or, where the log
    has none (a process that already holds a CUDA context), from the loaded kernel on this GPU."""
    from ..runtime import device, launch

    p = spec.validate(params)
    expr = spec.name_expression(p)
    arch = spec.require_target(compiler.normalise_arch(arch))
    module = compile_spec(spec, p, arch)
    r = module.resources.get(expr, compiler.Resources(known=False))
    if r.known:
        return r
    if device.gpu_available() and spec.target_arch(device.current_arch()) == arch:
        return launch.load(module, expr).loaded_resources()
    # No GPU to ask: compile again, in this process (no CUDA context), for the compiler's own report.
    module = compiler.compile_file(spec.source_path, [expr], arch, need_report=True)
    return module.resources.get(expr, compiler.Resources(known=False))


def compile_spec(spec: KernelSpec, params: Mapping[str, int], arch: str) -> compiler.CompiledModule:
    """Compile one instantiation of a rung for `arch` (works without a GPU); a rung built for exact targets
    ("sm_90a") is compiled for the one that matches `arch`, and refused with a ValueError where none does."""
    p = spec.validate(params)
    arch = spec.require_target(compiler.normalise_arch(arch))
    return compiler.compile_file(spec.source_path, module_names(spec, p), arch)


def module_names(spec: KernelSpec, params: Mapping[str, int]) -> list[str]:
    """The kernels one instantiation's module holds: the rung's, then its second kernel (if any)."""
    after = spec.second_kernel
    return [spec.name_expression(params)] + ([after.name_for(params)] if after else [])
