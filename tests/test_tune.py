"""The tuner's store and its pruning (no GPU needed)."""

import json
import warnings

import pytest

from gemmlab.kernels import get
from gemmlab.runtime import compiler
from gemmlab.tuned import TunedCache, representative_shape, shape_class
from gemmlab.tune.search import candidates, search_order

DEV = ("NVIDIA H100 80GB HBM3", (9, 0), 132)


def test_shape_classes_bucket_each_dimension():
    assert shape_class(4096, 4096, 4096) == "m-le4096.n-le4096.k-le4096"
    assert shape_class(4097, 10, 100000) == "m-le16384.n-le64.k-gt16384"
    assert shape_class(4000, 4096, 3000) == shape_class(4096, 2049, 4095)
    assert representative_shape("m-le4096.n-le64.k-gt16384") == (4096, 64, 32768)
    with pytest.raises(ValueError):
        representative_shape("4096")


def test_store_save_and_reload(tmp_path):
    cache = TunedCache.for_device(*DEV, root=tmp_path)
    params = get("blocktile_2d").validate({"BK": 16})
    cache.store("blocktile_2d", shape_class(4096, 4096, 4096), params, 30.1)
    cache.save()
    again = TunedCache.for_device(*DEV, root=tmp_path)
    assert again.lookup("blocktile_2d", 4000, 4000, 4000) == params
    assert again.lookup("blocktile_2d", 100, 100, 100) is None
    assert again.lookup("vectorized", 4000, 4000, 4000) is None
    assert not list(tmp_path.glob("*.tmp")), "atomic write leaves no temporary file"


def test_other_devices_do_not_share_entries(tmp_path):
    cache = TunedCache.for_device(*DEV, root=tmp_path)
    cache.store("blocktile_2d", shape_class(64, 64, 64), get("blocktile_2d").defaults, 1.0)
    cache.save()
    other = TunedCache.for_device("NVIDIA A100-SXM4-80GB", (8, 0), 108, root=tmp_path)
    assert other.entries == {}


def test_corrupt_file_is_ignored_with_a_warning(tmp_path):
    cache = TunedCache.for_device(*DEV, root=tmp_path)
    cache.path.parent.mkdir(parents=True, exist_ok=True)
    cache.path.write_text("{ this is not json")
    with pytest.warns(UserWarning, match="does not parse"):
        again = TunedCache.for_device(*DEV, root=tmp_path)
    assert again.entries == {}


def test_foreign_and_invalid_entries_are_ignored(tmp_path):
    cache = TunedCache.for_device(*DEV, root=tmp_path)
    good = get("smem_tiled").validate({"BLOCK_DIM": 16})
    cache.store("smem_tiled", "m-le64.n-le64.k-le64", good, 1.0)
    cache.save()
    data = json.loads(cache.path.read_text())
    data["entries"]["no_such_kernel/float32/m-le64.n-le64.k-le64"] = {"params": {}}
    data["entries"]["smem_tiled/float32/m-le256.n-le64.k-le64"] = {"params": {"BLOCK_DIM": 64}}
    cache.path.write_text(json.dumps(data))
    with pytest.warns(UserWarning) as record:
        again = TunedCache.for_device(*DEV, root=tmp_path)
    messages = " ".join(str(w.message) for w in record)
    assert "no_such_kernel" in messages and "BLOCK_DIM = 64" in messages
    assert list(again.entries) == ["smem_tiled/float32/m-le64.n-le64.k-le64"]
    # A file written for another device under this device's name is refused as a whole.
    data["device"] = "someone-else"
    cache.path.write_text(json.dumps(data))
    with pytest.warns(UserWarning, match="not a format-1 file"):
        assert TunedCache.for_device(*DEV, root=tmp_path).entries == {}


def test_search_order_starts_with_the_given_sets_and_covers_the_space():
    spec = get("smem_tiled")
    order = search_order(spec, first=[{"BLOCK_DIM": 7}, spec.defaults])
    assert order[0] == spec.validate({"BLOCK_DIM": 7}) and order[1] == spec.defaults
    assert len(order) == len(spec.search_space())
    assert {p["BLOCK_DIM"] for p in order} == set(range(2, 33))


@pytest.mark.skipif(not compiler.nvrtc_available(), reason="NVRTC not installed")
def test_candidates_are_pruned_by_the_compiler_report():
    spec = get("blocktile_2d")
    spilling = {"BM": 64, "BN": 16, "BK": 32, "TM": 8, "TN": 4}  # valid by the spec, spills in ptxas
    assert spec.problems(spilling) == []
    cands = candidates(spec, "sm_90", first=[spilling, spec.defaults], limit=2)
    assert cands[0].rejected and "local memory" in cands[0].rejected
    assert cands[1].rejected is None and cands[1].resources.registers > 0


def test_storing_a_tuned_entry_forgets_remembered_launches(tmp_path):
    """A launch remembered for repeat calls was made with the parameters of its time: a new tuned entry
    drops them all (the next call dispatches afresh)."""
    import numpy as np

    import gemmlab
    from gemmlab import api
    from gemmlab.tuned import TunedCache

    one = np.ones((2, 2), np.float32)
    gemmlab.matmul(one, one, kernel="cpu_naive")  # catch up with entries other tests stored
    plans = api.call._plans
    plans[("marker",)] = object()
    gemmlab.matmul(one, one, kernel="cpu_naive")
    assert ("marker",) in plans  # nothing was tuned since: plans stay
    TunedCache.for_device("Test GPU", (9, 0), 132, root=tmp_path).store("sgemm", "square-L", {"BM": 128}, 40.0)
    gemmlab.matmul(one, one, kernel="cpu_naive")
    assert ("marker",) not in plans


def test_candidates_are_pruned_then_measured_together_through_bench_measure(monkeypatch):
    """The tuner measures what the compiler did not reject through the one measuring function, eight at a time:
    failed verifications are noted and never best, the best rate wins, the defaults' rate is kept."""
    from types import SimpleNamespace

    from gemmlab.bench import measure as bench_measure
    from gemmlab.kernels import get
    from gemmlab.tune import search

    spec = get("sgemm")
    defaults = spec.validate(spec.defaults)
    other = spec.validate(dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, MIN_BLOCKS=5))
    bad = spec.validate(dict(BM=128, BN=64, BK=16, WM=64, WN=32, TM=8, TN=8, MIN_BLOCKS=3))
    rejected = spec.validate(dict(ORDER=2))
    monkeypatch.setattr(search, "_prune_by_compiler", lambda spec, p, arch, smem: search.Candidate(
        p, None, "uses local memory" if p == rejected else None))
    seen = []

    def fake_measure(entries, shape, **kw):
        seen.append([p for _, p in entries])
        rate = {id(defaults): 30.0, id(other): 40.0}
        return [SimpleNamespace(ok=p is not bad, tflops=rate.get(id(p), 0.0), rel_error=0.5 if p is bad else 1e-7,
                                note="", status="failed" if p is bad else "ok") for _, p in entries]

    monkeypatch.setattr(bench_measure, "measure", fake_measure)
    result = search.TuneResult("sgemm", "c", (512, 512, 512), None, 0.0, None)
    info = SimpleNamespace(arch="sm_90", smem_per_block_optin=232448)
    search._try_candidates(spec, [defaults, rejected, other, bad], info, (512, 512, 512), 20.0, 0, result, None)
    assert seen == [[defaults, other, bad]]                       # the rejected one is never measured
    assert result.best is other and result.best_tflops == 40.0 and result.default_tflops == 30.0
    notes = [(p, rate, note) for p, rate, note in result.tried]
    assert notes[0] == (rejected, None, "uses local memory")
    assert (bad, None, "FAILED verification (rel. error 5.0e-01)") in notes and (other, 40.0, "ok") in notes


def test_a_large_space_is_sampled_quickly_with_the_types_at_their_defaults():
    """Rung 10's space (540,672 valid sets) is sampled, not enumerated: bounded, seeded, each set once, the
    given sets first, type parameters (set from a call's arrays) never varied."""
    import time

    from gemmlab.tune import search

    spec = get("sgemm")
    first = [spec.heuristic(512, 512, 512, 132), spec.defaults]
    t0 = time.perf_counter()
    order = search_order(spec, first=first, seed=3)
    assert time.perf_counter() - t0 < 10
    assert order[0] == spec.validate(first[0]) and order[1] == spec.validate(spec.defaults)
    assert len(order) <= search.MAX_SAMPLED + len(first) and len(order) > 1000
    assert len({tuple(sorted(p.items())) for p in order}) == len(order)
    assert all(p[t] == spec.defaults[t] for p in order[2:] for t in spec.type_params)
    assert all(not spec.problems(p) for p in order)
    assert search_order(spec, first=first, seed=3) == order and search_order(spec, first=first, seed=4) != order


def test_the_search_times_each_set_with_the_shapes_own_alignment():
    """Tuning a shape whose N is off a multiple of 4: every set is timed with C through shared memory where
    its tile can stage it and with B in 4-byte copies where its threads and BN allow, as the call will run it
    (spec.follows); the sets stay valid and distinct; an aligned shape keeps 16-byte copies and C_STAGE 0."""
    from gemmlab.kernels.rungs import sgemm

    spec = get("sgemm")
    odd = search_order(spec, first=[spec.heuristic(1000, 3001, 200, 132)], seed=1, shape=(1000, 3001, 200))
    assert len({tuple(sorted(p.items())) for p in odd}) == len(odd) and all(not spec.problems(p) for p in odd)
    assert all(p["C_STAGE"] == int(sgemm.c_stage_floats(p) <= sgemm.smem_bytes(p) // 4) for p in odd)
    assert sum(p["C_STAGE"] for p in odd) > len(odd) // 2
    assert sum(p["B_COPY"] == 4 for p in odd) > len(odd) // 2
    aligned = search_order(spec, first=[spec.heuristic(1000, 3000, 200, 132)], seed=1, shape=(1000, 3000, 200))
    assert all(p["C_STAGE"] == 0 and p["B_COPY"] == 16 for p in aligned)


def test_a_search_where_nothing_passes_stops(monkeypatch):
    """Every candidate failing (or rejected) must not keep the tuner searching the whole space: it stops once
    GIVE_UP_AFTER budgets are spent, with no best."""
    from types import SimpleNamespace

    from gemmlab.runtime import device
    from gemmlab.tune import search

    clock = [0.0]
    monkeypatch.setattr(search.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(device, "device_info", lambda *a: SimpleNamespace(sm_count=132, arch="sm_90",
                                                                        smem_per_block_optin=232448))
    monkeypatch.setattr(search, "precompile", lambda *a, **k: None)
    monkeypatch.setattr(search, "_pool", lambda workers: None)
    calls = []

    def nothing_passes(spec, params, info, shape, per_ms, seed, result, on_step):
        calls.append(len(params))
        clock[0] += 1.0  # one second per group measured
        result.tried += [(p, None, "FAILED verification") for p in params]

    monkeypatch.setattr(search, "_try_candidates", nothing_passes)
    result = search.tune(get("sgemm"), (512, 512, 512), budget_s=5.0)
    assert result.best is None and len(calls) == 5 * search.GIVE_UP_AFTER + 1
