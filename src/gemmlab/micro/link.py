"""The link between the GPUs of one host, in the terms the tensor-parallel model takes (`distributed.model.Link`):
NCCL all-gather and reduce-scatter bus bandwidth over message sizes, and a peer copy's bandwidth between two
GPUs.

Bus bandwidth as NCCL's own tests define it: a collective over S bytes (the gathered tensor, or the tensor
reduced) among W ranks moves S (W - 1) / W through each rank's link, so busbw = S (W - 1) / W / time. One
process per rank (`bench.distributed.spawn_ranks`, NVLink multicast off in each); each size's time is the
median over calls of the slowest rank's, calls between barriers. On gloo (CPU processes) the same runs as a
check of the code, with gloo's stand-ins (an all-gather into row views; an all-reduce for the reduce-scatter).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from ..bench.distributed import all_gather_into, check_ranks, reduce_scatter_rows, spawn_ranks, time_calls
from ..distributed.model import Link

SIZES = (1 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30)  # bytes of the whole tensor (bf16 elements)


@dataclass
class LinkPoint:
    collective: str    # "all_gather" or "reduce_scatter"
    nbytes: int        # the whole tensor
    seconds: float
    busbw: float       # bytes / s


@dataclass
class LinkResult:
    world: int
    backend: str
    points: list[LinkPoint] = field(default_factory=list)
    peer_copy_bps: float | None = None   # GPU 0 -> GPU 1, one copy of the largest size (None: fewer than 2 GPUs)

    def link(self) -> Link:
        """The model's link: each collective's bus bandwidth at the largest size measured."""
        def best(kind):
            pts = [p for p in self.points if p.collective == kind]
            return max(pts, key=lambda p: p.nbytes).busbw if pts else 0.0
        return Link(best("all_gather"), best("reduce_scatter"))

    def to_dict(self) -> dict:
        return asdict(self)


def measure_link(world: int, backend: str = "nccl", sizes=SIZES, budget_ms: float = 100.0, rounds: int = 3) -> LinkResult:
    """Bus bandwidth of both collectives at each size over `world` ranks, and the peer copy (NCCL, 2+ GPUs)."""
    import torch

    check_ranks(world, backend, torch, least=2)
    sizes = tuple(int(s) for s in sizes)
    if any(s < 2 * world for s in sizes):
        raise ValueError(f"sizes must be at least {2 * world} bytes (one bf16 element a rank), got {sizes}")
    points = spawn_ranks(world, backend, _collectives, sizes, budget_ms, rounds)
    res = LinkResult(world, backend, [LinkPoint(**p) for p in points])
    if backend == "nccl":
        res.peer_copy_bps = _peer_copy(torch, max(sizes))
    return res


def _collectives(torch, dist, rank, world, dev, sizes, budget_ms, rounds) -> list[dict]:
    backend = "nccl" if dev.type == "cuda" else "gloo"
    out = []
    for nbytes in sizes:
        rows = max(1, nbytes // 2 // 1024 // world) * world   # bf16 rows of 1024 elements, whole shards
        full = torch.ones(rows, 1024, dtype=torch.bfloat16, device=dev)
        shard = full[rank * (rows // world):(rank + 1) * (rows // world)].clone()
        gathered = torch.empty_like(full)
        calls = {"all_gather": lambda: all_gather_into(torch, dist, gathered, shard, backend),
                 "reduce_scatter": lambda: reduce_scatter_rows(torch, dist, full, rank, world, backend)}
        times = time_calls(torch, dist, calls, dev, budget_ms, rounds)
        moved = full.numel() * full.element_size()
        for kind, t in times.items():
            out.append(asdict(LinkPoint(kind, moved, t, moved * (world - 1) / world / t)))
    return out


def _peer_copy(torch, nbytes: int) -> float | None:
    """GPU 0 -> GPU 1, bytes per second of one copy (median of a few, after a warm-up)."""
    if torch.cuda.device_count() < 2:
        return None
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda:1")
    samples = []
    for i in range(6):
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize(1)
        if i:  # the first is the warm-up (peer access set up)
            samples.append(time.perf_counter() - t0)
    samples.sort()
    return nbytes / samples[len(samples) // 2]
