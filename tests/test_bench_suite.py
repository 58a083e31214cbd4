"""The shape suite without a GPU: its shapes and groups, option parsing, the summary of hand-made records, the
script's output format, and `gemmlab bench --suite` refusing cleanly where it cannot run."""

import importlib.util
import math
import pathlib

import pytest
from typer.testing import CliRunner

from gemmlab.bench import suite
from gemmlab.bench.records import FAILED, GPU, GPU_PEER, OK, Record, Results, derive
from gemmlab.cli import app
from gemmlab.runtime import device

runner = CliRunner()
no_gpu = pytest.mark.skipif(device.gpu_available(), reason="checks the no-GPU path")
SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "shape_suite.py"


# ------------------------------------------------------------------------------------------ shapes


def test_the_suite_has_45_shapes_in_five_groups():
    everything = suite.cases()
    assert len(everything) == 45 and len(everything) >= 40
    assert list(suite.GROUPS) == ["square", "odd", "llm", "long_k", "wide"]
    counts = {g: sum(1 for grp, _ in everything if grp == g) for g in suite.GROUPS}
    assert counts == {"square": 6, "odd": 7, "llm": 25, "long_k": 4, "wide": 3}
    assert [g for g, _ in everything] == sorted((g for g, _ in everything), key=list(suite.GROUPS).index)


def test_known_shapes_sit_in_their_groups():
    assert suite.group_of((16384, 16384, 16384)) == "square"
    assert suite.group_of((4097, 4097, 4097)) == "odd"
    assert suite.group_of((1, 11008, 4096)) == "llm" and suite.group_of((1, 4096, 11008)) == "llm"
    assert suite.group_of((4096, 12288, 4096)) == "llm"  # QKV
    assert suite.group_of((64, 64, 131072)) == "long_k"
    assert suite.group_of((16384, 16384, 256)) == "wide"
    assert suite.group_of((3, 4, 5)) == ""


def test_every_shape_is_in_one_group_only():
    shapes = [s for _, s in suite.cases()]
    assert len(set(shapes)) == len(shapes)  # group_of, and the tables, rely on it


def test_quick_is_every_third_shape_of_the_groups_chosen():
    assert suite.cases(quick=True) == suite.cases()[::3]
    assert len(suite.cases(quick=True)) == 15
    two = suite.cases(["odd", "wide"])
    assert [g for g, _ in two] == ["odd"] * 7 + ["wide"] * 3
    assert suite.cases(["odd", "wide"], quick=True) == two[::3]


def test_only_the_weight_groups_give_b_as_w_transposed():
    assert suite.b_layout("llm") == "W.t()"
    assert {suite.b_layout(g) for g in suite.GROUPS if g != "llm"} == {"K x N"}


# ------------------------------------------------------------------------------------------ options


def test_only_parses_groups_and_names_an_unknown_one():
    assert suite.parse_groups("llm, wide") == ["llm", "wide"]
    assert suite.parse_groups("") is None and suite.parse_groups(None) is None
    with pytest.raises(ValueError) as exc:
        suite.parse_groups("llm,tiny")
    text = str(exc.value)
    assert "--only 'tiny'" in text and "square, odd, llm, long_k, wide" in text and "'llm'" not in text
    with pytest.raises(ValueError, match="unknown group 'tiny'"):
        suite.cases(["tiny"])


def test_dtypes_both_means_bfloat16_then_float32():
    assert suite.parse_dtypes("both") == ["bfloat16", "float32"] == suite.parse_dtypes(None)
    assert suite.parse_dtypes("float32") == ["float32"]
    assert suite.parse_dtypes("float32,bfloat16") == ["float32", "bfloat16"]
    with pytest.raises(ValueError, match="--dtype 'float16'"):
        suite.parse_dtypes("float16")


def test_tolerances_are_the_formats_tables():
    from gemmlab import formats

    assert suite.TOLERANCE == {"bfloat16": formats.tolerance("bfloat16"), "float32": formats.tolerance("float32")}
    assert suite.TOLERANCE["bfloat16"] == 1e-2 and suite.TOLERANCE["float32"] == 1e-4


# ------------------------------------------------------------------------------------------ summary


def _rec(kernel, dtype, shape, ms=None, status=OK, err=None, rung=None):
    m, n, k = shape
    family = GPU if kernel == suite.GEMMLAB else GPU_PEER
    return derive(Record(kernel=kernel, label=kernel, family=family, rung=rung, idea="", params={}, dtype=dtype,
                         m=m, n=n, k=k, alpha=1.0, beta=0.0, mode="compute", l2="cold", pinned=None, status=status,
                         rel_error=err, median_ms=ms))


def _timed(dtype, shape, torch_ms, gemmlab_ms):
    return [_rec(suite.GEMMLAB, dtype, shape, gemmlab_ms, err=1e-6), _rec(suite.TORCH, dtype, shape, torch_ms)]


def _hand_made():
    recs = (_timed("bfloat16", (512, 512, 512), 2.0, 1.0)       # x cuBLAS 2.0
            + _timed("bfloat16", (64, 64, 131072), 1.0, 4.0)    # 0.25: the worst
            + _timed("bfloat16", (1000, 1000, 1000), 8.0, 1.0)  # 8.0
            + [_rec(suite.GEMMLAB, "bfloat16", (3000, 3000, 3000), status=FAILED, err=0.5)]
            + _timed("float32", (512, 512, 512), 3.0, 2.0))
    return Results(recs, [])


def test_summary_is_the_geometric_mean_and_the_worst_of_the_timed_shapes():
    s = suite.summarize(_hand_made())
    assert list(s) == ["bfloat16", "float32"]
    bf = s["bfloat16"]
    assert bf.count == 4
    assert bf.geomean == pytest.approx((2.0 * 0.25 * 8.0) ** (1 / 3))  # the failed shape left out: 4^(1/3)
    assert bf.worst == pytest.approx(0.25) and bf.worst_shape == (64, 64, 131072)
    assert bf.failures == ((3000, 3000, 3000),)
    fp = s["float32"]
    assert (fp.count, fp.failures, fp.worst_shape) == (1, (), (512, 512, 512))
    assert fp.geomean == pytest.approx(1.5) and fp.worst == pytest.approx(1.5)


def test_a_shape_without_a_torch_time_is_a_failure_not_a_ratio():
    recs = _timed("float32", (512, 512, 512), 1.0, 1.0) + [_rec(suite.GEMMLAB, "float32", (1024, 1024, 1024), 1.0)]
    s = suite.summarize(Results(recs, []))["float32"]
    assert s.count == 2 and s.failures == ((1024, 1024, 1024),) and s.geomean == pytest.approx(1.0)


def test_a_dtype_with_every_shape_failed_has_no_mean():
    s = suite.summarize(Results([_rec(suite.GEMMLAB, "float32", (8, 8, 8), status=FAILED, err=math.inf)], []))
    assert s["float32"].geomean is None and s["float32"].worst is None and s["float32"].failures == ((8, 8, 8),)
    assert "geometric mean x cuBLAS -" in s["float32"].line()


def test_summary_line():
    bf = suite.summarize(_hand_made())["bfloat16"]
    assert bf.line() == ("bfloat16: 4 shapes, geometric mean x cuBLAS 1.587, worst 0.250 at 64 x 64 x 131072; "
                         "1 below 0.9: 64 x 64 x 131072 (0.250); 1 failed: 3000 x 3000 x 3000")
    assert bf.below == ((0.25, (64, 64, 131072)),)
    fp = suite.summarize(_hand_made())["float32"]
    assert fp.line() == "float32: 1 shapes, geometric mean x cuBLAS 1.500, worst 1.500 at 512 x 512 x 512"


def test_the_summary_survives_saving_and_loading(tmp_path):
    res = _hand_made()
    again = Results.from_json(res.to_json())
    assert suite.summarize(again) == suite.summarize(res)


# ------------------------------------------------------------------------------------------ the script


def _script():
    spec = importlib.util.spec_from_file_location("shape_suite_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_keeps_no_shape_list_of_its_own():
    script = _script()
    assert not {"SQUARE", "ODD", "MODELS", "LONG_K", "WIDE", "GROUPS"} & set(vars(script))
    assert "131072" not in SCRIPT.read_text()


def test_the_script_prints_its_markdown_rows_and_summary():
    script = _script()
    by_dtype = suite.pairs(_hand_made())
    first, failed = by_dtype["bfloat16"][0], by_dtype["bfloat16"][3]
    assert script.row(first) == ("| bfloat16 | square | 512 | 512 | 512 | K x N | 2.0000 | 1.0000 | "
                                 f"{first.gemmlab.tflops:.1f} | 2.000 | 1.0e-06 |")
    assert script.row(failed) == "| bfloat16 | odd | 3000 | 3000 | 3000 | K x N | | | | FAILED | 5.0e-01 |"
    lines = [script.summary_line(s) for s in suite.summarize(_hand_made()).values()]
    assert lines == ["bfloat16: 4 shapes, geometric mean x cuBLAS 1.587, worst 0.000 at 3000 x 3000 x 3000",
                     "float32: 1 shapes, geometric mean x cuBLAS 1.500, worst 1.500 at 512 x 512 x 512"]


# ------------------------------------------------------------------------------------------ the CLI


def _one_error_line(r):
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, r.output
    return lines[0]


@pytest.mark.parametrize("args,message", [
    (["--suite", "--only", "llm,tiny"], "--only 'tiny': not a group of the suite; the groups are square, odd, llm, "
                                        "long_k, wide"),
    (["--suite", "--dtype", "float16"], "--dtype 'float16': the suite runs bfloat16, float32 or both"),
    (["--suite", "--budget-ms", "0"], "--budget-ms must be positive"),
    (["--suite", "--shape", "64x64x64"], "--shape does not go with it"),
    (["--suite", "--batch", "4"], "--batch does not go with it"),
    (["--only", "llm"], "--only goes with --suite"),
    (["--quick"], "--quick goes with --suite"),
])
def test_bench_suite_names_what_is_wrong(args, message):
    r = runner.invoke(app, ["bench", *args], terminal_width=200)
    assert r.exit_code == 1 and message in _one_error_line(r), r.output


@no_gpu
def test_bench_suite_without_a_gpu_says_why(tmp_path):
    r = runner.invoke(app, ["bench", "--suite", "--quick", "--out", str(tmp_path / "r")], terminal_width=200)
    assert r.exit_code == 1, r.output
    assert "gemmlab bench --suite times GPU calls beside torch's" in _one_error_line(r)
    assert not (tmp_path / "r").exists()


@no_gpu
def test_bench_suite_spread_without_a_gpu_says_why(tmp_path):
    """The spread run checks the GPU in its parent without importing torch (each GPU's process imports it)."""
    import subprocess
    import sys

    code = ("import sys\nfrom typer.testing import CliRunner\nfrom gemmlab.cli import app\n"
            f"r = CliRunner().invoke(app, ['bench', '--suite', '--gpus', '2', '--out', {str(tmp_path / 'r')!r}])\n"
            "print('EXIT', r.exit_code, 'TORCH', 'torch' in sys.modules)\nprint(r.output)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert "EXIT 1 TORCH False" in out, out
    assert "gemmlab bench --suite times GPU calls beside torch's" in out, out
    assert not (tmp_path / "r").exists()


@no_gpu
def test_measure_without_a_gpu_raises_the_reason():
    pytest.importorskip("torch")
    from gemmlab.runtime.errors import GPUUnavailableError

    with pytest.raises(GPUUnavailableError):
        suite.measure(["float32"], ["square"], quick=True)


def _fake_run(monkeypatch, results, asked):
    """`bench --suite` on hand-made results: the GPU check passed and `measure` replaced (records what it got)."""
    from gemmlab.cli import bench as cli_bench

    def measure(dtypes, groups, quick, budget_ms, on_progress=None, command=""):
        asked.update(dtypes=dtypes, groups=groups, quick=quick, budget_ms=budget_ms)
        return Results(results.records, [{"run_id": "test-run", "notes": []}])

    monkeypatch.setattr(cli_bench, "_require_gpu_and_torch", lambda command: None)
    monkeypatch.setattr(suite, "measure", measure)


def test_bench_suite_prints_a_table_per_dtype_writes_results_and_fails_on_a_failed_shape(monkeypatch, tmp_path):
    asked = {}
    _fake_run(monkeypatch, _hand_made(), asked)
    r = runner.invoke(app, ["bench", "--suite", "--only", "odd,long_k", "--quick", "--out", str(tmp_path)],
                      terminal_width=250)
    assert r.exit_code == 1, r.output
    assert asked == {"dtypes": ["bfloat16", "float32"], "groups": ["odd", "long_k"], "quick": True,
                     "budget_ms": suite.DEFAULT_BUDGET_MS}
    assert "shape suite, bfloat16" in r.output and "shape suite, float32" in r.output and "FAILED" in r.output
    assert "bfloat16: 4 shapes, geometric mean x cuBLAS 1.587, worst 0.250 at 64 x 64 x 131072" in r.output
    assert "float32: 1 shapes, geometric mean x cuBLAS 1.500" in r.output
    assert "W.t()" not in r.output  # no llm shape in the hand-made results
    saved = Results.from_json((tmp_path / "results.json").read_text())
    assert suite.summarize(saved) == suite.summarize(_hand_made())
    assert (tmp_path / "results.csv").is_file() and not (tmp_path / "report.html").exists()


def test_bench_suite_exits_0_when_every_shape_verified(monkeypatch, tmp_path):
    asked = {}
    recs = [_rec(suite.GEMMLAB, "float32", (1, 11008, 4096), 1.25, err=1e-6, rung=16),
            _rec(suite.TORCH, "float32", (1, 11008, 4096), 1.0)]
    _fake_run(monkeypatch, Results(recs, []), asked)
    r = runner.invoke(app, ["bench", "--suite", "--dtype", "float32", "--budget-ms", "20", "--out", str(tmp_path)],
                      terminal_width=250)
    assert r.exit_code == 0, r.output
    assert asked["dtypes"] == ["float32"] and asked["groups"] is None and asked["budget_ms"] == 20
    assert "W.t()" in r.output and "0.800" in r.output and "16 skinny" in r.output  # the rung auto ran


def test_the_summary_names_every_shape_below_the_line_lowest_first():
    recs = (_timed("bfloat16", (512, 512, 512), 0.8, 1.0) + _timed("bfloat16", (1024, 1024, 1024), 0.5, 1.0)
            + _timed("bfloat16", (2048, 2048, 2048), 1.1, 1.0) + _timed("bfloat16", (4096, 4096, 4096), 0.9, 1.0))
    s = suite.summarize(Results(recs, []))["bfloat16"]
    assert [sh for _, sh in s.below] == [(1024, 1024, 1024), (512, 512, 512)]  # (0.9 itself is not below)
    assert "2 below 0.9: 1024 x 1024 x 1024 (0.500), 512 x 512 x 512 (0.800)" in s.line()
