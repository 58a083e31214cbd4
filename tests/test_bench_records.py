"""Result records: derived rates, JSON and CSV round trips, loading and merging across runs and devices."""

import json
import math

import pytest

from gemmlab.bench import records
from gemmlab.bench.records import Record, Results, derive, load


def make(kernel="naive", family="gpu", m=1024, median=2.0, mode="compute", run="r1", gpu="GPU A", **kw):
    base = dict(kernel=kernel, label=kernel, family=family, rung=1 if family != "gpu_peer" else None,
                idea="an idea", params={"BX": 32, "BY": 32}, dtype="float32", m=m, n=m, k=m, alpha=1.0,
                beta=0.0, mode=mode, l2="cold", pinned=None, method="events", samples=10, median_ms=median,
                rel_error=1e-7,
                gpu=gpu, peak_fp32_tflops=60.0, peak_dram_gbps=3000.0, run_id=run, measured_at="2026-01-01T00:00:00")
    if median is not None:
        base.update(min_ms=median * 0.9, max_ms=median * 1.2, q1_ms=median * 0.95, q3_ms=median * 1.05)
    base.update(kw)
    return derive(Record(**base))


def test_derived_rates_follow_their_definitions():
    r = make(m=1000, median=2.0)
    assert r.flops == 2 * 1000**3
    assert r.tflops == pytest.approx(2e9 / 2e-3 / 1e12)
    assert r.bytes == 4 * 3 * 1000**2
    assert r.gbps == pytest.approx(12e6 / 2e-3 / 1e9)
    assert r.pct_peak_compute == pytest.approx(100 * r.tflops / 60.0)
    assert r.pct_peak_bandwidth == pytest.approx(100 * r.gbps / 3000.0)
    assert make(m=1000, beta=0.5).bytes == 4 * 4 * 1000**2           # C is read as well
    e2e = make(m=1000, mode="end_to_end")
    assert e2e.bytes == 4 * 4 * 1000**2 and e2e.pct_peak_bandwidth is None  # host link, not DRAM
    cpu = make(kernel="cpu_naive", family="cpu")
    assert cpu.pct_peak_compute is None and cpu.device == "CPU"


def test_untimed_record_has_no_rates():
    r = make(median=None, status="failed", rel_error=math.inf)
    assert not r.ok and r.tflops is None and r.gbps is None


def _same(a: Results, b: Results):
    assert [r.as_dict() for r in a.records] == [r.as_dict() for r in b.records]


def test_json_round_trip_keeps_every_field_and_stays_strict_json():
    res = Results([make(), make(kernel="cublas", family="gpu_peer", median=1.0),
                   make(median=None, status="failed", rel_error=math.inf, note="verification failed")],
                  [{"run_id": "r1", "notes": ["a note"]}])
    text = res.to_json()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    back = Results.from_json(text)
    _same(res, back)
    assert back.records[2].rel_error == math.inf and back.runs == res.runs


def test_csv_round_trip_types():
    res = Results([make(pinned=True, mode="end_to_end"), make(kernel="cpu_blas", family="cpu", rung=5, params={}),
                   make(median=None, status="error", rel_error=None)])
    back = Results.from_csv(res.to_csv())
    _same(res, back)
    r = back.records[0]
    assert isinstance(r.params, dict) and r.params["BX"] == 32 and r.pinned is True and isinstance(r.m, int)
    assert back.records[2].rel_error is None and back.records[2].median_ms is None


def test_files_save_load_and_merge(tmp_path):
    run1 = Results([make(run="r1"), make(kernel="cublas", family="gpu_peer", run="r1")], [{"run_id": "r1"}])
    run2 = Results([make(run="r2", gpu="GPU B")], [{"run_id": "r2"}])
    run1.save(tmp_path / "one")                      # a directory: results.json and results.csv
    run2.save(tmp_path / "two.csv")
    merged = load([tmp_path / "one", tmp_path / "two.csv"])
    assert len(merged) == 3                          # the run saved twice (JSON and CSV) counts once
    assert {r.gpu for r in merged.records} == {"GPU A", "GPU B"}
    assert [run["run_id"] for run in merged.runs] == ["r1"]  # CSV carries no run metadata
    again = Results.merge(merged, merged)
    assert len(again) == 3


def test_a_later_record_of_the_same_measurement_replaces_the_earlier():
    a, b = make(median=2.0), make(median=3.0)
    assert Results.merge(Results([a]), Results([b])).records[0].median_ms == 3.0


def test_unknown_fields_are_ignored_and_missing_required_ones_named():
    d = make().as_dict()
    d["a_field_from_the_future"] = 1
    assert records.record_from_dict(d).kernel == "naive"
    del d["kernel"]
    with pytest.raises(ValueError, match="kernel"):
        records.record_from_dict(d)


def test_bad_files_are_named(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match="x.json"):
        load([bad])
    newer = tmp_path / "y.json"
    newer.write_text(json.dumps({"format": records.FORMAT, "schema": records.SCHEMA + 1, "records": []}))
    with pytest.raises(ValueError, match="newer"):
        load([newer])
    with pytest.raises(FileNotFoundError):
        load([tmp_path / "absent.json"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no gemmlab results"):
        load([tmp_path / "empty"])


def test_environment_facts_without_a_gpu():
    from gemmlab.bench import environment

    env = environment.record_fields()
    assert env["gemmlab_version"] and env["numpy"] and env["processor"]
    assert set(env) <= set(records.FIELDS)
