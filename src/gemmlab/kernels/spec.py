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

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

CUDA_DIR = Path(__file__).with_name("cuda")

Params = Mapping[str, int]

from ..formats import NATIVE_PRECISION, REDUCED_PRECISIONS  # noqa: F401  (the one formats table)


@dataclass(frozen=True)
class Param:
    """One parameter: its default, the values a search may try, and what it means. Template parameters
    (the default) are compiled into the kernel; `template=False` marks a launch parameter (e.g. a split over
    grid.y) that one compiled kernel serves for every value. `searched=False`: set from the call (e.g.
    whether it is a batch), so a search keeps the default."""

    name: str
    default: int
    choices: tuple[int, ...]
    doc: str
    template: bool = True
    searched: bool = True


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
    scratch: int = 0  # fp32 partial sums written to a workspace and read back once (split-K's slabs)
    # Sectors the crossbar carries per sector of A (of B) asked for: 1, except for cp.async into shared-memory
    # rows that start 16 bytes off a 32-byte boundary, whose sectors straddle two 32-byte units there and
    # are carried once for each (so a pitch of an odd number of 16-byte units carries 1.5x).
    a_carried: float = 1.0
    b_carried: float = 1.0

    @property
    def global_loads(self) -> int:
        return self.a_loads + self.b_loads + self.c_loads

    @property
    def global_elements(self) -> int:
        return self.global_loads + self.c_stores + 2 * self.scratch


# The launch limits of every CUDA device of compute capability 3.0 and later, and the kernels' own: block ids and
# tile numbers are 32-bit ints, so a launch has fewer than 2^31 blocks.
GRID_LIMITS = (2**31 - 1, 65535, 65535)
BLOCK_LIMITS = (1024, 1024, 64)
MAX_THREADS_PER_BLOCK = 1024


def launch_problems(geo: "Launch") -> list[str]:
    """What keeps a launch from running on any CUDA device (empty when nothing does). A grid with a zero
    axis is no launch at all (an empty C) and passes."""
    errs = []
    for axis, (g, limit) in enumerate(zip(geo.grid, GRID_LIMITS)):
        if g < 0 or g > limit:
            errs.append(f"grid axis {'xyz'[axis]} = {g} is beyond the device limit of {limit}")
    for axis, (b, limit) in enumerate(zip(geo.block, BLOCK_LIMITS)):
        if not 1 <= b <= limit:
            errs.append(f"block axis {'xyz'[axis]} = {b} is outside 1 .. {limit}")
    if geo.threads_per_block > MAX_THREADS_PER_BLOCK:
        errs.append(f"{geo.threads_per_block} threads per block exceed {MAX_THREADS_PER_BLOCK}")
    if not errs and geo.blocks > GRID_LIMITS[0]:
        errs.append(f"{geo.blocks} blocks exceed the kernels' 32-bit block ids")
    return errs


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def gemm_flops(m: int, n: int, k: int) -> int:
    """2*M*N*K: one multiply and one add per term of every dot product (the epilogue is not counted)."""
    return 2 * m * n * k


_SEARCH_SPACES: dict[int, tuple] = {}  # id(spec) -> (spec, its search space)


@dataclass(frozen=True)
class Staging:
    """Operands the launch layer copies into rows padded to a multiple of 16 bytes when their base address or
    row pitch is not one, because the kernel reads them in 16-byte pieces (or through the copy engine): a
    copy costs far less than a slower rung. `operands` is "A", "B" or "AB", or a function of the parameters
    that returns one; only products of at least `min_macs` multiply-adds are staged (below that the copy
    costs more than the kernel's checked path loses)."""

    operands: str | Callable[[dict[str, int]], str]
    min_macs: int = 0

    def letters(self, m: int, n: int, k: int, params: Params) -> str:
        if m * n * k < self.min_macs:
            return ""
        return self.operands(dict(params)) if callable(self.operands) else self.operands


def rows_16_byte_aligned(a_ptr: int, lda: int, b_ptr: int, ldb: int, elem_bytes: int = 2) -> list[str]:
    """An operand rule (`KernelSpec.operand_rules`) for rungs that read A and B in 16-byte pieces (TMA,
    cp.async): what keeps the bases or rows from being 16-byte aligned; empty when nothing does."""
    errs = []
    for name, ptr, ld in (("A", a_ptr, lda), ("B", b_ptr, ldb)):
        if ptr % 16:
            errs.append(f"{name}'s base address is not 16-byte aligned")
        if (ld * elem_bytes) % 16:
            errs.append(f"{name}'s rows are {ld} elements apart, not a multiple of {16 // elem_bytes}")
    return errs


@dataclass(frozen=True)
class SecondKernel:
    """A kernel of the same module launched after the rung's own, on the same stream (split-K's reduction):
    its name (or C++ name expression; a function of the parameters where it is a template, e.g. of the
    output type) and its geometry for (M, N, K, params), None where this instantiation needs no second
    launch. It takes (M, N, SPLIT_K, alpha, beta, C, ldc, the float workspace, the epilogue arguments).
    dependent: launched as the rung's programmatic dependent (scheduled while the rung's last blocks run);
    the kernel then waits (griddepcontrol.wait) before it reads the workspace, and the rung's kernel lets it
    start (griddepcontrol.launch_dependents)."""

    name: str | Callable[[dict[str, int]], str]
    geometry: Callable[[int, int, int, dict[str, int]], Launch | None]
    dependent: bool = False

    def name_for(self, params: Mapping[str, int]) -> str:
        """The name expression to compile and load for these parameters."""
        return self.name(dict(params)) if callable(self.name) else self.name


@dataclass(frozen=True)
class Workspace:
    """Scratch a launch needs: `floats` fp32 values, `ints` int32 values that are zero at launch and that the
    kernel leaves zero, and int32 scalars passed after the two pointers (e.g. a tile count)."""

    floats: int = 0
    ints: int = 0
    scalars: tuple[int, ...] = ()


@dataclass(frozen=True)
class TensorMapBox:
    """One tensor map (TMA descriptor) the kernel takes by value, as a description: which operand's memory
    ("A", "B" or "C"), the matrix as stored (`rows` x `cols`, row-major, `elem_bytes` per element; 0: the
    operand's own element size), and the box one copy moves. `optional`: where the operand's rows do not
    allow a map, the kernel gets an all-zero one and takes its other path. The launch layer encodes it."""

    operand: str
    rows: int
    cols: int
    box_rows: int
    box_cols: int
    elem_bytes: int = 0
    swizzle: int = 128
    optional: bool = False


@dataclass(frozen=True)
class Trace:
    """A traced build: the -D switch that records each block's and tile's times (analysis.timeline), and the
    k elements of one step for (params)."""

    define: str
    k_step: Callable[[dict[str, int]], int]


# The argument groups a kernel takes after the standard eleven (M, N, K, alpha, A, lda, B, ldb, beta, C,
# ldc), in the order a spec's `arguments` lists them:
# - "workspace": the float workspace and the int counters (pointers), then the workspace's scalars;
# - "epilogue": bias (fp32 vector), R (residual), ldr, flags (formats.epilogue_flags);
# - "tensor_maps": the maps `tensor_maps` describes, by value;
# - "batch": the number of products and the element strides between A's, B's, C's and R's matrices (int,
#   then four 64-bit integers; 0 for an operand every product shares). A rung that takes it runs a batch of
#   products in one launch (its BATCHED template parameter on: grid.z, or the persistent grid's tiles);
# - "scales": 8-bit inputs' scales, of A and of B (fp32 pointers; their kinds are in the epilogue flags), then
#   four int strides in elements for block scales: A's per row and per k block, B's per k block and per
#   128-column block (0 otherwise);
# - "groups": grouped products (BATCHED 2; after "batch", whose count is then the groups' and whose B stride
#   is between the groups' matrices of B): the groups' row ends or counts (int pointer), the rows per group of
#   the masked layout (0: ends), and the elements between the groups' biases (0: one bias for all). A rung
#   that takes it runs the products of a mixture-of-experts layer in one launch (`gemmlab.grouped_matmul`).
# - "arrivals": row blocks of A that arrive during the launch (gemmlab.distributed's all-gather): a flag per
#   block (pointer; null: none), the rows per block, the value each flag must reach, and the cluster-tile rows
#   the walk is rotated by (so that the rows present first are taken first).
ARGUMENT_GROUPS = ("workspace", "epilogue", "tensor_maps", "batch", "scales", "groups", "arrivals")


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
    # For rungs whose best parameters depend on the problem: (M, N, K, SM count, element type or None for
    # the rung's first, B read transposed: B_LAYOUT 2) -> parameters, used when the caller names none (a
    # tuned entry for the device takes precedence; see gemmlab.tune).
    heuristic: Callable[[int, int, int, int, str | None, bool], dict[str, int]] | None = None
    # Parameters that follow from the problem's shape and alignment, whatever chose the rest (the tuner does
    # not search them): (M, N, K, the parameters so far, complete) -> the values to set over them. Applied
    # over a tuned entry, which was measured on its shape class's other members (the heuristic sets them
    # itself). None: no such parameters.
    follows: Callable[[int, int, int, dict[str, int]], dict[str, int]] | None = None
    # For rungs that need scratch memory: (M, N, K, params, blocks launched) -> Workspace ("workspace" in
    # `arguments`). None: none.
    workspace: Callable[[int, int, int, dict[str, int], int], Workspace] | None = None
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
    # Argument groups after the standard eleven, in the kernel's order (ARGUMENT_GROUPS).
    arguments: tuple[str, ...] = ()
    # The fused epilogue of epilogue.cuh (bias, activation, residual) is taken: "epilogue" is in `arguments`.
    # Parameters an activation, a residual or block scales want unless the caller names them ({activation,
    # "residual" or "block_scales": {name: value}}).
    epilogue_params: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # Parameters a batch of products takes unless the caller names them (e.g. no split-K: its scratch and
    # counters are per product of one launch).
    batch_params: Mapping[str, int] = field(default_factory=dict)
    # Grouped products: (rows per group on average, N, K, the parameters so far) -> what changes for groups
    # (over batch_params and the shape heuristic's choice for all groups' rows as one product). None: nothing.
    group_params: Callable[[int, int, int, dict[str, int]], dict[str, int]] | None = None
    # Template parameters set from the arrays (dtypes, layout, precision, out_dtype), never by callers, and
    # per input element type ("tf32", ...) parameters that replace the defaults.
    type_params: tuple[str, ...] = ()
    type_defaults: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # Operands copied into 16-byte aligned rows before the launch (None: read as they are).
    staging: Staging | None = None
    # How a call whose B is given transposed (N x K, K contiguous: x @ W.t()) runs, for rungs that choose by
    # shape: (M, N, K, SM count, may the product be swapped) -> "read" (B_LAYOUT 2, in place), "copy" (into a
    # row-major B first) or "swap" (C^T = B^T A^T, B^T the swapped product's A). None: a rung with a B_LAYOUT
    # reads it in place; one without swaps where the swap's copies are smaller than B, else copies B.
    transposed_b: Callable[[int, int, int, int, bool], str] | None = None
    # What keeps a call's operands from this rung: (a_ptr, lda, b_ptr, ldb, element bytes) -> problems
    # (empty: fine); kernel="auto" passes over a rung whose rules fail and that does not stage them.
    operand_rules: Callable[[int, int, int, int, int], list[str]] | None = None
    second_kernel: SecondKernel | None = None
    # A persistent grid: no more blocks than can be resident at once, in whole clusters of cluster(params);
    # the blocks walk the work, so the grid does not bound C. A function of the parameters where only some
    # schedules walk (`walks`).
    persistent: bool | Callable[[dict[str, int]], bool] = False
    cluster: Callable[[dict[str, int]], int] | None = None
    # The tensor maps the kernel takes ("tensor_maps" in `arguments`): (M, N, K, params) -> boxes.
    tensor_maps: Callable[[int, int, int, dict[str, int]], tuple[TensorMapBox | None, ...]] | None = None
    # For analysis: a traced build, and shared-memory wavefronts where they are not the traffic model's.
    trace: Trace | None = None
    smem_wavefronts: Callable[[int, int, int, dict[str, int]], int] | None = None
    # Blocks (or persistent units) that share one tile of C along K, for (params): each runs 1 / that of the
    # tile's k steps (a split over K). The analysis counts work per unit with it. None: 1.
    k_slices: Callable[[dict[str, int]], int] | None = None
    # A persistent grid's last, partial round of tiles cut along K: (M, N, K, params, resident blocks) -> how
    # many parts each of its tiles runs as, side by side (each 1 / that of the tile's k steps), or 0 / 1 for
    # whole tiles. The analysis counts that round as 1 / parts of one. None: whole tiles.
    last_round_parts: Callable[[int, int, int, dict[str, int], int], int] | None = None
    # What the rung was predicted to buy over the rung before it at large squares (4096^3 and up), as a range
    # of (its time / this rung's time), written before it was measured (the .cu header's "Predicted" line);
    # `gemmlab ablation` prints it beside the measurement. None: no such prediction recorded.
    expected_gain: tuple[float, float] | None = None
    # The shapes kernel="auto" takes the rung for: (M, N, K, dtype) -> None where it is built for the shape,
    # else why not. None: every shape. (A named rung runs any shape: this says where it is the right choice.)
    fits_shape: Callable[[int, int, int, str], str | None] | None = None

    def __post_init__(self):
        unknown = [g for g in self.arguments if g not in ARGUMENT_GROUPS]
        if unknown:
            raise ValueError(f"kernel {self.name}: argument groups {unknown} are not among {ARGUMENT_GROUPS}")
        for group, hook in (("workspace", self.workspace), ("tensor_maps", self.tensor_maps)):
            if (group in self.arguments) != (hook is not None):
                raise ValueError(f"kernel {self.name}: the {group!r} argument group and the {group} hook go together")
        if ("batch" in self.arguments) != ("BATCHED" in self.type_params):
            raise ValueError(f"kernel {self.name}: the 'batch' argument group and the BATCHED type parameter go together")
        if "groups" in self.arguments and "batch" not in self.arguments:
            raise ValueError(f"kernel {self.name}: the 'groups' argument group comes with the 'batch' group")

    @property
    def epilogue(self) -> bool:
        """Whether the rung takes the fused epilogue (bias, activation, residual)."""
        return "epilogue" in self.arguments

    def slices_of_k(self, params: Params) -> int:
        """How many blocks share a tile of C along K with these parameters (`k_slices`; 1 without a split)."""
        return max(1, int(self.k_slices(dict(params)))) if self.k_slices else 1

    def parts_of_last_round(self, m: int, n: int, k: int, params: Params, resident: int) -> int:
        """Into how many parts along K each tile of a persistent grid's last, partial round is cut
        (`last_round_parts`; 1 for whole tiles)."""
        if self.last_round_parts is None:
            return 1
        return max(1, int(self.last_round_parts(m, n, k, dict(params), resident)))

    def walks(self, params: Params) -> bool:
        """Whether these parameters launch a persistent grid whose blocks walk the work (`persistent`)."""
        return bool(self.persistent(dict(params)) if callable(self.persistent) else self.persistent)

    @property
    def batched(self) -> bool:
        """Whether the rung runs a batch of products in one launch (the "batch" argument group)."""
        return "batch" in self.arguments

    @property
    def waits_for_rows(self) -> bool:
        """Whether the rung's launch can wait for row blocks of A to arrive (the "arrivals" argument group)."""
        return "arrivals" in self.arguments

    @property
    def grouped(self) -> bool:
        """Whether the rung runs grouped products in one launch (the "groups" argument group)."""
        return "groups" in self.arguments

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
        """Every combination of the declared choices that passes validate(): what a tuner may try, the first
        parameter varying slowest. Computed once per spec (the largest spaces take seconds to enumerate), the
        combinations checked as they are generated (rung 10's full product, 10^7 dictionaries at once, took
        13 GB); callers get copies."""
        cached = _SEARCH_SPACES.get(id(self))
        if cached is None or cached[0] is not self:
            names = [p.name for p in self.params]
            choices = (p.choices if p.searched else (p.default,) for p in self.params)
            combos = (dict(zip(names, values)) for values in itertools.product(*choices))
            cached = (self, [d for d in combos if not self.constraints(d)])
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
        args = ", ".join(str(int(params[p.name])) for p in self.params if p.template)
        return f"{self.template}<{args}>" if args else self.template

    # -------------------------------------------------------------------------------- model

    def launch(self, m: int, n: int, k: int, params: Params) -> Launch:
        """The launch geometry for (M, N, K), checked against the limits of every CUDA device
        (`launch_problems`): ValueError naming the rung, its parameters, the shape and the axis at fault."""
        geo = self.geometry(m, n, k, dict(params))
        errs = launch_problems(geo)
        if errs:
            shown = " ".join(f"{name}={v}" for name, v in dict(params).items() if name in self.defaults)
            raise ValueError(f"{self.name} ({shown}) at M x N x K = {m} x {n} x {k} needs a grid of {geo.grid} "
                             f"blocks of {geo.block} threads: {'; '.join(errs)}")
        return geo

    def flops(self, m: int, n: int, k: int) -> int:
        return gemm_flops(m, n, k)

    def traffic(self, m: int, n: int, k: int, params: Params, beta_nonzero: bool = False) -> Traffic:
        t = self.traffic_model(m, n, k, dict(params))
        if beta_nonzero:
            t = Traffic(t.a_loads, t.b_loads, m * n, t.c_stores, t.smem_loads, t.scratch)
        return t

    def global_bytes(self, m: int, n: int, k: int, params: Params, beta_nonzero: bool = False) -> int:
        return 4 * self.traffic(m, n, k, params, beta_nonzero).global_elements

    def intensity(self, m: int, n: int, k: int, params: Params, beta_nonzero: bool = False) -> float:
        """FLOPs per byte of global-memory traffic requested by the kernel (the operands' intensity)."""
        b = self.global_bytes(m, n, k, params, beta_nonzero)
        return self.flops(m, n, k) / b if b else math.inf

    def loads_per_thread(self, m: int, n: int, k: int, params: Params) -> float:
        """Average global loads of A and B per launched thread (the loads-per-thread count)."""
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
