"""The analysis against the GPU: occupancy against the driver, measurement records, calibration, ncu."""

import pytest

from gemmlab.analysis.models import fp32_specs

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("spec", fp32_specs(), ids=lambda s: s.name)
def test_occupancy_model_agrees_with_the_driver(spec):
    import cupy as cp

    from gemmlab import api
    from gemmlab.analysis.models import model_kernel
    from gemmlab.runtime.device import device_info

    dev = device_info()
    prepared = api.prepare(spec, {})
    mdl = model_kernel(spec, 1024, 1024, 1024, prepared.params, dev)
    geo = spec.launch(1024, 1024, 1024, prepared.params)
    prepared.kernel.ensure_dynamic_smem(geo.smem)
    driver = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
        prepared.kernel.function.kernel.ptr, geo.threads_per_block, geo.smem)
    assert mdl.occupancy.blocks_per_sm == driver, mdl.occupancy


def test_measure_verifies_times_and_records_the_clock():
    """bench.measure, the one measuring function: a rung with parameters the heuristic picks (type parameters
    included, which the call itself sets), a named tile and a peer, each verified, timed, with the SM clock;
    the records read back as they were written; bad parameters and a CPU baseline refused by name."""
    from gemmlab.analysis.measure import resolve_params
    from gemmlab.bench.measure import measure, measure_one
    from gemmlab.bench.records import record_from_dict
    from gemmlab.kernels import get
    from gemmlab.runtime import device

    name = fp32_specs()[0].name
    r = measure_one(name, 256, 192, 128, budget_ms=20)
    assert r.ok and r.rel_error < 1e-4 and r.median_ms > 0 and r.tflops > 0 and r.sm_clock_mhz > 0
    assert record_from_dict(r.as_dict()) == r
    full = resolve_params(get("sgemm"), 300, 200, 1000, None, device.device_info())
    assert "BATCHED" in full
    tile = dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, MIN_BLOCKS=5)
    recs = measure([("sgemm", full), ("sgemm", tile), "cublas"], (300, 200, 1000), budget_ms=20)
    assert [x.kernel for x in recs] == ["sgemm", "sgemm", "cublas"] and all(x.ok for x in recs)
    assert recs[1].params["BM"] == 64 and recs[0].label != recs[1].label
    with pytest.raises(ValueError, match="REDUCE = 3"):
        measure_one("sgemm", 300, 200, 1000, {"SPLIT_K": 2, "REDUCE": 3}, budget_ms=20)
    with pytest.raises(ValueError, match="CPU baseline"):
        measure(["cpu_naive"], (64, 64, 64))


def test_single_block_speed_is_between_the_wave_models():
    from gemmlab import api
    from gemmlab.analysis.measure import calibrate_single_block_speed

    spec = api.choose_kernel()
    cal = calibrate_single_block_speed(spec.name, None, k=512, budget_ms=20)
    assert 1.0 / cal.blocks_per_sm <= cal.single_block_speed <= 1.0


def test_ncu_reads_counters_where_available():
    from gemmlab.analysis import ncu

    if ncu.find_ncu() is None:
        pytest.skip("ncu not installed")
    names = [s.name for s in fp32_specs()[:2]]
    try:
        counters = ncu.profile([ncu.ProfileRun(n, 512, 512, 512) for n in names], timeout_s=240)
    except ncu.NcuUnavailable as exc:
        pytest.skip(f"ncu unavailable: {exc}")
    assert [c.run.kernel for c in counters] == names
    for c in counters:
        assert c.get("dram_read_bytes") is not None and c.get("l2_bytes") > 0


def test_explain_on_the_gpu_shows_measured_numbers(tmp_path):
    from typer.testing import CliRunner

    from gemmlab.cli import app
    from gemmlab.micro.ceilings import Ceilings
    from gemmlab.runtime.device import device_info

    path = Ceilings.datasheet(device_info()).save(tmp_path / "ceilings.json")
    r = CliRunner().invoke(app, ["explain", fp32_specs()[0].name, "--size", "512", "--ceilings", str(path)],
                           terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "SM clock" in r.output and "measured" in r.output
