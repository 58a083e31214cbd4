"""CLI smoke tests (CPU): the commands parse, print, and fail with one clear line where there is no GPU."""

import pytest
from typer.testing import CliRunner

from gemmlab.cli import app
from gemmlab.kernels import all_specs
from gemmlab.runtime import compiler, device

runner = CliRunner()


def test_help_lists_the_commands():
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    for cmd in ("info", "kernels", "run", "bench"):
        assert cmd in r.output


@pytest.mark.skipif(not compiler.nvrtc_available(), reason="NVRTC not installed")
def test_kernels_lists_every_rung_with_resources():
    r = runner.invoke(app, ["kernels", "--arch", "sm_80"], terminal_width=200)
    assert r.exit_code == 0, r.output
    for spec in all_specs():
        assert spec.name in r.output
    assert "resources for sm_80" in r.output
    assert "cpu_blas" in r.output


def test_kernels_rejects_a_bad_arch():
    r = runner.invoke(app, ["kernels", "--arch", "hopper"])
    assert r.exit_code != 0


def test_run_a_cpu_kernel():
    r = runner.invoke(app, ["run", "cpu_blocked", "--size", "48", "--param", "TILE=16", "--beta", "0.5"])
    assert r.exit_code == 0, r.output
    assert "GFLOP/s" in r.output and "rel. error" in r.output


def test_run_rejects_bad_parameters_with_the_name():
    r = runner.invoke(app, ["run", "smem_tiled", "--param", "BLOCK_DIM=64"])
    assert r.exit_code != 0
    assert "BLOCK_DIM" in r.output


@pytest.mark.parametrize("args, words", [
    (["run", "cpu_blocked", "--size", "48", "--sustained", "1"], ["CPU baseline", "--sustained"]),
    (["run", "naive", "--size", "32", "--sustained", "0"], ["--sustained", "positive"]),
    (["run", "naive", "--size", "32", "--sustained", "1", "--turns", "0"], ["--turns", "at least 1"]),
])
def test_run_rejects_sustained_where_it_cannot_run(args, words):
    r = runner.invoke(app, args)
    assert r.exit_code != 0
    assert all(w in r.output for w in words), r.output


@pytest.mark.skipif(device.gpu_available(), reason="checks the no-GPU path")
@pytest.mark.parametrize("args", [["info"], ["run", "naive", "--size", "32"],
                                  ["run", "naive", "--size", "32", "--sustained", "0.5"]])
def test_gpu_commands_fail_in_one_line_without_a_gpu(args):
    r = runner.invoke(app, args)
    assert r.exit_code != 0
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "GPU unavailable" in lines[0]


# ------------------------------------------------------------------------------------ bad input, one line

@pytest.mark.parametrize("args,message", [
    (["run", "cpu_naive", "--size", "-5"], "M = -5: --size, --m, --n and --k take positive sizes"),
    (["run", "--explain", "--size", "-5"], "M = -5"),
    (["run", "--m", "0", "--cc", "9.0"], "M = 0"),
    (["run", "cpu_blas", "--size", "100000"], "GiB of host memory"),
    (["run", "wgmma", "--explain", "--cc", "9.0"], "wgmma: runs float16 at fp16"),
])
def test_run_names_what_is_wrong_in_one_line(args, message):
    from typer.testing import CliRunner

    from gemmlab.cli import app

    r = CliRunner().invoke(app, args, terminal_width=200)
    assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output, r.output


def test_run_on_a_cpu_baseline_prints_gflops():
    import re

    from typer.testing import CliRunner

    from gemmlab.cli import app

    r = CliRunner().invoke(app, ["run", "cpu_blocked", "--size", "128"], terminal_width=200)
    assert r.exit_code == 0, r.output
    ms, gflops = re.search(r"([\d.]+) ms\s+([\d.]+) GFLOP/s", r.output).groups()
    assert float(gflops) == pytest.approx(2 * 128**3 / (float(ms) * 1e-3) / 1e9, rel=0.02)


def test_explain_choice_of_a_rung_that_does_not_take_the_dtype():
    from gemmlab import api

    c = api.explain_choice("float32", shape=(64, 64, 64), cc=(9, 0), kernel="wgmma")
    assert c.params is None and not c.candidates[0].fits and "not float32 at fp32" in c.candidates[0].reason


@pytest.mark.skipif(not compiler.nvrtc_available(), reason="needs NVRTC")
def test_kernels_for_an_architecture_nothing_compiles_for_fails():
    r = CliRunner().invoke(app, ["kernels", "--arch", "sm_999"], terminal_width=200)
    assert r.exit_code == 1 and "no rung compiles for sm_999" in r.output, r.output


def test_tables_are_not_cut_to_80_columns_in_a_pipe(monkeypatch):
    """Rich takes 80 columns where stdout is no terminal; the CLI gives its tables 160 there, and leaves a
    terminal's width (or COLUMNS) alone."""
    import io

    from gemmlab.cli import _app

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(_app.sys, "stdout", io.StringIO())
    assert _app._width() == 160
    monkeypatch.setenv("COLUMNS", "100")
    assert _app._width() is None


def test_explain_with_a_weight_takes_the_rung_that_reads_it_in_place():
    """--weight: B is W.t(); at M = 1 in bf16 the decision is rung 17 (gemv), with a row-major B rung 16."""
    from typer.testing import CliRunner

    from gemmlab.cli import app

    base = ["run", "--cc", "9.0", "--sms", "132", "--dtype", "bfloat16", "--m", "1", "--n", "8192", "--k", "8192"]
    with_weight = CliRunner().invoke(app, base + ["--weight"])
    assert with_weight.exit_code == 0 and "gemv (rung 17)" in with_weight.output
    row_major = CliRunner().invoke(app, base)
    assert row_major.exit_code == 0 and "skinny (rung 16)" in row_major.output


@pytest.mark.parametrize("cc", [(9, 0), (8, 0)])
def test_ablation_of_the_tensor_rungs_shows_the_predictions(monkeypatch, cc):
    """`gemmlab ablation --dtype bfloat16`: mma_sync, then the Hopper steps in ladder order (on sm_90), each
    against the one before beside its predicted gain; rungs the GPU cannot run are named, not timed."""
    import dataclasses
    import types

    from gemmlab.analysis import facts
    from gemmlab.bench import measure as bench_measure
    from gemmlab.cli import tune as cli_tune
    from gemmlab.kernels import get

    asked = {}
    tflops = {"cublas": 600.0, "mma_sync": 150.0, "tma_wgmma": 390.0, "warp_specialized": 450.0,
              "persistent": 540.0, "wgmma": 606.0}

    def fake_measure(kernels, shape, *, fmt, budget_ms, on_record=None):
        asked.update(kernels=list(kernels), shape=shape, fmt=fmt)
        return [types.SimpleNamespace(kernel=k, ok=True, tflops=tflops[k], rel_error=1e-3) for k in kernels]

    monkeypatch.setattr(bench_measure, "measure", fake_measure)
    monkeypatch.setattr(cli_tune.device, "device_info",
                        lambda: dataclasses.replace(facts.H100_SXM, compute_capability=cc))
    r = runner.invoke(app, ["ablation", "--dtype", "bfloat16", "--size", "1024"], terminal_width=250)
    assert r.exit_code == 0, r.output
    assert asked["fmt"] == "bf16" and asked["shape"] == (1024, 1024, 1024)
    hopper = ["tma_wgmma", "warp_specialized", "persistent", "wgmma"]
    if cc == (9, 0):
        assert asked["kernels"] == ["cublas", "mma_sync", *hopper]
        lo, hi = get("tma_wgmma").expected_gain
        assert f"{lo:.2f}-{hi:.2f}x" in r.output and "2.60x" in r.output and "(as predicted)" in r.output
        assert "1.12x" in r.output and "1.05-1.15x" in r.output  # wgmma over persistent: 606 / 540
    else:
        assert asked["kernels"] == ["cublas", "mma_sync"]
        assert "not on this GPU" in r.output and all(name in r.output for name in hopper)
    r = runner.invoke(app, ["ablation", "--dtype", "int8"])
    assert r.exit_code != 0 and "int8" in r.output
