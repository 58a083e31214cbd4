"""The ladder's algorithms as per-thread Python programs, written line for line after the CUDA sources.

Each program is what one thread of `kernels/cuda/NN_name.cu` does, with global and shared accesses made
through the `Thread` handle so that the engine can record them. Where a CUDA line reads
`As[ty][tx] = (row < M && k0 + tx < K) ? A[...] : 0.0f`, the program reads the same way. A frame ends
wherever a person watching should see a change: after the loads of a K step (at the barrier), after each
term of the inner product, after the store.

`MODELS` maps a kernel's registry name to its model. The kernel registry is the one list of rungs; a rung
without an entry here is reported as "no execution model for rung NN name" rather than guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from ..kernels import KernelSpec, cdiv, registry
from ..kernels.rungs.smem_tiled import grouped_tile
from .model import Mark, NoModelError, Program, Thread, Trace, simulate


def _launch_label(who: str) -> str:
    return f"launch: {who}; nothing has been read yet"


def _k_label(k: int, K: int) -> str:
    return f"k = {k}" + (" (padding: a zero term)" if k >= K else "")


# --------------------------------------------------------------------------------- 01 naive, 02 coalesced


def naive(t: Thread, M: int, N: int, K: int, p: dict[str, int]) -> Iterator[Mark]:
    row = t.block_idx[0] * p["BX"] + t.thread_idx[0]     # threadIdx.x walks rows of C
    col = t.block_idx[1] * p["BY"] + t.thread_idx[1]
    yield from _dot_product(t, row, col, M, N, K, "thread (x, y) owns C[blockIdx.x*BX + x, blockIdx.y*BY + y]")


def coalesced(t: Thread, M: int, N: int, K: int, p: dict[str, int]) -> Iterator[Mark]:
    col = t.block_idx[0] * p["BX"] + t.thread_idx[0]     # threadIdx.x walks columns of C: a warp shares a row
    row = t.block_idx[1] * p["BY"] + t.thread_idx[1]
    yield from _dot_product(t, row, col, M, N, K, "thread (x, y) owns C[blockIdx.y*BY + y, blockIdx.x*BX + x]")


def _dot_product(t: Thread, row: int, col: int, M: int, N: int, K: int, owner: str) -> Iterator[Mark]:
    """The body both direct rungs share: one dot product straight from global memory, then one store."""
    t.owns(row, col)
    if row >= M or col >= N:
        return
    yield Mark("launch", _launch_label(owner))
    acc = 0.0
    for k in range(K):
        acc = t.fma(row, col, k, acc, t.load_a(row, k), t.load_b(k, col))
        yield Mark("compute", f"k = {k}: each thread reads A[row, {k}] and B[{k}, col] from global memory "
                              f"and adds their product to its sum", step=k, k_done=k + 1, k=k)
    t.store_c(row, col, acc)
    yield Mark("store", "each thread writes its sum to C[row, col]", k_done=K)


# --------------------------------------------------------------------------------- 03 smem_tiled


def smem_tiled(t: Thread, M: int, N: int, K: int, p: dict[str, int]) -> Iterator[Mark]:
    BD = p["BLOCK_DIM"]
    tx, ty = t.thread_idx
    by, bx = grouped_tile(*t.block_idx, cdiv(M, BD), cdiv(N, BD), p["GROUP_M"])  # the tile this block computes
    row = by * BD + ty
    col = bx * BD + tx
    t.owns(row, col)
    yield Mark("launch", _launch_label(f"thread (tx, ty) of a {BD} x {BD} block owns C[row, col]"))
    steps = cdiv(K, BD)
    acc = 0.0
    k0 = 0
    # Blocks whose tile lies inside C take the unchecked loop for every full step along K; the checked
    # loop pads the rest with zeros. Both load the same elements, so both show as the same frames.
    if (by + 1) * BD <= M and (bx + 1) * BD <= N:
        while k0 + BD <= K:
            t.smem_write("As", ty, tx, t.load_a(row, k0 + tx))
            t.smem_write("Bs", ty, tx, t.load_b(k0 + ty, col))
            acc = yield from _smem_tiled_step(t, row, col, k0, K, BD, steps, acc)
            k0 += BD
    while k0 < K:
        if row < M and k0 + tx < K:
            t.smem_write("As", ty, tx, t.load_a(row, k0 + tx))
        else:
            t.smem_write("As", ty, tx, 0.0, padded=True)
        if k0 + ty < K and col < N:
            t.smem_write("Bs", ty, tx, t.load_b(k0 + ty, col))
        else:
            t.smem_write("Bs", ty, tx, 0.0, padded=True)
        acc = yield from _smem_tiled_step(t, row, col, k0, K, BD, steps, acc)
        k0 += BD
    if row < M and col < N:
        t.store_c(row, col, acc)
    yield Mark("store", "each thread inside C writes its sum to C[row, col]", k_done=K)


def _smem_tiled_step(t: Thread, row: int, col: int, k0: int, K: int, BD: int, steps: int, acc: float):
    """One K step after the tile loads: the barrier, BLOCK_DIM multiply-adds from shared memory, the barrier."""
    tx, ty = t.thread_idx
    step = k0 // BD
    yield Mark("load", f"step {step + 1}/{steps}: each thread copies A[row, {k0}+tx] to As[ty][tx] and "
                       f"B[{k0}+ty, col] to Bs[ty][tx] (0 past the edge); __syncthreads()",
               step=step, k_done=k0, sync=True)
    for k in range(BD):
        acc = t.fma(row, col, k0 + k, acc, t.smem_read("As", ty, k), t.smem_read("Bs", k, tx))
        last = k == BD - 1
        yield Mark("compute", f"step {step + 1}/{steps}, {_k_label(k0 + k, K)}: each thread adds "
                              f"As[ty][{k}] * Bs[{k}][tx] from shared memory to its sum"
                              + ("; __syncthreads()" if last else ""),
                   step=step, k_done=min(K, k0 + k + 1), sync=last, k=k0 + k)
    return acc


# --------------------------------------------------------------------------------- 04, 05 block tiles


def load_tile_zero_padded(t: Thread, dst: str, load: Callable[[int, int], float], rows: int, cols: int, nt: int,
                          r0: int, c0: int, rows_left: int, cols_left: int) -> None:
    """common.cuh's load_tile_zero_padded: the block's nt threads stride over a rows x cols tile."""
    for i in range(rows * cols // nt):
        e = t.tid + i * nt
        r, c = e // cols, e % cols
        if r < rows_left and c < cols_left:
            t.smem_write(dst, r, c, load(r0 + r, c0 + c))
        else:
            t.smem_write(dst, r, c, 0.0, padded=True)


def _tile_load_label(step: int, steps: int, k0: int, p: dict[str, int], nt: int) -> str:
    bm, bn, bk = p["BM"], p["BN"], p["BK"]
    return (f"step {step + 1}/{steps}: the {nt} threads copy the {bm} x {bk} tile of A (columns {k0}..{k0 + bk - 1}) "
            f"and the {bk} x {bn} tile of B (rows {k0}..{k0 + bk - 1}) to shared memory, "
            f"{bm * bk // nt} + {bk * bn // nt} elements each (0 past the edge); __syncthreads()")


def blocktile_1d(t: Thread, M: int, N: int, K: int, p: dict[str, int]) -> Iterator[Mark]:
    BM, BN, BK, TM = p["BM"], p["BN"], p["BK"], p["TM"]
    NT = BM * BN // TM
    tid = t.tid
    tcol = tid % BN
    trow = tid // BN
    row0, col0 = t.block_idx[1] * BM, t.block_idx[0] * BN
    for m in range(TM):
        t.owns(row0 + trow * TM + m, col0 + tcol)
    yield Mark("launch", _launch_label(f"thread tid owns a column of {TM} results: rows (tid / {BN})*{TM} + m, "
                                       f"column tid % {BN} of the block tile"))
    steps = cdiv(K, BK)
    acc = [0.0] * TM
    for step, k0 in enumerate(range(0, K, BK)):
        load_tile_zero_padded(t, "As", t.load_a, BM, BK, NT, row0, k0, M - row0, K - k0)
        load_tile_zero_padded(t, "Bs", t.load_b, BK, BN, NT, k0, col0, K - k0, N - col0)
        yield Mark("load", _tile_load_label(step, steps, k0, p, NT), step=step, k_done=k0, sync=True)
        for k in range(BK):
            b = t.smem_read("Bs", k, tcol)
            for m in range(TM):
                acc[m] = t.fma(row0 + trow * TM + m, col0 + tcol, k0 + k, acc[m],
                               t.smem_read("As", trow * TM + m, k), b)
            last = k == BK - 1
            yield Mark("compute", f"step {step + 1}/{steps}, {_k_label(k0 + k, K)}: each thread reads one B value "
                                  f"Bs[{k}][tcol] and {TM} A values As[trow*{TM} + m][{k}], {TM} multiply-adds"
                                  + ("; __syncthreads()" if last else ""),
                       step=step, k_done=min(K, k0 + k + 1), sync=last, k=k0 + k)
    col = col0 + tcol
    if col < N:
        for m in range(TM):
            row = row0 + trow * TM + m
            if row < M:
                t.store_c(row, col, acc[m])
    yield Mark("store", "each thread writes those of its results that lie inside C", k_done=K)


def blocktile_2d(t: Thread, M: int, N: int, K: int, p: dict[str, int]) -> Iterator[Mark]:
    BM, BN, BK, TM, TN = p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]
    TROWS, TCOLS = BM // TM, BN // TN
    NT = TROWS * TCOLS
    tid = t.tid
    tcol, trow = tid % TCOLS, tid // TCOLS
    row0, col0 = t.block_idx[1] * BM, t.block_idx[0] * BN
    for i in range(TM):
        for j in range(TN):
            t.owns(row0 + trow + i * TROWS, col0 + tcol + j * TCOLS)
    yield Mark("launch", _launch_label(f"thread tid owns {TM} x {TN} results, strided: rows trow + i*{TROWS}, "
                                       f"columns tcol + j*{TCOLS} (trow = tid / {TCOLS}, tcol = tid % {TCOLS})"))
    steps = cdiv(K, BK)
    acc = [[0.0] * TN for _ in range(TM)]
    for step, k0 in enumerate(range(0, K, BK)):
        load_tile_zero_padded(t, "As", t.load_a, BM, BK, NT, row0, k0, M - row0, K - k0)
        load_tile_zero_padded(t, "Bs", t.load_b, BK, BN, NT, k0, col0, K - k0, N - col0)
        yield Mark("load", _tile_load_label(step, steps, k0, p, NT), step=step, k_done=k0, sync=True)
        for k in range(BK):
            a = [t.smem_read("As", trow + i * TROWS, k) for i in range(TM)]
            b = [t.smem_read("Bs", k, tcol + j * TCOLS) for j in range(TN)]
            for i in range(TM):
                for j in range(TN):
                    acc[i][j] = t.fma(row0 + trow + i * TROWS, col0 + tcol + j * TCOLS, k0 + k, acc[i][j], a[i], b[j])
            last = k == BK - 1
            yield Mark("compute", f"step {step + 1}/{steps}, {_k_label(k0 + k, K)}: each thread reads {TM} values "
                                  f"of As and {TN} of Bs into registers and does their outer product, "
                                  f"{TM * TN} multiply-adds" + ("; __syncthreads()" if last else ""),
                       step=step, k_done=min(K, k0 + k + 1), sync=last, k=k0 + k)
    for i in range(TM):
        row = row0 + trow + i * TROWS
        if row >= M:
            continue
        for j in range(TN):
            col = col0 + tcol + j * TCOLS
            if col < N:
                t.store_c(row, col, acc[i][j])
    yield Mark("store", "each thread writes those of its results that lie inside C", k_done=K)


# --------------------------------------------------------------------------------- the model registry


@dataclass(frozen=True)
class RungModel:
    """How to simulate one rung, and how to make a small, readable picture of it."""

    program: Program
    smem: Callable[[dict[str, int]], dict[str, tuple[int, int]]]  # the __shared__ arrays: name -> (rows, cols)
    teaching: dict[str, int]                   # parameters for a picture of a few blocks (must pass validate)
    block: Callable[[int], dict[str, int]]     # what `--block B` sets
    tile: Callable[[dict[str, int]], tuple[int, int]]  # rows x columns of C per block
    watch: str                                 # what a reader should watch, one sentence


def _no_smem(p: dict[str, int]) -> dict[str, tuple[int, int]]:
    return {}


MODELS: dict[str, RungModel] = {
    "naive": RungModel(
        naive, _no_smem, {"BX": 2, "BY": 2}, lambda b: {"BX": b, "BY": b}, lambda p: (p["BX"], p["BY"]),
        "each thread reads a whole row of A and column of B from global memory: 2K loads per result; "
        "threadIdx.x walks rows, so a warp's threads read different rows of A"),
    "coalesced": RungModel(
        coalesced, _no_smem, {"BX": 2, "BY": 2}, lambda b: {"BX": b, "BY": b}, lambda p: (p["BY"], p["BX"]),
        "the same 2K loads per result, but threadIdx.x walks columns: a warp reads one A value and a run of "
        "consecutive B values"),
    "smem_tiled": RungModel(
        smem_tiled, lambda p: {"As": (p["BLOCK_DIM"],) * 2, "Bs": (p["BLOCK_DIM"],) * 2},
        {"BLOCK_DIM": 2, "GROUP_M": 1}, lambda b: {"BLOCK_DIM": b}, lambda p: (p["BLOCK_DIM"],) * 2,
        "per step each thread loads one element of A and one of B into shared memory; after the barrier the "
        "block reuses them BLOCK_DIM times each: BLOCK_DIM times fewer global loads"),
    "blocktile_1d": RungModel(
        blocktile_1d, lambda p: {"As": (p["BM"], p["BK"]), "Bs": (p["BK"], p["BN"])},
        {"BM": 16, "BN": 16, "BK": 4, "TM": 8}, lambda b: {"BM": b, "BN": b}, lambda p: (p["BM"], p["BN"]),
        "each thread owns a column of TM results and reuses each B value it reads from shared memory TM times"),
    "blocktile_2d": RungModel(
        blocktile_2d, lambda p: {"As": (p["BM"], p["BK"]), "Bs": (p["BK"], p["BN"])},
        {"BM": 16, "BN": 16, "BK": 4, "TM": 2, "TN": 2}, lambda b: {"BM": b, "BN": b}, lambda p: (p["BM"], p["BN"]),
        "each thread owns a strided TM x TN grid of results: per k, TM + TN shared loads feed TM*TN multiply-adds"),
}


def model_for(spec: KernelSpec) -> RungModel:
    try:
        return MODELS[spec.name]
    except KeyError:
        raise NoModelError(f"no execution model for rung {spec.rung:02d} {spec.name} yet; the visualiser models "
                           f"{', '.join(MODELS)} (add a program to gemmlab/viz/rungs.py)") from None


def resolve(kernel: str, params: dict[str, int] | None = None, block: int | None = None) -> tuple[KernelSpec, RungModel, dict[str, int]]:
    """The spec, its model, and the parameters: teaching defaults, then `block`, then `params`, validated."""
    spec = registry.get(kernel)
    model = model_for(spec)
    p = dict(model.teaching)
    if block is not None:
        p.update(model.block(block))
    p.update(params or {})
    return spec, model, spec.validate(p)


def run(kernel: str, m: int, n: int | None = None, k: int | None = None, params: dict[str, int] | None = None,
        block: int | None = None, seed: int = 0, max_events: int | None = None) -> Trace:
    """Simulate `kernel` on an m x k by k x n product (n and k default to m)."""
    spec, model, p = resolve(kernel, params, block)
    n = m if n is None else n
    k = m if k is None else k
    for name, v in (("M", m), ("N", n), ("K", k)):
        if v < 1:
            raise ValueError(f"{name} = {v}: the visualiser needs sizes of at least 1")
    extra = {} if max_events is None else {"max_events": max_events}
    return simulate(spec, model.program, model.smem(p), m, n, k, p, seed=seed, **extra)


def default_size(kernel: str, params: dict[str, int] | None = None, block: int | None = None) -> int:
    """A square size that gives a 2 x 2 grid of blocks: enough to see blocks share the operands."""
    _, model, p = resolve(kernel, params, block)
    return 2 * max(model.tile(p))
