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

The transfers are torch.distributed point-to-point operations (`batch_isend_irecv`): on NCCL they run on
NCCL's stream, ordered after what the current stream had queued when they were posted, and `wait()` makes the
current stream wait for them, not the host; on gloo (CPU tensors) `wait()` blocks. Sums travel in the output
dtype, as a reduce-scatter of that dtype adds them. Keep NCCL_NVLS_ENABLE=0 in every process (NVLink multicast
stays off); these functions start no process and use no multicast.
"""

from __future__ import annotations

from ..api.call import matmul as _matmul
from ..formats import dtype_label, number_format
from .schedule import all_gather_plan, pieces, reduce_scatter_plan, row_blocks


def _torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:  # pragma: no cover - the functions take torch tensors
        raise ImportError("gemmlab.distributed needs torch (torch.distributed)") from exc
    return torch, dist


def _ring(group, dist):
    """(rank, world, global rank of rank - 1, of rank + 1) in `group`."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("gemmlab.distributed: torch.distributed is not initialised (call "
                           "torch.distributed.init_process_group first, e.g. under torchrun)")
    rank, world = dist.get_rank(group), dist.get_world_size(group)

    def glob(r):
        return dist.get_global_rank(group, r) if group is not None else r

    return rank, world, glob((rank - 1) % world), glob((rank + 1) % world)


def _exchange(dist, send, dst, recv, src, group):
    """Post one ring step: `send` to `dst`, `recv` from `src`; the requests to wait on."""
    ops = [dist.P2POp(dist.isend, send, dst, group), dist.P2POp(dist.irecv, recv, src, group)]
    return dist.batch_isend_irecv(ops)


def all_gather_matmul(a_shard, b, group=None, *, bias=None, activation=None, out_dtype=None, return_gathered=False,
                      chunks: int = 1, **params):
    """C = all_gather(a_shard) @ B (+ bias, activation), M x N on every rank, each shard multiplied as it
    arrives. With `return_gathered`, also the gathered A (M x K). `chunks`: each shard travels and is
    multiplied in that many row pieces (schedule.pieces), a finer pipeline: the ring then loses one piece of
    the shorter side instead of one shard (distributed.model.predict). Other keywords go to gemmlab.matmul."""
    torch, dist = _torch()
    rows, k, n = _operands("all_gather_matmul", ("A's shard", a_shard), ("B", b), params)
    rank, world, prev, nxt = _ring(group, dist)
    cuts = _pieces(rows, chunks)
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


def matmul_reduce_scatter(a, b_shard, group=None, *, bias=None, activation=None, out_dtype=None, chunks: int = 1,
                          **params):
    """Rank r's row block (M / W x N) of sum over ranks of A_r @ B_r, then bias and activation on that sum; A_r
    is this rank's M x K / W slice of A, B_r its K / W x N slice of B. `chunks`: each row block's partial sum
    is made and passed on in that many row pieces (a finer pipeline, as for all_gather_matmul). Other
    keywords go to gemmlab.matmul."""
    torch, dist = _torch()
    m, k, n = _operands("matmul_reduce_scatter", ("A", a), ("B's slice", b_shard), params)
    rank, world, prev, nxt = _ring(group, dist)
    blocks = row_blocks(m, world)
    rows = blocks[0][1]
    cuts = _pieces(rows, chunks)
    dtype = _out_dtype(torch, a, out_dtype)
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


def _pieces(rows: int, chunks) -> list[tuple[int, int]]:
    """The row pieces of a block (schedule.pieces); ValueError naming `chunks` where it is not a count."""
    if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 1:
        raise ValueError(f"chunks must be a positive integer (row pieces per shard), got {chunks!r}")
    return pieces(rows, chunks) or [(0, 0)]


_TAKEN = ("residual", "beta", "alpha", "c", "scale_a", "scale_b", "stream")


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


def _out_dtype(torch, a, out_dtype):
    """The output's torch dtype: out_dtype, else the format's (the inputs', or bfloat16 for 8-bit ones)."""
    if out_dtype is not None:
        return getattr(torch, dtype_label(out_dtype))
    try:
        return getattr(torch, number_format(dtype_label(a.dtype)).out_dtype)
    except ValueError:  # a dtype only the CPU baselines take (float64): the result keeps it
        return a.dtype
