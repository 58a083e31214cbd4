"""Deciding once: a checked call (Request) and its operands' layout become a `Plan`: the rung, its full
parameters and where they came from, the loaded kernel(s), the launch geometry, how each operand is read
(in place, Bᵀ in place, a row-major copy, a 16-byte aligned staged copy), the epilogue flags, the scratch
and the tensor maps it needs, and the packed arguments that repeat calls rewrite in place.

A plan depends only on what a repeat-call key captures (shapes, strides, dtypes, devices, 16-byte
alignment, kernel, parameters, epilogue), never on the values or the addresses of the arrays, so one plan
serves every call with that key.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import numpy as np

from .. import arrays, formats
from ..kernels import KernelSpec, registry
from ..kernels.spec import Launch, TensorMapBox, Workspace, launch_problems
from ..runtime import compiler, device, launch
from ..runtime.errors import GemmlabError
from . import dispatch
from .checks import AUTO, INT32_MAX, Request


class CaptureError(GemmlabError, RuntimeError):
    """A call inside CUDA graph capture that would have to compile or load a kernel first."""


# ----------------------------------------------------------------------------------------- loaded kernels

@dataclass
class Prepared:
    """A loaded kernel instantiation, cached per (kernel, params, device, build options)."""

    spec: KernelSpec
    params: dict[str, int]
    kernel: launch.LoadedKernel
    compile_seconds: float
    after: launch.LoadedKernel | None = None  # the rung's second kernel, from the same module
    module: compiler.CompiledModule | None = None


_prepared: dict[tuple, Prepared] = {}


def is_prepared(spec: KernelSpec, params: Mapping[str, Any], dev: int) -> bool:
    key, _ = dispatch.validated_params(spec, params)
    return (key, dev, compiler.added_options()) in _prepared


def prepare(spec: KernelSpec, params: Mapping[str, Any] | None = None) -> Prepared:
    """Validate, compile (or fetch from the cache) and load one instantiation on the current device."""
    key, p = dispatch.validated_params(spec, params)
    cupy = device.require_cupy()
    dev = cupy.cuda.Device().id
    raw_key = (key, dev, compiler.added_options())
    hit = _prepared.get(raw_key)
    if hit is not None:
        return hit
    info = device.device_info(dev)
    if info.compute_capability < spec.min_cc:
        raise ValueError(f"kernel {spec.name} needs compute capability {spec.min_cc}, the device is {info.compute_capability}")
    module = compiler.compile_file(spec.source_path, registry.module_names(spec, p), spec.require_target(info.arch))
    after = spec.second_kernel
    prepared = Prepared(spec, p, launch.load(module, spec.name_expression(p)), module.compile_seconds,
                        launch.load(module, after.name_for(p)) if after else None, module)
    _prepared[raw_key] = prepared
    return prepared


def loaded(kernel: str) -> list[Prepared]:
    """The loaded instantiations of `kernel` under the compile options in force (compiler.added_options)."""
    opts = compiler.added_options()
    return [p for key, p in _prepared.items() if p.spec.name == kernel and key[2] == opts]


def resident_blocks(spec: KernelSpec, p: dict[str, int], kernel, geo: Launch, sm_count: int) -> int:
    """Blocks of a persistent kernel that run at once, in whole clusters: the driver's count of clusters that
    fit (SMs group into GPCs, and a cluster never spans two), or the SM count rounded down to whole clusters
    where it cannot say; without clusters, the driver's blocks per SM (rung 15's: one; rung 16's small blocks:
    several) times the SMs."""
    cluster = spec.cluster(p) if spec.cluster else 1
    if cluster == 1:
        return sm_count * (kernel.max_active_blocks(geo.block, geo.smem) or 1)
    fit = kernel.max_active_clusters(cluster, geo.block, geo.smem)
    return cluster * (fit if fit else sm_count // cluster)


# ----------------------------------------------------------------------------------------- operands

@dataclass(frozen=True)
class OperandLayout:
    """How the kernel reads one matrix operand: in place with leading dimension `ld` (elements), or from a
    row-major copy made per call (`copy`), then perhaps from a staged copy in rows of whole 128-byte lines
    (`stage`).
    `transposed`: the operand is read as its transpose (Bᵀ of a column-major B), `rows` x `cols` as read.
    A batched operand holds `batch` such matrices `bstride` elements apart (batch 1, bstride 0: one matrix,
    shared by every product of a batched call)."""

    rows: int
    cols: int
    ld: int
    item: int
    copy: bool = False
    stage: bool = False
    transposed: bool = False
    batch: int = 1
    bstride: int = 0

    @property
    def read_bstride(self) -> int:
        """The elements between its matrices as the kernel reads them (0: one matrix)."""
        if self.batch <= 1:
            return 0
        if self.stage:
            return self.rows * self.staged_ld
        return self.rows * max(self.cols, 1) if self.copy else self.bstride

    @property
    def uniform(self) -> bool:
        """Whether its matrices follow one another at the row pitch (batch x rows rows of one 2-D layout)."""
        return self.batch <= 1 or self.bstride == self.rows * self.ld

    @property
    def staged_ld(self) -> int:
        """The staged copy's row pitch: rows padded to whole 128-byte lines (16-byte loads and TMA need 16;
        whole lines keep TMA's wide L2 fills, tma.l2_promotion)."""
        step = max(128 // self.item, 1)
        return -(-self.cols // step) * step

    @property
    def read_ld(self) -> int:
        """The leading dimension the kernel reads it with: the staged copy's, the row-major copy's, or its own."""
        return self.staged_ld if self.stage else max(self.cols, 1) if self.copy else self.ld


def layout_of(shape, strides, item: int, *, allow_transposed: bool = False) -> OperandLayout:
    """The layout a 2-D operand, or a batch of them (3-D), is read with (see arrays.row_pitch /
    column_pitch). A batch whose matrices are not evenly spaced, non-negative steps apart is copied."""
    if len(shape) == 3:
        lay = layout_of(shape[1:], strides[1:], item, allow_transposed=allow_transposed)
        batch, step = int(shape[0]), strides[0]
        if batch <= 1:
            return lay
        if not isinstance(step, int) or step < 0:
            return replace(layout_of(shape[1:], (shape[2], 1), item), copy=True, batch=batch, bstride=0)
        return replace(lay, batch=batch, bstride=step)
    rows, cols = int(shape[0]), int(shape[1])
    if rows == 0 or cols == 0:  # nothing of it is read
        return OperandLayout(rows, cols, max(cols, 1), item)
    if allow_transposed:
        ld = arrays.column_pitch((rows, cols), strides)
        if ld is not None and arrays.row_pitch((rows, cols), strides) is None:
            return OperandLayout(cols, rows, ld, item, transposed=True)
    ld = arrays.row_pitch((rows, cols), strides)
    if ld is None:
        return OperandLayout(rows, cols, max(cols, 1), item, copy=True)
    return OperandLayout(rows, cols, ld, item)


def _reads_b_kmajor_only(spec: KernelSpec, element: str) -> bool:
    """Whether the rung reads B only given transposed (B_LAYOUT's choices, e.g. gemv)."""
    return (dispatch.layout_problem(spec, element, False) is not None
            and dispatch.layout_problem(spec, element, True) is None)


def _as_kmajor(shape, strides, item: int) -> OperandLayout | None:
    """B (K x N) read as the transpose of an N x K matrix where its columns allow it, also where it reads as
    row-major too (one column, one row, nothing to read); None where they do not."""
    if len(shape) == 3:
        return _as_kmajor(shape[1:], strides[1:], item) if shape[0] <= 1 else None
    rows, cols = int(shape[0]), int(shape[1])
    if rows == 0 or cols == 0:
        return OperandLayout(cols, rows, max(rows, 1), item, transposed=True)
    if cols == 1:  # one column: the transpose is one row, K contiguous where B's own column is
        return OperandLayout(1, rows, rows, item, transposed=True) if strides[0] == 1 or rows == 1 else None
    if rows == 1:  # one row: N rows of one element, B's columns apart
        return OperandLayout(cols, 1, strides[1], item, transposed=True) if strides[1] >= 1 else None
    ld = arrays.column_pitch((rows, cols), strides)
    return None if ld is None else OperandLayout(cols, rows, ld, item, transposed=True)


def _unaligned(ptr: int, lay: OperandLayout) -> bool:
    """Whether the operand as read (a row-major copy starts aligned, its rows `cols` apart) has a base or a row
    pitch that is not a multiple of 16 bytes."""
    if lay.rows == 0 or lay.cols == 0:
        return False
    if lay.copy:
        return (lay.cols * lay.item) % 16 != 0 or (lay.batch > 1 and (lay.rows * lay.cols * lay.item) % 16 != 0)
    return ptr % 16 != 0 or (lay.ld * lay.item) % 16 != 0 or (lay.bstride * lay.item) % 16 != 0


# ----------------------------------------------------------------------------------------- the plan

@dataclass
class Plan:
    request: Request
    device: int
    spec: KernelSpec
    params: dict[str, int]
    params_source: str
    params_detail: str
    prepared: Prepared
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    second: Launch | None
    a: OperandLayout
    b: OperandLayout
    c: OperandLayout | None           # the caller's C (None: a new output)
    r: OperandLayout | None           # the residual
    bias_direct: bool                 # the bias is an fp32 vector of the home's type, read as it is
    workspace: Workspace | None
    maps: tuple[TensorMapBox | None, ...]
    pack: launch.ArgPack
    function: int                     # driver handles of the kernel and the second kernel
    second_function: int
    slots: dict[str, int]             # argument name -> its index in the pack
    second_pack: launch.ArgPack | None = None
    second_launch: launch.DependentLaunch | None = None  # the second kernel as a programmatic dependent
    scratch: bool = False             # the workspace asks for memory
    # The call runs as C^T = B^T A^T (dispatch.computes_transposed): this plan is the swapped product's (its
    # request has M and N exchanged), and launch.run passes it B^T, A^T, C^T and R^T.
    transposed: bool = False
    loaded_maps: tuple | None = None  # the tensor maps now in the pack
    # The kernel can wait for row blocks of A inside the launch (launch.Arrivals): a walking rung with the
    # "arrivals" group, one product, K not split, not computed transposed.
    waits: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    map_cache: dict = field(default_factory=dict)
    # (A, B, C) address sets found not to overlap (a given C only; the layouts are the plan's, so the same
    # addresses give the same answer): a few kept, for callers that take turns over several buffers
    disjoint: set = field(default_factory=set)
    # Read by every launch, so worked out once: the new output's shape, whether the product is empty (nothing to
    # launch), and whether the pack has slots beyond the five every kernel has (alpha, A, B, beta, C).
    out_shape: tuple[int, ...] = field(init=False)
    empty_product: bool = field(init=False)
    optional_slots: bool = field(init=False)

    def __post_init__(self):
        req = self.request
        self.out_shape = (req.batch, req.m, req.n) if req.batched else (req.m, req.n)
        self.empty_product = req.m == 0 or req.n == 0 or req.batch == 0
        self.optional_slots = bool(set(self.slots) - {"alpha", "a", "b", "beta", "c"})

    @property
    def stage(self) -> str:
        return ("A" if self.a.stage else "") + ("B" if self.b.stage else "")


def _bias_direct(home: arrays.Home, bias) -> bool:
    if bias is None:
        return True
    if home.name == "torch":
        return (type(bias).__module__.startswith("torch") and bias.is_cuda and bias.dtype == home.torch.float32
                and bias.is_contiguous())
    return type(bias).__module__.startswith("cupy") and bias.dtype == np.float32 and bias.flags.c_contiguous


def make_plan(req: Request, home: arrays.Home, dev: int, a, b, c, bias, residual, *, may_swap: bool = True) -> Plan:
    """Decide everything about a call on these device arrays (on device `dev`, the current one)."""
    info = device.device_info(dev)
    item_in = formats.element_bytes(req.element)
    item_out = formats.ITEMSIZE[req.out]
    sa, sb = arrays.strides_in_elements(a), arrays.strides_in_elements(b)
    la = layout_of(a.shape, sa, item_in)
    lb_t = layout_of(b.shape, sb, item_in, allow_transposed=True)
    lb = layout_of(b.shape, sb, item_in)
    pa, pb = home.ptr(a), home.ptr(b)

    # The rung: named, or the highest that fits (its operand rules checked on the operands as read); grouped
    # products: the rung that runs them (`grouped`), B read as it lies (K-major where given transposed).
    if req.grouped:
        spec = grouped_rung(req.kernel)
        if info.compute_capability < spec.min_cc:
            raise ValueError(f"grouped products run on {spec.name} (rung {spec.rung}), which needs compute "
                             f"capability {spec.min_cc[0]}.{spec.min_cc[1]}; the device is "
                             f"{info.compute_capability[0]}.{info.compute_capability[1]}")
        may_swap = False
    elif req.kernel == AUTO:
        ops = None if la.copy or lb.copy or req.m * req.n * req.k == 0 else (pa, la.ld, pb, lb.ld)
        spec = dispatch.choose_kernel(req.dtype, info.compute_capability, req.precision, epilogue=req.epilogue,
                                      operands=ops, shape=(req.m, req.n, req.k), batched=req.batch > 1,
                                      b_kmajor=lb_t.transposed)
    else:
        spec = registry.get(req.kernel)
    # (any call with batch dimensions, a batch of one included, runs as asked: the swap takes 2-D operands)
    if req.kernel == AUTO and may_swap and dispatch.computes_transposed(spec, req.m, req.n, req.k, lb_t.transposed,
                                                                        req.batched or req.batch > 1, info.sm_count):
        swapped = replace(req, m=req.n, n=req.m, bias={"row": "col", "col": "row"}.get(req.bias))
        p = make_plan(swapped, home, dev, b.T, a.T, None if c is None else c.T, bias,
                      None if residual is None else residual.T, may_swap=False)
        return replace(p, transposed=True)
    if not lb_t.transposed and _reads_b_kmajor_only(spec, req.element):
        lb_t = _as_kmajor(b.shape, sb, item_in) or lb_t  # (one column, or K = 0: either reading fits)
    if req.grouped:
        b_kmajor = lb_t.transposed
    else:
        b_kmajor = dispatch.reads_b_transposed(spec, req.m, req.n, req.k, lb_t.transposed, info.sm_count)
    lb = lb_t if b_kmajor else lb

    given = dict(req.params) or None
    full, source, detail = dispatch.full_params(spec, req.m, req.n, req.k, info, req.element, req.out, given,
                                                req.activation, b_kmajor, residual=req.residual, batch=req.batch,
                                                block_scales=req.block_scales, grouped=bool(req.grouped))
    if device.stream_capturing(home.stream(dev)) and not is_prepared(spec, full, dev):
        raise CaptureError(f"gemmlab.matmul would compile and load {spec.name} {full} during CUDA graph capture; "
                           "make one call with the same shapes, dtypes and options before capturing")
    prepared = prepare(spec, full)
    p = prepared.params

    # Staging: operands the rung reads in 16-byte pieces, not aligned as given (a copy is aligned).
    letters = spec.staging.letters(req.m, req.n, req.k, p) if spec.staging else ""
    if req.m * req.n * req.k == 0:
        letters = ""  # nothing is read
    if "A" in letters and _unaligned(pa, la):
        la = replace(la, stage=True, copy=la.copy or not la.uniform)
    if "B" in letters and _unaligned(pb, lb):
        lb = replace(lb, stage=True, copy=lb.copy or not lb.uniform)
    problems = dispatch.operand_problems(spec, _as_read(pa, la, pb, lb), item_in) if req.m * req.n * req.k else []
    if problems:
        raise ValueError(f"{spec.name} cannot read these operands: {'; '.join(problems)}")

    lc = None
    if c is not None:
        sc = arrays.strides_in_elements(c)
        lc = layout_of(c.shape, sc, item_out)
        if lc.batch > 1 and not lc.copy and lc.bstride < (lc.rows - 1) * lc.ld + lc.cols:
            lc = replace(lc, copy=True)  # C's matrices overlap (a broadcast C): written through a copy
    lr = layout_of(residual.shape, arrays.strides_in_elements(residual), item_out) if residual is not None else None
    for name, lay in (("lda", la), ("ldb", lb), ("ldc", lc), ("ldr", lr)):
        if lay is not None and lay.read_ld > INT32_MAX:
            raise ValueError(f"{name} = {lay.read_ld} exceeds the kernels' 32-bit index range")

    geo = spec.launch(req.m, req.n, req.k, p)
    if geo.smem > info.smem_per_block_optin:
        raise ValueError(f"{spec.name} {p} needs {geo.smem} bytes of shared memory per block; "
                         f"this device allows {info.smem_per_block_optin}")
    grid = geo.grid
    if req.grouped:  # how many tiles the groups make is on the GPU: every block that can be resident walks them
        grid = (INT32_MAX, 1, 1)
    elif p.get("BATCHED"):  # a batch: the persistent grid walks every product's tiles; others take grid.z
        if spec.walks(p):
            if grid[0] * req.batch > INT32_MAX:
                raise ValueError(f"{spec.name}: {req.batch} products of {grid[0]} tiles exceed the kernel's 32-bit "
                                 "tile index")
            grid = (grid[0] * req.batch, 1, 1)
        elif grid[2] != 1:
            raise ValueError(f"{spec.name} {p} uses grid.z for one product; it cannot also take a batch")
        else:
            grid = (grid[0], grid[1], req.batch)
    if spec.walks(p):  # blocks walk the tiles: no more than can be resident at once
        grid = (min(grid[0], resident_blocks(spec, p, prepared.kernel, geo, info.sm_count)), 1, 1)
    errs = launch_problems(Launch(grid, geo.block, geo.smem))
    if errs:
        raise ValueError(f"{spec.name} {p} at {req.m} x {req.n} x {req.k} needs a grid of {grid}: {'; '.join(errs)}")
    prepared.kernel.ensure_dynamic_smem(geo.smem)
    second = spec.second_kernel.geometry(req.m, req.n, req.k, p) if spec.second_kernel else None
    workspace = spec.workspace(req.m, req.n, req.k, p, grid[0] * grid[1] * grid[2]) if spec.workspace else None
    if p.get("BATCHED") and (second is not None or (workspace is not None and (workspace.floats or workspace.ints))):
        raise ValueError(f"{spec.name} {p}: a split over K (scratch per product) has no batched form; a batch "
                         f"of {req.batch} runs without one (leave its split parameters to the rung)")
    maps = spec.tensor_maps(req.m, req.n, req.k, p) if spec.tensor_maps else ()

    ldc = lc.read_ld if lc is not None else max(req.n, 1)
    ldr = lr.read_ld if lr is not None else 0
    strides = (la.read_bstride, lb.read_bstride, (lc.read_bstride if lc is not None else req.m * ldc),
               lr.read_bstride if lr is not None else 0) if req.batch > 1 else (0, 0, 0, 0)
    if req.grouped:  # A and C are 2-D (all groups' rows); only B holds a matrix per group
        strides = (0, lb.read_bstride, 0, 0)
    values, slots = _arguments(spec, req, workspace, len(maps), la.read_ld, lb.read_ld, ldc, ldr, strides)
    # the second kernel's (M, N, SPLIT_K, alpha, beta, C, ldc, workspace, bias, R, ldr, flags)
    second_pack = None if second is None else launch.ArgPack(
        (np.int32(req.m), np.int32(req.n), np.int32(p.get("SPLIT_K", 1)), np.float32(1), np.float32(0), _NULL,
         np.int32(ldc), _NULL, _NULL, _NULL, np.int32(ldr), np.int32(req.epilogue_flags)))
    after = launch.function_handle(prepared.after) if prepared.after is not None else 0
    second_launch = None
    if second is not None and spec.second_kernel.dependent:
        second_launch = launch.DependentLaunch(after, second.grid, second.block, second.smem)
    waits = (spec.waits_for_rows and spec.walks(p) and not p.get("BATCHED") and spec.slices_of_k(p) == 1
             and not la.copy and not la.stage)
    return Plan(req, dev, spec, p, source, detail, prepared, grid, geo.block, geo.smem, second, la, lb, lc, lr,
                _bias_direct(home, bias), workspace, maps, launch.ArgPack(values),
                launch.function_handle(prepared.kernel), after, slots, second_pack=second_pack,
                second_launch=second_launch,
                scratch=workspace is not None and (workspace.floats or workspace.ints) > 0, waits=waits)


def grouped_rung(kernel: str) -> KernelSpec:
    """The rung that runs grouped products: the highest with a grouped form for kernel="auto", else the named
    one, which must have it."""
    if kernel == AUTO:
        specs = [s for s in registry.REGISTRY.values() if s.grouped]
        if not specs:
            raise ValueError("no rung runs grouped products")
        return max(specs, key=lambda s: s.rung)
    spec = registry.get(kernel)
    if not spec.grouped:
        offer = [s.name for s in registry.REGISTRY.values() if s.grouped]
        raise ValueError(f"kernel {spec.name} runs no grouped products; {', '.join(offer) or 'no rung'} does "
                         "(or kernel='auto')")
    return spec


def _as_read(pa: int, la: OperandLayout, pb: int, lb: OperandLayout):
    """(a_ptr, lda, b_ptr, ldb) as the kernel will read them: a staged or copied operand is aligned."""
    a = (pa, la.ld) if not (la.copy or la.stage) else (0, la.staged_ld)
    b = (pb, lb.ld) if not (lb.copy or lb.stage) else (0, lb.staged_ld)
    return (*a, *b)


_NULL = np.uint64(0)


def _arguments(spec: KernelSpec, req: Request, workspace: Workspace | None, n_maps: int, lda: int, ldb: int,
               ldc: int, ldr: int, strides: tuple[int, int, int, int] = (0, 0, 0, 0)):
    """The kernel's argument list (the leading dimensions are the plan's; addresses and scalars are
    placeholders), and the index of every argument a call rewrites."""
    values: list = [np.int32(req.m), np.int32(req.n), np.int32(req.k), np.float32(1), _NULL, np.int32(lda), _NULL,
                    np.int32(ldb), np.float32(0), _NULL, np.int32(ldc)]
    slots = {"alpha": 3, "a": 4, "b": 6, "beta": 8, "c": 9}
    for group in spec.arguments:
        if group == "workspace":
            slots["ws_floats"], slots["ws_ints"] = len(values), len(values) + 1
            values += [_NULL, _NULL, *(np.int32(s) for s in workspace.scalars)]
        elif group == "epilogue":
            slots["bias"], slots["r"] = len(values), len(values) + 1
            values += [_NULL, _NULL, np.int32(ldr), np.int32(req.flags)]
        elif group == "tensor_maps":
            from ..runtime import tma

            slots["maps"] = len(values)
            values += [tma.kernel_arg(bytes(tma.TENSOR_MAP_BYTES))] * n_maps
        elif group == "batch":
            values += [np.int32(req.batch), *(np.int64(x) for x in strides)]
        elif group == "groups":
            slots["groups"] = len(values)
            values += [_NULL, np.int32(req.group_rows), np.int32(req.n if req.group_bias else 0)]
        elif group == "arrivals":
            slots["arrive"] = len(values)
            values += [_NULL, np.int32(0), np.int32(0), np.int32(0)]
        elif group == "scales":
            slots["scale_a"], slots["scale_b"] = len(values), len(values) + 1
            slots["scale_strides"] = len(values) + 2  # block scales: A's row and k strides, B's k and column strides
            values += [_NULL, _NULL, np.int32(0), np.int32(0), np.int32(0), np.int32(0)]
    return values, slots
