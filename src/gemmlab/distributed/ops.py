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
from .schedule import all_gather_order, reduce_scatter_order, row_blocks


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
                      **params):
    """C = all_gather(a_shard) @ B (+ bias, activation), M x N on every rank, each shard multiplied as it
    arrives. With `return_gathered`, also the gathered A (M x K). Other keywords go to gemmlab.matmul."""
    torch, dist = _torch()
    rows, k, n = _operands("all_gather_matmul", ("A's shard", a_shard), ("B", b), params)
    rank, world, prev, nxt = _ring(group, dist)
    gathered = torch.empty((world, rows, k), dtype=a_shard.dtype, device=a_shard.device)
    gathered[rank].copy_(a_shard)
    out = torch.empty((world * rows, n), dtype=_out_dtype(torch, a_shard, out_dtype), device=a_shard.device)
    order = all_gather_order(rank, world)
    for s, block in enumerate(order):
        reqs = _exchange(dist, gathered[block], nxt, gathered[order[s + 1]], prev, group) if s + 1 < world else []
        _matmul(gathered[block], b, out[block * rows:(block + 1) * rows], bias=bias, activation=activation,
                out_dtype=out_dtype, **params)
        for r in reqs:
            r.wait()
    return (out, gathered.reshape(world * rows, k)) if return_gathered else out


def matmul_reduce_scatter(a, b_shard, group=None, *, bias=None, activation=None, out_dtype=None, **params):
    """Rank r's row block (M / W x N) of sum over ranks of A_r @ B_r, then bias and activation on that sum; A_r
    is this rank's M x K / W slice of A, B_r its K / W x N slice of B. Other keywords go to gemmlab.matmul."""
    torch, dist = _torch()
    m, k, n = _operands("matmul_reduce_scatter", ("A", a), ("B's slice", b_shard), params)
    rank, world, prev, nxt = _ring(group, dist)
    blocks = row_blocks(m, world)
    rows = blocks[0][1]
    dtype = _out_dtype(torch, a, out_dtype)
    work = [torch.empty((rows, n), dtype=dtype, device=a.device) for _ in range(2)]
    out = torch.empty((rows, n), dtype=dtype, device=a.device)
    reqs = []
    for s, step in enumerate(reduce_scatter_order(rank, world)):
        first, count = blocks[step.rows]
        target = work[s % 2] if step.send else out
        for r in reqs:      # the sum so far has arrived in `target` (and the last send has left)
            r.wait()
        epi = dict(bias=bias, activation=activation) if not step.send else {}
        _matmul(a[first:first + count], b_shard, target, beta=1.0 if step.receive else 0.0, **epi, **params)
        if step.send:       # on to rank + 1; the next step's sum comes from rank - 1
            nxt_target = work[(s + 1) % 2] if s + 2 < world else out
            reqs = _exchange(dist, target, nxt, nxt_target, prev, group)
    return out


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
