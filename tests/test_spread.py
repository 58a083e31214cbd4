"""Spreading a sweep over the GPUs of a host: the shares, the processes (each with its own
CUDA_VISIBLE_DEVICES) and the merge into one result, on the CPU."""

import os

import pytest

from gemmlab.bench import spread
from gemmlab.bench.records import Results


def test_shares_are_balanced_by_cost_and_keep_the_items_order():
    assert spread.deal([1, 1, 1, 1, 1, 1, 1], 4) == [[0, 4], [1, 5], [2, 6], [3]]
    assert spread.deal([10, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], 2) == [[0], list(range(1, 11))]
    assert spread.deal([], 3) == [[], [], []]
    shares = spread.deal([float(i % 5 + 1) for i in range(45)], 4)
    loads = [sum(i % 5 + 1 for i in s) for s in shares]
    assert sorted(i for s in shares for i in s) == list(range(45)) and max(loads) - min(loads) <= 5
    with pytest.raises(ValueError, match="GPUs must be >= 1"):
        spread.deal([1.0], 0)


def test_each_share_runs_in_its_own_process_with_its_gpu_visible():
    items = list(range(10))
    costs = [float(i % 4) for i in items]
    parts = spread.run_spread(_where, items, costs, 3)
    assert len(parts) == 3
    taken = [i for share, _ in parts for i in share]
    assert sorted(taken) == items  # every item once, over all processes
    pids = set()
    for gpu, (share, (visible, got, pid)) in enumerate(parts):
        assert visible == str(gpu) and got == [items[i] for i in share] and pid != os.getpid()
        pids.add(pid)
        # each process got its items costliest first (the queue's order)
        assert [costs[i] for i in share] == sorted((costs[i] for i in share), reverse=True)
    assert len(pids) == 3
    assert len(spread.run_spread(_where, [1, 2], [1.0, 1.0], 4)) == 2  # (no more processes than items)
    with pytest.raises(RuntimeError, match="GPU 0's share failed: ZeroDivisionError"):
        spread.run_spread(_fails, [1], [1.0], 1)
    with pytest.raises(ValueError, match="2 items but 1 costs"):
        spread.run_spread(_where, [1, 2], [1.0], 2)
    with pytest.raises(ValueError, match="GPUs must be >= 1"):
        spread.run_spread(_where, [1], [1.0], 0)


def test_a_pulled_share_takes_items_from_the_queue_as_it_iterates():
    import queue

    q = queue.Queue()
    for i in (2, 0, None, 1):
        q.put(i)
    pull = spread.Pull(q, ["a", "b", "c"])
    it = iter(pull)
    assert next(it) == "c" and pull.taken == [2]  # (one item taken per step, none ahead)
    assert list(it) == ["a"] and pull.taken == [2, 0]
    assert q.get() == 1  # what the end mark left for the other processes


def test_a_slow_process_takes_fewer_items():
    """Items pulled as the processes ask: the process whose first item is slow ends with fewer items."""
    timings = []
    parts = spread.run_spread(_slow_first, list(range(12)), [2.0] + [1.0] * 11, 2, timings=timings)
    slow = next(share for share, _ in parts if 0 in share)
    assert sum(len(share) for share, _ in parts) == 12 and len(slow) < 6, parts
    # where each process's time went: started, asked for its first item, found the queue empty, returned
    assert [t.gpu for t in timings] == [0, 1]
    for t in timings:
        assert 0 <= t.started <= t.first <= t.last <= t.done, t
    slow_gpu = next(g for g, (share, _) in enumerate(parts) if 0 in share)
    assert timings[slow_gpu].last - timings[slow_gpu].first >= 3.0  # (its 3 s item inside its measuring)
    note = spread.times_note(timings)
    assert note.startswith("2 processes: start to the first item ") and "measuring" in note, note


def test_the_times_note_names_each_part_of_the_wall_time():
    t = [spread.ProcessTimes(0, 0.5, 4.0, 14.0, 14.2), spread.ProcessTimes(1, 0.6, 5.5, 13.0, 13.1),
         spread.ProcessTimes(2, 0.7, None, None, 2.0)]  # (one that never reached its items)
    assert spread.times_note(t) == ("3 processes: start to the first item 4.0-5.5 s, measuring 7.5-10.0 s, the last "
                                    "result back at 14.2 s")
    assert spread.times_note([]) == ""


def test_merge_keeps_every_run_and_orders_records():
    from gemmlab.bench.records import Record

    def rec(m):
        return Record(kernel="gemmlab", label="x", family="gpu", rung=15, idea="", params={}, dtype="bfloat16", m=m,
                      n=8, k=8, alpha=1.0, beta=0.0, mode="compute", l2="cold", pinned=None)
    a, b = Results([rec(3), rec(1)], [{"run_id": "a"}]), Results([rec(2)], [{"run_id": "b"}])
    merged = spread.merge([a, b], order=lambda r: r.m)
    assert [r.m for r in merged.records] == [1, 2, 3] and [r["run_id"] for r in merged.runs] == ["a", "b"]


def _where(items):
    return os.environ.get("CUDA_VISIBLE_DEVICES"), list(items), os.getpid()


def _fails(items):
    return 1 / 0


def _slow_first(items):
    import time

    got = []
    for i in items:
        time.sleep(3.0 if i == 0 else 0.05)  # (3 s: a late start of the other process is covered)
        got.append(i)
    return got


def test_the_suite_spread_merges_in_suite_order(monkeypatch):
    """measure_spread deals the suite's cases, and puts the processes' records back in suite order (per dtype,
    gemmlab before torch on each shape), every process's run kept and marked."""
    from gemmlab.bench import suite
    from gemmlab.bench.records import Record

    def fake(fn, items, costs, gpus, dtypes, *rest, timings=None):
        assert fn is suite.measure_share and len(costs) == len(items)
        timings.extend(spread.ProcessTimes(g, 0.1, 3.0, 9.0 + g, 9.5 + g) for g in range(gpus))
        out = []
        for g, share in enumerate(spread.deal(costs, gpus)):
            recs = [Record(kernel=kern, label=kern, family="gpu", rung=None, idea="", params={}, dtype=dt, m=items[i][1][0],
                           n=items[i][1][1], k=items[i][1][2], alpha=1.0, beta=0.0, mode="compute", l2="cold",
                           pinned=None)
                    for dt in dtypes for i in reversed(share) for kern in (suite.TORCH, suite.GEMMLAB)]
            out.append((share, Results(recs, [{"run_id": str(g)}])))
        return out

    monkeypatch.setattr(spread, "run_spread", fake)
    res = suite.measure_spread(3, ["bfloat16", "float32"], ["square", "odd"])
    chosen = suite.cases(["square", "odd"])
    want = [(dt, s, kern) for dt in ("bfloat16", "float32") for _, s in chosen for kern in (suite.GEMMLAB, suite.TORCH)]
    assert [(r.dtype, (r.m, r.n, r.k), r.kernel) for r in res.records] == want
    assert len(res.runs) == 3 and all("spread over 3 GPUs" in run["notes"][-2] for run in res.runs)
    assert res.runs[0]["notes"][-1] == ("3 processes: start to the first item 3.0-3.0 s, measuring 6.0-8.0 s, the "
                                        "last result back at 11.5 s")


def test_tune_jobs_spread_back_in_order_and_refuse_mixed_gpus(monkeypatch):
    from gemmlab.tune import search

    jobs = [("sgemm", (512, 512, 512)), ("sgemm", (4096, 4096, 4096)), ("wgmma", (1024, 1024, 1024))]

    def fake(fn, items, costs, gpus, budget_s, names=("H100", "H100"), timings=None):
        assert fn is search._tune_share and budget_s == 5.0
        if timings is not None:
            timings.extend(spread.ProcessTimes(g, 0.1, 2.0, 7.0, 7.2) for g in range(gpus))
        return [(share, [(names[g], search.TuneResult(items[i][0], "c", items[i][1], None, 0.0, None)) for i in share])
                for g, share in enumerate(spread.deal(costs, gpus))]

    monkeypatch.setattr(spread, "run_spread", fake)
    timings = []
    got = search.tune_jobs(jobs, 5.0, gpus=2, timings=timings)
    assert [(r.kernel, r.shape) for r in got] == jobs and [t.gpu for t in timings] == [0, 1]
    monkeypatch.setattr(spread, "run_spread", lambda *a, **kw: fake(*a, names=("H100", "H200"), **kw))
    with pytest.raises(ValueError, match="the GPUs differ"):
        search.tune_jobs(jobs, 5.0, gpus=2)
