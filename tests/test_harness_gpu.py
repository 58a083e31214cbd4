"""The harness on a GPU: a known operation timed two ways, compute <= end to end, graph replay, C reset,
peers in strict fp32. Each test prints what it measured (pytest -s shows it; the device script logs it)."""

import time

import numpy as np
import pytest

from gemmlab.runtime import device

pytestmark = pytest.mark.gpu


def _cp():
    return device.require_cupy()


def _rel(c, ref) -> float:
    c = np.asarray(c, dtype=np.float64)
    return float(np.linalg.norm(c - ref) / np.linalg.norm(ref))


def test_device_copy_bandwidth_agrees_with_a_second_method():
    """A 512 MiB device-to-device copy: the harness's median against one event pair around 20 copies."""
    cp = _cp()
    from gemmlab.bench.timing import time_gpu

    nbytes = 512 << 20  # far beyond any L2, so the flush changes nothing and both methods see DRAM
    src = cp.ones(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    stream = cp.cuda.get_current_stream()

    def copy():
        dst.data.copy_from_device_async(src.data, nbytes, stream)

    t = time_gpu(copy, budget_ms=300, min_samples=10)
    harness_gbps = 2 * nbytes / (t.median_ms * 1e-3) / 1e9  # bytes read + bytes written

    copy()
    stream.synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    reps = 20
    t0 = time.perf_counter()
    start.record(stream)
    for _ in range(reps):
        copy()
    end.record(stream)
    end.synchronize()
    wall = time.perf_counter() - t0
    batch_gbps = 2 * nbytes * reps / (cp.cuda.get_elapsed_time(start, end) * 1e-3) / 1e9
    wall_gbps = 2 * nbytes * reps / wall / 1e9
    print(f"device copy: harness {harness_gbps:.0f} GB/s (median of {t.samples}, IQR {100 * t.rel_noise:.2f}%), "
          f"one event pair around {reps} copies {batch_gbps:.0f} GB/s, host clock {wall_gbps:.0f} GB/s")
    assert abs(harness_gbps / batch_gbps - 1) < 0.05
    assert abs(harness_gbps / wall_gbps - 1) < 0.10


def test_compute_only_is_never_slower_than_end_to_end_and_records_carry_the_device():
    from gemmlab.bench import sweep
    from gemmlab.bench.timing import TimingOptions
    from gemmlab.kernels import specs_for_dtype

    top = specs_for_dtype("float32")[-1].name
    quick = TimingOptions(budget_ms=30, min_samples=5)
    plan = sweep.Plan(shapes=[(1024, 1024, 1024), (200, 300, 100)], gpu=[(top, {})], peers=["cublas"],
                      timing=quick, e2e_timing=quick)
    for pinned in (False, True):
        plan.pinned = pinned
        recs = list(sweep.Sweep(plan))
        assert recs and all(r.ok for r in recs), [(r.label, r.status, r.note) for r in recs if not r.ok]
        d = device.device_info()
        for r in recs:
            assert r.gpu == d.name and r.sm_count == d.sm_count and r.peak_fp32_tflops > 0 and r.driver
        by = {(r.label, r.shape, r.mode): r for r in recs}
        for (label, shape, mode), r in by.items():
            if mode == "compute":
                e = by[(label, shape, "end_to_end")]
                print(f"{label} {shape} pinned={pinned}: compute {r.median_ms:.4f} ms ({r.method}), "
                      f"end to end {e.median_ms:.4f} ms")
                assert r.median_ms <= e.median_ms
                assert e.pinned is pinned


def test_graph_replay_matches_event_pairs_for_a_long_call():
    """A plain kernel launch is capturable: graph replay and event pairs must agree."""
    cp = _cp()
    import gemmlab
    from gemmlab.bench.timing import time_gpu

    g = cp.random.default_rng(1)
    a = g.uniform(-1, 1, (2048, 2048), dtype=cp.float32)
    b = g.uniform(-1, 1, (2048, 2048), dtype=cp.float32)
    c = cp.empty((2048, 2048), cp.float32)
    run = lambda: gemmlab.matmul(a, b, c, kernel="pipelined")  # noqa: E731
    run()
    with cp.cuda.Stream(non_blocking=True):
        ev = time_gpu(run, flush_l2=False, graph=False, budget_ms=100)
        gr = time_gpu(run, flush_l2=False, graph=True, budget_ms=100)
    print(f"pipelined 2048 warm: events {ev.median_ms:.4f} ms, graph {gr.median_ms:.4f} ms "
          f"({gr.calls_per_sample} calls per replay)")
    assert ev.method == "events" and gr.method == "graph" and gr.l2 == "warm"
    assert abs(gr.median_ms / ev.median_ms - 1) < 0.10


def test_a_call_that_cannot_be_captured_falls_back_to_events_and_says_so():
    """cuBLAS through CuPy's handle is not capturable here; the harness must time it anyway, with events."""
    cp = _cp()
    from gemmlab.bench.peers import cublas_sgemm
    from gemmlab.bench.timing import time_gpu

    g = cp.random.default_rng(2)
    a = g.uniform(-1, 1, (1024, 1024), dtype=cp.float32)
    c = cp.empty((1024, 1024), cp.float32)
    with cp.cuda.Stream(non_blocking=True):
        t = time_gpu(lambda: cublas_sgemm(a, a, c), flush_l2=False, graph=True, budget_ms=50)
    assert t.method in ("graph", "events") and t.median_ms > 0


def test_cold_graph_replay_runs_every_rotation():
    cp = _cp()
    from gemmlab import api
    from gemmlab.bench.timing import rotation_count, time_gpu
    from gemmlab.kernels import specs_for_dtype

    name = specs_for_dtype("float32")[-1].name
    m = n = k = 128
    rot = rotation_count(4 * 3 * m * m, device.device_info().l2_bytes)
    g = cp.random.default_rng(2)
    a = g.uniform(-1, 1, (rot, m, k), dtype=cp.float32)
    b = g.uniform(-1, 1, (rot, k, n), dtype=cp.float32)
    c = cp.full((rot, m, n), cp.nan, dtype=cp.float32)
    calls = [lambda i=i: api.matmul(a[i], b[i], c[i], kernel=name) for i in range(rot)]
    with cp.cuda.Stream(non_blocking=True):
        api.prepare(specs_for_dtype("float32")[-1])
        t = time_gpu(calls[0], rotations=calls[1:], graph=True, budget_ms=50, min_samples=5)
    print(f"{name} 128 cold: {1e3 * t.median_ms:.2f} us per call, method {t.method}, {t.calls_per_sample} calls "
          f"per replay ({rot} operand sets)")
    assert t.method == "graph" and t.l2 == "cold" and t.calls_per_sample == rot
    ref = np.einsum("rik,rkj->rij", a.get().astype(np.float64), b.get().astype(np.float64))
    assert _rel(c.get(), ref) < 1e-5  # every rotation's C was written by the replays


def test_c_is_restored_before_every_sample_when_beta_is_not_zero():
    cp = _cp()
    from gemmlab.bench.peers import cublas_sgemm
    from gemmlab.bench.timing import time_gpu

    g = cp.random.default_rng(3)
    a = g.uniform(-1, 1, (300, 200), dtype=cp.float32)
    b = g.uniform(-1, 1, (200, 100), dtype=cp.float32)
    c0 = g.uniform(-1, 1, (300, 100), dtype=cp.float32)
    c = c0.copy()
    time_gpu(lambda: cublas_sgemm(a, b, c, 1.0, 0.5), reset=lambda: c.__setitem__(Ellipsis, c0),
             budget_ms=20, min_samples=5)
    ref = a.get().astype(np.float64) @ b.get() + 0.5 * c0.get()
    assert _rel(c.get(), ref) < 1e-5  # one application after the last reset, not many


def test_torch_and_triton_peers_are_strict_fp32_on_gemmlabs_stream():
    cp = _cp()
    from gemmlab.bench import runners

    g = cp.random.default_rng(4)
    m, n, k = 513, 257, 2048
    a = g.uniform(-1, 1, (m, k), dtype=cp.float32)
    b = g.uniform(-1, 1, (k, n), dtype=cp.float32)
    c0 = g.uniform(-1, 1, (m, n), dtype=cp.float32)
    ref = 0.5 * (a.get().astype(np.float64) @ b.get()) - 1.5 * c0.get()
    ran = 0
    for name in ("torch", "triton"):
        try:
            r = runners.peer_runner(name)
        except runners.Unavailable as exc:
            print(f"{name} peer not available: {exc}")
            continue
        try:
            with cp.cuda.Stream(non_blocking=True) as s:
                c = c0.copy()
                r.bind(a, b, c, 0.5, -1.5)()
                s.synchronize()
            err = _rel(c.get(), ref)
            print(f"{name} peer: relative error {err:.2e}")
            assert err < 1e-5  # TF32 would give ~1e-3
            ran += 1
        finally:
            r.close()
    if not ran:
        pytest.skip("neither torch nor triton is installed")


def test_torch_peer_can_be_captured_in_a_graph():
    cp = _cp()
    from gemmlab.bench import runners
    from gemmlab.bench.timing import time_gpu

    try:
        r = runners.peer_runner("torch")
    except runners.Unavailable as exc:
        pytest.skip(str(exc))
    try:
        g = cp.random.default_rng(5)
        a = g.uniform(-1, 1, (256, 256), dtype=cp.float32)
        b = g.uniform(-1, 1, (256, 256), dtype=cp.float32)
        c = cp.empty((256, 256), cp.float32)
        with cp.cuda.Stream(non_blocking=True):
            t = time_gpu(r.bind(a, b, c, 1.0, 0.0), flush_l2=False, graph=True, budget_ms=20, min_samples=5)
        print(f"torch 256 warm by graph replay: {1e3 * t.median_ms:.2f} us, method {t.method}")
        assert t.method == "graph"
    finally:
        r.close()


def test_clock_monitor_reads_the_sm_clock_where_nvml_is_present():
    pytest.importorskip("pynvml")
    from gemmlab.bench.timing import ClockMonitor

    mon = ClockMonitor.for_device(device.device_info().index)
    assert mon.available and mon.max_mhz and mon.max_mhz > 0
    mhz = mon.sm_mhz()
    print(f"SM clock now {mhz} MHz (max {mon.max_mhz} MHz)")
    assert mhz and 0 < mhz <= mon.max_mhz * 1.05


def test_sustained_timing_reports_time_clock_power_and_energy():
    """Two calls back to back (bench.sustained): times agree with an event pair around the same call, the
    clock and power come from NVML where it is installed, cycles and energy follow from them."""
    from gemmlab.bench.sustained import time_sustained

    cp = _cp()
    a = cp.random.rand(2048, 2048, dtype=cp.float32)
    out = cp.empty_like(a)
    calls = {"matmul": lambda: cp.matmul(a, a, out=out), "copy": lambda: cp.copyto(out, a)}
    res = time_sustained(calls, seconds=0.3, turns=2, warmup_s=0.2)
    assert list(res) == ["matmul", "copy"] and all(len(r.turns) == 2 for r in res.values())
    s, e = cp.cuda.Event(), cp.cuda.Event()
    s.record()
    for _ in range(50):
        calls["matmul"]()
    e.record()
    e.synchronize()
    direct = cp.cuda.get_elapsed_time(s, e) / 50
    r = res["matmul"]
    print(f"sustained matmul {r.ms:.4f} ms (events around 50 calls: {direct:.4f}), {r.sm_mhz} MHz, {r.watts} W")
    assert 0.7 < r.ms / direct < 1.4
    assert res["copy"].ms < r.ms
    if r.sm_mhz is not None:
        assert 200 < r.sm_mhz < 3000 and r.kcycles == pytest.approx(r.ms * r.sm_mhz)
    if r.watts is not None:
        assert 20 < r.watts < 2000 and r.joules == pytest.approx(r.watts * r.ms * 1e-3)


@pytest.mark.parametrize("dtype,precision", [("float32", None), ("float16", None), ("bfloat16", None),
                                             ("float32", "tf32")])
def test_run_sustained_prints_the_call_beside_cublas(dtype, precision):
    """`gemmlab run --sustained`: the call and cuBLAS on the same operands, back to back, in one table with
    time, clock, power and energy per call and the ratio to cuBLAS."""
    from typer.testing import CliRunner

    from gemmlab.cli import app

    if dtype == "bfloat16" or precision == "tf32":
        pytest.importorskip("torch")  # (CuPy has no bfloat16; cuBLAS TF32 is torch's)
    args = ["run", "auto", "--size", "512", "--dtype", dtype, "--sustained", "0.1", "--turns", "1"]
    r = CliRunner().invoke(app, args + (["--precision", precision] if precision else []), terminal_width=200)
    assert r.exit_code == 0, r.output
    words = r.output.split()  # (the table's headers may wrap)
    assert "mJ" in words and "cuBLAS" in " ".join(words) and "kcycles" in words, r.output
    assert "power limit" in " ".join(words), r.output


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "tf32"])
def test_a_tensor_format_sweep_verifies_and_times_its_rungs_and_peers(fmt):
    """`Sweep` in another number format: the rungs that run it and the peers in it, both modes, every
    record verified against the float64 product of the rounded operands, in the format's own terms."""
    from gemmlab.bench import sweep
    from gemmlab.bench.formats import FORMATS
    from gemmlab.bench.timing import TimingOptions

    nf = FORMATS[fmt]
    if nf.needs_torch:
        pytest.importorskip("torch")
    plan = sweep.default_plan(gpu=True, fmt=fmt)
    plan.shapes = [(256, 256, 256), (257, 129, 300)]
    if fmt == "bf16":  # large enough that torch work unordered with the sweep's stream would show
        plan.shapes.append((4096, 4096, 4096))
    if fmt == "fp16":
        plan.alpha, plan.beta = 0.5, 2.0  # C read and reset in 16 bits
    plan.timing = TimingOptions(budget_ms=20, warmup_ms=2, min_samples=3)
    plan.e2e_timing = TimingOptions(budget_ms=20, warmup_ms=2, min_samples=3)
    res = sweep.run_plan(plan)
    for r in res.records:
        print(f"{fmt} {r.label:>10} {r.m}x{r.n}x{r.k} {r.mode:>10}: {r.status} err {r.rel_error} "
              f"{r.median_ms} ms {r.note}")
    print("notes:", res.notes())
    bad = [(r.label, r.mode, r.status, r.note) for r in res.records if not r.ok]
    assert not bad
    kernels = {r.kernel for r in res.records}
    assert "cublas" in kernels and kernels & {"mma_sync", "wgmma"}
    for r in res.records:
        assert r.dtype == nf.dtype and r.precision == fmt and r.verify_tol == nf.verify_tol
        assert r.rel_error < nf.verify_tol and r.peak_tflops and r.pct_peak_compute
        assert r.bytes % nf.itemsize == 0
    labels = {r.label for r in res.records}
    for label in labels:
        modes = {(r.m, r.mode) for r in res.records if r.label == label}
        assert modes == {(m, mode) for m, _, _ in plan.shapes for mode in ("compute", "end_to_end")}, label
    if fmt == "tf32":  # TF32 really ran: its error is far above strict fp32's (~1e-6) and below 1e-3
        assert all(r.rel_error > 1e-5 for r in res.records if r.mode == "compute")


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "tf32"])
def test_cublas_gemm_ex_computes_each_format(fmt):
    cp = _cp()
    from gemmlab.bench import peers

    g = cp.random.default_rng(11)
    m, n, k = 300, 257, 2048
    a32, b32, c32 = (g.uniform(-1, 1, shp, dtype=cp.float32) for shp in ((m, k), (k, n), (m, n)))
    if fmt == "bf16":
        torch = pytest.importorskip("torch")
        a, b, c0 = (torch.from_dlpack(x).to(torch.bfloat16) for x in (a32, b32, c32))
        vals = lambda x: cp.from_dlpack(x.float()).get().astype(np.float64)  # noqa: E731
        c = c0.clone()
    else:
        dt = cp.float16 if fmt == "fp16" else cp.float32
        a, b, c0 = (x.astype(dt) for x in (a32, b32, c32))
        vals = lambda x: x.get().astype(np.float64)  # noqa: E731
        c = c0.copy()
    cp.cuda.Device().synchronize()  # (the operands were made on the default streams)
    with cp.cuda.Stream(non_blocking=True) as s:
        peers.cublas_gemm_ex(a, b, c, 0.5, -1.5, fmt)
        s.synchronize()
    ref = 0.5 * (vals(a) @ vals(b)) - 1.5 * vals(c0)
    err = _rel(vals(c), ref)
    print(f"cublasGemmEx {fmt}: relative error {err:.2e}")
    assert err < {"bf16": 5e-3, "fp16": 1e-3, "tf32": 1e-3}[fmt]
    if fmt == "tf32":
        assert err > 1e-5  # the TF32 compute type ran, not strict fp32


def test_sweep_command_in_bf16_writes_results_and_a_report(tmp_path):
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from gemmlab.cli import app

    r = CliRunner().invoke(app, ["sweep", "--dtype", "bfloat16", "--sizes", "256", "--budget-ms", "10",
                                 "-o", str(tmp_path), "--report"], terminal_width=200)
    print(r.output)
    assert r.exit_code == 0, r.output
    assert "bf16" in r.output and "cublas" in r.output
    report = (tmp_path / "report.md").read_text()
    assert ", bf16 at N = 256" in report and "tolerance 1e-02" in report
    bad = CliRunner().invoke(app, ["sweep", "--dtype", "float16", "-k", "cpu_naive", "--sizes", "64"])
    assert bad.exit_code != 0 and "fp32 only" in bad.output
    bad = CliRunner().invoke(app, ["sweep", "--dtype", "float16", "-k", "naive", "--sizes", "64"])
    assert bad.exit_code != 0 and "naive does not run fp16" in bad.output


@pytest.mark.parametrize("bias,activation,dtype", [("column", "gelu_tanh", "bfloat16"), ("row", "relu", "bfloat16"),
                                                   ("none", "silu", "bfloat16"), ("column", "gelu_erf", "bfloat16"),
                                                   ("row", "none", "bfloat16"), ("column", "gelu_tanh", "float16")])
def test_fused_layer_calls_are_verified_and_timed_side_by_side(bias, activation, dtype):
    """`bench.fused.measure`: gemmlab's one launch, torch eager, cuBLASLt's fused epilogue where nvmath-python
    loads and offers it, and the bare product; every call checked against the float64 layer, then timed."""
    pytest.importorskip("torch")
    from gemmlab.bench import fused

    layer = fused.Layer(640, 384, 320, dtype=dtype, bias=bias, activation=activation)
    res = fused.measure(layer, budget_ms=20)
    for r in res.records:
        print(f"{layer.epilogue:>20} {r.label:>24}: {r.status} err {r.rel_error} {r.median_ms} ms {r.note}")
    print("notes:", res.notes())
    assert all(r.ok for r in res.records), [(r.label, r.note) for r in res.records if not r.ok]
    kinds = {r.kernel for r in res.records}
    assert {fused.EAGER, fused.BARE} <= kinds and kinds & {"wgmma", "mma_sync"}
    for r in res.records:
        assert r.rel_error < 1e-2 and r.dtype == dtype and r.precision == {"bfloat16": "bf16", "float16": "fp16"}[dtype]
        assert r.epilogue == ("" if r.kernel == fused.BARE else layer.epilogue)
    nvmath_there = fused._nvmath_epilog(layer)[0] is not None
    assert (fused.CUBLASLT in kinds) == nvmath_there
    if not nvmath_there:
        assert any("cuBLASLt fused epilogue skipped" in n for n in res.notes())


def test_fused_command_prints_the_calls_and_writes_a_report(tmp_path):
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from gemmlab.cli import app

    r = CliRunner().invoke(app, ["fused", "--shape", "512x384x256", "--budget-ms", "20", "-o", str(tmp_path),
                                 "--report"], terminal_width=200)
    print(r.output)
    assert r.exit_code == 0, r.output
    assert "torch eager" in r.output and "cuBLAS product alone" in r.output and "x eager" in r.output
    report = (tmp_path / "report.md").read_text()
    assert "## Fused layer bias_col+gelu_tanh, 512 x 384 x 256, bf16" in report
