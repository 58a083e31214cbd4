"""Tensor-parallel products on torch.distributed, the communication of each ring step under the GEMM of the step
before (schedule.py gives the order).

all_gather_matmul: every rank holds M / W rows of A (`a_shard`) and its own B (K x N, e.g. the rank's column
slice of a weight, as W.t()); the result is all of A times B, M x N, on every rank. Each step posts the ring's
next transfer (send the block this rank holds to rank + 1, receive the next from rank - 1) and then multiplies
the block it holds into its rows of C, so the transfer runs under the product.

matmul_reduce_scatter: every rank holds A's K-slice (M x K / W) and B's (K / W x N); the result is rank r's
row block of the sum over ranks, M / W x N. Each step multiplies one row block of A by B and adds the sum so
far received from rank - 1 in the same launch (beta = 1: C is that sum), then sends it to rank + 1; the last
step is the rank's own rows, with the fused epilogue (bias, activation) on the full sum.

On NCCL groups of CUDA tensors all_gather_matmul runs otherwise by default (transport "copy", exchange.py): the
copy engines push every shard into every rank's symmetric buffer (whole, or in `pieces`), each followed by a
flag, and one GEMM over all of A waits inside its launch for each flag before it reads the rows behind it,
walking the blocks in the order they arrive. The ring below cut the GEMM into W products of 1 / W each, too
small to fill the GPU at W = 4, while NCCL's kernels took SMs from them (docs/journal.md, "the first run on
NCCL").

Where the copy engines' overlap saves less than its per-peer steps cost (the host's queueing of them, pushes
landing one after another; small products, many GPUs: model.choose), "auto" runs the sequential form instead
(transport "sequential"): NCCL's collective, then one GEMM (the all-gather's with the fused epilogue; the
reduce-scatter's epilogue on the scattered sum).

The ring's transfers are torch.distributed point-to-point operations (`batch_isend_irecv`): on NCCL they run on
NCCL's stream, ordered after what the current stream had queued when they were posted, and `wait()` makes the
current stream wait for them, not the host; on gloo (CPU tensors) `wait()` blocks. Sums travel in the output
dtype, as a reduce-scatter of that dtype adds them. Keep NCCL_NVLS_ENABLE=0 in every process (NVLink multicast
stays off); these functions start no process and use no multicast.
"""

from __future__ import annotations

import functools

from ..api.call import matmul as _matmul
from ..api.call import matmul_after as _matmul_after
from ..api.launch import Arrivals
from ..formats import check_activation, dtype_label, number_format
from ..runtime import launch as _driver
from . import exchange, model
from .schedule import all_gather_plan, pieces, reduce_scatter_plan, row_blocks

TRANSPORTS = ("auto", "copy", "ring", "sequential")


_modules: list = []  # (torch, torch.distributed), imported by the first call


def _torch():
    if _modules:
        return _modules[0]
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:  # pragma: no cover - the functions take torch tensors
        raise ImportError("gemmlab.distributed needs torch (torch.distributed)") from exc
    _modules.append((torch, dist))
    return torch, dist


# id(group) -> (group, its ring, whether its backend is NCCL): asked once per group (each query costs host time)
_groups: dict[int, tuple] = {}


def _group_facts(group, dist) -> tuple:
    """(group, its ring, whether it runs on NCCL), asked of torch.distributed once per group."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("gemmlab.distributed: torch.distributed is not initialised (call "
                           "torch.distributed.init_process_group first, e.g. under torchrun)")
    pg = group if group is not None else dist.group.WORLD  # (a new default group after a re-initialisation)
    hit = _groups.get(id(pg))
    if hit is not None and hit[0] is pg:
        return hit
    rank, world = dist.get_rank(group), dist.get_world_size(group)

    def glob(r):
        return dist.get_global_rank(group, r) if group is not None else r

    ring = (rank, world, glob((rank - 1) % world), glob((rank + 1) % world))
    hit = _groups[id(pg)] = (pg, ring, str(dist.get_backend(group)).lower() == "nccl")
    return hit


def _ring(group, dist):
    """(rank, world, global rank of rank - 1, of rank + 1) in `group`."""
    return _group_facts(group, dist)[1]


def _on_nccl(dist, group) -> bool:
    """Whether `group` runs on NCCL (its collectives into one tensor)."""
    return _group_facts(group, dist)[2]


def _exchange(dist, send, dst, recv, src, group):
    """Post one ring step: `send` to `dst`, `recv` from `src`; the requests to wait on."""
    ops = [dist.P2POp(dist.isend, send, dst, group), dist.P2POp(dist.irecv, recv, src, group)]
    return dist.batch_isend_irecv(ops)


def all_gather_matmul(a_shard, b, group=None, *, bias=None, activation=None, out_dtype=None, return_gathered=False,
                      chunks: int = 1, transport: str = "auto", pieces: int = 1, **params):
    """C = all_gather(a_shard) @ B (+ bias, activation), M x N on every rank, each shard multiplied as it
    arrives. With `return_gathered`, also the gathered A (M x K). `transport`: "copy" (the copy engines and one
    GEMM that waits for each block, exchange.py; NCCL groups of CUDA tensors), "ring" (NCCL or gloo
    point-to-point, a GEMM per ring step), "sequential" (the collective, then one GEMM), or "auto": "copy" where
    it runs, `chunks` is 1 and the overlap pays for its per-peer steps (model.choose), "sequential" where it runs and
    does not pay, else "ring".
    `chunks` (the ring): each shard travels and is multiplied in that many row pieces (schedule.pieces), a
    finer pipeline: the ring then loses one piece of the shorter side instead of one shard
    (distributed.model.predict). `pieces` (the copy engines): each shard is pushed in that many row pieces, a
    flag each, so that the GEMM starts on a block's first rows while the rest travels; it must divide the
    shard's rows. The default, 1, pushes whole shards: on 4 H200s more pieces cost the host more driver calls
    than the finer pipeline saved (docs/journal.md, 2026-11-28). Other keywords go to gemmlab.matmul."""
    torch, dist = _torch()
    rows, k, n = _operands("all_gather_matmul", ("A's shard", a_shard), ("B", b), params)
    if not isinstance(pieces, int) or isinstance(pieces, bool) or pieces < 1 or (rows and rows % pieces):
        raise ValueError(f"pieces must be a positive integer that divides the shard's {rows} rows, got {pieces!r}")
    rank, world, prev, nxt = _ring(group, dist)
    cuts = _pieces(rows, chunks)
    way = _transport(torch, dist, a_shard, group, transport, chunks, "all_gather", world * rows, n * world, k,
                     world)
    if way == "sequential" or world == 1:
        return _gather_then_multiply(torch, dist, group, world, a_shard, b, rows, k, n, bias, activation, out_dtype,
                                     return_gathered, params)
    if way == "copy" and rows > 0 and k > 0:
        return _gather_by_copy(torch, dist, group, rank, world, a_shard, b, rows, k, n, bias, activation, out_dtype,
                               return_gathered, params, pieces)
    gathered = torch.empty((world, rows, k), dtype=a_shard.dtype, device=a_shard.device)
    gathered[rank].copy_(a_shard)
    out = torch.empty((world * rows, n), dtype=_out_dtype(torch, a_shard, out_dtype), device=a_shard.device)
    waiting: dict[int, list] = {}  # piece -> the requests that bring it for the current step's shard
    for op in all_gather_plan(rank, world, len(cuts)):
        first, count = cuts[op.piece]
        for r in waiting.pop(op.piece, []) if op.wait else []:  # the piece has arrived (its last send has left)
            r.wait()
        if op.recv is not None:  # pass the piece on; the next shard's piece comes from rank - 1
            waiting[op.piece] = _exchange(dist, gathered[op.block, first:first + count], nxt,
                                          gathered[op.recv, first:first + count], prev, group)
        _matmul(gathered[op.block, first:first + count], b,
                out[op.block * rows + first:op.block * rows + first + count],
                bias=bias, activation=activation, out_dtype=out_dtype, **params)
    for reqs in waiting.values():
        for r in reqs:
            r.wait()
    return (out, gathered.reshape(world * rows, k)) if return_gathered else out


def _gather_then_multiply(torch, dist, group, world, a_shard, b, rows, k, n, bias, activation, out_dtype,
                          return_gathered, params):
    """all_gather_matmul without overlap: the collective into one M x K tensor, then one GEMM over it with the
    fused epilogue."""
    kept = None
    if world > 1 and a_shard.is_cuda and not return_gathered:  # (kept: the same addresses, plan and maps each call)
        kept = _Kept(torch, group, "gathered", (world * rows, k), a_shard.dtype, a_shard.device)
        gathered = kept.tensor
    else:
        gathered = torch.empty((world * rows, k), dtype=a_shard.dtype, device=a_shard.device)
    if world == 1:
        gathered.copy_(a_shard)
    elif _on_nccl(dist, group):
        dist.all_gather_into_tensor(gathered, a_shard.contiguous(), group=group)
    else:  # (gloo has no gather into one tensor: into its row views)
        dist.all_gather(list(gathered.chunk(world)), a_shard.contiguous(), group=group)
    out = torch.empty((world * rows, n), dtype=_out_dtype(torch, a_shard, out_dtype), device=a_shard.device)
    if out.numel():
        _matmul(gathered, b, out, bias=bias, activation=activation, out_dtype=out_dtype, **params)
    if kept is not None:
        kept.done(torch)
    return (out, gathered) if return_gathered else out


_kept_buffers: dict[tuple, list] = {}


class _Kept:
    """A buffer the sequential form keeps per group, use, shape, dtype and device (freed by forget_exchanges): a
    new one each call would give the GEMM new addresses, and with them new tensor maps to encode. Its last use
    is marked by an event on the stream that used it, which the next call's stream waits for (so a call on
    another stream never writes it while the last one still reads it)."""

    def __init__(self, torch, group, what: str, shape: tuple[int, int], dtype, device):
        pg = group if group is not None else _torch()[1].group.WORLD
        key = (id(pg), what, shape, dtype, device)
        hit = _kept_buffers.get(key)
        if hit is None or hit[0] is not pg:  # [group, buffer, event of the last use, the stream it was on (raw)]
            hit = _kept_buffers[key] = [pg, torch.empty(shape, dtype=dtype, device=device), None, 0]
        self.slot, self.tensor = hit, hit[1]
        self.raw = torch._C._cuda_getCurrentRawStream(device.index)
        if hit[2] is not None and hit[3] != self.raw:  # (on the same stream the order is the stream's)
            _stream_object(torch, self.raw, device).wait_event(hit[2])

    def done(self, torch) -> None:
        """Mark the last use (after the collective: the caller's stream has waited for it)."""
        if self.slot[2] is None:
            self.slot[2] = torch.cuda.Event()
        self.slot[2].record(_stream_object(torch, self.raw, self.tensor.device))
        self.slot[3] = self.raw


_stream_objects: dict[int, object] = {}  # raw handle -> torch's stream object (creating one costs host time)


def _stream_object(torch, raw: int, device):
    """The current torch stream object of handle `raw` on `device`, made once per handle."""
    s = _stream_objects.get(raw)
    if s is None or s.device != device:
        s = _stream_objects[raw] = torch.cuda.current_stream(device)
    return s


def _gather_by_copy(torch, dist, group, rank, world, a_shard, b, rows, k, n, bias, activation, out_dtype,
                    return_gathered, params, pieces=1):
    """all_gather_matmul through the push exchange (exchange.py's steps). The GEMM is queued first, so that it
    starts on the rank's own block while the host is still queueing the pushes; the pushes wait only for the
    shard (an event recorded before the GEMM), never for the GEMM, which waits for the other ranks' pushes."""
    a_shard = a_shard.contiguous()  # (a strided shard would be copied by a kernel: no SM may be needed)
    ex = exchange.exchange_for(torch, dist, group, rank, world, rows, k, a_shard.dtype, a_shard.device,
                               pieces=pieces)
    ex.epoch += 1
    e = ex.epoch
    here = torch.cuda.current_stream(a_shard.device)
    stream = here.cuda_stream
    ex.ready.record(here)  # the shard is written
    ex.own.copy_(a_shard)
    for q in range(pieces):
        _driver.stream_write_value(stream, ex.arrived(rank, rank, q), e)
    out = torch.empty((world * rows, n), dtype=_out_dtype(torch, a_shard, out_dtype), device=a_shard.device)
    _matmul_after(ex.rows_view, b, out, bias=bias, activation=activation, out_dtype=out_dtype,
                  arrivals=Arrivals(ex.arrived(rank, 0), rows // pieces, e, world * pieces, first=rank * pieces),
                  **params)
    gathered = ex.rows_view.clone() if return_gathered else None
    for p in ex.others:  # this rank has read its gathered rows of call e to the end
        _driver.stream_write_value(stream, ex.done(p, rank), e)
    ex.stream.wait_event(ex.ready)
    a_shard.record_stream(ex.stream)  # (its memory is not reused before the pushes have read it)
    side, src, step = ex.stream.cuda_stream, a_shard.data_ptr(), ex.piece_bytes
    for p in ex.push_order:  # rank - 1, rank - 2, ...: each rank receives rank + 1's block first
        _driver.stream_wait_value(side, ex.done(rank, p), e - 1)  # p is done with call e - 1
        dst = ex.peer_slot_ptr[p]
        for q in range(pieces):  # piece by piece, each flagged as it lands: the GEMM starts on the first
            _driver.stream_copy(side, dst + q * step, src + q * step, step)
            _driver.stream_write_value(side, ex.arrived(p, rank, q), e)
    here.wait_stream(ex.stream)
    return (out, gathered) if return_gathered else out


def matmul_reduce_scatter(a, b_shard, group=None, *, bias=None, activation=None, out_dtype=None, chunks: int = 1,
                          transport: str = "auto", **params):
    """Rank r's row block (M / W x N) of sum over ranks of A_r @ B_r, then bias and activation on that sum; A_r
    is this rank's M x K / W slice of A, B_r its K / W x N slice of B; `bias` has one element per column (N).
    `transport`: "ring" (NCCL or gloo point-to-point, each step adding the sum received to its own product),
    "copy" (the copy engines push each rank's partial of every other rank's rows as it is made, the sum and the
    epilogue after the last has landed; NCCL groups of CUDA tensors; exchange.py), "sequential" (one GEMM, then
    the collective, then the epilogue on the sum), or "auto" (the default: "copy" where it runs, `chunks` is 1
    and the overlap pays for its per-peer steps (model.choose), "sequential" where it runs and does not pay, else
    the ring). `chunks` (the ring): each row block's partial sum is made
    and passed on in that many row pieces (a finer pipeline, as for all_gather_matmul). Other keywords go to
    gemmlab.matmul."""
    torch, dist = _torch()
    m, k, n = _operands("matmul_reduce_scatter", ("A", a), ("B's slice", b_shard), params)
    _check_sum_epilogue(torch, a, n, bias, activation)
    rank, world, prev, nxt = _ring(group, dist)
    blocks = row_blocks(m, world)
    rows = blocks[0][1]
    cuts = _pieces(rows, chunks)
    dtype = _out_dtype(torch, a, out_dtype)
    way = _transport(torch, dist, a, group, transport, chunks, "reduce_scatter", m, n, k * world, world)
    if way == "sequential" or world == 1:
        return _multiply_then_reduce_scatter(torch, dist, group, rank, world, a, b_shard, rows, n, dtype, bias,
                                             activation, out_dtype, params)
    if way == "copy" and rows > 0 and n > 0:
        return _reduce_scatter_by_copy(torch, dist, group, rank, world, a, b_shard, blocks, n, dtype, bias,
                                       activation, out_dtype, params)
    work = [torch.empty((rows, n), dtype=dtype, device=a.device) for _ in range(2)]
    out = torch.empty((rows, n), dtype=dtype, device=a.device)
    buffers = {0: work[0], 1: work[1], -1: out}
    waiting: dict[int, list] = {}  # piece -> the requests of its last exchange (its sum arriving in the target)
    for op in reduce_scatter_plan(rank, world, len(cuts)):
        first, _ = blocks[op.rows]
        p0, count = cuts[op.piece]
        target = buffers[op.target]
        for r in waiting.pop(op.piece, []) if op.wait else []:  # the piece's sum so far is in `target`
            r.wait()
        epi = dict(bias=bias, activation=activation) if not op.send else {}
        _matmul(a[first + p0:first + p0 + count], b_shard, target[p0:p0 + count],
                beta=1.0 if op.accumulate else 0.0, **epi, **params)
        if op.send:  # on to rank + 1; the next step's sum for this piece comes from rank - 1
            waiting[op.piece] = _exchange(dist, target[p0:p0 + count], nxt, buffers[op.next_target][p0:p0 + count],
                                          prev, group)
    return out


def _multiply_then_reduce_scatter(torch, dist, group, rank, world, a, b_shard, rows, n, dtype, bias, activation,
                                  out_dtype, params):
    """matmul_reduce_scatter without overlap: the partial product of all rows, the collective's sum of this rank's
    rows (in the output type, as NCCL sums), then bias and activation on it."""
    kept = None
    if world > 1 and a.is_cuda:  # (kept: the same addresses, plan and maps each call)
        kept = _Kept(torch, group, "partial", (world * rows, n), dtype, a.device)
        partial = kept.tensor
    else:
        partial = torch.empty((world * rows, n), dtype=dtype, device=a.device)
    if world == 1:  # (nothing to sum: the epilogue fused)
        if partial.numel():
            _matmul(a, b_shard, partial, bias=bias, activation=activation, out_dtype=out_dtype, **params)
        return partial
    if partial.numel():
        _matmul(a, b_shard, partial, out_dtype=out_dtype, **params)
    if _on_nccl(dist, group):
        out = torch.empty((rows, n), dtype=dtype, device=a.device)
        dist.reduce_scatter_tensor(out, partial, group=group)
    else:  # (gloo has no reduce-scatter: the sum of all rows, then this rank's)
        dist.all_reduce(partial, group=group)
        out = partial[rank * rows:(rank + 1) * rows].clone()
    if kept is not None:
        kept.done(torch)
    return epilogue_in_place(torch, out, bias, activation)


def _reduce_scatter_by_copy(torch, dist, group, rank, world, a, b_shard, blocks, n, dtype, bias, activation, out_dtype,
                            params):
    """matmul_reduce_scatter through the push exchange (exchange.py, "GEMM + reduce-scatter"): the partials of
    the other ranks' rows first, each pushed as soon as it is made, then the own rows' partial into the own slot
    while the last pushes travel; once every peer's partial has landed, the slots' sum (fp32 inside, rounded once
    to the output type, as NCCL's sum) and the epilogue on it."""
    rows = blocks[0][1]
    ex = exchange.exchange_for(torch, dist, group, rank, world, rows, n, dtype, a.device, kind="reduce_scatter")
    ex.epoch += 1
    e = ex.epoch
    here = torch.cuda.current_stream(a.device)
    stream, side = here.cuda_stream, ex.stream.cuda_stream
    for j in ex.send_order:  # rank + 1 first: rank j's partials arrive from j - 1 first, from j + 1 last
        first = blocks[j][0]
        _matmul(a[first:first + rows], b_shard, ex.staging[j], out_dtype=out_dtype, **params)
        ex.made[j].record(here)
        ex.stream.wait_event(ex.made[j])
        _driver.stream_wait_value(side, ex.done(rank, j), e - 1)  # j is done with call e - 1
        _driver.stream_copy(side, ex.peer_slot_ptr[j], ex.staging_ptr[j], ex.block_bytes)
        _driver.stream_write_value(side, ex.arrived(j, rank), e)
    first = blocks[rank][0]  # the own rows' partial, under the pushes still on their way
    _matmul(a[first:first + rows], b_shard, ex.own, out_dtype=out_dtype, **params)
    for p in ex.others:  # every other rank's partial of this rank's rows has landed
        _driver.stream_wait_value(stream, ex.arrived(rank, p), e)
    # (a new tensor: the buffer is the next call's.) Two slots in one elementwise add, which reads each once at
    # the copy bandwidth; torch's sum over the slots' axis ran at 1.4 TB/s there. Both add in fp32 and round once.
    out = torch.add(ex.buffer[0], ex.buffer[1]) if world == 2 else torch.sum(ex.buffer, dim=0)
    for p in ex.others:  # this rank has read its buffer of call e to the end
        _driver.stream_write_value(stream, ex.done(p, rank), e)
    here.wait_stream(ex.stream)  # (the staging slots are not rewritten before they have left)
    return epilogue_in_place(torch, out, bias, activation)


def _transport(torch, dist, tensor, group, transport: str, chunks, kind: str, m: int, n: int, k: int,
               world: int) -> str:
    """The way a product runs: "copy" (the copy engines, exchange.py; refused by name where it cannot run),
    "sequential", or "ring"; "auto" takes "copy" where it runs, `chunks` is 1 and model.choose says the overlap
    pays for its per-peer steps, "sequential" where the copy engines could run but it does not pay, else "ring".
    ValueError for another transport."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
    if transport in ("ring", "sequential"):
        return transport
    why = exchange.available(torch, dist, tensor, group)
    if transport == "copy":
        if why:
            raise ValueError(f"transport='copy' cannot run here: {why}")
        return "copy"
    if why is not None or chunks != 1:
        return "ring"
    label = dtype_label(tensor.dtype)
    if label not in model.REFERENCE_RATE:  # (no rate to judge by: the overlap)
        return "copy"
    return _choice(kind, m, n, k, world, label)


def transport_taken(kind: str, tensor, m: int, n: int, k: int, group=None, *, transport: str = "auto",
                    chunks: int = 1) -> str:
    """The form ("copy", "sequential" or "ring") a product of full shape M x N x K over `group` takes with these
    arguments, `tensor` being the rank's A (its shard or K-slice): what the harness reports beside its times."""
    torch, dist = _torch()
    if kind not in model.KINDS:
        raise ValueError(f"kind must be one of {model.KINDS}, got {kind!r}")
    world = _ring(group, dist)[1]
    way = _transport(torch, dist, tensor, group, transport, chunks, kind, m, n, k, world)
    return "sequential" if world == 1 else way  # (one rank: nothing to overlap)


@functools.lru_cache(maxsize=256)
def _choice(kind: str, m: int, n: int, k: int, world: int, dtype: str) -> str:
    """model.choose's form for a product (asked once per shape)."""
    return model.choose(kind, m, n, k, world, dtype)[0]


def _check_sum_epilogue(torch, a, n, bias, activation) -> None:
    """The reduce-scatter's epilogue applies to the sum, one bias per column: a bias of N elements on A's device
    (a per-row bias has no meaning across the ranks' row blocks), a known activation; raises naming the fault."""
    check_activation(activation)
    if bias is None:
        return
    if not isinstance(bias, torch.Tensor) or tuple(bias.shape) not in ((n,), (1, n)):
        raise ValueError(f"bias of matmul_reduce_scatter must be a tensor of N = {n} elements (one per column), got "
                         f"{tuple(getattr(bias, 'shape', ())) or type(bias).__name__}")
    if bias.device != a.device:
        raise ValueError(f"bias is on {bias.device}, A on {a.device}: put both on the same device")
    if not bias.is_floating_point():
        raise TypeError(f"bias must be a float tensor, got {bias.dtype}")


def torch_activation(torch, activation):
    """The epilogue's activation as a torch function of one tensor (None for none)."""
    name = check_activation(activation)
    if name is None:
        return None
    f = torch.nn.functional
    return {"relu": torch.relu, "silu": f.silu, "gelu_tanh": lambda v: f.gelu(v, approximate="tanh"),
            "gelu_erf": f.gelu}[name]


def epilogue_in_place(torch, out, bias, activation):
    """act(out + bias) by torch, in out's type, for a product whose sum is only known after its launches (the
    reduce-scatter's): the bias added in place, the activation computed in fp32 inside torch's kernels."""
    if bias is not None:
        out.add_(bias)
    act = torch_activation(torch, activation)
    return out if act is None else act(out)


def forget_exchanges() -> None:
    """Free the buffers kept for reuse: the copy engines' (one per group, kind and block shape: exchange.forget)
    and the sequential form's. Call it on every rank at the same point of the program."""
    torch, dist = _torch()
    exchange.forget(torch, dist)
    _kept_buffers.clear()
    _stream_objects.clear()
    _groups.clear()


def _pieces(rows: int, chunks) -> list[tuple[int, int]]:
    """The row pieces of a block (schedule.pieces); ValueError naming `chunks` where it is not a count."""
    if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 1:
        raise ValueError(f"chunks must be a positive integer (row pieces per shard), got {chunks!r}")
    return pieces(rows, chunks) or [(0, 0)]


_TAKEN = ("residual", "beta", "alpha", "c", "scale_a", "scale_b", "stream", "arrivals")


def _operands(fn: str, a, b, params: dict) -> tuple[int, int, int]:
    """(rows of A, K, N) of a product's local operands, each given as (what it is, tensor); raises naming the
    one at fault, or the keywords the products do not take."""
    bad = sorted(set(params) & set(_TAKEN))
    if bad:
        raise ValueError(f"{', '.join(bad)}: not taken by the tensor-parallel products (bias and activation are; "
                         "other keywords are a rung's parameters)")
    (na, ta), (nb, tb) = a, b
    if ta.dim() != 2 or tb.dim() != 2:
        raise ValueError(f"{fn} takes 2-D operands, got {na} {tuple(ta.shape)} and {nb} {tuple(tb.shape)}")
    if tb.shape[0] != ta.shape[1]:
        raise ValueError(f"inner dimensions differ: {na} is {ta.shape[0]} x {ta.shape[1]}, {nb} is "
                         f"{tb.shape[0]} x {tb.shape[1]}")
    return ta.shape[0], ta.shape[1], tb.shape[1]


_out_dtypes: dict[tuple, object] = {}


def _out_dtype(torch, a, out_dtype):
    """The output's torch dtype: out_dtype, else the format's (the inputs', or bfloat16 for 8-bit ones); worked
    out once per pair."""
    key = (a.dtype, out_dtype)
    try:
        hit = _out_dtypes.get(key)
    except TypeError:  # (an unhashable out_dtype: the lookup's own error names it)
        return _find_out_dtype(torch, a, out_dtype)
    if hit is None:
        hit = _out_dtypes[key] = _find_out_dtype(torch, a, out_dtype)
    return hit


def _find_out_dtype(torch, a, out_dtype):
    if out_dtype is not None:
        return getattr(torch, dtype_label(out_dtype))
    try:
        return getattr(torch, number_format(dtype_label(a.dtype)).out_dtype)
    except ValueError:  # a dtype only the CPU baselines take (float64): the result keeps it
        return a.dtype
