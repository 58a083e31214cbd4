"""The order of work in a ring: which shard a rank multiplies at each step of an all-gather + GEMM, and which
rows of the output it computes, adds to and passes on at each step of a GEMM + reduce-scatter. Pure functions
of (rank, world size, rows), no torch: what the overlapped products follow and what the tests check by hand.

All-gather + GEMM (column-parallel: every rank holds M / W rows of A and its own B, and needs all of A).
In a ring each rank sends to rank + 1 and receives from rank - 1; at step s rank r holds shard r - s (mod W),
so it multiplies its own shard first, with nothing to wait for, then each shard as it arrives:

    rank 0 of 4:  shards 0, 3, 2, 1        rank 2 of 4:  shards 2, 1, 0, 3

GEMM + reduce-scatter (row-parallel: every rank holds a K-slice of A and of B and so a partial sum of all of
C; rank r ends with rows r of the sum). The sum for rows c starts at rank c + 1, which computes its partial
and sends it on; each rank on the way adds its own partial; after W - 1 hops it reaches rank c, which adds
its partial last. At step s rank r works on rows r - 1 - s (mod W), receiving (for s > 0) the sum so far
from rank r - 1 and (for s < W - 1) sending its sum to rank r + 1:

    rank 0 of 4:  rows 3, 2, 1, 0          rank 1 of 4:  rows 0, 3, 2, 1
"""

from __future__ import annotations

from dataclasses import dataclass


def _check(rank: int, world: int) -> None:
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"world size must be a positive integer, got {world!r}")
    if not isinstance(rank, int) or not 0 <= rank < world:
        raise ValueError(f"rank must be in 0 .. {world - 1}, got {rank!r}")


def all_gather_order(rank: int, world: int) -> list[int]:
    """The shards rank `rank` multiplies, in order: its own, then as the ring delivers them."""
    _check(rank, world)
    return [(rank - s) % world for s in range(world)]


@dataclass(frozen=True)
class ReduceStep:
    rows: int          # which of the W row blocks of C this step computes a partial sum for
    receive: bool      # add the sum so far, received from rank - 1, before passing it on
    send: bool         # pass the sum on to rank + 1 (False: the last step; the rows are this rank's own)


def reduce_scatter_order(rank: int, world: int) -> list[ReduceStep]:
    """The steps of a ring reduce-scatter fused with the GEMM that makes the partial sums."""
    _check(rank, world)
    return [ReduceStep((rank - 1 - s) % world, s > 0, s < world - 1) for s in range(world)]


def row_blocks(m: int, world: int) -> list[tuple[int, int]]:
    """(first row, rows) of each rank's block of an M-row matrix split evenly: equal blocks, as NCCL's
    all-gather and reduce-scatter take them. ValueError naming M and the world size where they do not divide."""
    if m < 0:
        raise ValueError(f"M must be >= 0, got {m}")
    _check(0, world)
    if m % world:
        raise ValueError(f"M = {m} rows do not split into {world} equal blocks (one per rank); pad M to a multiple "
                         f"of {world}")
    step = m // world
    return [(r * step, step) for r in range(world)]


def pieces(rows: int, parts: int) -> list[tuple[int, int]]:
    """A block of `rows` rows cut into `parts` pieces for a finer pipeline (the first pieces one row longer
    where they do not divide); pieces of no rows are left out."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    base, extra = divmod(rows, parts)
    out, start = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        if n:
            out.append((start, n))
        start += n
    return out


# ------------------------------------------------------------------------------------------ chunked rings
# Each shard cut into row pieces (`pieces`): the ring runs piece by piece, every piece's transfer posted before
# its GEMM. These plans are the products' order of work, op by op, so that a test can run them without torch.


@dataclass(frozen=True)
class GatherOp:
    """All-gather + GEMM, one piece of one step: wait for the piece of `block` to have arrived (and for its
    last send to have left), post the exchange (send this piece of `block` to rank + 1, receive the same
    piece of `recv` from rank - 1; None on the last step), then multiply the piece of `block`."""
    step: int
    piece: int
    block: int
    wait: bool
    recv: int | None


def all_gather_plan(rank: int, world: int, chunks: int = 1) -> list[GatherOp]:
    """The ops of `all_gather_matmul` on rank `rank` with each shard in `chunks` pieces."""
    _check(rank, world)
    if chunks < 1:
        raise ValueError(f"chunks must be >= 1, got {chunks}")
    order = all_gather_order(rank, world)
    return [GatherOp(s, j, block, s > 0, order[s + 1] if s + 1 < world else None)
            for s, block in enumerate(order) for j in range(chunks)]


@dataclass(frozen=True)
class ReduceOp:
    """GEMM + reduce-scatter, one piece of one step: wait for this piece's sum so far to have arrived in
    `target` (and its last send to have left), compute the piece of row block `rows` into `target` (adding
    what is there where `accumulate`), then, where `send`, post the exchange: send the piece to rank + 1 and
    receive the next sum for it from rank - 1 into `next_target`. Targets: 0 and 1 are the two work buffers,
    -1 the output."""
    step: int
    piece: int
    rows: int
    wait: bool
    accumulate: bool
    target: int
    send: bool
    next_target: int


def reduce_scatter_plan(rank: int, world: int, chunks: int = 1) -> list[ReduceOp]:
    """The ops of `matmul_reduce_scatter` on rank `rank` with each row block in `chunks` pieces."""
    _check(rank, world)
    if chunks < 1:
        raise ValueError(f"chunks must be >= 1, got {chunks}")
    ops = []
    for s, step in enumerate(reduce_scatter_order(rank, world)):
        target = s % 2 if step.send else -1
        nxt = (s + 1) % 2 if s + 2 < world else -1
        ops += [ReduceOp(s, j, step.rows, s > 0, step.receive, target, step.send, nxt) for j in range(chunks)]
    return ops

