"""What a rung of the ladder is, as data: `KernelSpec`.

A spec names the CUDA source and template, declares the template parameters with their defaults and
allowed values, checks a parameter set (`validate`: the tuner prunes with it, users get clear errors),
gives the launch geometry, and carries the analytic model as plain functions of (M, N, K, params) that
need no GPU: FLOPs, global-memory loads and stores, shared-memory loads, arithmetic intensity.

Traffic is counted in elements *requested by the kernel as written* (global loads issued to the memory
system, after zero padding: padded elements are not loaded). How much of it reaches DRAM depends on the
caches; `analysis` models that separately.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

CUDA_DIR = Path(__file__).with_name("cuda")

Params = Mapping[str, int]

# The precision each input dtype runs at unless the caller asks for another: the dtype's own.
NATIVE_PRECISION = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
# Precisions a caller may ask for instead of the native one, with the input dtype they apply to: tf32 runs
# fp32 operands on the tensor cores (inputs rounded to a 10-bit mantissa, fp32 accumulation). Never a default.
REDUCED_PRECISIONS = {"tf32": "float32"}


@dataclass(frozen=True)
class Param:
    """One template parameter: its default, the values a search may try, and what it means."""

    name: str
    default: int
    choices: tuple[int, ...]
    doc: str


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int = 0  # dynamic shared memory, bytes

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


@dataclass(frozen=True)
class Traffic:
    """Element counts (not bytes) moved between the kernel and global memory, and from shared memory."""

    a_loads: int
    b_loads: int
    c_loads: int
    c_stores: int
    smem_loads: int = 0

    @property
    def global_loads(self) -> int:
        return self.a_loads + self.b_loads + self.c_loads

    @property
    def global_elements(self) -> int:
        return self.global_loads + self.c_stores


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def gemm_flops(m: int, n: int, k: int) -> int:
    """2*M*N*K: one multiply and one add per term of every dot product (the epilogue is not counted)."""
    return 2 * m * n * k


_SEARCH_SPACES: dict[int, tuple] = {}  # id(spec) -> (spec, its search space)


@dataclass(frozen=True)
class KernelSpec:
    name: str
    rung: int
    source: str                      # file name under kernels/cuda
    template: str                    # C++ function template name
    idea: str                        # one line for listings
    params: tuple[Param, ...]
    constraints: Callable[[dict[str, int]], list[str]]
    geometry: Callable[[int, int, int, dict[str, int]], Launch]
    traffic_model: Callable[[int, int, int, dict[str, int]], Traffic]
    outputs_per_thread: Callable[[dict[str, int]], int] = lambda p: 1
    # For rungs whose best parameters depend on the problem: (M, N, K, SM count) -> parameters, used when
    # the caller names none (a tuned entry for the device takes precedence; see gemmlab.tune).
    heuristic: Callable[[int, int, int, int], dict[str, int]] | None = None
    # For rungs that need scratch memory: (M, N, K, params) -> (floats, ints). Such kernels take two more
    # arguments after ldc: a float workspace and an int array that must be zero at launch and that the
    # kernel leaves zero. None: the kernel takes the standard eleven arguments only.
    workspace: Callable[[int, int, int, dict[str, int]], tuple[int, int]] | None = None
    min_cc: tuple[int, int] = (7, 5)
    # Exact architectures the rung is built for, when it uses features only they have (wgmma and
    # setmaxnreg: "sm_90a"). Empty: any architecture from min_cc up, built for the device's own.
    targets: tuple[str, ...] = ()
    # Input dtypes the rung takes at their own precision (NATIVE_PRECISION). "float32" here means a strict
    # fp32 rung: the ladder, the tuner and the analysis run exactly those.
    dtypes: tuple[str, ...] = ("float32",)
    # Reduced precisions the rung also offers (keys of REDUCED_PRECISIONS, e.g. "tf32"), used only when a
    # caller asks for one (`matmul(..., precision="tf32")`), never for plain fp32 work.
    precisions: tuple[str, ...] = ()
    # Free-form facts other code reads. Among them: "epilogue" (True: the kernel takes the fused-epilogue
    # arguments bias, R, ldr, flags after the standard ones and any workspace; see epilogue.cuh),
    # "type_params" (template parameters set from the dtypes, not by callers), "type_defaults" ({input
    # element type: parameters} replacing the defaults for that type), "stage_operands" (the letters of
    # the operands, "A", "B" or "AB", that the API copies into rows padded to 16-byte multiples when their
    # base or row pitch is not one, because the kernel's fast path reads them in 16-byte pieces; or a
    # function of the parameters that returns them), and
    # "stage_min_macs" (stage only products of at least this many multiply-adds; default 0).
    extra: dict = field(default_factory=dict)

    # -------------------------------------------------------------------------------- parameters

    @property
    def defaults(self) -> dict[str, int]:
        return {p.name: p.default for p in self.params}

    @property
    def source_path(self) -> Path:
        return CUDA_DIR / self.source

    def problems(self, params: Mapping[str, object]) -> list[str]:
        """Everything wrong with a parameter set (empty when it is runnable); never raises."""
        known = {p.name: p for p in self.params}
        errs = [f"{self.name} has no parameter {k!r} (it takes {', '.join(sorted(known)) or 'none'})"
                for k in params if k not in known]
        merged: dict[str, int] = self.defaults
        for k, v in params.items():
            if k not in known:
                continue
            if isinstance(v, bool) or not isinstance(v, (int,)) and not (hasattr(v, "__index__")):
                errs.append(f"{self.name}: parameter {k} must be an integer, got {v!r}")
                continue
            merged[k] = int(v)
            if int(v) < 1 and not (int(v) == 0 and 0 in known[k].choices):  # 0 only for switches (0 / 1)
                errs.append(f"{self.name}: parameter {k}={v} must be positive")
        if errs:
            return errs
        return [f"{self.name}: {e}" for e in self.constraints(merged)]

    def validate(self, params: Mapping[str, object] | None = None) -> dict[str, int]:
        """Merge with defaults and check; raise ValueError naming each offending parameter."""
        params = dict(params or {})
        errs = self.problems(params)
        if errs:
            raise ValueError("; ".join(errs))
        merged = self.defaults
        merged.update({k: int(v) for k, v in params.items()})
        return merged

    def search_space(self) -> list[dict[str, int]]:
        """Every combination of the declared choices that passes validate(): what a tuner may try.
        Computed once per spec (the largest spaces take seconds to enumerate); callers get copies."""
        cached = _SEARCH_SPACES.get(id(self))
        if cached is None or cached[0] is not self:
            out: list[dict[str, int]] = [{}]
            for p in self.params:
                out = [dict(d, **{p.name: v}) for d in out for v in p.choices]
            cached = (self, [d for d in out if not self.constraints(d)])
            _SEARCH_SPACES[id(self)] = cached
        return [dict(d) for d in cached[1]]

    def target_arch(self, arch: str) -> str | None:
        """The architecture to compile for on a device of `arch` ("sm_90"), or None where the rung cannot run."""
        if not self.targets:
            return arch
        base = arch[:-1] if arch.endswith("a") else arch
        for t in self.targets:
            if t == arch or (t.endswith("a") and t[:-1] == base):
                return t
        return None

    def require_target(self, arch: str) -> str:
        """target_arch, or a ValueError naming what the rung needs."""
        t = self.target_arch(arch)
        if t is None:
            raise ValueError(f"kernel {self.name} is built for {' / '.join(self.targets)} only; this target is {arch}")
        return t

    def name_expression(self, params: Params) -> str:
        args = ", ".join(str(int(params[p.name])) for p in self.params)
        return f"{self.template}<{args}>" if self.params else self.template

    # -------------------------------------------------------------------------------- model

    def launch(self, m: int, n: int, k: int, params: Params) -> Launch:
        return self.geometry(m, n, k, dict(params))

    def flops(self, m: int, n: int, k: int) -> int:
        return gemm_flops(m, n, k)

    def traffic(self, m: int, n: int, k: int, params: Params, beta_nonzero: bool = False) -> Traffic:
        t = self.traffic_model(m, n, k, dict(params))
        if beta_nonzero:
            t = Traffic(t.a_loads, t.b_loads, m * n, t.c_stores, t.smem_loads)
        return t

    def global_bytes(self, m: int, n: int, k: int, params: Params, beta_nonzero: bool = False) -> int:
        return 4 * self.traffic(m, n, k, params, beta_nonzero).global_elements

    def intensity(self, m: int, n: int, k: int, params: Params, beta_nonzero: bool = False) -> float:
        """FLOPs per byte of global-memory traffic requested by the kernel (seed 000's measure)."""
        b = self.global_bytes(m, n, k, params, beta_nonzero)
        return self.flops(m, n, k) / b if b else math.inf

    def loads_per_thread(self, m: int, n: int, k: int, params: Params) -> float:
        """Average global loads of A and B per launched thread (seed 001's count)."""
        launch = self.launch(m, n, k, params)
        t = self.traffic(m, n, k, params)
        threads = launch.blocks * launch.threads_per_block
        return (t.a_loads + t.b_loads) / threads if threads else 0.0


def block_threads_constraint(p: Params) -> list[str]:
    """The rule of the one-result-per-thread rungs: BX x BY threads, 1..1024 of them."""
    t = p["BX"] * p["BY"]
    return [f"BX*BY = {t} threads per block, must be 1..1024"] if not 1 <= t <= 1024 else []


def pow2_choices(lo: int, hi: int) -> tuple[int, ...]:
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v *= 2
    return tuple(out)
