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

from dataclasses import dataclass, field
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


# --------------------------------------------------------------------------------- 06-09: 16-byte accesses


def rows_are_16B_aligned(ld: int) -> bool:
    """tile_io.cuh's rows_are_16B_aligned for the model's matrices: their bases are aligned, so the rows are
    when the leading dimension is a multiple of 4 floats."""
    return ld % 4 == 0


def load4_zero_padded(load: Callable[[int, int], float], load4: Callable[[int, int], list[float]], r: int, c: int,
                      left: int, vec: bool) -> tuple[list[float], list[bool]]:
    """tile_io.cuh's load4_zero_padded: row r, columns c .. c+3, of which `left` lie inside (the rest read as 0).
    One 16-byte load when `vec` and all four are in, else one 4-byte load per element inside. Returns the
    four values and which of them are padding."""
    if vec and left >= 4:
        return load4(r, c), [False] * 4
    return [load(r, c + j) if left > j else 0.0 for j in range(4)], [left <= j for j in range(4)]


def store4_c(t: Thread, row: int, col: int, acc: list[float], left: int, vec: bool) -> None:
    """tile_io.cuh's store4_c: C[row, col .. col+3] for the `left` of them inside C, 16 bytes at once where it can."""
    if vec and left >= 4:
        t.store_c4(row, col, acc)
        return
    for j in range(4):
        if j < left:
            t.store_c(row, col + j, acc[j])


def load_step_tiles(t: Thread, BM: int, BN: int, BK: int, NT: int, row0: int, col0: int, k0: int, M: int, N: int,
                    K: int, vec_a: bool, vec_b: bool) -> None:
    """tile_io.cuh's load_step_tiles (rungs 06-08; rung 09 splits it into load_global and store_shared).

    The A tile is read as float4 along K and stored transposed, As[k][m], as four 4-byte stores; the B tile
    as float4 and stored as it lies, Bs[k][n], in one 16-byte store. As's row stride (BM, or BM + 4 with
    padding) is the shape of the shared array, so it does not appear here."""
    for i in range(BM * BK // 4 // NT):
        e = t.tid + i * NT
        r, kq = e // (BK // 4), (e % (BK // 4)) * 4
        row = row0 + r
        v, pad = load4_zero_padded(t.load_a, t.load_a4, row, k0 + kq, K - k0 - kq if row < M else 0, vec_a)
        for j in range(4):
            t.smem_write("As", kq + j, r, v[j], pad[j])                  # As[(kq + j) * BMP + r]
    for i in range(BK * BN // 4 // NT):
        e = t.tid + i * NT
        r, c = e // (BN // 4), (e % (BN // 4)) * 4
        krow = k0 + r
        v, pad = load4_zero_padded(t.load_b, t.load_b4, krow, col0 + c, N - col0 - c if krow < K else 0, vec_b)
        t.smem_write4("Bs", r, c, v, pad)                                # *(float4*)&Bs[r * BN + c]


def store_grouped_tile(t: Thread, TM: int, TN: int, ROW_STEP: int, COL_STEP: int, row0: int, col0: int, M: int,
                       N: int, acc: list[list[float]], vec: bool) -> None:
    """tile_io.cuh's store_grouped_tile: result (i, j) to row row0 + (i / 4) * ROW_STEP + i % 4, column
    col0 + (j / 4) * COL_STEP + j % 4, four columns at a time."""
    for i in range(TM):
        row = row0 + (i // 4) * ROW_STEP + i % 4
        for g in range(TN // 4):
            col = col0 + g * COL_STEP
            store4_c(t, row, col, acc[i][4 * g:4 * g + 4], N - col if row < M else 0, vec)


def _own(t: Thread, rows: list[int], cols: list[int]) -> None:
    for r in rows:
        for c in cols:
            t.owns(r, c)


def _vec_load_label(step: int, steps: int, k0: int, p: dict[str, int], nt: int, As: str = "As", Bs: str = "Bs") -> str:
    bm, bn, bk = p["BM"], p["BN"], p["BK"]
    return (f"step {step + 1}/{steps}: the {nt} threads read the {bm} x {bk} tile of A (columns {k0}..{k0 + bk - 1}) "
            f"and the {bk} x {bn} tile of B (rows {k0}..{k0 + bk - 1}) as float4, {bm * bk // 4 // nt} + "
            f"{bk * bn // 4 // nt} each (16-byte loads where the rows are aligned and all four lie inside, else "
            f"float by float; 0 past the edge); A goes to {As} transposed ({As}[k][m]: four 4-byte stores), "
            f"B to {Bs} as it lies (one 16-byte store); __syncthreads()")


def _outer_products(t: Thread, step: int, steps: int, k0: int, K: int, BK: int, a_cols: list[int], b_cols: list[int],
                    rows: list[int], cols: list[int], acc: list[list[float]]) -> Iterator[Mark]:
    """The k loop of rungs 06-08: per k, one 16-byte load of As[k][m .. m+3] for each m of a_cols and of
    Bs[k][n .. n+3] for each n of b_cols, then the outer product into the TM x TN accumulators."""
    for k in range(BK):
        a = [x for m in a_cols for x in t.smem_read4("As", k, m)]
        b = [x for n in b_cols for x in t.smem_read4("Bs", k, n)]
        for i, row in enumerate(rows):
            for j, col in enumerate(cols):
                acc[i][j] = t.fma(row, col, k0 + k, acc[i][j], a[i], b[j])
        last = k == BK - 1
        yield Mark("compute", f"step {step + 1}/{steps}, {_k_label(k0 + k, K)}: each thread loads {len(a_cols)} float4 "
                              f"of As[{k}][...] and {len(b_cols)} of Bs[{k}][...] ({len(a_cols) + len(b_cols)} LDS.128 "
                              f"for {len(rows) + len(cols)} values) and does their outer product, "
                              f"{len(rows) * len(cols)} multiply-adds" + ("; __syncthreads()" if last else ""),
                   step=step, k_done=min(K, k0 + k + 1), sync=last, k=k0 + k)


def vectorized(t: Thread, M: int, N: int, K: int, p: dict[str, int]) -> Iterator[Mark]:
    BM, BN, BK, TM, TN = p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]
    TCOLS = BN // TN
    NT = (BM // TM) * TCOLS
    tid = t.tid
    tcol, trow = tid % TCOLS, tid // TCOLS
    row0, col0 = t.block_idx[1] * BM, t.block_idx[0] * BN
    vec_a, vec_b, vec_c = rows_are_16B_aligned(K), rows_are_16B_aligned(N), rows_are_16B_aligned(N)
    # The thread's tile is contiguous: rows trow*TM + i, columns tcol*TN + j.
    rows = [row0 + trow * TM + i for i in range(TM)]
    cols = [col0 + tcol * TN + j for j in range(TN)]
    _own(t, rows, cols)
    yield Mark("launch", _launch_label(f"thread tid owns a contiguous {TM} x {TN} tile: rows trow*{TM} + i, columns "
                                       f"tcol*{TN} + j of the block tile (trow = tid / {TCOLS}, tcol = tid % {TCOLS})"))
    steps = cdiv(K, BK)
    acc = [[0.0] * TN for _ in range(TM)]
    for step, k0 in enumerate(range(0, K, BK)):
        load_step_tiles(t, BM, BN, BK, NT, row0, col0, k0, M, N, K, vec_a, vec_b)
        yield Mark("load", _vec_load_label(step, steps, k0, p, NT), step=step, k_done=k0, sync=True)
        yield from _outer_products(t, step, steps, k0, K, BK, [trow * TM + i for i in range(0, TM, 4)],
                                   [tcol * TN + j for j in range(0, TN, 4)], rows, cols, acc)
    for i in range(TM):
        row = row0 + trow * TM + i
        for j in range(0, TN, 4):
            col = col0 + tcol * TN + j
            store4_c(t, row, col, acc[i][j:j + 4], N - col if row < M else 0, vec_c)
    yield Mark("store", "each thread writes its results inside C, four at a time (16-byte stores where the rows "
                        "are aligned and all four lie inside)", k_done=K)


def conflict_free(t: Thread, M: int, N: int, K: int, p: dict[str, int]) -> Iterator[Mark]:
    BM, BN, BK, TM, TN = p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]
    TROWS, TCOLS = BM // TM, BN // TN
    NT = TROWS * TCOLS
    tid = t.tid
    tcol, trow = tid % TCOLS, tid // TCOLS
    row0, col0 = t.block_idx[1] * BM, t.block_idx[0] * BN
    vec_a, vec_b, vec_c = rows_are_16B_aligned(K), rows_are_16B_aligned(N), rows_are_16B_aligned(N)
    # 4 x 4 groups spread over the block tile: rows g*(4*TROWS) + trow*4 + 0..3, columns g*(4*TCOLS) + tcol*4 + 0..3.
    rows = [row0 + (i // 4) * 4 * TROWS + trow * 4 + i % 4 for i in range(TM)]
    cols = [col0 + (j // 4) * 4 * TCOLS + tcol * 4 + j % 4 for j in range(TN)]
    _own(t, rows, cols)
    yield Mark("launch", _launch_label(f"thread tid owns {TM // 4} x {TN // 4} groups of 4 x 4 results spread over "
                                       f"the block tile: rows g*{4 * TROWS} + trow*4 + 0..3, columns g*{4 * TCOLS} + "
                                       f"tcol*4 + 0..3 (trow = tid / {TCOLS}, tcol = tid % {TCOLS})"))
    steps = cdiv(K, BK)
    acc = [[0.0] * TN for _ in range(TM)]
    for step, k0 in enumerate(range(0, K, BK)):
        load_step_tiles(t, BM, BN, BK, NT, row0, col0, k0, M, N, K, vec_a, vec_b)
        yield Mark("load", _vec_load_label(step, steps, k0, p, NT), step=step, k_done=k0, sync=True)
        yield from _outer_products(t, step, steps, k0, K, BK, [g * 4 * TROWS + trow * 4 for g in range(TM // 4)],
                                   [g * 4 * TCOLS + tcol * 4 for g in range(TN // 4)], rows, cols, acc)
    store_grouped_tile(t, TM, TN, 4 * TROWS, 4 * TCOLS, row0 + trow * 4, col0 + tcol * 4, M, N, acc, vec_c)
    yield Mark("store", "each thread writes its 4 x 4 groups inside C, four results at a time", k_done=K)


def _warp_map(t: Thread, p: dict[str, int]) -> tuple[int, int, int, int, int, int, int]:
    """Rungs 08 and 09: (NT, LROWS, LCOLS, wm, wn, tr, tc): the warp tile's corner and the lane's place in it."""
    BM, BN, WM, WN, TM, TN = p["BM"], p["BN"], p["WM"], p["WN"], p["TM"], p["TN"]
    WARPS_N = BN // WN
    NT = (BM // WM) * WARPS_N * 32
    LROWS, LCOLS = WM // TM, WN // TN          # the lane grid inside a warp
    lane, warp = t.tid % 32, t.tid // 32
    wm, wn = (warp // WARPS_N) * WM, (warp % WARPS_N) * WN
    tr, tc = lane // LCOLS, lane % LCOLS
    return NT, LROWS, LCOLS, wm, wn, tr, tc


def _warp_label(p: dict[str, int], LROWS: int, LCOLS: int) -> str:
    return (f"warp w owns the {p['WM']} x {p['WN']} warp tile at (wm, wn); its 32 lanes form a {LROWS} x {LCOLS} grid "
            f"of thread tiles in it, each {p['TM'] // 4} x {p['TN'] // 4} groups of 4 x 4: rows wm + g*{4 * LROWS} + "
            f"tr*4 + 0..3, columns wn + g*{4 * LCOLS} + tc*4 + 0..3 (tr = lane / {LCOLS}, tc = lane % {LCOLS})")


def warptile(t: Thread, M: int, N: int, K: int, p: dict[str, int]) -> Iterator[Mark]:
    BM, BN, BK, TM, TN = p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]
    NT, LROWS, LCOLS, wm, wn, tr, tc = _warp_map(t, p)
    row0, col0 = t.block_idx[1] * BM, t.block_idx[0] * BN
    vec_a, vec_b, vec_c = rows_are_16B_aligned(K), rows_are_16B_aligned(N), rows_are_16B_aligned(N)
    rows = [row0 + wm + (i // 4) * 4 * LROWS + tr * 4 + i % 4 for i in range(TM)]
    cols = [col0 + wn + (j // 4) * 4 * LCOLS + tc * 4 + j % 4 for j in range(TN)]
    _own(t, rows, cols)
    yield Mark("launch", _launch_label(_warp_label(p, LROWS, LCOLS)))
    steps = cdiv(K, BK)
    acc = [[0.0] * TN for _ in range(TM)]
    for step, k0 in enumerate(range(0, K, BK)):
        load_step_tiles(t, BM, BN, BK, NT, row0, col0, k0, M, N, K, vec_a, vec_b)
        yield Mark("load", _vec_load_label(step, steps, k0, p, NT), step=step, k_done=k0, sync=True)
        yield from _outer_products(t, step, steps, k0, K, BK, [wm + g * 4 * LROWS + tr * 4 for g in range(TM // 4)],
                                   [wn + g * 4 * LCOLS + tc * 4 for g in range(TN // 4)], rows, cols, acc)
    store_grouped_tile(t, TM, TN, 4 * LROWS, 4 * LCOLS, row0 + wm + tr * 4, col0 + wn + tc * 4, M, N, acc, vec_c)
    yield Mark("store", "each thread writes its 4 x 4 groups inside C, four results at a time", k_done=K)


def pipelined(t: Thread, M: int, N: int, K: int, p: dict[str, int]) -> Iterator[Mark]:
    BM, BN, BK, TM, TN = p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]
    NT, LROWS, LCOLS, wm, wn, tr, tc = _warp_map(t, p)
    A_PER, B_PER = BM * BK // 4 // NT, BK * BN // 4 // NT      # float4 loads per thread and step
    tid = t.tid
    row0, col0 = t.block_idx[1] * BM, t.block_idx[0] * BN
    vec_a, vec_b, vec_c = rows_are_16B_aligned(K), rows_are_16B_aligned(N), rows_are_16B_aligned(N)

    # Where this thread's float4s of each tile come from and go to (fixed for the whole loop).
    a_r = [(tid + i * NT) // (BK // 4) for i in range(A_PER)]
    a_kq = [((tid + i * NT) % (BK // 4)) * 4 for i in range(A_PER)]
    b_r = [(tid + i * NT) // (BN // 4) for i in range(B_PER)]
    b_c = [((tid + i * NT) % (BN // 4)) * 4 for i in range(B_PER)]
    ra: list[tuple[list[float], list[bool]]] = []     # the register stage: float4s (and which are padding)
    rb: list[tuple[list[float], list[bool]]] = []

    def load_global(k0: int) -> None:
        ra[:] = [load4_zero_padded(t.load_a, t.load_a4, row0 + a_r[i], k0 + a_kq[i],
                                   K - k0 - a_kq[i] if row0 + a_r[i] < M else 0, vec_a) for i in range(A_PER)]
        rb[:] = [load4_zero_padded(t.load_b, t.load_b4, k0 + b_r[i], col0 + b_c[i],
                                   N - col0 - b_c[i] if k0 + b_r[i] < K else 0, vec_b) for i in range(B_PER)]

    def store_shared(buf: int) -> None:      # As[buf] is rows buf*BK .. of the (2*BK) x (BM + 4) array
        for i in range(A_PER):
            v, pad = ra[i]
            for j in range(4):
                t.smem_write("As", buf * BK + a_kq[i] + j, a_r[i], v[j], pad[j])
        for i in range(B_PER):
            t.smem_write4("Bs", buf * BK + b_r[i], b_c[i], *rb[i])

    a: list[list[float]] = [[], []]    # two fragment sets: k + 1's are read while k's are multiplied
    b: list[list[float]] = [[], []]

    def load_fragments(buf: int, k: int, slot: int) -> None:
        a[slot] = [x for g in range(TM // 4) for x in t.smem_read4("As", buf * BK + k, wm + g * 4 * LROWS + tr * 4)]
        b[slot] = [x for g in range(TN // 4) for x in t.smem_read4("Bs", buf * BK + k, wn + g * 4 * LCOLS + tc * 4)]

    rows = [row0 + wm + (i // 4) * 4 * LROWS + tr * 4 + i % 4 for i in range(TM)]
    cols = [col0 + wn + (j // 4) * 4 * LCOLS + tc * 4 + j % 4 for j in range(TN)]
    _own(t, rows, cols)
    yield Mark("launch", _launch_label(_warp_label(p, LROWS, LCOLS) + "; As and Bs hold two buffers each"))
    steps = cdiv(K, BK)
    acc = [[0.0] * TN for _ in range(TM)]
    load_global(0)
    store_shared(0)
    yield Mark("load", "before the loop, " + _vec_load_label(0, steps, 0, p, NT, As="As[0]", Bs="Bs[0]"),
               step=0, k_done=0, sync=True)
    buf = 0
    for step, k0 in enumerate(range(0, K, BK)):
        has_next = k0 + BK < K
        if has_next:
            load_global(k0 + BK)          # in flight during the math below
        load_fragments(buf, 0, 0)
        for k in range(BK):
            if k + 1 < BK:
                load_fragments(buf, k + 1, (k + 1) % 2)
            for i, row in enumerate(rows):
                for j, col in enumerate(cols):
                    acc[i][j] = t.fma(row, col, k0 + k, acc[i][j], a[k % 2][i], b[k % 2][j])
            yield Mark("compute", _pipelined_label(step, steps, k0, k, K, BK, buf, has_next, TM * TN),
                       step=step, k_done=min(K, k0 + k + 1), sync=k == BK - 1 and not has_next, k=k0 + k)
        if has_next:
            store_shared(buf ^ 1)         # the other buffer was last read before the previous barrier
            yield Mark("load", f"step {step + 1}/{steps} ends: the registers, holding tile {step + 2} (A columns "
                               f"{k0 + BK}..{k0 + 2 * BK - 1}, B rows {k0 + BK}..{k0 + 2 * BK - 1}), go to buffer "
                               f"{buf ^ 1} of As and Bs (As transposed: four 4-byte stores per float4), while buffer "
                               f"{buf} still holds tile {step + 1}; __syncthreads()",
                       step=step + 1, k_done=k0 + BK, sync=True)
        buf ^= 1
    store_grouped_tile(t, TM, TN, 4 * LROWS, 4 * LCOLS, row0 + wm + tr * 4, col0 + wn + tc * 4, M, N, acc, vec_c)
    yield Mark("store", "each thread writes its 4 x 4 groups inside C, four results at a time", k_done=K)


def _pipelined_label(step: int, steps: int, k0: int, k: int, K: int, BK: int, buf: int, has_next: bool,
                     fmas: int) -> str:
    head = f"step {step + 1}/{steps} on buffer {buf}, {_k_label(k0 + k, K)}: "
    if k == 0:
        head += (f"the global loads of tile {step + 2} go out to registers and stay in flight during this step's math; "
                 if has_next else "no tile left to load; ")
        head += f"each thread reads its fragments for k = {k0} into register set 0"
        if k + 1 < BK:
            head += f" and for k = {k0 + 1} into set 1"
    elif k + 1 < BK:
        head += f"each thread reads its fragments for k = {k0 + k + 1} into set {(k + 1) % 2}"
    else:
        head += "the tile's last k: no fragments to read"
    head += f", and multiplies set {k % 2}: {fmas} multiply-adds"
    if k == BK - 1 and not has_next:
        head += "; __syncthreads()"
    return head


# --------------------------------------------------------------------------------- the model registry


@dataclass(frozen=True)
class RungModel:
    """How to simulate one rung, and how to make a small, readable picture of it."""

    program: Program
    # The __shared__ arrays: name -> (rows, cols), cols being the row stride in floats (padding included),
    # so that (r, c) is the word r * cols + c of the array, as in the CUDA source.
    smem: Callable[[dict[str, int]], dict[str, tuple[int, int]]]
    teaching: dict[str, int]                   # parameters for a picture of a few blocks (must pass validate)
    block: Callable[[int], dict[str, int]]     # what `--block B` sets
    tile: Callable[[dict[str, int]], tuple[int, int]]  # rows x columns of C per block
    watch: str                                 # what a reader should watch, one sentence
    size_tiles: float = 2.0                    # the default size, in block tiles (2: a 2 x 2 grid of whole tiles)
    smem_titles: dict[str, str] = field(default_factory=dict)  # how the panels of As and Bs are indexed
    banks_before: str | None = None            # the rung whose shared-memory layout this one changes


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
    # Rungs 06-09 at 32 x 32 block tiles and 1.5 tiles (48): a 2 x 2 grid whose last row and column of blocks
    # overhang C by half, about 300,000 events. Two tiles (64) would pass the HTML page's 400,000.
    "vectorized": RungModel(
        vectorized, lambda p: {"As": (p["BK"], p["BM"]), "Bs": (p["BK"], p["BN"])},
        {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 8}, lambda b: {"BM": b, "BN": b}, lambda p: (p["BM"], p["BN"]),
        "blocktile_2d's algorithm with accesses four words wide: A and B arrive as float4 (one instruction, four "
        "elements), As is stored transposed (As[k][m]) so that a thread's TM values of A for one k lie side by side, "
        "and each k takes (TM + TN)/4 LDS.128 instead of TM + TN loads; the thread tile is contiguous",
        size_tiles=1.5, smem_titles={"As": "As[k][m] (A transposed)", "Bs": "Bs[k][n]"}),
    "conflict_free": RungModel(
        conflict_free, lambda p: {"As": (p["BK"], p["BM"] + 4), "Bs": (p["BK"], p["BN"])},
        {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 8}, lambda b: {"BM": b, "BN": b}, lambda p: (p["BM"], p["BN"]),
        "the counts of rung 06, but each thread's results are 4 x 4 groups spread over the block tile and As has 4 "
        "columns of padding, so that no warp access to shared memory splits over banks "
        "(gemmlab visualize conflict_free --banks shows which lane hits which bank)",
        size_tiles=1.5, smem_titles={"As": "As[k][m], 4 columns of padding", "Bs": "Bs[k][n]"},
        banks_before="vectorized"),
    "warptile": RungModel(
        warptile, lambda p: {"As": (p["BK"], p["BM"] + 4), "Bs": (p["BK"], p["BN"])},
        {"BM": 32, "BN": 32, "BK": 8, "WM": 32, "WN": 16, "TM": 4, "TN": 4}, lambda b: {"BM": b, "BN": b},
        lambda p: (p["BM"], p["BN"]),
        "block tile, then warp tiles, then thread tiles: the 32 lanes of a warp form a grid of thread tiles inside "
        "the warp's own WM x WN tile (focus on a warp), so a warp reads few distinct float4 of As and Bs per k and "
        "the other lanes get broadcasts",
        size_tiles=1.5, smem_titles={"As": "As[k][m], 4 columns of padding", "Bs": "Bs[k][n]"}),
    "pipelined": RungModel(
        pipelined, lambda p: {"As": (2 * p["BK"], p["BM"] + 4), "Bs": (2 * p["BK"], p["BN"])},
        {"BM": 32, "BN": 32, "BK": 8, "WM": 32, "WN": 16, "TM": 4, "TN": 4}, lambda b: {"BM": b, "BN": b},
        lambda p: (p["BM"], p["BN"]),
        "two buffers of As and Bs (the upper and lower halves): while the threads compute on one, the next tile's "
        "global loads are in flight into registers, which then go to the other buffer; one barrier per step",
        size_tiles=1.5,
        smem_titles={"As": "As[buf][k][m]: buffer 0 above, 1 below", "Bs": "Bs[buf][k][n]: 0 above, 1 below"}),
}


def model_for(spec: KernelSpec) -> RungModel:
    try:
        return MODELS[spec.name]
    except KeyError:
        raise NoModelError(f"no execution model for rung {spec.rung:02d} {spec.name} yet; the visualiser models "
                           f"{', '.join(MODELS)} (add a program to gemmlab/viz/rungs.py)") from None


def resolve(kernel: str, params: dict[str, int] | None = None, block: int | None = None,
            teaching: bool = True) -> tuple[KernelSpec, RungModel, dict[str, int]]:
    """The spec, its model, and the parameters: teaching defaults (or, with `teaching` off, the spec's own),
    then `block`, then `params`, validated."""
    spec = registry.get(kernel)
    model = model_for(spec)
    p = dict(model.teaching) if teaching else spec.defaults
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
    return int(model.size_tiles * max(model.tile(p)))
