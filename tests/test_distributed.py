"""Tensor-parallel products without a GPU: the ring's schedules by hand, the time model by hand, and (where
torch is installed) both products on gloo with 1-3 CPU processes against the single-process product."""

import os

import pytest

from gemmlab.distributed import (Link, all_gather_order, collective_seconds, pieces, predict, reduce_scatter_order,
                                 row_blocks)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_all_gather_order_visits_every_shard_once_own_first_then_as_the_ring_delivers(world):
    for rank in range(world):
        order = all_gather_order(rank, world)
        assert order[0] == rank and sorted(order) == list(range(world))
        # at step s rank r holds what rank r - 1 held at step s - 1 (it was sent on)
        if rank:
            assert order[1:] == all_gather_order(rank - 1, world)[:-1]
    assert all_gather_order(0, 4) == [0, 3, 2, 1] and all_gather_order(2, 4) == [2, 1, 0, 3]


@pytest.mark.parametrize("world", [1, 2, 3, 5, 8])
def test_reduce_scatter_order_passes_each_sum_along_the_ring_to_its_owner(world):
    steps = {r: reduce_scatter_order(r, world) for r in range(world)}
    for r in range(world):
        assert sorted(s.rows for s in steps[r]) == list(range(world))
        last = steps[r][-1]
        assert last.rows == r and not last.send and last.receive == (world > 1)
        assert not steps[r][0].receive
        for s in range(1, world):  # what r adds to at step s is what r - 1 made at step s - 1 and sent
            assert steps[r][s].rows == steps[(r - 1) % world][s - 1].rows and steps[(r - 1) % world][s - 1].send
    assert [s.rows for s in reduce_scatter_order(0, 4)] == [3, 2, 1, 0]


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("chunks", [1, 2, 3])
def test_the_chunked_all_gather_ring_without_torch(world, chunks):
    """Every rank multiplies every piece of every shard once, each holding the data of the rank it came from."""
    from gemmlab.distributed import all_gather_plan

    def act(rank, op, st, arrived):
        held = st.setdefault("held", {(rank, j): rank for j in range(chunks)})  # (block, piece) -> origin
        if arrived is not None:
            block, origin = arrived
            held[(block, op.piece)] = origin
        assert (op.block, op.piece) in held, (rank, op)  # the piece is here before it is used
        st.setdefault("done", []).append((op.block, op.piece, held[(op.block, op.piece)]))
        return (held[(op.block, op.piece)], op.recv) if op.recv is not None else None

    state = _run_ring_gather(world, chunks, lambda r: all_gather_plan(r, world, chunks), act)
    for r, st in state.items():
        assert sorted(st["done"]) == [(b, j, b) for b in range(world) for j in range(chunks)]


def _run_ring_gather(world, chunks, plan_of, act):
    """Every rank's plan run without torch: an exchange puts what is sent in rank + 1's inbox for its piece
    (FIFO) and notes where this rank's own receive lands (the op's `recv` block), which the piece's next wait
    takes; ranks take turns, and an op whose wait finds nothing yet blocks its rank. `act(rank, op, state,
    arrived)` does the op's work and returns (what it sends, where its receive lands) or None. Raises on a
    deadlock."""
    from collections import deque

    plans = {r: plan_of(r) for r in range(world)}
    inbox = {(r, j): deque() for r in range(world) for j in range(chunks)}
    lands = {(r, j): deque() for r in range(world) for j in range(chunks)}
    state = {r: {} for r in range(world)}
    at = {r: 0 for r in range(world)}
    while any(at[r] < len(plans[r]) for r in range(world)):
        moved = False
        for r in range(world):
            if at[r] == len(plans[r]):
                continue
            op = plans[r][at[r]]
            arrived = None
            if op.wait:
                if not inbox[(r, op.piece)]:
                    continue
                arrived = (lands[(r, op.piece)].popleft(), inbox[(r, op.piece)].popleft())
            send = act(r, op, state[r], arrived)
            if send is not None:
                inbox[((r + 1) % world, op.piece)].append(send[0])
                lands[(r, op.piece)].append(send[1])
            at[r] += 1
            moved = True
        if not moved:
            raise AssertionError(f"deadlock at {at}")
    return state


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("chunks", [1, 2, 3])
def test_the_chunked_reduce_scatter_ring_without_torch(world, chunks):
    """Rank r ends with, for every piece, the sum of all ranks' partials of row block r, each added once, and
    no buffer is written while its last send could still be reading it."""
    from collections import deque

    from gemmlab.distributed import reduce_scatter_plan

    plans = {r: reduce_scatter_plan(r, world, chunks) for r in range(world)}
    inbox = {(r, j): deque() for r in range(world) for j in range(chunks)}
    lands = {(r, j): deque() for r in range(world) for j in range(chunks)}
    bufs = {r: {(t, j): None for t in (0, 1, -1) for j in range(chunks)} for r in range(world)}
    at = {r: 0 for r in range(world)}
    while any(at[r] < len(plans[r]) for r in range(world)):
        moved = False
        for r in range(world):
            if at[r] == len(plans[r]):
                continue
            op = plans[r][at[r]]
            if op.wait:
                if not inbox[(r, op.piece)]:
                    continue
                landed, payload = lands[(r, op.piece)].popleft(), inbox[(r, op.piece)].popleft()
                assert landed == op.target  # the sum so far arrived where this op adds to it
                bufs[r][(landed, op.piece)] = payload
            mine = frozenset({(r, op.rows)})  # this rank's partial of row block `rows`
            before = bufs[r][(op.target, op.piece)] if op.accumulate else frozenset()
            assert before is not None and not (before & mine), (r, op)
            bufs[r][(op.target, op.piece)] = before | mine
            if op.send:
                inbox[((r + 1) % world, op.piece)].append(bufs[r][(op.target, op.piece)])
                lands[(r, op.piece)].append(op.next_target)
                assert op.next_target != op.target  # never receive into the buffer being sent
            at[r] += 1
            moved = True
        if not moved:
            raise AssertionError(f"deadlock at {at}")
    for r in range(world):
        for j in range(chunks):
            assert bufs[r][(-1, j)] == frozenset((q, r) for q in range(world)), (r, j, bufs[r][(-1, j)])


def test_blocks_and_pieces():
    assert row_blocks(8, 4) == [(0, 2), (2, 2), (4, 2), (6, 2)]
    with pytest.raises(ValueError, match="M = 10 rows do not split into 4"):
        row_blocks(10, 4)
    with pytest.raises(ValueError, match="rank"):
        all_gather_order(4, 4)
    assert pieces(10, 3) == [(0, 4), (4, 3), (7, 3)] and pieces(2, 4) == [(0, 1), (1, 1)]


def test_the_model_by_hand():
    link = Link(all_gather_busbw=100e9, reduce_scatter_busbw=50e9, step_latency_s=1e-6)
    # 16384 x 8192 bf16 gathered over 4 ranks: 268 MB x 3/4 / 100 GB/s + 3 steps of 1 us
    t = collective_seconds("all_gather", 16384 * 8192 * 2, 4, link)
    assert t == pytest.approx(16384 * 8192 * 2 * 0.75 / 100e9 + 3e-6)
    p = predict("all_gather", 16384, 8192, 8192, 4, 1.0e-3, link)
    assert p.comm_s == pytest.approx(t) and p.sequential_s == pytest.approx(t + 1e-3)
    assert p.ideal_s == pytest.approx(max(t, 1e-3))
    g, c = 1e-3 / 4, t / 3
    assert p.overlapped_s == pytest.approx(max(4 * g, 3 * c + g))
    assert p.ideal_s <= p.overlapped_s <= p.sequential_s and p.limiter == "link"
    # reduce-scatter moves C (M x N) at its own bus bandwidth
    q = predict("reduce_scatter", 4096, 8192, 2048, 2, 5e-3, link)
    assert q.comm_s == pytest.approx(4096 * 8192 * 2 * 0.5 / 50e9 + 1e-6) and q.limiter == "math"
    one = predict("all_gather", 64, 64, 64, 1, 1e-5, link)
    assert one.comm_s == 0 and one.overlapped_s == one.sequential_s == 1e-5 and one.efficiency == 1
    # blocks that are launches of their own: each block's GEMM as timed, not a W-th of the whole
    c2 = q.comm_s
    blocks = predict("reduce_scatter", 4096, 8192, 2048, 2, 5e-3, link, block_s=3e-3, tail_s=1e-4)
    assert blocks.overlapped_s == pytest.approx(max(2 * 3e-3, c2 + 3e-3) + 1e-4)
    assert blocks.sequential_s == q.sequential_s and blocks.ideal_s == q.ideal_s  # (the parts alone: unchanged)
    with pytest.raises(ValueError, match="block_s must be >= 0"):
        predict("reduce_scatter", 4096, 8192, 2048, 2, 5e-3, link, block_s=-1.0)


# ----------------------------------------------------------------------------------------- on gloo, CPU

def _on_gloo(rank, world, path, body, results):
    """One process of a gloo group: `body(rank, world)`'s result into `results[rank]`."""
    import torch.distributed as dist

    os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    try:
        results[rank] = body(rank, world)
    finally:
        dist.destroy_process_group()
    from gemmlab.bench.distributed import leave_now

    leave_now()  # (the interpreter's teardown could abort the process after its result was in)


def _spawn(body, world, tmp_path) -> dict:
    """{rank: body's result} from `world` CPU processes on gloo (skipped where torch or gloo is missing)."""
    torch = pytest.importorskip("torch")
    import torch.multiprocessing as mp

    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_on_gloo, args=(world, str(tmp_path / "rendezvous"), body, results), nprocs=world, join=True)
        got = dict(results)
    assert sorted(got) == list(range(world))
    return got


def _products(rank, world):
    import torch

    import gemmlab.distributed as gd

    g = torch.Generator().manual_seed(7)
    m, n, k = 6 * world, 20, 12 * world
    a = torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g)
    bias = torch.randn(n, generator=g)
    rows, cols = m // world, k // world
    # column-parallel: this rank's rows of A, all of B
    y, gathered = gd.all_gather_matmul(a[rank * rows:(rank + 1) * rows], b, bias=bias, activation="relu",
                                       return_gathered=True)
    ag_err = float((y - torch.relu(a @ b + bias)).abs().max())
    ag_same = bool(torch.equal(gathered, a))
    # row-parallel: this rank's K-slice of A and B; its rows of the sum, bias and activation on the sum
    z = gd.matmul_reduce_scatter(a[:, rank * cols:(rank + 1) * cols], b[rank * cols:(rank + 1) * cols],
                                 bias=bias, activation="silu")
    full = torch.nn.functional.silu(a @ b + bias)
    rs_err = float((z - full[rank * rows:(rank + 1) * rows]).abs().max())
    return (ag_err, ag_same, rs_err, tuple(y.shape), tuple(z.shape))


@pytest.mark.parametrize("world", [1, 2, 3])
def test_products_on_gloo_equal_the_single_process_product(world, tmp_path):
    got = _spawn(_products, world, tmp_path)
    for rank, (ag_err, ag_same, rs_err, yshape, zshape) in got.items():
        assert ag_same and ag_err < 1e-4 and rs_err < 1e-4, (rank, ag_err, rs_err)
        assert yshape == (6 * world, 20) and zshape == (6, 20)


def _chunked(rank, world):
    """Both products with each shard in 1, 2, 4 and 7 row pieces (7 > 6 rows: empty pieces left out): the
    results of the unchunked rings, up to the rounding of a product over fewer rows (BLAS may block those
    differently)."""
    import torch

    import gemmlab.distributed as gd

    g = torch.Generator().manual_seed(11)
    m, n, k = 6 * world, 20, 12 * world
    a, b, bias = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g), torch.randn(n, generator=g)
    rows, cols = m // world, k // world
    out = {}
    for chunks in (1, 2, 4, 7):
        y = gd.all_gather_matmul(a[rank * rows:(rank + 1) * rows], b, bias=bias, activation="relu", chunks=chunks)
        z = gd.matmul_reduce_scatter(a[:, rank * cols:(rank + 1) * cols], b[rank * cols:(rank + 1) * cols],
                                     bias=bias, activation="silu", chunks=chunks)
        out[chunks] = (y, z)
    full = a @ b + bias
    ag_err = float((out[4][0] - torch.relu(full)).abs().max())
    rs_err = float((out[4][1] - torch.nn.functional.silu(full)[rank * rows:(rank + 1) * rows]).abs().max())
    same = all(torch.allclose(out[c][i], out[1][i], rtol=1e-5, atol=1e-5) for c in (2, 4, 7) for i in (0, 1))
    return ag_err, rs_err, same


@pytest.mark.parametrize("world", [2, 3])
def test_chunked_rings_on_gloo(world, tmp_path):
    for rank, (ag_err, rs_err, same) in _spawn(_chunked, world, tmp_path).items():
        assert ag_err < 1e-4 and rs_err < 1e-4 and same, (rank, ag_err, rs_err, same)


def test_chunks_in_the_model_and_refused_by_name():
    link = Link(100e9, 100e9)
    # t_comm = t_gemm at W = 4: one block of four lost (80 %), one piece of sixteen with 4 chunks (94 %)
    comm = collective_seconds("all_gather", 16384 * 8192 * 2, 4, link)
    one = predict("all_gather", 16384, 8192, 8192, 4, comm, link)
    four = predict("all_gather", 16384, 8192, 8192, 4, comm, link, chunks=4)
    assert one.efficiency == pytest.approx(0.8) and four.efficiency == pytest.approx(16 / 17)
    with pytest.raises(ValueError, match="chunks must be >= 1"):
        predict("all_gather", 16, 16, 16, 2, 1e-3, link, chunks=0)
    import gemmlab.distributed.ops as ops

    with pytest.raises(ValueError, match="chunks must be a positive integer"):
        ops._pieces(6, 0)


def test_the_copy_reduce_scatters_sum_is_a_tail_nothing_overlaps():
    link = Link(100e9, 100e9)
    comm = collective_seconds("reduce_scatter", 8192 * 8192 * 2, 4, link)
    plain = predict("reduce_scatter", 8192, 8192, 8192, 4, comm, link)
    tail = predict("reduce_scatter", 8192, 8192, 8192, 4, comm, link, tail_s=1e-4)
    assert tail.overlapped_s == pytest.approx(plain.overlapped_s + 1e-4)
    assert tail.sequential_s == plain.sequential_s and tail.ideal_s == plain.ideal_s  # (the bound is unchanged)
    with pytest.raises(ValueError, match="tail_s must be >= 0"):
        predict("reduce_scatter", 16, 16, 16, 2, 1e-3, link, tail_s=-1.0)


def _mlp(rank, world):
    import torch
    import torch.distributed as dist

    import gemmlab.distributed as gd

    torch.manual_seed(3)   # the same full layers on every rank
    tokens, hidden, inter = 4 * world, 12, 8 * world
    up = torch.nn.Linear(hidden, inter)
    down = torch.nn.Linear(inter, hidden)
    x = torch.randn(tokens, hidden, requires_grad=True)
    ref = down(torch.nn.functional.gelu(up(x), approximate="tanh"))
    ref.square().sum().backward()

    col = gd.ColumnParallelLinear(hidden, inter, activation="gelu_tanh")
    row = gd.RowParallelLinear(inter, hidden)
    cols, rows = inter // world, tokens // world
    with torch.no_grad():
        col.weight.copy_(up.weight[rank * cols:(rank + 1) * cols])
        col.bias.copy_(up.bias[rank * cols:(rank + 1) * cols])
        row.weight.copy_(down.weight[:, rank * cols:(rank + 1) * cols])
        row.bias.copy_(down.bias)
    xs = x.detach()[rank * rows:(rank + 1) * rows].clone().requires_grad_(True)
    y = row(col(xs))           # this rank's rows of the block's output
    y.square().sum().backward()
    # the loss is the sum over ranks of each rank's rows: its gradient w.r.t. shared parameters is the
    # sum of the ranks' contributions, as a data-parallel all-reduce would add them
    gb = row.bias.grad.clone()
    dist.all_reduce(gb)
    err = dict(
        y=float((y - ref[rank * rows:(rank + 1) * rows]).abs().max()),
        dx=float((xs.grad - x.grad[rank * rows:(rank + 1) * rows]).abs().max()),
        dw_up=float((col.weight.grad - up.weight.grad[rank * cols:(rank + 1) * cols]).abs().max()),
        db_up=float((col.bias.grad - up.bias.grad[rank * cols:(rank + 1) * cols]).abs().max()),
        dw_down=float((row.weight.grad - down.weight.grad[:, rank * cols:(rank + 1) * cols]).abs().max()),
        db_down=float((gb / world - down.bias.grad).abs().max()),
    )
    with torch.no_grad():      # inference: the activation fused, no autograd
        same = float((row(col(xs)) - y).abs().max())
    return (err, same)


@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_parallel_linear_pair_trains_as_the_full_layers(world, tmp_path):
    got = _spawn(_mlp, world, tmp_path)
    for rank, (err, same) in got.items():
        assert all(v < 1e-4 for v in err.values()), (rank, err)
        assert same < 1e-4, (rank, same)


# ------------------------------------------------------------------------------------------ what limits it

def test_explain_names_the_link_or_the_math():
    from gemmlab.analysis.tensor_parallel import REFERENCE_BUSBW, explain_tensor_parallel, rank_shape

    assert rank_shape("all_gather", 16384, 8192, 8192, 4) == (16384, 2048, 8192)
    assert rank_shape("reduce_scatter", 16384, 8192, 8192, 4) == (16384, 8192, 2048)
    # 268 MB gathered at the reference 270 GB/s: 0.75 ms, against a 16384 x 2048 x 8192 GEMM's 0.53 ms bound
    v = explain_tensor_parallel("all_gather", 16384, 8192, 8192, 4, device="h100")
    assert v.busbw == REFERENCE_BUSBW[4] and v.prediction.limiter == "link" and "limited by the link" in v.paragraph
    assert v.prediction.comm_s == pytest.approx(16384 * 8192 * 2 * 3 / 4 / 270e9)
    # a fast link: the math
    fast = explain_tensor_parallel("all_gather", 16384, 8192, 8192, 4, device="h100", busbw=2e12)
    assert fast.prediction.limiter == "math" and "limited by the math" in fast.paragraph
    # row-parallel: the partial sums (M x N, bf16 out) move
    rs = explain_tensor_parallel("reduce_scatter", 8192, 8192, 28672, 2, device="h100")
    assert rs.prediction.comm_s == pytest.approx(8192 * 8192 * 2 / 2 / REFERENCE_BUSBW[2])
    # then the sum of the two slots of its 4096 rows (two blocks read, one written) over the DRAM bandwidth
    from gemmlab.analysis import tensor_parallel as tpa
    from gemmlab.kernels import registry

    g = rs.prediction.gemm_s
    bare = predict("reduce_scatter", 8192, 8192, 28672, 2, g, Link(REFERENCE_BUSBW[2], REFERENCE_BUSBW[2]),
                   step_bps=tpa.tp.REFERENCE_PUSH_BPS)
    tail = rs.prediction.overlapped_s - bare.overlapped_s
    dram = tpa.explain(registry.get("wgmma"), 8192, 8192, 14336, None, "h100", dtype="bfloat16").ceilings.dram_bps
    assert tail == pytest.approx(3 * 4096 * 8192 * 2 / dram) and "the sum of the 2 slots" in rs.paragraph
    assert "slots" not in v.paragraph  # (the all-gather has no sum)
    # the pipeline's blocks move by the copy engines' push, faster than a step of the collective
    assert "pushed by the copy engines at 383 GB/s" in v.paragraph and "under the bound" in v.paragraph
    assert "comm / GEMM 1.41 (within 2 x" in v.paragraph  # (0.746 ms of collective against a 0.530 ms GEMM)
    slow = explain_tensor_parallel("all_gather", 16384, 8192, 8192, 4, device="h100", push_bps=REFERENCE_BUSBW[4])
    assert slow.prediction.overlapped_s > v.prediction.overlapped_s and slow.prediction.comm_s == v.prediction.comm_s
    with pytest.raises(ValueError, match="multiples of 4"):
        explain_tensor_parallel("all_gather", 16384, 8190, 8192, 4, device="h100")
    with pytest.raises(ValueError, match="no reference bus bandwidth for 3 GPUs"):
        explain_tensor_parallel("all_gather", 3 * 1024, 3 * 1024, 1024, 3, device="h100")
    with pytest.raises(ValueError, match="kind must be"):
        explain_tensor_parallel("all_reduce", 1024, 1024, 1024, 2, device="h100")


def test_explain_cli_for_a_distributed_product():
    from typer.testing import CliRunner

    from gemmlab.cli import app

    res = CliRunner().invoke(app, ["explain", "wgmma", "--m", "4096", "--n", "10240", "--k", "8192", "--distributed",
                                   "4", "--device", "h100", "--busbw", "300"])
    assert res.exit_code == 0, res.output
    assert "over 4 GPUs" in res.output and "ring pipeline" in res.output and "300 GB/s" in res.output


def _transports(rank, world):
    """On gloo (CPU tensors) the copy engines cannot run: "auto" takes the ring, "copy" is refused by name, and
    an unknown transport is named."""
    import torch

    import gemmlab.distributed as gd

    a, b = torch.randn(4, 8), torch.randn(8, 5)
    y = gd.all_gather_matmul(a, b, transport="auto")
    errors = []
    for transport in ("copy", "pigeon"):
        try:
            gd.all_gather_matmul(a, b, transport=transport)
        except ValueError as exc:
            errors.append(str(exc))
    z = gd.matmul_reduce_scatter(torch.randn(4 * world, 3), torch.randn(3, 5))  # (auto: the ring on gloo)
    for bias, act in ((torch.randn(4), None), (torch.randn(5), "swish")):  # a bias per row; an unknown activation
        try:
            gd.matmul_reduce_scatter(torch.randn(4 * world, 3), torch.randn(3, 5), bias=bias, activation=act)
        except ValueError as exc:
            errors.append(str(exc))
    return tuple(y.shape) + tuple(z.shape), errors


def test_the_copy_transport_is_refused_where_it_cannot_run(tmp_path):
    for rank, (shape, errors) in _spawn(_transports, 2, tmp_path).items():
        assert shape == (8, 5, 4, 5)
        assert "transport='copy' cannot run here: the tensors are not on a GPU" in errors[0], errors
        assert "transport must be one of auto, copy, ring, sequential" in errors[1], errors
        assert "must be a tensor of N = 5 elements (one per column), got (4,)" in errors[2], errors
        assert "swish" in errors[3], errors


def _sequential(rank, world):
    """transport="sequential" (the collective, then one GEMM; on gloo an all-reduce for the reduce-scatter) against
    the ring and the single-process product, with an epilogue on each."""
    import torch

    import gemmlab.distributed as gd

    g = torch.Generator().manual_seed(13)
    m, n, k = 5 * world, 7, 6 * world
    a, b, bias = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g), torch.randn(n, generator=g)
    rows, cols = m // world, k // world
    shard = a[rank * rows:(rank + 1) * rows]
    a_slice, b_slice = a[:, rank * cols:(rank + 1) * cols], b[rank * cols:(rank + 1) * cols]
    y, gathered = gd.all_gather_matmul(shard, b, bias=bias, activation="gelu_tanh", transport="sequential",
                                       return_gathered=True)
    z = gd.matmul_reduce_scatter(a_slice, b_slice, bias=bias, activation="relu", transport="sequential")
    z_ring = gd.matmul_reduce_scatter(a_slice, b_slice, bias=bias, activation="relu", transport="ring")
    full = a @ b + bias
    taken = (gd.ops.transport_taken("all_gather", shard, m, n, k), gd.ops.transport_taken(
        "reduce_scatter", a_slice, m, n, k, transport="sequential"))
    return dict(taken=taken, gathered=bool(torch.equal(gathered, a)),
                ag=float((y - torch.nn.functional.gelu(full, approximate="tanh")).abs().max()),
                rs=float((z - torch.relu(full)[rank * rows:(rank + 1) * rows]).abs().max()),
                rs_ring=float((z - z_ring).abs().max()), shapes=(tuple(y.shape), tuple(z.shape)))


@pytest.mark.parametrize("world", [1, 3])
def test_the_sequential_form_on_gloo(world, tmp_path):
    for rank, r in _spawn(_sequential, world, tmp_path).items():
        assert r["gathered"] and r["ag"] < 1e-4 and r["rs"] < 1e-4 and r["rs_ring"] < 1e-4, (rank, r)
        assert r["shapes"] == ((5 * world, 7), (5, 7))
        # the form a call takes: on gloo the ring by default (one rank: sequential), the sequential form by name
        assert r["taken"] == ("sequential" if world == 1 else "ring", "sequential"), r["taken"]


def test_auto_overlaps_where_the_saving_pays_for_the_hosts_steps():
    from gemmlab.distributed import model

    # large products: the overlap saves far more than the host's per-peer steps cost
    for kind in model.KINDS:
        way, p, host = model.choose(kind, 16384, 8192, 8192, 4)
        assert way == "copy" and p.sequential_s - p.overlapped_s > host > 0
        # small ones: the saving is below the host's time, so one after the other
        way, p, host = model.choose(kind, 1024, 4096, 4096, 4)
        assert way == "sequential" and p.sequential_s - p.overlapped_s < host
        assert model.choose(kind, 16384, 8192, 8192, 1)[0] == "sequential"  # (nothing to overlap)
    # the decision is the model's: no host cost and any saving takes the overlap; a slower host, neither shape
    assert model.choose("all_gather", 1024, 4096, 4096, 4, per_peer_s=0.0)[0] == "copy"
    assert model.choose("all_gather", 16384, 8192, 8192, 4, per_peer_s=1.0)[0] == "sequential"
    # the pairs of forms timed side by side on 2 and 4 H200s (docs/journal.md), each "kind M N K W: faster form";
    # the last six are shapes whose collective and GEMM are within 2 x of each other (2 H200s)
    measured = """AG 2048 8192 8192 2 copy, AG 4096 10240 8192 2 copy, AG 4096 10240 8192 4 sequential,
                  AG 2048 8192 8192 4 sequential, AG 8192 8192 8192 4 copy, RS 2048 8192 8192 2 copy,
                  RS 4096 10240 8192 4 copy, RS 2048 8192 8192 4 sequential, RS 16384 8192 2048 2 copy,
                  RS 16384 2048 8192 2 copy, RS 8192 4096 4096 2 copy, AG 16384 2048 8192 2 copy,
                  AG 8192 4096 4096 2 copy, AG 16384 8192 2048 2 copy"""
    assert len(measured.split(",")) == 14
    for pair in measured.split(","):
        k, m, n, kk, world, way = pair.split()
        kind, shape, world = {"AG": "all_gather", "RS": "reduce_scatter"}[k], (int(m), int(n), int(kk)), int(world)
        assert model.choose(kind, *shape, world)[0] == way, (kind, shape, world)
    # the copy form's blocks move at the push rate: at NCCL's bus bandwidth the first of those took the
    # sequential form, which measured 0.99 x NCCL + torch.matmul where the copy form measured 1.40
    ref = model.reference_busbw(2)
    assert model.choose("reduce_scatter", 16384, 8192, 2048, 2, push_bps=ref)[0] == "sequential"
    p = model.predict("all_gather", 4096, 4096, 4096, 2, 1e-3, model.Link(ref, ref), step_bps=2 * ref)
    q = model.predict("all_gather", 4096, 4096, 4096, 2, 1e-3, model.Link(ref, ref))
    assert p.sequential_s == q.sequential_s and p.comm_s == q.comm_s and p.overlapped_s <= q.overlapped_s
    with pytest.raises(ValueError, match="step_bps must be > 0"):
        model.predict("all_gather", 64, 64, 64, 2, 1e-3, model.Link(ref, ref), step_bps=0.0)
    # more GPUs, more per-peer steps for the same saving
    saves = {w: model.choose("reduce_scatter", 8192, 8192, 8192, w) for w in (2, 4, 8)}
    assert saves[2][2] < saves[4][2] < saves[8][2]
    assert model.reference_busbw(8) == model.REFERENCE_BUSBW[4] and model.reference_busbw(3) == model.REFERENCE_BUSBW[4]
    with pytest.raises(ValueError, match="no reference GEMM rate for 'float64'"):
        model.choose("all_gather", 64, 64, 64, 2, "float64")
    with pytest.raises(ValueError, match="kind must be one of"):
        model.choose("all_reduce", 64, 64, 64, 2)


def test_arrivals_rotate_by_whole_cluster_rows_and_wrap_the_count():
    from gemmlab.api.launch import Arrivals

    a = Arrivals(flags=0x1000, rows=1024, epoch=5, blocks=4, first=3)
    assert a.kernel_args({"BM": 128, "CLUSTER": 2}) == (0x1000, 1024, 5, 12)  # 3 blocks of 4 cluster rows
    assert a.kernel_args({"BM": 128, "CLUSTER": 1}) == (0x1000, 1024, 5, 24)
    # blocks that are not whole cluster-tile rows: walked from row 0 (the waits keep it right)
    assert Arrivals(0x1000, 1000, 5, 4, first=3).kernel_args({"BM": 128, "CLUSTER": 2})[3] == 0
    # the count as the kernel's 32-bit comparison sees it
    assert Arrivals(0, 128, 2**32 + 7, 2).kernel_args({})[2] == 7
    assert Arrivals(0, 128, 2**31 + 1, 2).kernel_args({})[2] == -(2**31) + 1


def _forget(rank, world):
    """forget_exchanges is collective and harmless where no exchange was made (gloo: none can be)."""
    import gemmlab.distributed as gd
    from gemmlab.distributed import exchange

    gd.forget_exchanges()
    return len(exchange._exchanges)


def test_forget_exchanges_on_every_rank(tmp_path):
    assert set(_spawn(_forget, 2, tmp_path).values()) == {0}


@pytest.mark.parametrize("activation", [None, "relu", "silu", "gelu_tanh", "gelu_erf"])
def test_the_copy_reduce_scatters_epilogue_on_the_sum(activation):
    """What the copy path applies once the slots are summed (ops.epilogue_in_place): act(sum + bias) in the
    sum's type, against float64; without a bias, the activation alone."""
    torch = pytest.importorskip("torch")

    from gemmlab.distributed import ops

    g = torch.Generator().manual_seed(5)
    total, bias = torch.randn(6, 20, generator=g), torch.randn(20, generator=g)
    ref = {None: lambda z: z, "relu": torch.relu, "silu": torch.nn.functional.silu,
           "gelu_tanh": lambda z: torch.nn.functional.gelu(z, approximate="tanh"),
           "gelu_erf": torch.nn.functional.gelu}[activation]
    want = ref(total.double() + bias.double())
    got = ops.epilogue_in_place(torch, total.clone(), bias, activation)
    assert got.dtype == torch.float32 and float((got.double() - want).abs().max()) < 1e-5
    bare = ops.epilogue_in_place(torch, total.clone(), None, activation)
    assert float((bare.double() - ref(total.double())).abs().max()) < 1e-5
    half = ops.epilogue_in_place(torch, total.bfloat16(), bias, activation)  # bf16 sums keep their type
    assert half.dtype == torch.bfloat16 and float((half.double() - want).abs().max()) < 5e-2


def test_an_all_gathers_block_goes_in_pieces_of_whole_cluster_tiles():
    """The copy all-gather pushes a block of R rows in 4, 2 or 1 pieces, each a flag of its own and a whole
    multiple of 256 rows (two 128-row tiles: the GEMM's walk takes a piece's tiles before the next piece's)."""
    from gemmlab.distributed import exchange

    for rows in (256, 512, 768, 1024, 1536, 2048, 4096, 8192, 100, 1000, 3072):
        p = exchange.pieces(rows)
        assert p in (1, 2, 4) and rows % p == 0, rows
        assert p == 1 or (rows // p) % 256 == 0, rows
        assert p == max(q for q in (1, 2, 4) if q == 1 or rows % (q * 256) == 0), rows
    assert [exchange.pieces(r) for r in (4096, 2048, 1024, 512, 256, 300)] == [4, 4, 4, 2, 1, 1]


def test_pieces_that_do_not_divide_the_shard_are_refused_by_name():
    torch = pytest.importorskip("torch")
    import gemmlab.distributed as gd

    a, b = torch.zeros(6, 4), torch.zeros(4, 5)
    for bad in (0, 4, -1, 1.5, True):
        with pytest.raises(ValueError, match="pieces must be a positive integer that divides the shard's 6 rows"):
            gd.all_gather_matmul(a, b, pieces=bad)
