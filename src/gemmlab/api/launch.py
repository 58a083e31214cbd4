"""The one launch path: every GPU call, first or repeated, FP32 or tensor-core, plain or fused, ends in
`run(plan, ...)`.

It takes the caller's device arrays and a plan, and in order: makes the row-major or 16-byte aligned
copies the plan asks for, takes the output and the scratch from the arrays' framework (torch's allocator
for torch tensors, CuPy's pool for CuPy arrays), encodes (or reuses) the tensor maps, writes the
addresses and scalars into the plan's packed arguments, and launches the kernel, and its second kernel if
the plan has one, on the given stream with one cuLaunchKernel each. Nothing here synchronises, copies to
the host or compiles, so a call can be captured in a CUDA graph once its plan exists.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from .. import arrays
from ..formats import ITEMSIZE
from ..runtime import device, launch, tma
from .plan import OperandLayout, Plan

_MAPS_PER_PLAN = 16


class _Driver:
    """The few driver entry points a launch needs, looked up once."""

    def __init__(self):
        cp = device.require_cupy()
        self.launch = launch.driver_launch()
        self.memcpy2d = cp.cuda.runtime.memcpy2DAsync
        self.memset = cp.cuda.runtime.memsetAsync
        self.d2d = cp.cuda.runtime.memcpyDeviceToDevice
        self.capturing = cp.cuda.runtime.streamIsCapturing


_driver: list = []


def driver() -> _Driver:
    if not _driver:
        _driver.append(_Driver())
    return _driver[0]


# ----------------------------------------------------------------------------------------- scratch
# Split-K partial sums and tile counters (the counters zero at launch; every kernel that uses them leaves
# them zero). One grow-only pair per (device, stream, thread): launches on one stream run in order, and a
# thread's calls never interleave with another's between a kernel and its second kernel, also where threads
# share a stream handle (the legacy or the per-thread default stream). Under graph capture the scratch is
# taken from the framework's allocator for that call alone (the graph's private pool keeps it) and zeroed
# by a captured memset, so no memory of the eager cache ends up inside a graph.

_scratch: dict[tuple, tuple] = {}
_scratch_lock = threading.Lock()


def _scratch_for(plan: Plan, home: arrays.Home, stream: int):
    """(float pointer, int pointer, what keeps them alive) for the plan's workspace on `stream`."""
    ws = plan.workspace
    if ws is None or (ws.floats == 0 and ws.ints == 0):
        return 0, 0, None
    drv = driver()
    if drv.capturing(stream):
        f = home.empty((max(ws.floats, 1),), "float32", plan.device)
        i = home.empty((max(ws.ints, 1),), "int32", plan.device)
        drv.memset(home.ptr(i), 0, 4 * max(ws.ints, 1), stream)
        return home.ptr(f), home.ptr(i), (f, i)
    key = (plan.device, stream, threading.get_ident(), home.name)
    slot = _scratch.get(key)
    if slot is None or slot[0] < ws.floats or slot[1] < ws.ints:
        with _scratch_lock:
            floats = max(ws.floats, slot[0] if slot else 0, 1)
            ints = max(ws.ints, slot[1] if slot else 0, 1)
            f = home.empty((floats,), "float32", plan.device)
            i = home.empty((ints,), "int32", plan.device)
            drv.memset(home.ptr(i), 0, 4 * ints, stream)
            slot = _scratch[key] = (floats, ints, f, i, home.ptr(f), home.ptr(i))
    return slot[4], slot[5], slot


def forget_scratch() -> None:
    _scratch.clear()


# ----------------------------------------------------------------------------------------- operands

def _staged(home: arrays.Home, x, ptr: int, lay: OperandLayout, dev: int, stream: int):
    """A copy of the rows x cols operand at `ptr` (row pitch lay.ld; a batch of them one after another) in
    rows padded to whole 128-byte lines (OperandLayout.staged_ld)."""
    ld = lay.staged_ld
    rows = lay.rows * max(lay.batch, 1)
    label = {4: "float32", 2: "int16", 1: "uint8"}[lay.item]
    out = home.empty((rows, ld), label, dev)
    if rows and lay.cols:
        driver().memcpy2d(home.ptr(out), ld * lay.item, ptr, lay.ld * lay.item, lay.cols * lay.item, rows,
                          driver().d2d, stream)
    return out, home.ptr(out), ld


def _operand(home: arrays.Home, x, lay: OperandLayout, dev: int, stream: int):
    """(keep-alive, pointer) of an operand as the kernel reads it (with the leading dimension lay.read_ld)."""
    if not (lay.copy or lay.stage):
        return x, home.ptr(x)
    if lay.copy:
        x = home.contiguous(x)
    if lay.stage:
        ld = max(lay.cols, 1) if lay.copy else lay.ld
        out, ptr, _ = _staged(home, x, home.ptr(x), OperandLayout(lay.rows, lay.cols, ld, lay.item, batch=lay.batch),
                              dev, stream)
        return out, ptr
    return x, home.ptr(x)


def _fp32_vector(home: arrays.Home, bias, dev: int):
    """The bias as a contiguous fp32 vector of the home's type on `dev` (converted where it is not one)."""
    if home.name == "torch":
        torch = home.torch
        if type(bias).__module__.startswith("torch"):
            v = bias.detach().reshape(-1).to(device=f"cuda:{dev}", dtype=torch.float32)
        else:
            v = torch.as_tensor(np.asarray(bias.get() if hasattr(bias, "get") else bias, dtype=np.float32),
                                device=f"cuda:{dev}")
        return v.contiguous()
    cp = home.cp
    if type(bias).__module__.startswith("torch"):
        bias = bias.detach().float()
        bias = bias.cpu().numpy() if not bias.is_cuda else cp.asarray(bias)
    with cp.cuda.Device(dev):
        return cp.ascontiguousarray(cp.asarray(bias, dtype=cp.float32).reshape(-1))


def _maps(plan: Plan, pa: int, pb: int, pc: int) -> tuple[bytes, ...]:
    """The plan's tensor maps for these addresses, encoded once per address set."""
    key = (pa, pb, pc)
    hit = plan.map_cache.get(key)
    if hit is not None:
        return hit
    zero = bytes(tma.TENSOR_MAP_BYTES)
    req = plan.request
    ptrs = {"A": pa, "B": pb, "C": pc}
    lds = {"A": plan.a.read_ld, "B": plan.b.read_ld, "C": plan.c.read_ld if plan.c is not None else max(req.n, 1)}
    # A batched build reads 3-D maps: depth the products an operand holds (1 for one every product shares),
    # its matrices the plan's batch stride apart; grouped products read B so (a matrix per group), A and C 2-D.
    batched = bool(plan.params.get("BATCHED"))
    grouped = bool(req.grouped)
    lays = {"A": plan.a, "B": plan.b, "C": plan.c}
    out = []
    for box in plan.maps:
        if box is None or req.m == 0 or req.n == 0 or req.k == 0:
            out.append(zero)  # nothing is read through it (or the kernel takes its other path)
            continue
        ptr, ld = ptrs[box.operand], lds[box.operand]
        item = box.elem_bytes or ITEMSIZE[req.out]
        depth, step = 1, 0
        deep = batched and (not grouped or box.operand == "B")
        if deep:
            lay = lays[box.operand]
            step = lay.read_bstride if lay is not None else req.m * ld  # (C allocated by the call: contiguous)
            depth = req.batch if step else 1
        if box.optional and (ptr % 16 or (ld * item) % 16 or (step * item) % 16):
            out.append(zero)
            continue
        out.append(tma.encode(ptr, item, box.rows, box.cols, ld, box.box_rows, box.box_cols, swizzle=box.swizzle,
                              depth=depth, depth_stride=step, rank=3 if deep else 2))
    hit = tuple(out)
    if len(plan.map_cache) >= _MAPS_PER_PLAN:
        plan.map_cache.clear()
    plan.map_cache[key] = hit
    return hit


def _span(ptr: int, lay: OperandLayout) -> tuple[int, int]:
    if lay.rows == 0 or lay.cols == 0 or lay.batch == 0:
        return (0, 0)
    last = (lay.batch - 1) * lay.bstride if lay.batch > 1 else 0
    return ptr, ptr + (last + (lay.rows - 1) * lay.ld + lay.cols) * lay.item


# ----------------------------------------------------------------------------------------- the launch

def run(plan: Plan, home: arrays.Home, a, b, c, bias, residual, alpha: float, beta: float, stream: int,
        scale_a=None, scale_b=None, groups=None, arrivals=None):
    """C = act(alpha A B + beta C + bias) + R on `stream`, as the plan says; returns C, or the new output.
    A transposed plan computes C^T = B^T A^T: it is given the transposes (views), and a new output comes back
    as C, row-major (the swapped product's C^T transposed once more, a copy of M x N).
    `arrivals`: row blocks of A still arriving (Arrivals); a plan whose kernel cannot wait for them has the stream
    wait for all of them first, before anything reads A."""
    if arrivals is not None and (plan.transposed or not plan.waits):
        for j in range(arrivals.blocks):
            launch.stream_wait_value(stream, arrivals.flags + 4 * j, arrivals.epoch)
        arrivals = None
    if plan.transposed:
        out = _run(plan, home, b.T, a.T, None if c is None else c.T, bias, None if residual is None else residual.T,
                   alpha, beta, stream)
        return home.contiguous(out.T) if c is None else c
    return _run(plan, home, a, b, c, bias, residual, alpha, beta, stream, scale_a, scale_b, groups, arrivals)


@dataclass(frozen=True)
class Arrivals:
    """Row blocks of A that other GPUs write while the launch runs (gemmlab.distributed): block j (`rows` rows
    of A) is present once the 32-bit flag at `flags` + 4 j has reached `epoch`. The kernel waits per tile where
    the plan can (Plan.waits), walking its tile rows from block `first` on where blocks are whole cluster-tile
    rows (else from row 0); elsewhere the stream waits for every block before the launch."""

    flags: int
    rows: int
    epoch: int
    blocks: int
    first: int = 0

    def kernel_args(self, params: dict) -> tuple[int, int, int, int]:
        """(flags, rows per flag, the value to reach as a signed 32-bit integer, the walk's rotation in
        cluster-tile rows) for a plan with these parameters."""
        e = self.epoch & 0xFFFFFFFF
        span = params.get("BM", 128) * params.get("CLUSTER", 1)
        shift = self.first * self.rows // span if self.rows % span == 0 else 0
        return (self.flags, self.rows, e - (1 << 32) if e >= 1 << 31 else e, shift)


def _scale_vector(home: arrays.Home, s, dev: int, block: bool = False):
    """An 8-bit product's scale as the kernel reads it: fp32 on `dev`, contiguous (a tensor or vector) or, for
    block scales, 2-D with any strides (the kernel takes them); the tensor itself where it is one."""
    torch = home.torch
    if s.dtype == torch.float32 and s.device.index == dev and (block or s.is_contiguous()):
        return s
    if block:
        return s.detach().to(device=f"cuda:{dev}", dtype=torch.float32).contiguous()
    return s.detach().reshape(-1).to(device=f"cuda:{dev}", dtype=torch.float32).clone()


DISJOINT_KEPT = 16  # address sets a plan remembers as checked (a tensor-parallel call takes turns over W)


def _run(plan: Plan, home: arrays.Home, a, b, c, bias, residual, alpha: float, beta: float, stream: int,
         scale_a=None, scale_b=None, groups=None, arrivals=None):
    # (a repeat call runs every line below: the common case, operands in place and a new output, takes the
    # fewest; each line costs the host about as much as a small GEMM's microsecond on the GPU)
    req = plan.request
    dev = plan.device
    ptr = home.ptr
    la, lb = plan.a, plan.b
    ka, pa = _operand(home, a, la, dev, stream) if la.copy or la.stage else (a, ptr(a))
    kb, pb = _operand(home, b, lb, dev, stream) if lb.copy or lb.stage else (b, ptr(b))
    if c is None:
        out = target = home.empty(plan.out_shape, req.out, dev)
        pc = ptr(out)
    else:
        out = c
        target = home.contiguous(c) if plan.c.copy else c
        pc = ptr(target)
        if (pa, pb, pc) not in plan.disjoint:  # (the layouts are the plan's: the same addresses, the same answer)
            span = _span(pc, OperandLayout(req.m, req.n, plan.c.read_ld, plan.c.item, batch=plan.c.batch,
                                           bstride=plan.c.read_bstride))
            for p, lay in ((pa, la), (pb, lb)):
                read = OperandLayout(lay.rows, lay.cols, lay.read_ld, lay.item, batch=lay.batch,
                                     bstride=lay.read_bstride)
                if arrays.overlaps(span, _span(p, read)):
                    raise ValueError("C shares memory with A or B; the result would overwrite its own inputs")
            if len(plan.disjoint) >= DISJOINT_KEPT:
                plan.disjoint.clear()
            plan.disjoint.add((pa, pb, pc))
    if plan.empty_product:
        return out
    pbias = pr = 0
    vec = kr = None
    if bias is not None:
        vec = bias if plan.bias_direct else _fp32_vector(home, bias, dev)
        pbias = ptr(vec)
    if residual is not None:
        kr = home.contiguous(residual) if plan.r.copy else residual
        pr = ptr(kr)
    pf, pi, keep_ws = _scratch_for(plan, home, stream) if plan.scratch else (0, 0, None)
    ks = strides = None
    if scale_a is not None or scale_b is not None:
        ks = [None if x is None else _scale_vector(home, x, dev, kind == "block")
              for x, kind in ((scale_a, req.scale_a), (scale_b, req.scale_b))]
        # block scales' strides (elements): A's M x ceil(K / 128) per row and per k block, B's ceil(K / 128) x
        # ceil(N / 128) per k block and per column block
        strides = [*(ks[0].stride() if req.scale_a == "block" else (0, 0)),
                   *(ks[1].stride() if req.scale_b == "block" else (0, 0))]
        if req.grouped and ks[1] is not None:  # B's scale of group g at g x (1: one per group; N: one per column)
            strides[2] = req.n if req.scale_b == "col" else 1 if ks[1].numel() > 1 else 0
    maps = _maps(plan, pa, pb, pc) if plan.maps else ()

    s = plan.slots
    pack = plan.pack
    slots = pack.slots
    drv = driver()
    with plan.lock:
        slots[3].value, slots[8].value = alpha, beta
        slots[4].value, slots[6].value, slots[9].value = pa, pb, pc
        if plan.optional_slots:
            if "bias" in s:
                slots[s["bias"]].value, slots[s["r"]].value = pbias, pr
            if "ws_floats" in s:
                slots[s["ws_floats"]].value, slots[s["ws_ints"]].value = pf, pi
            if "groups" in s:
                slots[s["groups"]].value = ptr(groups) if groups is not None else 0
            if "arrive" in s:  # (flags pointer, rows per flag, the value to reach, the walk's rotation); 0: none
                first = s["arrive"]
                if arrivals is None:
                    slots[first].value = 0
                else:
                    for i, v in enumerate(arrivals.kernel_args(plan.params)):
                        slots[first + i].value = v
            if "scale_a" in s:
                slots[s["scale_a"]].value = ptr(ks[0]) if ks and ks[0] is not None else 0
                slots[s["scale_b"]].value = ptr(ks[1]) if ks and ks[1] is not None else 0
                for i, v in enumerate(strides or (0, 0, 0, 0)):
                    slots[s["scale_strides"] + i].value = v
        if maps and maps is not plan.loaded_maps:
            first = s["maps"]
            for i, raw in enumerate(maps):
                pack.set_bytes(first + i, raw)
            plan.loaded_maps = maps
        g, bl = plan.grid, plan.block
        drv.launch(plan.function, g[0], g[1], g[2], bl[0], bl[1], bl[2], plan.smem, stream, pack.address, 0)
        if plan.second is not None:  # (M, N, SPLIT_K, alpha, beta, C, ldc, workspace, the epilogue arguments)
            after, two = plan.second, plan.second_pack.slots
            two[3].value, two[4].value, two[5].value = alpha, beta, pc
            two[7].value, two[8].value, two[9].value = pf, pbias, pr
            if plan.second_launch is not None:
                plan.second_launch(stream, plan.second_pack.address)
            else:
                drv.launch(plan.second_function, *after.grid, *after.block, after.smem, stream,
                           plan.second_pack.address, 0)
    if target is not out:
        home.copy_into(c, target)  # C's layout was not row-major: the result goes back into it
    del ka, kb, vec, kr, keep_ws, ks  # (alive until the launches are queued; the allocators order their reuse)
    return out
