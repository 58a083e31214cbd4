"""What limits a tensor-parallel product: each rank's GEMM by the single-GPU model (explain's prediction for
the rank's shape), the collective by the link's bus bandwidth, and the pipeline of `gemmlab.distributed`
between them (distributed.model.predict; the reduce-scatter's sum of the slots at the end, over the DRAM
bandwidth): sequential, ideal and overlapped times, and whether the link or the math bounds it.

The link is a bus bandwidth in NCCL's terms (S (W - 1) / W bytes per second of a collective over S bytes), given,
measured (`gemmlab bench --distributed` reports it per case), or the reference host's (REFERENCE_BUSBW).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..distributed import model as tp
from ..kernels import registry
from .explain import explain

REFERENCE_BUSBW = tp.REFERENCE_BUSBW  # (the reference host's NCCL all-gather: distributed.model)


@dataclass
class Verdict:
    kind: str
    m: int
    n: int
    k: int
    world: int
    rank_shape: tuple[int, int, int]   # each rank's GEMM
    busbw: float
    busbw_source: str
    prediction: tp.Prediction
    gemm_limiter: str                  # what limits each rank's GEMM (the single-GPU model's limiter)
    paragraph: str


def rank_shape(kind: str, m: int, n: int, k: int, world: int) -> tuple[int, int, int]:
    """Each rank's GEMM: all of A times its N / W columns (all-gather), or A's and B's K / W slices."""
    if kind == "all_gather":
        return m, n // world, k
    return m, n, k // world


def explain_tensor_parallel(kind: str, m: int, n: int, k: int, world: int, *, kernel: str = "wgmma",
                            dtype: str = "bfloat16", busbw: float | None = None, device=None,
                            push_bps: float = tp.REFERENCE_PUSH_BPS) -> Verdict:
    """The model's verdict on a tensor-parallel product of full shape M x N x K over `world` GPUs: the collective
    at `busbw` (one after the other), the pipeline's blocks pushed by the copy engines at `push_bps` (the form
    gemmlab.distributed takes on NCCL)."""
    if kind not in tp.KINDS:
        raise ValueError(f"kind must be one of {tp.KINDS}, got {kind!r}")
    if world < 1 or min(m, n, k) < 1:
        raise ValueError(f"need M, N, K >= 1 and a world size >= 1, got {m} x {n} x {k} over {world}")
    if (n if kind == "all_gather" else k) % world or m % world:
        what = "M and N" if kind == "all_gather" else "M and K"
        raise ValueError(f"{kind} {m} x {n} x {k} over {world} GPUs: {what} must be multiples of {world}")
    if busbw is None:
        if world > 1 and world not in REFERENCE_BUSBW:
            raise ValueError(f"no reference bus bandwidth for {world} GPUs (known: {sorted(REFERENCE_BUSBW)}); "
                             "give one (bytes per second, e.g. from gemmlab bench --distributed)")
        busbw, source = REFERENCE_BUSBW.get(world, 1.0), "the reference host's NCCL all-gather (H100, NVLink)"
    else:
        source = "given"
    if busbw <= 0:
        raise ValueError(f"the bus bandwidth must be > 0, got {busbw}")
    if not push_bps > 0:
        raise ValueError(f"the push rate must be > 0, got {push_bps}")
    spec = registry.get(kernel)
    rm, rn, rk = rank_shape(kind, m, n, k, world)
    e = explain(spec, rm, rn, rk, None, device, dtype=dtype)
    gemm_s = e.prediction.limiter.seconds
    elem = e.model.fmt.elem if kind == "all_gather" else e.model.fmt.out_elem
    # the reduce-scatter by the copy engines ends with the sum of the W slots of its rows: W blocks read, one
    # written, at best at the DRAM bandwidth (measured slower: docs/journal.md, "the reduce-scatter by the copy
    # engines")
    sums = kind == "reduce_scatter" and world > 1
    tail = (world + 1) * (m // world) * n * elem / e.ceilings.dram_bps if sums else 0.0
    p = tp.predict(kind, m, n, k, world, gemm_s, tp.Link(busbw, busbw), elem, tail_s=tail, step_bps=push_bps)
    collective = "all-gather of A" if kind == "all_gather" else "reduce-scatter of the partial sums"
    moved = m * (k if kind == "all_gather" else n) * elem
    which = ("the link: the collective takes longer than each rank's GEMM, so the GEMM hides under it"
             if p.limiter == "link" else
             "the math: each rank's GEMM takes longer than the collective, which hides under it")
    para = (f"Over {world} GPUs, {kind.replace('_', '-')} {m}x{n}x{k} ({dtype}): each rank multiplies "
            f"{rm}x{rn}x{rk}, at best {gemm_s * 1e3:.3f} ms by {spec.name}'s model (its {e.prediction.limiter.resource} "
            f"bound); "
            f"the {collective}, {moved / 1e6:.0f} MB, takes {p.comm_s * 1e3:.3f} ms at {busbw / 1e9:.0f} GB/s bus "
            f"bandwidth ({source}); comm / GEMM {p.comm_s / gemm_s:.2f}"
            + (f" (within {tp.BALANCED:g} x: overlap can take the call near the longer part alone)"
               if tp.balanced(p.comm_s, gemm_s) else "") +
            f". It is limited by {which}. Sequential: {p.sequential_s * 1e3:.3f} ms; perfect "
            f"overlap: {p.ideal_s * 1e3:.3f} ms; the pipeline of {world} blocks, each pushed by the copy engines at "
            f"{push_bps / 1e9:.0f} GB/s: {p.overlapped_s * 1e3:.3f} ms "
            f"({p.efficiency:.0%} of perfect, {p.speedup:.2f}x sequential), losing one block of the shorter side"
            + (f", then the sum of the {world} slots of its rows, at least {tail * 1e3:.3f} ms at the DRAM bandwidth"
               if tail else "")
            + (" (under the bound: the pushes move the blocks faster than the collective's steps)."
               if p.overlapped_s < p.ideal_s else "."))
    return Verdict(kind, m, n, k, world, (rm, rn, rk), busbw, source, p, e.prediction.limiter.resource, para)
