"""gemmlab bench / sweep / report on a machine without a GPU: small, quick, and writing real files."""

import json

import pytest
from typer.testing import CliRunner

from gemmlab.cli import app
from gemmlab.runtime import device

runner = CliRunner()
no_gpu = pytest.mark.skipif(device.gpu_available(), reason="checks the no-GPU path")
QUICK = ["--sizes", "16,24", "-k", "cpu_reordered,cpu_blas", "--budget-ms", "5"]


@no_gpu
def test_bench_without_a_gpu_runs_the_cpu_ladder_and_writes_the_report(tmp_path):
    r = runner.invoke(app, ["bench", *QUICK, "-k", "naive", "--out", str(tmp_path)], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "GPU part skipped" in r.output and "CuPy" in r.output
    doc = json.loads((tmp_path / "results.json").read_text())
    assert {rec["kernel"] for rec in doc["records"]} == {"cpu_reordered", "cpu_blas"}
    assert any(n.startswith("GPU part skipped") for n in doc["runs"][0]["notes"])
    md = (tmp_path / "report.md").read_text()
    assert "CPU ladder" in md and "GPU part skipped" in md and "cpu_blas" in md
    assert (tmp_path / "report.html").read_text().count("data:image/png;base64,") >= 1
    assert (tmp_path / "results.csv").read_text().startswith("kernel,")


def test_sweep_writes_a_file_and_report_reads_it_back(tmp_path):
    out = tmp_path / "one.json"
    r = runner.invoke(app, ["sweep", *QUICK, "--no-peers", "--shape", "8x12x5", "--reps", "3", "--out", str(out)],
                      terminal_width=200)
    if device.gpu_available():
        pytest.skip("the GPU path is covered by the GPU tests")
    assert r.exit_code == 0, r.output
    recs = json.loads(out.read_text())["records"]
    assert {(x["m"], x["n"], x["k"]) for x in recs} == {(16, 16, 16), (24, 24, 24), (8, 12, 5)}
    assert all(x["samples"] == 3 for x in recs)
    rep = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "rep")], terminal_width=200)
    assert rep.exit_code == 0, rep.output
    assert (tmp_path / "rep" / "report.html").is_file() and "6 records" in rep.output


@pytest.mark.parametrize("args,words", [
    (["sweep", "--sizes", "abc"], "size 'abc'"),
    (["sweep", "-k", "nope"], "unknown kernel 'nope'"),
    (["sweep", "--shape", "3x4"], "MxNxK"),
    (["sweep", "--modes", "fast"], "--modes"),
    (["report", "/no/such/results.json"], "no such results"),
])
def test_bad_options_fail_in_one_line(args, words):
    r = runner.invoke(app, args, terminal_width=200)
    assert r.exit_code != 0
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and words in lines[0], r.output


@no_gpu
def test_ctrl_c_keeps_the_measurements(tmp_path, monkeypatch):
    from gemmlab.bench import sweep

    real = sweep.Sweep.__iter__

    def interrupted(self):
        for i, rec in enumerate(real(self)):
            yield rec
            if i == 1:
                raise KeyboardInterrupt

    monkeypatch.setattr(sweep.Sweep, "__iter__", interrupted)
    r = runner.invoke(app, ["bench", *QUICK, "--out", str(tmp_path)], terminal_width=200)
    assert r.exit_code == 130, r.output
    assert "interrupted" in r.output
    doc = json.loads((tmp_path / "results.json").read_text())
    assert len(doc["records"]) == 2 and doc["runs"][0]["interrupted"]
    assert (tmp_path / "report.html").is_file()


@pytest.mark.parametrize("args,message", [
    (["--batch", "0", "--shape", "64x64x64"], "--batch 0: a batch has at least one product"),
    (["--batch", "4", "--shape", "64x64x64", "--shared", "c"], "--shared 'c' is not one of none, a, b"),
    (["--batch", "4", "--shape", "64x64x64", "--dtype", "int8"], "--dtype 'int8'"),
    (["--batch", "4"], "--batch needs the products' shape"),
])
def test_bench_batch_names_what_is_wrong(args, message):
    r = runner.invoke(app, ["bench", *args], terminal_width=200)
    assert r.exit_code == 1 and message in r.output, r.output


@no_gpu
def test_bench_batch_without_a_gpu_says_why():
    r = runner.invoke(app, ["bench", "--batch", "4", "--shape", "64x64x64"], terminal_width=200)
    assert r.exit_code == 1 and "gemmlab bench --batch times GPU calls beside torch's" in r.output, r.output


@no_gpu
@pytest.mark.parametrize("args,message", [
    (["bench", "--no-cpu"], "nothing was measured: GPU part skipped"),
    (["bench", "-k", "sgemm"], "nothing was measured: GPU part skipped"),
    (["sweep", "-k", "cpu_naive", "--sizes", "4096"], "nothing was measured: the CPU baselines run where"),
])
def test_a_run_that_measures_nothing_says_so_and_fails(args, message, tmp_path):
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "r")], terminal_width=200)
    assert r.exit_code == 2 and message in r.output, r.output
    assert not (tmp_path / "r").exists()


def test_cpu_scale_must_be_positive():
    r = runner.invoke(app, ["bench", "--cpu-scale", "-1"], terminal_width=200)
    assert r.exit_code == 1 and "--cpu-scale must be positive" in r.output, r.output


@pytest.mark.parametrize("cc", [(9, 0), (8, 0), (7, 5)])
def test_the_main_jobs_tensor_section_is_the_rungs_this_gpu_runs(monkeypatch, cc):
    """On a GPU with tensor cores the main job adds BF16 at four squares, compute only, with the peers: the
    tensor rungs in ladder order (on Hopper mma_sync and the Hopper steps up to rung 15; before it mma_sync
    alone), and no section where no tensor rung runs."""
    import dataclasses

    from gemmlab.analysis import facts
    from gemmlab.bench import main_job
    from gemmlab.bench.records import COMPUTE

    monkeypatch.setattr(device, "gpu_unavailable_reason", lambda: None)
    monkeypatch.setattr(device, "device_info", lambda *a: dataclasses.replace(facts.H100_SXM, compute_capability=cc))
    monkeypatch.setattr("gemmlab.bench.peers.torch_unavailable_reason", lambda: None)
    if cc < (8, 0):
        assert "no tensor-core rung" in main_job.why_not()
        return
    assert main_job.why_not() is None
    plan = main_job.tensor_plan(budget_ms=40)
    names = [n for n, _ in plan.gpu]
    hopper = ["tma_wgmma", "warp_specialized", "persistent", "wgmma"]
    assert names == (["mma_sync", *hopper] if cc == (9, 0) else ["mma_sync"])
    assert plan.fmt == "bf16" and plan.modes == (COMPUTE,) and plan.timing.budget_ms == 40
    assert [s[0] for s in plan.shapes] == list(main_job.TENSOR_SIZES) and {"cublas", "torch"} <= set(plan.peers)


@pytest.mark.parametrize("args,with_section", [([], True), (["--sizes", "16"], False), (["--dtype", "float32"], False),
                                               (["--no-peers"], False)])
def test_only_the_main_job_adds_the_tensor_section(monkeypatch, tmp_path, args, with_section):
    from gemmlab.bench import main_job
    from gemmlab.bench.records import Results
    from gemmlab.cli import _measure

    ran = []

    class FakeSweep:
        notes = []

    def fake_run(plan, command):
        ran.append(plan.fmt)
        return Results([], []), False, FakeSweep()

    monkeypatch.setattr(device, "gpu_unavailable_reason", lambda: None)
    monkeypatch.setattr(_measure, "build_plan", lambda **kw: main_job.Plan(shapes=[], fmt="fp32"))
    monkeypatch.setattr(_measure, "run", fake_run)
    monkeypatch.setattr(_measure, "nothing_measured", lambda *a: None)
    monkeypatch.setattr(_measure, "write_outputs", lambda *a, **k: {"json": "r.json", "csv": "r.csv", "html": "r.html",
                                                                    "markdown": "r.md"})
    monkeypatch.setattr(_measure, "summary", lambda *a: None)
    monkeypatch.setattr(main_job, "why_not", lambda: None)
    monkeypatch.setattr(main_job, "tensor_plan", lambda budget_ms=None: main_job.Plan(shapes=[], fmt="bf16"))
    monkeypatch.setattr(main_job, "measure_layer", lambda command, budget_ms=None: ran.append("layer") or Results([], []))
    r = runner.invoke(app, ["bench", *args, "--out", str(tmp_path)], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert ran == (["fp32", "bf16", "layer"] if with_section else ["fp32"])
