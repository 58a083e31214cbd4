"""The execution model: its counts against the specs' analytic models, its thread maps against the CUDA
sources, a 4 x 4 example, and the rules it enforces (races, barriers, bounds)."""

from __future__ import annotations

import numpy as np
import pytest

from gemmlab import viz
from gemmlab.kernels import all_specs, cdiv, get
from gemmlab.viz import rungs
from gemmlab.viz.model import (A_LOAD, AS_READ, AS_WRITE, B_LOAD, BS_READ, BS_WRITE, C_STORE, FMA, GLOBAL_LOADS,
                               OWN, SMEM_READS, Mark, ModelError, simulate)

LADDER = ("naive", "coalesced", "smem_tiled", "blocktile_1d", "blocktile_2d", "vectorized", "conflict_free", "warptile",
          "pipelined")


# ------------------------------------------------------------------------------------------ the registries


def test_every_model_is_a_registered_rung_and_the_first_nine_are_modelled():
    names = {s.name for s in all_specs()}
    assert set(viz.MODELS) <= names, f"models for rungs the registry does not have: {set(viz.MODELS) - names}"
    assert set(LADDER) <= set(viz.MODELS)


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.name)
def test_each_rung_is_modelled_or_reported_clearly(spec):
    if spec.name in viz.MODELS:
        model = viz.model_for(spec)
        p = spec.validate(model.teaching)           # the teaching parameters are runnable ones
        assert set(p) == {q.name for q in spec.params}
        trace = viz.run(spec.name, viz.default_size(spec.name))
        assert trace.disagreements() == []
    else:
        with pytest.raises(viz.NoModelError, match=f"no execution model for rung {spec.rung:02d} {spec.name}"):
            viz.run(spec.name, 8)


def test_unknown_kernels_are_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="smem_tiled"):
        viz.run("no_such_rung", 4)


# ------------------------------------------------------------------------------------------ a 4 x 4 example


def test_seed_001_eight_reads_per_thread_naive_four_tiled():
    naive = viz.run("naive", 4, block=2)
    tiled = viz.run("smem_tiled", 4, block=2)
    assert naive.blocks == tiled.blocks == 4 and naive.threads_per_block == tiled.threads_per_block == 4
    for trace, each in ((naive, 8), (tiled, 4)):
        per_thread = [trace.count(GLOBAL_LOADS, thread=t) for t in range(trace.threads)]
        assert per_thread == [each] * 16, trace.spec.name
        assert trace.loads_per_thread() == each == trace.spec.loads_per_thread(4, 4, 4, trace.params)
        assert np.array_equal(trace.c, trace.a @ trace.b)


def test_seed_001_one_thread_step_by_step():
    """Thread 5 = block (1, 0), thread (1, 0): it computes C[0, 3]; per step it copies A[0, k0 + 1] and
    B[k0, 3] into As[0][1] and Bs[0][1], waits, then reads row 0 of As and column 1 of Bs."""
    trace = viz.run("smem_tiled", 4, block=2)
    assert [mk.phase for mk in trace.frames] == ["launch", "load", "compute", "compute", "load", "compute", "compute", "store"]
    assert [mk.sync for mk in trace.frames] == [False, True, False, True, True, False, True, False]
    assert trace.owned(5) == [(0, 3)]
    for step, (load, k_frames) in enumerate(((1, (2, 3)), (4, (5, 6)))):
        k0 = 2 * step
        assert trace.cells(A_LOAD, frame=load, thread=5) == {(0, k0 + 1)}
        assert trace.cells(B_LOAD, frame=load, thread=5) == {(k0, 3)}
        assert trace.cells(AS_WRITE, frame=load, thread=5) == trace.cells(BS_WRITE, frame=load, thread=5) == {(0, 1)}
        block = trace.block_of(5)
        assert trace.cells(AS_WRITE, frame=load, block=block) == {(0, 0), (0, 1), (1, 0), (1, 1)}
        for k, f in enumerate(k_frames):
            assert trace.cells(AS_READ, frame=f, thread=5) == {(0, k)}
            assert trace.cells(BS_READ, frame=f, thread=5) == {(k, 1)}
            assert trace.cells(FMA, frame=f, thread=5) == {(0, 3)}
            assert trace.count(GLOBAL_LOADS, frame=f) == 0
    assert trace.cells(C_STORE, frame=7, thread=5) == {(0, 3)}
    assert trace.c[0, 3] == trace.a[0] @ trace.b[:, 3]


# ------------------------------------------------------------------------------------------ counts = spec


SIZES = [(1, 1, 1), (4, 4, 4), (5, 7, 3), (9, 4, 6), (13, 11, 17), (16, 16, 16), (17, 18, 19)]
CASES = (
    [("naive", s, p) for s in SIZES for p in ({"BX": 1, "BY": 1}, {"BX": 2, "BY": 3}, {"BX": 4, "BY": 2}, {"BX": 8, "BY": 8})]
    + [("coalesced", s, p) for s in SIZES for p in ({"BX": 2, "BY": 2}, {"BX": 8, "BY": 1}, {"BX": 3, "BY": 4})]
    + [("smem_tiled", s, {"BLOCK_DIM": bd}) for s in SIZES for bd in (2, 3, 4, 5, 8)]
    + [("blocktile_1d", s, dict(zip(("BM", "BN", "BK", "TM"), p)))
       for s in SIZES[1:] for p in ((16, 16, 4, 8), (32, 16, 4, 16), (16, 32, 8, 16), (16, 16, 8, 4), (16, 16, 8, 2))]
    + [("blocktile_2d", s, dict(zip(("BM", "BN", "BK", "TM", "TN"), p)))
       for s in SIZES[1:] for p in ((16, 16, 4, 2, 2), (16, 32, 4, 2, 4), (32, 16, 8, 4, 2), (16, 16, 8, 1, 4), (32, 32, 4, 4, 4))]
)
# Rungs 06-09 read in float4 where the rows allow: K and N multiples of 4 take the 16-byte paths, the others
# (and every edge) the float-by-float ones, so the shapes mix both. 32 x 32 block tiles: one to four blocks;
# thread tiles 8 wide in one dimension or the other, so that 4 x 4 groups repeat along rows and columns, and
# for rungs 08-09 two warps side by side.
VEC_SIZES = [(5, 7, 3), (33, 35, 9), (32, 32, 16), (40, 36, 12)]
VEC_CASES = (
    [(name, s, dict(zip(("BM", "BN", "BK", "TM", "TN"), p)))
     for name in ("vectorized", "conflict_free") for s in VEC_SIZES for p in ((32, 32, 8, 4, 8), (32, 32, 4, 8, 4))]
    + [(name, s, dict(zip(("BM", "BN", "BK", "WM", "WN", "TM", "TN"), p)))
       for name in ("warptile", "pipelined") for s in VEC_SIZES
       for p in ((32, 32, 8, 32, 16, 4, 4), (32, 32, 4, 32, 32, 8, 4))]
)


@pytest.mark.parametrize("kernel,mnk,params", CASES + VEC_CASES, ids=lambda v: str(v).replace(" ", ""))
def test_counts_equal_the_spec_model(kernel, mnk, params):
    m, n, k = mnk
    trace = viz.run(kernel, m, n, k, params=params)
    spec, p = trace.spec, trace.params
    want = spec.traffic(m, n, k, p)
    got = trace.traffic()
    assert (got.a_loads, got.b_loads, got.c_stores, got.smem_loads) == \
        (want.a_loads, want.b_loads, want.c_stores, want.smem_loads)
    assert trace.loads_per_thread() == pytest.approx(spec.loads_per_thread(m, n, k, p), rel=1e-12)
    # the launch is the spec's, every thread computes the spec's number of outputs, each C element once
    launch = spec.launch(m, n, k, p)
    assert trace.threads == launch.blocks * launch.threads_per_block
    owns = np.bincount(trace.events["thread"][trace.select(OWN)], minlength=trace.threads)
    assert set(owns.tolist()) == {spec.outputs_per_thread(p)}
    stored = trace.events["r"][trace.select(C_STORE)] * n + trace.events["c"][trace.select(C_STORE)]
    assert sorted(stored.tolist()) == list(range(m * n))
    assert np.array_equal(trace.c, trace.a @ trace.b)          # small integers: exact


def test_every_thread_of_a_tiled_rung_loads_its_share_of_each_tile():
    """load_tile_zero_padded: thread tid of NT writes tile elements tid, tid + NT, ...: (BM*BK + BK*BN)/NT
    shared stores per step, padding included, and one global load for each element inside the matrices."""
    p = {"BM": 16, "BN": 32, "BK": 4, "TM": 2, "TN": 4}
    trace = viz.run("blocktile_2d", 21, 40, 10, params=p)
    nt = (16 // 2) * (32 // 4)
    steps = cdiv(10, 4)
    for t in range(trace.threads):
        tid = t % nt
        writes = trace.cells(AS_WRITE, thread=t)
        assert writes == {divmod(e, 4) for e in range(tid, 16 * 4, nt)}
        assert trace.count((AS_WRITE, BS_WRITE), thread=t) == steps * (16 * 4 + 4 * 32) // nt
    # the last step's padding: columns 10, 11 of the A tile hold zeros and were not loaded
    pads = trace.select(AS_WRITE) & (trace.events["aux"] == 1)
    assert set(trace.events["c"][pads].tolist()) >= {2, 3}


def test_blocktile_2d_threads_own_strided_tiles():
    p = {"BM": 32, "BN": 16, "BK": 8, "TM": 4, "TN": 2}
    trace = viz.run("blocktile_2d", 40, params=p)
    trows, tcols = 32 // 4, 16 // 2
    for t in (0, 1, 9, 63, 64 + 17):
        blk, tid = divmod(t, trows * tcols)
        bx, by = blk % trace.launch.grid[0], blk // trace.launch.grid[0]
        trow, tcol = tid // tcols, tid % tcols
        want = [(by * 32 + trow + i * trows, bx * 16 + tcol + j * tcols) for i in range(4) for j in range(2)]
        assert trace.owned(t) == want


def test_blocktile_1d_threads_own_a_column():
    trace = viz.run("blocktile_1d", 32, params={"BM": 16, "BN": 16, "BK": 4, "TM": 8})
    # thread 17 of block 0: tcol = 17 % 16 = 1, trow = 1: rows 8..15 of column 1
    assert trace.owned(17) == [(r, 1) for r in range(8, 16)]
    assert trace.count(AS_READ, frame=2, thread=17) == 8 and trace.count(BS_READ, frame=2, thread=17) == 1


def test_vectorized_threads_own_contiguous_tiles_and_conflict_free_spreads_them_in_groups():
    """06: rows trow*TM + i, columns tcol*TN + j. 07: the same thread owns 4 x 4 groups, columns
    g*4*TCOLS + tcol*4 + 0..3 (TCOLS = BN/TN = 4 here: groups 16 columns apart)."""
    p = {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 8}
    vec = viz.run("vectorized", 64, 64, 8, params=p)
    cf = viz.run("conflict_free", 64, 64, 8, params=p)
    t = 32 + 5                # block (1, 0): columns from 32; tid 5: tcol = 1, trow = 1
    assert vec.owned(t) == [(4 + i, 32 + 8 + j) for i in range(4) for j in range(8)]
    assert cf.owned(t) == [(4 + i, 32 + g * 16 + 4 + jj) for i in range(4) for g in range(2) for jj in range(4)]
    assert vec.traffic() == cf.traffic()          # only the map and the padding differ
    # A is stored transposed: thread 5 loads A[2, 4..7] (tile element 5: row 5 / 2, k 4 * (5 % 2)) into
    # As[4..7][2]; rung 07's As has 4 more columns per k-row than BM
    assert cf.cells(AS_WRITE, frame=1, thread=5) >= {(4, 2), (5, 2), (6, 2), (7, 2)}
    assert vec.smem_shapes["As"] == (8, 32) and cf.smem_shapes["As"] == (8, 36)


def test_warptile_lanes_form_a_grid_inside_their_warp_tile():
    """WM x WN = 32 x 16 warp tiles, 4 x 4 thread tiles: lanes form an 8 x 4 grid; warp 1 sits 16 columns right."""
    p = {"BM": 32, "BN": 32, "BK": 8, "WM": 32, "WN": 16, "TM": 4, "TN": 4}
    trace = viz.run("warptile", 32, 32, 8, params=p)
    for tid in (0, 3, 4, 31, 32, 45):
        warp, lane = divmod(tid, 32)
        tr, tc = lane // 4, lane % 4
        assert trace.owned(tid) == [(tr * 4 + i, warp * 16 + tc * 4 + j) for i in range(4) for j in range(4)]
    # per k, a warp reads 8 distinct float4 of As (one per lane row) and 4 of Bs: the rest are broadcasts
    f = 2
    warp0 = trace.select(AS_READ, frame=f) & (trace.events["thread"] < 32)
    assert len(set(zip(trace.events["r"][warp0].tolist(), trace.events["c"][warp0].tolist()))) == 8 * 4
    warp0 = trace.select(BS_READ, frame=f) & (trace.events["thread"] < 32)
    assert len(set(zip(trace.events["r"][warp0].tolist(), trace.events["c"][warp0].tolist()))) == 4 * 4


def test_a_16_byte_access_is_one_instruction_of_four_elements():
    p = {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 8}
    aligned = viz.run("vectorized", 32, 32, 32, params=p)
    for kinds in (A_LOAD, B_LOAD, SMEM_READS, BS_WRITE, C_STORE):
        assert aligned.instructions(kinds) * 4 == aligned.count(kinds), kinds
    assert aligned.instructions(AS_WRITE) == aligned.count(AS_WRITE)     # the transposed stores are 4-byte
    # per k, a thread issues TM/4 + TN/4 = 3 LDS.128 for its 12 values
    assert aligned.instructions(SMEM_READS, frame=2, thread=0) == 3
    assert aligned.count(SMEM_READS, frame=2, thread=0) == 12
    # a warp's 16-byte load of A covers 16 rows x 8 floats: 16 sectors, two such loads per thread and step
    assert aligned.warp_requests(1, 0) == {"A": (2, 32), "B": (2, 32)}
    # K = 9 and N = 35 are not multiples of 4: A's, B's and C's rows are not 16-byte aligned, every access is
    # a float; the elements are the same ones
    odd = viz.run("vectorized", 33, 35, 9, params=p)
    for kinds in (A_LOAD, B_LOAD, C_STORE):
        assert odd.instructions(kinds) == odd.count(kinds) > 0
    assert odd.instructions(SMEM_READS) * 4 == odd.count(SMEM_READS)    # shared memory is always aligned
    assert np.array_equal(odd.c, odd.a @ odd.b)


def test_pipelined_loads_the_next_tile_while_computing_on_the_other_buffer():
    """K = 40, BK = 8: 5 steps. Tile s sits in buffer s % 2 (rows 8 * (s % 2) .. of As and Bs); the global loads
    of tile s + 1 happen in step s's first compute frame; one barrier per step, plus the prologue's."""
    p = {"BM": 32, "BN": 32, "BK": 8, "WM": 32, "WN": 16, "TM": 4, "TN": 4}
    trace = viz.run("pipelined", 32, 32, 40, params=p)
    frames = trace.frames
    steps = 5
    assert sum(mk.sync for mk in frames) == steps + 1
    assert sum(mk.sync for mk in viz.run("warptile", 32, 32, 40, params=p).frames) == 2 * steps
    e = trace.events
    for f, mk in enumerate(frames):
        reads = trace.select(SMEM_READS, frame=f)
        writes = trace.select((AS_WRITE, BS_WRITE), frame=f)
        if mk.phase == "compute":
            s = mk.step
            # reads buffer s % 2 only (the step's last k reads nothing: its fragments came with k - 1)
            assert set((e["r"][reads] // 8).tolist()) == ({s % 2} if mk.k < 8 * s + 7 else set()), f
            assert not writes.any()
            loads = trace.cells(A_LOAD, frame=f)
            if mk.k == 8 * s and s + 1 < steps:                              # the step's first frame
                assert {c for _, c in loads} == set(range(8 * (s + 1), 8 * (s + 2)))   # tile s + 1 in flight
            else:
                assert not loads
        elif mk.phase == "load":
            s = mk.step                                                       # tile s goes to buffer s % 2
            assert set((e["r"][writes] // 8).tolist()) == {s % 2}, f
            assert mk.sync and not reads.any()
    assert np.array_equal(trace.c, trace.a @ trace.b)


def test_naive_walks_rows_with_x_and_coalesced_walks_columns():
    """A warp of 32 threads along x: naive reads 32 rows of A (32 sectors) and one element of B; coalesced
    reads one element of A and 32 consecutive floats of B (4 sectors of 32 bytes)."""
    naive = viz.run("naive", 64, 64, 8, params={"BX": 32, "BY": 1})
    coal = viz.run("coalesced", 64, 64, 8, params={"BX": 32, "BY": 1})
    f = 3   # a compute frame
    assert naive.warp_requests(f, 0) == {"A": (1, 32), "B": (1, 1)}
    assert coal.warp_requests(f, 0) == {"A": (1, 1), "B": (1, 4)}
    assert naive.traffic() == coal.traffic()


def test_out_of_range_threads_do_nothing_in_the_naive_rungs_but_join_the_barriers_when_tiled():
    naive = viz.run("naive", 3, params={"BX": 2, "BY": 2})     # 4 x 4 threads for 3 x 3
    outside = [t for t in range(naive.threads) if naive.owned(t)[0][0] >= 3 or naive.owned(t)[0][1] >= 3]
    assert len(outside) == 16 - 9
    assert all(naive.count((A_LOAD, B_LOAD, FMA), thread=t) == 0 for t in outside)
    tiled = viz.run("smem_tiled", 3, block=2)
    t = 15                    # block (1, 1), thread (1, 1): C[3, 3], outside C
    assert tiled.owned(t) == [(3, 3)]
    assert tiled.count(GLOBAL_LOADS, thread=t) == 0
    assert tiled.count(SMEM_READS, thread=t) == 2 * 2 * 2       # it still multiplies zeros, 2 steps x 2 k
    assert tiled.count(C_STORE, thread=t) == 0


# ------------------------------------------------------------------------------------------ the rules


def _broken_smem_tiled(skip_first_barrier=False, skip_second_barrier=False, early_return=False, overreach=False):
    def program(t, M, N, K, p):
        BD = p["BLOCK_DIM"]
        tx, ty = t.thread_idx
        row, col = t.block_idx[1] * BD + ty, t.block_idx[0] * BD + tx
        t.owns(row, col)
        yield Mark("launch", "launch")
        if early_return and (row >= M or col >= N):
            return
        acc = 0.0
        for k0 in range(0, K, BD):
            inside = row < M and k0 + tx < K
            t.smem_write("As", ty, tx, t.load_a(row, k0 + tx) if inside or overreach else 0.0)
            t.smem_write("Bs", ty, tx, t.load_b(k0 + ty, col) if k0 + ty < K and col < N else 0.0)
            if not skip_first_barrier:
                yield Mark("load", "loads", sync=True)
            for k in range(BD):
                acc = t.fma(row, col, k0 + k, acc, t.smem_read("As", ty, k), t.smem_read("Bs", k, tx))
            yield Mark("compute", "compute", sync=not skip_second_barrier)
        if row < M and col < N:
            t.store_c(row, col, acc)
    return program


@pytest.mark.parametrize("broken,message", [
    ({"skip_first_barrier": True}, "race"),
    ({"skip_second_barrier": True}, "race in block 0: thread 0 overwrites As"),
    ({"early_return": True}, "barrier divergence"),
    ({"overreach": True}, "outside the 3 x 3 matrix"),
])
def test_the_model_refuses_a_program_that_breaks_the_rules(broken, message):
    spec = get("smem_tiled")
    smem = {"As": (2, 2), "Bs": (2, 2)}
    with pytest.raises(ModelError, match=message):
        simulate(spec, _broken_smem_tiled(**broken), smem, 3, 3, 3, {"BLOCK_DIM": 2})
    trace = simulate(spec, _broken_smem_tiled(), smem, 3, 3, 3, {"BLOCK_DIM": 2})   # the fixed one runs
    assert np.array_equal(trace.c, trace.a @ trace.b)


def test_too_large_a_run_is_refused_not_attempted():
    with pytest.raises(ModelError, match="too large to visualise"):
        viz.run("naive", 64, max_events=10_000)


def test_sizes_must_be_positive_and_parameters_valid():
    with pytest.raises(ValueError, match="at least 1"):
        viz.run("smem_tiled", 4, 0, 4, block=2)
    with pytest.raises(ValueError, match="BLOCK_DIM"):
        viz.run("smem_tiled", 4, block=40)
    with pytest.raises(ValueError, match="threads per block"):
        viz.run("blocktile_2d", 16, block=8)


def test_frames_are_the_same_for_every_thread_and_k_progress_is_monotone():
    for name in LADDER:
        trace = viz.run(name, 7, 6, 5)
        done = [mk.k_done for mk in trace.frames]
        assert done == sorted(done) and done[-1] == 5
        computes = [mk for mk in trace.frames if mk.phase == "compute"]
        assert {mk.k for mk in computes} >= set(range(5))
        assert len(np.unique(trace.events["frame"])) <= len(trace.frames)
        assert rungs.MODELS[name].watch
