"""The analysis commands without a GPU (one clear line, or the model on a preset), and ncu's CSV parsing."""

import pytest
from typer.testing import CliRunner

from gemmlab.analysis import ncu
from gemmlab.analysis.facts import H100_SXM
from gemmlab.analysis.models import fp32_specs, model_kernel
from gemmlab.cli import app
from gemmlab.runtime import device
from gemmlab.runtime.compiler import Resources

runner = CliRunner()
no_gpu = pytest.mark.skipif(device.gpu_available(), reason="checks the no-GPU path")


def test_help_lists_the_analysis_commands():
    out = runner.invoke(app, ["--help"], terminal_width=200).output
    for cmd in ("micro", "roofline", "explain", "profile", "sawtooth", "cliff", "timeline"):
        assert cmd in out


@no_gpu
@pytest.mark.parametrize("args", [["micro"], ["roofline"], ["profile", "naive"], ["sawtooth"], ["cliff"], ["timeline"]])
def test_gpu_commands_fail_in_one_line_without_a_gpu(args):
    r = runner.invoke(app, args)
    assert r.exit_code != 0
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "GPU unavailable" in lines[0]
    assert "gemmlab[cuda13]" in lines[0]   # the install hint survives the console's markup, unescaped


@pytest.mark.parametrize("args, says", [(["timeline", "naive"], "naive has no traced build; these have: wgmma"),
                                        (["timeline", "--dtype", "float32"], "--dtype takes float16 or bfloat16"),
                                        (["timeline", "nonesuch"], "nonesuch")])
def test_timeline_names_what_is_wrong(args, says):
    r = runner.invoke(app, args, terminal_width=200)
    assert r.exit_code != 0
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and says in lines[0], r.output


@no_gpu
def test_explain_without_a_gpu_models_the_preset():
    first, second = fp32_specs()[0], fp32_specs()[1]
    r = runner.invoke(app, ["explain", first.name, "--m", "512", "--n", "256", "--k", "128"], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "model only" in r.output and "H100" in r.output
    assert "time bounds" in r.output and second.name in r.output


def test_explain_on_a_named_preset_and_bad_input():
    r = runner.invoke(app, ["explain", fp32_specs()[-1].name, "--size", "1000", "--device", "h100"], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "top rung" in r.output
    r = runner.invoke(app, ["explain", "no_such_kernel"])
    assert r.exit_code != 0 and fp32_specs()[0].name in r.output
    r = runner.invoke(app, ["explain", fp32_specs()[0].name, "--device", "nope"])
    assert r.exit_code != 0 and "h100" in r.output


@pytest.mark.parametrize("cmd, extra", [
    ("roofline", ["--size", "256"]),
    ("roofline", ["--size", "1024", "--dtype", "bfloat16"]),
    ("sawtooth", ["blocktile_2d", "--n-from", "1024", "--n-to", "1280", "--step", "64"]),
    ("sawtooth", ["warp_specialized", "--dtype", "bfloat16", "--n-from", "1024", "--n-to", "1280", "--step", "64"]),
    ("cliff", ["--sizes", "256,512"]),
])
def test_model_only_figures(tmp_path, cmd, extra):
    out = tmp_path / f"{cmd}.png"
    r = runner.invoke(app, [cmd, "--model-only", "--out", str(out), *extra], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"


# ----------------------------------------------------------------------------------- ncu parsing

RAW = '''"ID","Process ID","Process Name","Host Name","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum","lts__t_bytes.sum","lts__t_sectors_srcunit_tex.sum","sm__cycles_elapsed.avg.per_second","gpu__time_duration.sum","sm__warps_active.avg.pct_of_peak_sustained_active"
"","","","","","Kbyte","byte","byte","sector","cycle/nsecond","nsecond","%"
"0","123","python","h","naive_gemm","1,024.5","2,048","4,000,000","100,000","1.98","150,000,000","97.5"
"1","123","python","h","blocktile_2d_gemm","8","0","64","2","1.755","5,300,000","24.9"
'''


def test_parse_raw_csv_converts_units_and_separators():
    rows = ncu.parse_raw_csv(RAW)
    assert len(rows) == 2 and rows[0]["Kernel Name"] == "naive_gemm"
    assert rows[0]["dram__bytes_read.sum"] == pytest.approx(1024.5e3)
    assert rows[0]["dram__bytes_write.sum"] == 2048
    assert rows[0]["sm__cycles_elapsed.avg.per_second"] == pytest.approx(1.98e9)
    assert rows[0]["gpu__time_duration.sum"] == pytest.approx(0.15)
    assert rows[1]["sm__warps_active.avg.pct_of_peak_sustained_active"] == pytest.approx(24.9)


@pytest.mark.parametrize("value, unit, expect", [
    ("3", "Mbyte", 3e6), ("2.5", "Gbyte/second", 2.5e9), ("1", "usecond", 1e-6), ("1.5", "Ghz", 1.5e9),
    ("12", "", 12.0), ("n/a", "byte", None), ("372160", "ns", 3.7216e-4), ("248", "us", 2.48e-4),
    ("1.5", "ms", 1.5e-3),
])
def test_convert(value, unit, expect):
    got = ncu.convert(value, unit)
    assert (got != got) if expect is None else got == pytest.approx(expect)


def test_unknown_metrics_are_found_in_the_log():
    log = "==ERROR== Failed to find metric l1tex__data_pipe_lsu_wavefronts.sum\n==PROF== done"
    assert ncu._unknown_metrics(log, list(ncu.METRICS.values())) == ["l1tex__data_pipe_lsu_wavefronts.sum"]


def test_counters_and_comparison_with_the_model():
    run = ncu.ProfileRun("naive", 4096, 4096, 4096)
    mdl = model_kernel("naive", 4096, 4096, 4096, None, H100_SXM, Resources(registers=32), compile=False)
    c = ncu.Counters(run, "naive_gemm", {"dram_read_bytes": mdl.cache.dram_read_bytes, "dram_write_bytes":
                     mdl.cache.dram_write_bytes, "l2_from_l1_sectors": mdl.cache.l2_bytes / 32, "l2_bytes": 1.0,
                     "sm_clock_hz": 1.9e9})
    cmp_ = ncu.compare_traffic(mdl, c)
    assert cmp_.sum_ratio == pytest.approx(1.0) and cmp_.within(0.25)
    assert cmp_.l2_metric.startswith("lts__t_sectors_srcunit_tex") and c.sm_clock_mhz == pytest.approx(1900)
    c2 = ncu.Counters(run, "naive_gemm", {"dram_read_bytes": 1.0, "dram_write_bytes": 0.0, "l2_bytes": 2.0})
    assert c2.l2_compared_bytes == (2.0, "lts__t_bytes")


def test_profile_without_ncu_says_so(monkeypatch):
    monkeypatch.setattr(ncu, "find_ncu", lambda: None)
    with pytest.raises(ncu.NcuUnavailable, match="not found"):
        ncu.profile([ncu.ProfileRun("naive", 64, 64, 64)])


FAKE_NCU = """#!{python}
import json, os, sys
args = sys.argv[1:]
log = open(os.environ["FAKE_NCU_LOG"], "a")
log.write(json.dumps(args) + "\\n")
if "--import" in args:
    n = int(open(args[args.index("--import") + 1]).read())
    print('"ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum","lts__t_bytes.sum","sm__cycles_elapsed.avg.per_second"')
    print('"","","byte","byte","byte","cycle/second"')
    for i in range(n):
        print(f'"{{i}}","k{{i}}","{{1000 * (i + 1)}}","10","5,000","1980000000"')
    sys.exit(0)
metrics = args[args.index("--metrics") + 1]
bad = os.environ.get("FAKE_NCU_UNKNOWN", "")
if bad and bad in metrics:
    print("==ERROR== Failed to find metric " + bad)
    sys.exit(1)
assert args[args.index("--clock-control") + 1] == "none"
open(args[args.index("--export") + 1] + ".ncu-rep", "w").write(args[args.index("--launch-count") + 1])
"""


def test_profile_drives_ncu_and_drops_unknown_metrics(tmp_path, monkeypatch):
    import json
    import sys

    exe = tmp_path / "ncu"
    exe.write_text(FAKE_NCU.format(python=sys.executable))
    exe.chmod(0o755)
    log = tmp_path / "calls.log"
    monkeypatch.setattr(ncu, "find_ncu", lambda: str(exe))
    monkeypatch.setenv("FAKE_NCU_LOG", str(log))
    monkeypatch.setenv("FAKE_NCU_UNKNOWN", "l1tex__data_pipe_lsu_wavefronts.sum")
    names = [s.name for s in fp32_specs()[:2]]
    counters = ncu.profile([ncu.ProfileRun(n, 64, 64, 64) for n in names], workdir=tmp_path / "w")
    assert [c.run.kernel for c in counters] == names
    assert counters[1].get("dram_read_bytes") == 2000 and counters[0].get("l2_bytes") == 5000
    assert counters[0].sm_clock_mhz == pytest.approx(1980)
    assert counters[0].dropped == ["l1tex__data_pipe_lsu_wavefronts.sum"]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 3   # refused, retried without the unknown metric, imported
    regex = calls[1][calls[1].index("--kernel-name") + 1]
    assert regex.startswith("regex:") and all(s.template in regex for s in fp32_specs()[:2])


def test_profile_reports_counter_permission(tmp_path, monkeypatch):
    exe = tmp_path / "ncu"
    exe.write_text("#!/bin/sh\necho '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission'\nexit 1\n")
    exe.chmod(0o755)
    monkeypatch.setattr(ncu, "find_ncu", lambda: str(exe))
    with pytest.raises(ncu.NcuUnavailable, match="ERR_NVGPUCTRPERM"):
        ncu.profile([ncu.ProfileRun(fp32_specs()[0].name, 64, 64, 64)], workdir=tmp_path)


def test_roofline_of_a_tensor_format_has_the_tensor_roof(monkeypatch, tmp_path):
    """--dtype bfloat16: the format's ladder (mma_sync and the Hopper rungs on the preset H100), under the
    tensor cores' peak, not the FP32 one; a rung that does not take the format is named."""
    from gemmlab.analysis import figures

    seen = {}
    real = figures.roofline_figure

    def fake_figure(ceil, points, title="", datasheet=None, wavefront_bps=None, peak=None):
        seen.update(points=[p.label for p in points], peak=peak, title=title)
        return real(ceil, points, title, datasheet, wavefront_bps, peak)

    monkeypatch.setattr(figures, "roofline_figure", fake_figure)
    r = runner.invoke(app, ["roofline", "--model-only", "--dtype", "bfloat16", "--size", "1024", "--out", str(tmp_path / "r.png")],
                      terminal_width=200)
    assert r.exit_code == 0, r.output
    assert seen["points"][:5] == ["mma_sync", "tma_wgmma", "warp_specialized", "persistent", "wgmma"]
    assert seen["peak"][1] > 500e12 and "bf16 peak" in seen["peak"][0] and "bfloat16" in seen["title"]
    r = runner.invoke(app, ["roofline", "--model-only", "--dtype", "bfloat16", "-k", "naive"])
    assert r.exit_code != 0 and "naive" in r.output

