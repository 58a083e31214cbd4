"""Sweep planning (sizes, shapes, names) and a CPU sweep end to end, with no GPU needed."""

import pytest

from gemmlab.bench import sweep
from gemmlab.bench.records import Results
from gemmlab.bench.timing import TimingOptions
from gemmlab.cpu import BASELINES
from gemmlab.kernels import all_specs, specs_for_dtype

FAST = TimingOptions(budget_ms=5, min_samples=2, noise_target=0.5)


def test_sizes_grammar():
    assert sweep.parse_sizes("128,1000, 64") == [64, 128, 1000]
    assert sweep.parse_sizes("256..2048") == [256, 512, 1024, 2048]
    assert sweep.parse_sizes("100..300,100") == [100, 128, 256]
    for bad in ("", "abc", "0", "5..3", "-4"):
        with pytest.raises(ValueError):
            sweep.parse_sizes(bad)


def test_neighbours_of_powers_of_two():
    assert sweep.with_neighbours([2, 64, 100]) == [2, 63, 64, 65, 100]


def test_shapes():
    assert sweep.parse_shape("4096x1024x512") == (4096, 1024, 512)
    assert sweep.parse_shape("7X3x1") == (7, 3, 1)
    for bad in ("4096x1024", "axbxc", "0x1x1"):
        with pytest.raises(ValueError):
            sweep.parse_shape(bad)


def test_names_sort_into_rungs_peers_and_cpu():
    rung = all_specs()[0].name
    gpu, peers, cpu = sweep.split_names([rung, "cublas", "cpu_blas"])
    assert gpu == [(rung, {})] and peers == ["cublas"] and cpu == [("cpu_blas", {})]
    with pytest.raises(ValueError, match="known:.*cpu_naive"):
        sweep.split_names(["no_such_kernel"])


def test_default_plans_read_the_registries():
    gpu = sweep.default_plan(gpu=True)
    assert [n for n, _ in gpu.gpu] == [s.name for s in specs_for_dtype("float32")]  # sweeps run fp32 data
    assert [n for n, _ in gpu.cpu] == list(BASELINES)
    assert "cublas" in gpu.peers and (4096, 4096, 4096) in gpu.shapes
    assert any(s[0] & (s[0] - 1) and (s[0] + 1) & s[0] for s in gpu.shapes)  # a non-power of two
    cpu = sweep.default_plan(gpu=False)
    assert not cpu.gpu and not cpu.peers and cpu.cpu_shapes


def test_cpu_baselines_are_bounded_by_max_cube():
    plan = sweep.Plan(shapes=[], cpu_scale=0.25)
    naive = __import__("gemmlab.bench.runners", fromlist=["cpu_runner"]).cpu_runner("cpu_naive")
    limit = int(BASELINES["cpu_naive"].max_cube * 0.25)
    assert plan.cpu_fits(naive, (limit, limit, limit))
    assert not plan.cpu_fits(naive, (limit + 1, limit + 1, limit + 1))


def _cpu_plan(**kw):
    return sweep.Plan(shapes=[], cpu=[("cpu_reordered", {}), ("cpu_blas", {})], cpu_shapes=[(24, 24, 24), (40, 17, 9)],
                      cpu_timing=FAST, cpu_settle_s=0.0, **kw)


def test_a_cpu_sweep_makes_verified_records_with_metadata():
    s = sweep.Sweep(_cpu_plan(beta=0.5, alpha=-1.0))
    recs = list(s)
    res = s.finish()
    assert len(recs) == 4 and all(r.ok for r in recs)
    r = recs[0]
    assert r.family == "cpu" and r.rel_error < 1e-5 and r.tflops > 0 and r.beta == 0.5 and r.alpha == -1.0
    assert r.processor and r.gemmlab_version and r.run_id == s.run_id and r.l2 == "warm" and r.method == "wall"
    assert res.runs[0]["finished_at"] and not res.runs[0]["interrupted"]
    assert Results.from_json(res.to_json()).records == res.records


def test_an_interrupted_sweep_keeps_what_it_measured():
    s = sweep.Sweep(_cpu_plan())
    kept = []
    with pytest.raises(KeyboardInterrupt):
        for rec in s:
            kept.append(rec)
            if len(kept) == 2:
                raise KeyboardInterrupt
    res = s.finish(interrupted=True)
    assert len(res) == 2 and res.runs[0]["interrupted"] and "interrupted" in res.notes()[-1]


def test_gpu_work_is_skipped_with_the_reason_where_there_is_no_gpu():
    from gemmlab.runtime import device

    if device.gpu_available():
        pytest.skip("checks the no-GPU path")
    plan = _cpu_plan()
    plan.gpu, plan.peers, plan.shapes = [(all_specs()[0].name, {})], ["cublas"], [(64, 64, 64)]
    s = sweep.Sweep(plan)
    recs = list(s)
    assert all(r.family == "cpu" for r in recs) and len(recs) == 4
    assert s.notes and s.notes[0].startswith("GPU part skipped: ") and "CuPy" in s.notes[0]
