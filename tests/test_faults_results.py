"""Damaged, odd or hostile results: reading them and reporting on them gives a correct report or one clear
line (a warning, or a CLI error with a non-zero exit), never a traceback and never a wrong number."""

import csv
import io
import json
import math
import os
import re
import warnings

import matplotlib
import pytest
from typer.testing import CliRunner

from gemmlab.bench import records
from gemmlab.bench.records import Results, ResultsWarning, derive, load
from gemmlab.cli import app
from gemmlab.report import build_report, write_report
from gemmlab.report.context import ReportContext
from test_report import synthetic

runner = CliRunner()


def by_name(secs, name):
    return [s for s in secs if s.name == name]


def report_text(secs) -> str:
    return str([(s.title, s.blocks) for s in secs])


def saved(tmp_path, results: Results, name="results.json"):
    path = tmp_path / name
    results.save(path)
    return path


def lines(output: str, prefix: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.startswith(prefix)]


# ------------------------------------------------------------------------------------------ a time that is not one


@pytest.mark.parametrize("median", [0.0, -1.5, math.nan, math.inf])
def test_a_time_of_zero_negative_or_non_finite_is_not_measured_and_never_divided_by(median):
    res = synthetic()
    bad = next(r for r in res.records if r.kernel == "smem_tiled" and r.m == 4096 and r.mode == "compute")
    bad.median_ms = median
    derive(bad)
    assert not bad.measured and not bad.ok and bad.tflops is None and bad.gbps is None
    secs = build_report(res)
    story = by_name(secs, "ladder_story")[0]
    assert "smem_tiled" not in story.tables()[0].column("kernel")
    assert "smem_tiled at 4096 (compute): not measured" in report_text(by_name(secs, "overview"))
    table1 = by_name(secs, "table1")[0].tables()[0]
    assert "smem_tiled" not in table1.column("kernel")
    assert not re.search(r"\b(nan|inf)\b", report_text(s for s in secs if s.name != "overview"))


def test_report_cli_on_a_file_with_a_zero_time_writes_the_report(tmp_path):
    doc = json.loads(synthetic().to_json())
    for d in doc["records"]:
        if d["kernel"] == "cublas" and d["m"] == 4096 and d["mode"] == "compute":
            d["median_ms"] = 0
    (tmp_path / "r.json").write_text(json.dumps(doc))
    r = runner.invoke(app, ["report", str(tmp_path / "r.json"), "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "cublas at 4096 (compute): not measured" in md


# ------------------------------------------------------------------------------------------ damaged files


def test_bad_records_and_runs_are_skipped_with_one_warning_naming_the_file(tmp_path):
    doc = json.loads(synthetic().to_json())
    n = len(doc["records"])
    doc["records"][0] = 5
    doc["records"][1] = ["not", "a", "record"]
    doc["runs"].append("not a run")
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = load([path])
    assert len(res) == n - 2 and len(res.runs) == 1
    assert len(caught) == 1 and caught[0].category is ResultsWarning
    msg = str(caught[0].message)
    assert str(path) in msg and "2 of" in msg and "records" in msg and "1 of 2 runs" in msg


@pytest.mark.parametrize("field, value", [
    ("median_ms", "abc"), ("median_ms", {"a": 1}), ("median_ms", "nan"), ("median_ms", [1.0]), ("median_ms", True),
    ("m", "inf"), ("m", 1.5), ("m", 0), ("alpha", "-inf"), ("tflops", {}), ("pinned", {"x": 1}), ("pinned", "maybe"),
    ("params", [1, 2]), ("params", {"a": json.loads("[" * 40 + "]" * 40)}),
    ("kernel", 5), ("kernel", None), ("label", {"a": 1}),
])
def test_a_wrong_typed_or_non_finite_field_skips_its_record(tmp_path, field, value):
    doc = json.loads(synthetic().to_json())
    doc["records"][0][field] = value
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    seen: list[str] = []
    res = load([path], warn=seen.append)
    assert len(res) == len(doc["records"]) - 1
    assert len(seen) == 1 and str(path) in seen[0] and "1 of" in seen[0]


def test_an_infinite_verification_error_still_loads():
    res = Results([r for r in synthetic().records if r.status == "failed"])
    res.records[0].rel_error = math.inf
    seen: list[str] = []
    back = Results.from_json(res.to_json(), warn=seen.append)
    assert not seen and back.records[0].rel_error == math.inf


def test_rates_are_derived_again_from_the_recorded_time():
    doc = json.loads(synthetic().to_json())
    d = next(x for x in doc["records"] if x["kernel"] == "cublas" and x["m"] == 4096 and x["mode"] == "compute")
    d["tflops"] = 9999.0
    r = next(x for x in Results.from_json(json.dumps(doc)).records
             if x.kernel == "cublas" and x.m == 4096 and x.mode == "compute")
    assert r.tflops == pytest.approx(51.0)


def test_garbage_csv_rows_are_skipped_and_the_rest_loads(tmp_path):
    res = synthetic()
    text = res.to_csv()
    row = next(csv.DictReader(io.StringIO(text)))
    row["m"] = "abc"
    buf = io.StringIO()
    csv.DictWriter(buf, fieldnames=list(row), lineterminator="\n").writerow(row)
    path = tmp_path / "r.csv"
    path.write_text(text + "garbage,1,2\n" + buf.getvalue() + '"unterminated,x\n')
    seen: list[str] = []
    back = load([path], warn=seen.append)
    assert len(back) == len(res)
    assert len(seen) == 1 and str(path) in seen[0] and "3 of" in seen[0]


@pytest.mark.parametrize("text", ["[" * 100000 + "]" * 100000, "[1, 2]", '"a string"', "{", "",
                                  json.dumps({"format": records.FORMAT, "schema": "one"}),
                                  json.dumps({"format": records.FORMAT, "records": {"a": 1}})])
def test_a_file_that_cannot_be_read_is_skipped_in_a_folder_with_one_warning(tmp_path, text):
    good = synthetic()
    good.save(tmp_path / "good.json")
    (tmp_path / "bad.json").write_text(text)
    seen: list[str] = []
    res = load([tmp_path], warn=seen.append)
    assert len(res) == len(good)
    assert len(seen) == 1 and str(tmp_path / "bad.json") in seen[0] and "skipped" in seen[0]
    with pytest.raises(ValueError, match="bad.json"):  # named on its own, it is an error naming it
        load([tmp_path / "bad.json"])


def test_a_file_that_is_not_text_is_skipped_in_a_folder(tmp_path):
    synthetic().save(tmp_path / "good.json")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00garbage")
    seen: list[str] = []
    assert len(load([tmp_path], warn=seen.append)) == len(synthetic())
    assert len(seen) == 1 and "bin.csv" in seen[0]


def test_report_cli_prints_one_warning_line_per_bad_file_and_writes_the_report(tmp_path):
    data = tmp_path / "data"
    synthetic().save(data / "good.json")
    doc = json.loads(synthetic(gpu="GPU B", run="run2").to_json())
    doc["records"][0] = "oops"
    (data / "partly.json").write_text(json.dumps(doc))
    (data / "deep.json").write_text("[" * 100000 + "]" * 100000)
    r = runner.invoke(app, ["report", str(data), "--out", str(tmp_path / "rep")], terminal_width=100)
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    warned = lines(r.output, "warning:")
    assert len(warned) == 2
    assert any("partly.json" in w and "1 of" in w for w in warned) and any("deep.json" in w for w in warned)
    assert "GPU B" in (tmp_path / "rep" / "report.md").read_text()


# ------------------------------------------------------------------------------------------ text into figures


def test_math_text_in_gpu_names_and_labels_is_drawn_as_written(tmp_path):
    gpu, label = r"GPU $\foo$ x_1^2", r"naive $\bar$ a_b"
    res = synthetic(gpu=gpu)
    for r in res.records:
        if r.kernel == "naive":
            r.label = label
    with matplotlib.rc_context({"text.usetex": True}):  # LaTeX asked for by a matplotlibrc: still no TeX
        secs = build_report(res)
        paths = write_report(res, tmp_path)
    assert len(list(paths["figures"].glob("*.png"))) == sum(len(s.figures()) for s in secs) == 4
    for fig in (f for s in secs for f in s.figures()):
        ax = fig.figure.axes[0]
        # what matplotlib draws: the text without math mode, the escaped dollars shown as dollars
        drawn = [t._preprocess_math(t.get_text()) for t in ax.findobj(matplotlib.text.Text) if "$" in t.get_text()
                 and "mathdefault" not in t.get_text()]
        assert all(mode is False for _, mode in drawn)
        assert any(gpu in s for s, _ in drawn) or any(label in s for s, _ in drawn)
        assert fig.png()


# ------------------------------------------------------------------------------------------ what the records say


def test_a_cpu_only_report_says_warm_l2_and_does_not_claim_a_gpu():
    res = synthetic()
    res.records = [r for r in res.records if r.family == "cpu"]
    assert {r.l2 for r in res.records} == {"warm"}
    secs = build_report(res)
    caption = by_name(secs, "table1")[0].tables()[0].caption
    assert "warm L2" in caption and "cold" not in caption
    sec = by_name(secs, "cpu_and_gpu")[0]
    fig = sec.figures()[0]
    assert "GPU" not in sec.title and "GPU" not in fig.figure.axes[0].get_title() and "GPU" not in fig.caption
    assert all(ln.get_linestyle() == "--" for ln in fig.figure.axes[0].get_lines())


def test_a_warm_l2_gpu_run_is_captioned_warm():
    res = synthetic(cpu=False)
    for r in res.records:
        r.l2 = "warm"
    secs = build_report(res)
    assert "warm L2" in by_name(secs, "table1")[0].tables()[0].caption
    fig = by_name(secs, "throughput")[0].figures()[0]
    assert "warm L2" in fig.figure.axes[0].get_title() and "flushed" not in fig.caption


# ------------------------------------------------------------------------------------------ --at


def test_report_at_a_size_without_results_is_a_one_line_error_naming_the_sizes(tmp_path):
    path = saved(tmp_path, synthetic())
    r = runner.invoke(app, ["report", str(path), "--at", "999", "--out", str(tmp_path / "rep")], terminal_width=80)
    assert r.exit_code != 0
    errors = lines(r.output, "error:")
    assert len(errors) == 1 and "999" in errors[0] and "256, 512, 1024, 4096" in errors[0]
    assert not (tmp_path / "rep" / "report.md").exists()
    with pytest.raises(ValueError, match="sizes with results"):
        build_report(synthetic(), at=999)
    assert ReportContext(synthetic()).sizes() == [256, 512, 1024, 4096]


def test_report_at_a_size_with_results_is_used(tmp_path):
    path = saved(tmp_path, synthetic())
    r = runner.invoke(app, ["report", str(path), "--at", "1024", "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    assert "N = 1024" in (tmp_path / "rep" / "report.md").read_text()


def test_bench_outputs_at_a_size_without_results_warn_and_use_the_default(tmp_path, capsys):
    from gemmlab.cli import _measure

    paths = _measure.write_outputs(synthetic(), tmp_path / "out", report=True, at=999)
    out = capsys.readouterr().out
    assert len([ln for ln in out.splitlines() if "warning: --at 999" in ln]) == 1
    assert "Table 1: time, throughput and bandwidth at N = 4096" in paths["markdown"].read_text()
    _measure.summary(synthetic(), 999)
    assert "at N = 4096" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ saving


def test_save_does_not_follow_a_link_planted_at_the_old_temporary_name(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "results.json"
    (tmp_path / "results.json.tmp").symlink_to(victim)
    synthetic().save(target)
    assert victim.read_text() == "precious"
    assert (tmp_path / "results.json.tmp").is_symlink() and not target.is_symlink()
    assert len(load([target])) == len(synthetic())


def test_an_interrupted_save_leaves_the_previous_results_intact(tmp_path, monkeypatch):
    target = tmp_path / "results.json"
    synthetic().save(target)
    before = target.read_bytes()

    def interrupted(src, dst):
        raise OSError("interrupted")

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(OSError, match="interrupted"):
        synthetic(gpu="GPU B").save(target)
    monkeypatch.undo()
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # no temporary left behind
    assert {r.gpu for r in load([target]).records} == {"GPU A"}
