"""Tensor-parallel products timed over the GPUs of one host (NCCL), or over CPU processes (gloo): gemmlab's
overlapped products (`gemmlab.distributed`) against the sequential collective then torch.matmul, and against
torch's fused operators where its symmetric memory runs, in the same processes, interleaved; the collective
alone and each rank's GEMM alone beside them, so that the model (`distributed.model.predict`) can be held to
the measurement.

One process per rank (`torch.multiprocessing`, a file rendezvous), each on its own GPU under NCCL. Every
process has NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 set before the
group starts (NVLink multicast stays off). Per case, every candidate is first checked against the float64
product of the full operands; then rounds of calls go round the candidates in turn, each call between two
barriers, timed on the host around a device synchronize (what a user's step pays); a call's time is the
slowest rank's (an all-reduce of the maxima), and a candidate's time the median of its calls. Operands are
fresh random values per case; the shapes this is for move hundreds of MB per call, past L2.

The model is fed each part's GPU time (the collective's, the GEMM's, the copy reduce-scatter's sum: calls
queued back to back, `gpu_seconds`), and its times are turned into a call's as timed here: a lone call of a
part takes its GPU time plus a lead (the timing's floor, an empty call between barriers, and the host's
queueing before its work starts). One after the other is predicted as the first part's lone call plus the
second's GPU time (its launch queued under the first's work); the overlapped call as the GEMM's lead plus the
pipeline, or the timing's floor plus the host's queueing of the whole call where that is longer.

kind "all_gather" (column-parallel): A (M x K) in row shards, each rank's B its K x N / W column slice;
kind "reduce_scatter" (row-parallel): each rank's K / W slice of A and B, the sum scattered by rows.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, NamedTuple, Sequence

KINDS = ("all_gather", "reduce_scatter")
ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# M x N x K (the full product) of the tensor-parallel figures in docs/performance.md
SHAPES = ((8192, 28672, 8192), (16384, 8192, 8192), (4096, 10240, 8192))
def balanced_shapes(world: int, dtype: str = "bfloat16", m: int = 16384, other: int = 8192) -> list[tuple]:
    """Two full products whose collective and GEMM the reference model puts nearest each other over `world`
    GPUs: the all-gather's comm / GEMM is about (W - 1) R / (B N) (R the GEMM's rate, B the collective's bus
    bandwidth), the reduce-scatter's the same with K for N, so M x N* x `other` and M x `other` x K* with N* = K*
    = (W - 1) R / B, rounded to a multiple of 256 W (whole tiles on every rank). Each product runs as both kinds;
    one of each pair is balanced for the all-gather, the other for the reduce-scatter."""
    from ..distributed import model

    if world < 2:
        raise ValueError(f"balanced shapes need 2 or more GPUs, got {world}")
    if dtype not in model.REFERENCE_RATE:
        raise ValueError(f"no reference GEMM rate for {dtype!r} (known: {', '.join(model.REFERENCE_RATE)})")
    step = 256 * world
    best = max(step, round((world - 1) * model.REFERENCE_RATE[dtype] / model.reference_busbw(world) / step) * step)
    return [(m, best, other), (m, other, best)]
CANDIDATES = ("gemmlab", "sequential", "torch_fused", "comm", "gemm_gemmlab", "gemm_torch")


@dataclass
class Row:
    """One case over `world` ranks: each candidate's median time (s; None where it did not run, `notes` says
    why), its relative error against float64, and the model's predictions from the measured parts."""

    kind: str
    m: int
    n: int
    k: int
    world: int
    backend: str
    dtype: str
    seconds: dict[str, float | None] = field(default_factory=dict)
    errors: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    predicted: dict[str, float] = field(default_factory=dict)
    spans: dict[str, float] = field(default_factory=dict)  # GPU span per candidate (time_calls), NCCL only
    gpu: dict[str, float] = field(default_factory=dict)  # the model's parts queued back to back (gpu_seconds)
    transport: str = ""  # the form gemmlab's default call took (its "auto": copy, sequential or ring)

    @property
    def ideal(self) -> float | None:
        """max(collective alone, gemmlab's GEMM alone): perfect overlap."""
        c, g = self.seconds.get("comm"), self.seconds.get("gemm_gemmlab")
        return None if c is None or g is None else max(c, g)

    @property
    def balance(self) -> float | None:
        """The collective alone over gemmlab's GEMM alone: the overlap's most (the ideal bound over the sequential
        sum) is 1 + min(b, 1 / b), so it matters most near 1."""
        c, g = self.seconds.get("comm"), self.seconds.get("gemm_gemmlab")
        return None if not c or not g else c / g

    @property
    def balanced(self) -> bool | None:
        """Whether the collective and the GEMM alone are within `distributed.model.BALANCED` of each other: the
        cases the overlap's share of the ideal bound is judged on (where one part is much longer, its own time is
        the call's)."""
        from ..distributed.model import balanced

        return None if self.balance is None else balanced(self.seconds["comm"], self.seconds["gemm_gemmlab"])

    @property
    def label(self) -> str:
        """The case in short: "AG 16384x8192x8192" (all-gather) or "RS ..." (reduce-scatter)."""
        return f"{'AG' if self.kind == 'all_gather' else 'RS'} {self.m}x{self.n}x{self.k}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ideal": self.ideal, "balance": self.balance, "balanced": self.balanced}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Row":
        """A row as `to_dict` wrote it (the derived fields are recomputed)."""
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in names})


def run(world: int, shapes: Iterable[Sequence[int]] = SHAPES, kinds: Sequence[str] = KINDS, backend: str = "nccl",
        dtype: str = "bfloat16", budget_ms: float = 300.0, rounds: int = 5, chunks: Sequence[int] = (1,)) -> list[Row]:
    """Every (kind, shape) over `world` processes; rank 0's rows. NCCL needs `world` GPUs; gloo runs on CPUs.
    `chunks`: row pieces per shard of gemmlab's rings; the first is "gemmlab" (and the model's), each other
    "gemmlab_<chunks>"."""
    import torch

    cases = [(kind, *map(int, s)) for kind in kinds for s in shapes]
    chunks = tuple(chunks)
    _check(world, cases, backend, torch)
    if not chunks or any(not isinstance(c, int) or c < 1 for c in chunks):
        raise ValueError(f"chunks must be positive integers, got {chunks!r}")
    rows = spawn_ranks(world, backend, _cases, cases, dtype, budget_ms, rounds, chunks)
    return [Row(**r) for r in rows]


def spawn_ranks(world: int, backend: str, body, *args):
    """`body(torch, dist, rank, world, device, *args)` in `world` processes of one process group (NCCL: rank r
    on GPU r; gloo: CPUs), NVLink multicast off in each; rank 0's result. `body` is a module-level function."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="gemmlab-tp-") as tmp, mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_worker, args=(world, os.path.join(tmp, "rendezvous"), backend, body, args, out), nprocs=world,
                 join=True)
        return out.get("result")


def check_ranks(world: int, backend: str, torch, least: int = 1) -> None:
    """ValueError naming the fault where `world` processes on `backend` cannot run here (at least `least`)."""
    if world < least:
        raise ValueError(f"the world size must be >= {least}, got {world}" if least == 1 else
                         f"a link needs at least {least} ranks, got {world}")
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"backend must be 'nccl' (GPUs) or 'gloo' (CPU processes), got {backend!r}")
    if backend == "nccl" and torch.cuda.device_count() < world:
        raise ValueError(f"{world} ranks on NCCL need {world} GPUs; this host has {torch.cuda.device_count()}")


def _check(world: int, cases: list, backend: str, torch) -> None:
    check_ranks(world, backend, torch)
    for kind, m, n, k in cases:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if min(m, n, k) < 1 or m % world or (k if kind == "reduce_scatter" else n) % world:
            what = "M and K" if kind == "reduce_scatter" else "M and N"
            raise ValueError(f"{kind} {m} x {n} x {k} over {world} ranks: {what} must be positive multiples of {world}")


def _worker(rank: int, world: int, rendezvous: str, backend: str, body, args: tuple, out) -> None:
    os.environ.update(ENV)
    import torch
    import torch.distributed as dist

    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    try:
        dev = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        result = body(torch, dist, rank, world, dev, *args)
        if rank == 0:
            out["result"] = result
    finally:
        dist.destroy_process_group()
    leave_now()


def leave_now() -> None:
    """End a rank's process once its work is done and its result delivered, without the interpreter's
    teardown: there a library's thread, still joinable, aborted the process (std::terminate, SIGABRT) in about
    one gloo run in five, after every result was in."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _cases(torch, dist, rank, world, dev, cases, dtype, budget_ms, rounds, chunks) -> list[dict]:
    backend = "nccl" if dev.type == "cuda" else "gloo"
    return [asdict(_case(torch, dist, rank, world, backend, kind, m, n, k, dtype, budget_ms, rounds, chunks))
            for kind, m, n, k in cases]


def _case(torch, dist, rank, world, backend, kind, m, n, k, dtype, budget_ms, rounds, chunks) -> Row:
    import gemmlab.distributed as gd

    from .. import formats
    from ..distributed import exchange, model
    from ..distributed.ops import transport_taken

    dev = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    dt = getattr(torch, dtype)
    g = torch.Generator(device=dev).manual_seed(1234)  # the same full operands on every rank
    a = (torch.randn(m, k, generator=g, device=dev) / k ** 0.25).to(dt)
    b = (torch.randn(k, n, generator=g, device=dev) / k ** 0.25).to(dt)
    row = Row(kind, m, n, k, world, backend, dtype)
    mr = m // world
    if kind == "all_gather":
        cols = n // world
        shard, b_local = a[rank * mr:(rank + 1) * mr].contiguous(), b[:, rank * cols:(rank + 1) * cols].contiguous()
        want = a.double() @ b_local.double()                       # every rank: all of A times its columns
        gathered = torch.empty(m, k, dtype=dt, device=dev)
        local = (a, b_local)
        ours = lambda c: lambda: gd.all_gather_matmul(shard, b_local, chunks=c)  # noqa: E731
        calls = {
            "gemmlab": ours(chunks[0]),
            "sequential": lambda: torch.matmul(all_gather_into(torch, dist, gathered, shard, backend), b_local),
            "comm": lambda: all_gather_into(torch, dist, gathered, shard, backend),
        }
        moved = m * k * a.element_size()
    else:
        ks = k // world
        a_local, b_local = a[:, rank * ks:(rank + 1) * ks].contiguous(), b[rank * ks:(rank + 1) * ks].contiguous()
        want = (a.double() @ b.double())[rank * mr:(rank + 1) * mr]  # this rank's rows of the full sum
        part = torch.zeros(m, n, dtype=dt, device=dev)
        local = (a_local, b_local)
        ours = lambda c: lambda: gd.matmul_reduce_scatter(a_local, b_local, chunks=c)  # noqa: E731
        calls = {
            "gemmlab": ours(chunks[0]),
            "sequential": lambda: reduce_scatter_rows(torch, dist, torch.matmul(a_local, b_local), rank, world, backend),
            "comm": lambda: reduce_scatter_rows(torch, dist, part, rank, world, backend),
        }
        moved = m * n * a.element_size()
    for c in chunks[1:]:
        calls[f"gemmlab_{c}"] = ours(c)
    if kind == "reduce_scatter" and backend == "nccl" and chunks[0] == 1:  # the copy path's tail: the slots' sum
        slots = torch.zeros(world, mr, n, dtype=dt, device=dev)
        calls["slots_sum"] = ((lambda: torch.add(slots[0], slots[1])) if world == 2 else  # (as the copy path sums)
                              (lambda: torch.sum(slots, dim=0)))
        # the copy path's GEMMs: one of M / W rows per block, each its own launch (its own last wave)
        calls["gemm_block"] = lambda: gemmlab_matmul(a_local[:mr], b_local)
    way = None
    if backend == "nccl":  # (the default is the copy engines or the sequential form: every form timed beside it)
        way = transport_taken(kind, shard if kind == "all_gather" else a_local, m, n, k, chunks=chunks[0])
        row.transport = way

        def forced(t):
            if kind == "all_gather":
                return lambda: gd.all_gather_matmul(shard, b_local, chunks=chunks[0], transport=t)
            return lambda: gd.matmul_reduce_scatter(a_local, b_local, chunks=chunks[0], transport=t)
        for t in ("copy", "sequential", "ring"):
            if t != way:
                calls[f"gemmlab_{t}"] = forced(t)
        if kind == "all_gather" and exchange.pieces(mr) > 1:  # the copy form with each block in pieces
            calls["gemmlab_copy_pieces"] = lambda: gd.all_gather_matmul(shard, b_local, transport="copy",
                                                                        pieces=exchange.pieces(mr))
    named = ("gemmlab_copy", "gemmlab_sequential", "gemmlab_ring", "gemmlab_copy_pieces")
    extra = [name for name in calls if name.startswith("gemmlab_") and name not in named]
    extra += [name for name in named if name in calls]
    calls["gemm_gemmlab"] = lambda: gemmlab_matmul(*local)
    calls["gemm_torch"] = lambda: torch.matmul(*local)
    fused, why = _torch_fused(torch, dist, kind, backend, shard if kind == "all_gather" else a_local, b_local)
    # every rank must run the same calls in the same order (each holds collectives): what one lacks, all drop
    if not _all_agree(torch, dist, fused is not None, dev):
        fused, why = None, why or "not available on every rank"
    if fused is not None:
        calls["torch_fused"] = fused
    else:
        row.notes["torch_fused"] = why
    tol = formats.tolerance(dtype)
    for name in ("gemmlab", *extra, "sequential", "torch_fused"):
        if name not in calls:
            continue
        err, why = 0.0, ""
        try:
            got = calls[name]()
            got = got[0] if isinstance(got, (tuple, list)) else got
            err = float((got.double() - want).norm() / want.norm().clamp_min(1e-30))
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run here is reported, not fatal
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        worst = max_over_ranks(torch, dist, err, dev)
        if not _all_agree(torch, dist, not why, dev):  # dropped by every rank, where any rank failed it
            calls.pop(name)
            row.notes[name] = why or "failed on another rank"
            continue
        row.errors[name] = worst
        if name.startswith("gemmlab") and row.errors[name] > tol:
            raise AssertionError(f"{kind} {m} x {n} x {k} over {world}: gemmlab's rel. error {row.errors[name]:.2e} "
                                 f"> {tol:.0e}")
    del want
    calls["floor"] = lambda: None  # (the timing's own floor: a barrier, then nothing queued, then a sync)
    times = time_calls(torch, dist, calls, dev, budget_ms, rounds, spans=row.spans)
    row.seconds = {name: times.get(name) for name in (*CANDIDATES, *extra, "floor",
                                                       *[x for x in ("slots_sum", "gemm_block") if x in calls])}
    row.seconds["host_gemmlab"] = host_seconds(torch, dist, calls["gemmlab"], dev)
    for name in ("gemmlab_copy", "gemmlab_sequential", "gemmlab_copy_pieces"):  # (the forms' host times)
        if name in calls:
            row.seconds[f"host_{name}"] = host_seconds(torch, dist, calls[name], dev)
    # The model's parts: each one's time on the GPU, queued back to back (a lone call's wall time adds the
    # host's part: the timing's floor and the time before its work starts, `lead`)
    parts = ("comm", "gemm_gemmlab", "gemm_torch", *[x for x in ("slots_sum", "gemm_block") if x in calls])
    row.gpu = {name: gpu_seconds(torch, dist, calls[name], dev) for name in parts}
    # (a part queued back to back can take longer a call than alone: a long GEMM's clock under sustained power,
    # collectives queued behind one another; a lone call bounds it, less the timing's floor)
    gpu = {name: min(v, max(times[name] - times["floor"], 1e-9)) for name, v in row.gpu.items()}
    c, g_ours, g_torch = (gpu[name] for name in ("comm", "gemm_gemmlab", "gemm_torch"))
    if c > 0 and g_ours > 0 and g_torch > 0 and world > 1:
        busbw = moved * (world - 1) / world / c
        link = model.Link(busbw, busbw)  # (the kind's own collective, measured)
        ours = model.predict(kind, m, n, k, world, g_ours, link, a.element_size(), chunks=chunks[0],
                             tail_s=gpu.get("slots_sum", 0.0),
                             block_s=gpu.get("gemm_block") if way == "copy" and kind == "reduce_scatter" else None)
        seq = model.predict(kind, m, n, k, world, g_torch, link, a.element_size())

        def lead(name):  # what a lone call of the part takes beyond its GPU time
            return times[name] - gpu[name]
        # one after the other: the first part as a lone call, the second's launch queued under the first's work
        first = "comm" if kind == "all_gather" else "gemm_torch"
        seq_s = lead(first) + seq.sequential_s
        if way == "sequential":  # gemmlab's own call: the sequential form where auto chose it ...
            mine = lead("comm" if kind == "all_gather" else "gemm_gemmlab") + ours.sequential_s
        else:  # ... else the overlap, from the GEMM's launch on, or the host's queueing where that is longer
            mine = max(times["floor"] + row.seconds["host_gemmlab"], lead("gemm_gemmlab") + ours.overlapped_s)
        row.predicted = {"sequential": seq_s, "overlapped": lead("gemm_gemmlab") + ours.overlapped_s,
                         "ideal": ours.ideal_s, "gemmlab": mine, "busbw": busbw,
                         "limiter_link": float(ours.limiter == "link")}
    return row


def gpu_seconds(torch, dist, call, dev, reps: int = 8) -> float:
    """The time per call of `reps` calls queued back to back after a barrier (GPUs: between two events on the
    current stream, so the host's queueing hides under the work; CPU processes: the wall time), the slowest
    rank's: what a part costs on the GPU once its launch is not waited for."""
    call()
    _sync(torch, dev)
    dist.barrier()
    _sync(torch, dev)
    if dev.type == "cuda":
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        marks[0].record()
        for _ in range(reps):
            call()
        marks[1].record()
        _sync(torch, dev)
        t = marks[0].elapsed_time(marks[1]) * 1e-3 / reps
    else:
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        t = (time.perf_counter() - t0) / reps
    return max_over_ranks(torch, dist, t, dev)


def gemmlab_matmul(a, b):
    from ..api.call import matmul

    return matmul(a, b)


def all_gather_into(torch, dist, gathered, shard, backend):
    """The whole of A on every rank (NCCL: into one tensor; gloo, which has no such call: into its row views)."""
    if backend == "nccl":
        dist.all_gather_into_tensor(gathered, shard)
    else:
        dist.all_gather(list(gathered.chunk(dist.get_world_size())), shard)
    return gathered


def reduce_scatter_rows(torch, dist, full, rank, world, backend):
    """This rank's rows of the sum over ranks of `full` (NCCL: a reduce-scatter; gloo, which has none: an
    all-reduce, then the rows)."""
    rows = full.shape[0] // world
    if backend == "nccl":
        out = torch.empty(rows, full.shape[1], dtype=full.dtype, device=full.device)
        dist.reduce_scatter_tensor(out, full)
        return out
    summed = full.clone()
    dist.all_reduce(summed)
    return summed[rank * rows:(rank + 1) * rows]


def _torch_fused(torch, dist, kind, backend, a, b):
    """torch's fused operator for the kind (torch.ops.symm_mem), as a call; or None and why it cannot run."""
    if backend != "nccl":
        return None, "needs NCCL and symmetric memory (GPUs)"
    try:
        from torch.distributed import _symmetric_memory as symm

        group = dist.group.WORLD
        symm.enable_symm_mem_for_group(group.group_name)
        ops = torch.ops.symm_mem
        if kind == "all_gather":
            return (lambda: ops.fused_all_gather_matmul(a, [b], gather_dim=0, group_name=group.group_name)[1][0]), ""
        return (lambda: ops.fused_matmul_reduce_scatter(a, b, "sum", scatter_dim=0, group_name=group.group_name)), ""
    except Exception as exc:  # noqa: BLE001 - torch builds without symmetric memory: said in the row
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"


def _all_agree(torch, dist, flag: bool, dev) -> bool:
    """Whether `flag` holds on every rank (a collective: every rank must call it)."""
    t = torch.tensor([0.0 if flag else 1.0], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item() == 0.0


def host_seconds(torch, dist, call, dev, reps: int = 5) -> float:
    """The host's time to queue one call (`reps` calls back to back, no synchronisation between them), the
    slowest rank's: what a call costs before its GPU work can start, where the timed call waits for it."""
    _sync(torch, dev)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        call()
    t = (time.perf_counter() - t0) / reps
    _sync(torch, dev)
    return max_over_ranks(torch, dist, t, dev)


def max_over_ranks(torch, dist, value: float, dev) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _sync(torch, dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_calls(torch, dist, calls: dict, dev, budget_ms: float, rounds: int,
               spans: dict | None = None) -> dict[str, float]:
    """Median over calls of the slowest rank's time per call, candidates in turn within each round (the first
    of a round moves along), after one warm-up call each; the number of calls per round from the budget.
    `spans` (a dict, GPUs only): filled with each candidate's median GPU span, the slowest rank's, from an event
    recorded on the current stream before the call to one after it (the call on the GPU, waits for other ranks
    included, and the host's queueing where the idle GPU waits for it; not the synchronisation after it)."""
    names = list(calls)
    timed_spans = spans is not None and dev.type == "cuda"
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(2)] if timed_spans else None
    gpu: dict[str, list[float]] = {name: [] for name in names}
    first = {}
    for name in names:  # warm-up (compiles, plans, communicators), then one call to size the rounds
        calls[name]()
        _sync(torch, dev)
        dist.barrier()
        t0 = time.perf_counter()
        calls[name]()
        _sync(torch, dev)
        first[name] = max_over_ranks(torch, dist, time.perf_counter() - t0, dev)
    per_round = max(1, int(budget_ms / 1e3 / rounds / max(sum(first.values()), 1e-6)))
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            for _ in range(per_round):
                dist.barrier()
                _sync(torch, dev)
                t0 = time.perf_counter()
                if marks:
                    marks[0].record()
                calls[name]()
                if marks:
                    marks[1].record()
                _sync(torch, dev)
                samples[name].append(time.perf_counter() - t0)
                if marks:
                    gpu[name].append(marks[0].elapsed_time(marks[1]) * 1e-3)
    out = {}
    for name in names:  # the slowest rank's time per call, call by call
        out[name] = _median_of_max(torch, dist, samples[name], dev)
        if timed_spans:
            spans[name] = _median_of_max(torch, dist, gpu[name], dev)
    return out


def _median_of_max(torch, dist, values: list[float], dev) -> float:
    t = torch.tensor(values, dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return statistics.median(t.tolist())


def table(rows: Sequence[Row]) -> list[list[str]]:
    """Rows for a printed table: per case the times (ms), gemmlab against sequential, the ideal bound and torch's
    fused operator, and the model's predictions against the measurement."""
    out = []
    for r in rows:
        s = r.seconds

        def ms(name):
            v = s.get(name)
            return "-" if v is None else f"{v * 1e3:.3f}"
        ours, seq, fused, ideal = s.get("gemmlab"), s.get("sequential"), s.get("torch_fused"), r.ideal
        p = r.predicted
        out.append([
            r.kind, f"{r.m}x{r.n}x{r.k}", str(r.world), r.transport or "-", ms("comm"), ms("gemm_gemmlab"),
            "-" if r.balance is None else f"{r.balance:.2f}" + (" *" if r.balanced else ""),
            ms("sequential"), ms("gemmlab"), ms("host_gemmlab"),
            ms("torch_fused") if fused else r.notes.get("torch_fused", "-")[:40],
            f"{seq / ours:.2f}x" if seq and ours else "-",
            f"{ideal / ours:.0%}" if ideal and ours else "-",
            f"{fused / ours:.2f}x" if fused and ours else "-",
            (f"{p.get('gemmlab', p['overlapped']) / ours:.2f} / {p['sequential'] / seq:.2f}" if p and ours and seq
             else "-"),
            ("link" if p.get("limiter_link") else "math") if p else "-",
        ])
    return out


MODEL_TOLERANCE = 0.15  # the model's predicted time within this share of the measured one
# The calls of a row that become result records: (name in Row.seconds, family, label). gemmlab's forms by name
# follow gemmlab's own call; the peers are timed in the same processes.
RECORDED = (("gemmlab", "gpu", "gemmlab.distributed"), ("sequential", "gpu_peer", "NCCL + torch.matmul"),
            ("torch_fused", "gpu_peer", "torch's fused operator"))


class _Call(NamedTuple):  # what a result record says of a call (bench.verified.torch_call_run)
    kernel: str
    label: str
    family: str
    rung: None
    idea: str
    params: dict


class _Timed(NamedTuple):
    median_ms: float

    def as_dict(self) -> dict[str, Any]:
        return {"median_ms": self.median_ms, "method": "lone calls between barriers, the slowest rank's, median "
                "over rounds", "l2": "warm"}


def to_results(rows: Sequence[Row], command: str = ""):
    """The rows as `Results`, a run per row (one problem: kind, full shape, world size) with the row itself in
    the run's metadata ("distributed", which the report's tensor-parallel section reads), and a record per call
    timed: gemmlab's call and its forms by name, sequential NCCL + torch.matmul and torch's fused operator, each
    the whole product over the row's GPUs (TFLOP/s of all of them) with its error against float64."""
    from ..formats import number_format
    from .records import Results
    from .verified import torch_call_run

    runs, records = [], []
    for r in rows:
        about = {"world": r.world, "kind": r.kind, "backend": r.backend, "transport": r.transport}
        run, record, finish = torch_call_run(command, ("distributed", r.to_dict()), dtype=r.dtype, m=r.m, n=r.n,
                                             k=r.k, fmt=number_format(r.dtype), peak=None)
        forms = [(name, "gpu", f"gemmlab.distributed, {name[8:]} by name") for name in r.seconds
                 if name.startswith("gemmlab_") and r.seconds[name]]
        for name, family, label in (*RECORDED[:1], *forms, *RECORDED[1:]):
            t = r.seconds.get(name)
            if not t:
                continue
            shown = f"{label} ({r.transport})" if name == "gemmlab" and r.transport else label
            records.append(record(_Call(name, shown, family, None, f"{r.kind.replace('_', '-')} over {r.world} GPUs",
                                        about), err=r.errors.get(name), t=_Timed(t * 1e3)))
        finish()
        runs.append(run)
    return Results(records, runs)


def rows_of(results) -> list[Row]:
    """The tensor-parallel rows kept in results' runs (`to_results`), in run order."""
    return [Row.from_dict(run["distributed"]) for run in results.runs if isinstance(run.get("distributed"), dict)]


def verdict(rows: Sequence[Row]) -> list[str]:
    """One line per world size and criterion, over the rows given: gemmlab's call against sequential (never
    slower), its share of the ideal bound on the balanced cases (`Row.balanced`), against torch's fused
    operator, and the model's predictions within MODEL_TOLERANCE of the measurements."""
    from ..distributed.model import BALANCED

    out = []
    for w in sorted({r.world for r in rows}):
        rs = [r for r in rows if r.world == w and r.seconds.get("gemmlab") and r.seconds.get("sequential")]
        if not rs:
            continue
        x_seq = sorted((r.seconds["sequential"] / r.seconds["gemmlab"], r.label) for r in rs)
        out.append(f"W={w}: never slower than sequential: {sum(v >= 1 for v, _ in x_seq)} of {len(rs)} "
                   f"(worst {x_seq[0][0]:.2f}, {x_seq[0][1]})")
        shares = sorted((r.ideal / r.seconds["gemmlab"], r.label) for r in rs if r.balanced and r.ideal)
        out.append(f"W={w}: of the ideal bound where comm / GEMM is within {BALANCED:g} x: " +
                   (f"{len(shares)} case(s), {shares[0][0]:.0%}-{shares[-1][0]:.0%} (worst {shares[0][1]})" if shares
                    else "no case"))
        fused = [r.seconds["torch_fused"] / r.seconds["gemmlab"] for r in rs if r.seconds.get("torch_fused")]
        if fused:
            out.append(f"W={w}: at or above torch's fused operator: {sum(v >= 1 for v in fused)} of {len(fused)} "
                       f"({min(fused):.2f}-{max(fused):.2f} x)")
        within = {"sequential": [0, 0], "gemmlab": [0, 0]}
        for r in rs:
            for what in within:
                pred = r.predicted.get(what)
                if pred:
                    within[what][0] += abs(pred / r.seconds[what] - 1) <= MODEL_TOLERANCE
                    within[what][1] += 1
        if any(n for _, n in within.values()):
            out.append(f"W={w}: model within {MODEL_TOLERANCE:.0%}: " +
                       ", ".join(f"{what} {k} of {n}" for what, (k, n) in within.items()))
    return out


TABLE_HEADER = ["kind", "M x N x K", "GPUs", "form", "comm ms", "GEMM ms", "comm / GEMM", "sequential ms", "gemmlab ms",
                "host ms", "torch fused ms", "x sequential", "of ideal", "x torch fused",
                "model / measured (gemmlab / sequential)", "limit"]
