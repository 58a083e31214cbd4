"""Number formats in the harness, without a GPU: which rungs and peers a format sweep runs, what its records
say (bytes, peaks, tolerances), and how the report keeps formats apart."""

import numpy as np
import pytest

from gemmlab.bench import sweep
from gemmlab.bench.formats import FORMATS, number_format
from gemmlab.bench.records import Record, Results, derive, record_from_dict
from gemmlab.kernels import registry
from gemmlab.report import build_report
from gemmlab.report.context import ReportContext
from gemmlab.runtime.device import DeviceInfo


def test_number_format_pairs_dtype_and_precision_and_names_what_does_not_combine():
    assert number_format().name == "fp32" and number_format("float32", "fp32").name == "fp32"
    assert number_format("float32", "tf32").name == "tf32"
    assert number_format("bfloat16").name == "bf16" and number_format("float16", "fp16").name == "fp16"
    with pytest.raises(ValueError, match="'tf32' does not apply to bfloat16"):
        number_format("bfloat16", "tf32")
    with pytest.raises(ValueError, match="'bf16' does not apply to float32.*tf32"):
        number_format("float32", "bf16")
    with pytest.raises(ValueError, match="dtype 'float64' is not one of"):
        number_format("float64")
    assert [FORMATS[f].verify_tol for f in ("fp32", "tf32", "fp16", "bf16")] == [1e-4, 1e-3, 1e-2, 1e-2]
    assert FORMATS["bf16"].needs_torch and not FORMATS["fp16"].needs_torch


@pytest.mark.parametrize("fmt,dtype,precision", [("bf16", "bfloat16", None), ("fp16", "float16", None),
                                                 ("tf32", "float32", "tf32")])
def test_a_tensor_format_plan_holds_the_rungs_that_run_it_the_peers_and_no_cpu(fmt, dtype, precision):
    plan = sweep.default_plan(gpu=True, fmt=fmt)
    want = [s.name for s in registry.specs_for(dtype, precision)]
    assert want and [name for name, _ in plan.gpu] == want
    assert "naive" not in want and "wgmma" in want
    assert plan.peers == ["cublas", "torch", "triton"] and plan.cpu == []
    assert plan.shapes == [(s, s, s) for s in sweep.DEFAULT_TENSOR_SIZES] and (8192, 8192, 8192) in plan.shapes
    assert plan.tolerance == FORMATS[fmt].verify_tol and plan.number_format.dtype == dtype
    fp32 = sweep.default_plan(gpu=True)
    assert fp32.fmt == "fp32" and fp32.tolerance == 1e-4 and len(fp32.gpu) > len(plan.gpu) and fp32.cpu


def _rec(kernel="wgmma", precision="bf16", dtype="bfloat16", ms=1.0, n=4096, gpu="GPU A", family="gpu",
         peak=989.0, rung=15):
    return derive(Record(kernel=kernel, label=kernel, family=family, rung=rung if family == "gpu" else None,
                         idea="", params={}, dtype=dtype, m=n, n=n, k=n, alpha=1.0, beta=0.0, mode="compute",
                         l2="cold", pinned=None, precision=precision, median_ms=ms, q1_ms=ms, q3_ms=ms,
                         rel_error=2e-3 if precision in ("bf16", "fp16") else 1e-6, verify_tol=FORMATS[precision].verify_tol,
                         peak_fp32_tflops=66.9, peak_tflops=None if precision == "fp32" else peak, gpu=gpu,
                         run_id="r1", measured_at="2026-01-01T00:00:00", samples=10, method="events"))


def test_records_count_bytes_and_peaks_in_their_own_format():
    bf = _rec(ms=0.2)
    assert bf.bytes == 2 * 3 * 4096 * 4096 and bf.fmt == "bf16" and bf.itemsize == 2
    assert bf.tflops == pytest.approx(2 * 4096**3 / 0.2e-3 / 1e12)
    assert bf.pct_peak_compute == pytest.approx(100 * bf.tflops / 989.0)
    fp = _rec(precision="fp32", dtype="float32", ms=3.0)
    assert fp.bytes == 4 * 3 * 4096 * 4096 and fp.peak_tflops == 66.9
    assert fp.pct_peak_compute == pytest.approx(100 * fp.tflops / 66.9)
    tf = _rec(precision="tf32", dtype="float32", ms=0.5, peak=494.0)
    assert tf.key() != _rec(precision="fp32", dtype="float32", ms=0.5).key()  # same kernel, dtype, shape
    # A record saved before formats existed (no precision, tolerance or format peak) reads as fp32.
    old = {k: v for k, v in fp.as_dict().items() if k not in ("precision", "verify_tol", "peak_tflops")}
    back = record_from_dict(old)
    assert back.fmt == "fp32" and back.precision == "" and back.verify_tol is None


def test_tensor_peaks_follow_the_architecture():
    h100 = DeviceInfo(index=0, name="H100", compute_capability=(9, 0), sm_count=132, sm_clock_khz=1980000,
                      **_other_fields())
    assert h100.peak_tensor_tflops("bfloat16") == pytest.approx(132 * 4096 * 1.98e9 / 1e12)
    assert h100.peak_tensor_tflops("float16") == h100.peak_tensor_tflops("bfloat16")
    assert h100.peak_tensor_tflops("float32", "tf32") == pytest.approx(h100.peak_tensor_tflops("float16") / 2)
    assert h100.peak_tensor_tflops("float32") is None  # strict fp32 has no tensor-core path
    v100 = DeviceInfo(index=0, name="V100", compute_capability=(7, 0), sm_count=80, sm_clock_khz=1530000,
                      **_other_fields())
    assert v100.peak_tensor_tflops("bfloat16") is None and v100.peak_tensor_tflops("float32", "tf32") is None
    assert v100.peak_tensor_tflops("float16") == pytest.approx(80 * 1024 * 1.53e9 / 1e12)


def _other_fields() -> dict:
    import dataclasses

    given = {"index", "name", "compute_capability", "sm_count", "sm_clock_khz"}
    out = {}
    for f in dataclasses.fields(DeviceInfo):
        if f.name not in given and f.default is dataclasses.MISSING:
            out[f.name] = 0
    return out


def test_bf16_bit_patterns_widen_exactly():
    bits = np.array([0x3F80, 0xC020, 0x0000, 0x7F80, 0x3EAB], dtype=np.uint16)
    got = sweep.bf16_bits_to_float64(bits)
    assert got[:4].tolist() == [1.0, -2.5, 0.0, float("inf")]
    assert got[4] == pytest.approx(0.333984375)


def test_the_report_keeps_number_formats_apart():
    recs = [_rec("cublas", "bf16", family="gpu_peer", ms=0.20), _rec("wgmma", "bf16", ms=0.19),
            _rec("mma_sync", "bf16", ms=0.30, rung=11),
            _rec("cublas", "fp32", "float32", family="gpu_peer", ms=2.7), _rec("sgemm", "fp32", "float32", ms=2.8, rung=10)]
    ctx = ReportContext(Results(recs, [{"run_id": "r1", "notes": []}]))
    assert ctx.gpus() == ["GPU A", "GPU A, bf16"] and ctx.devices() == ["GPU A"]
    assert ctx.format_of("GPU A, bf16").name == "bf16" and ctx.format_of("GPU A").name == "fp32"
    assert [r.kernel for r in ctx.gpu_records("GPU A, bf16")] == ["mma_sync", "wgmma", "cublas"]
    wg = next(r for r in recs if r.kernel == "wgmma")
    assert ctx.reference_for(wg).fmt == "bf16"  # never the fp32 cuBLAS record of the same shape
    assert ctx.pct_of_reference(wg) == pytest.approx(100 * 0.20 / 0.19)
    secs = build_report(Results(recs, [{"run_id": "r1", "notes": []}]))
    titles = [s.title for s in secs]
    assert "The GPU ladder on GPU A, bf16 at N = 4096" in titles and "The GPU ladder on GPU A at N = 4096" in titles
    text = " ".join(str(b) for s in secs for b in s.blocks)
    assert "bf16: 2.0e-03 (tolerance 1e-02)" in text and "fp32: 1.0e-06 (tolerance 1e-04)" in text
    assert "cublasGemmEx, bf16 in and out" in text
    t1 = next(s for s in secs if s.title.startswith("Table 1") and s.title.endswith("bf16"))
    assert "2 x (MK + KN + MN)" in t1.tables()[0].caption and "bf16 (dense tensor cores)" in t1.tables()[0].caption


def test_a_fused_layer_names_its_epilogue_and_rejects_what_it_cannot_measure():
    from gemmlab.bench.fused import Layer

    assert Layer(8, 8, 8).epilogue == "bias_col+gelu_tanh"
    assert Layer(8, 8, 8, bias="row", activation="none").epilogue == "bias_row"
    assert Layer(8, 8, 8, bias="none", activation="silu").epilogue == "silu"
    assert Layer(8, 8, 8, bias="row", activation="gelu_erf").describe() == "bias per row, then GELU (erf)"
    for kwargs, words in (({"dtype": "float32"}, "--dtype 'float32'"), ({"bias": "both"}, "--bias 'both'"),
                          ({"activation": "tanh"}, "--activation 'tanh'"),
                          ({"bias": "none", "activation": "none"}, "no epilogue"), ({"m": 0}, "positive")):
        args = {"m": 8, "n": 8, "k": 8, **kwargs}
        with pytest.raises(ValueError, match=words):
            Layer(**args).check()


def _layer_recs(run="L1"):
    out = []
    for kernel, label, family, ms, epi in (("wgmma", "gemmlab wgmma", "gpu", 1.60, "bias_col+gelu_tanh"),
                                           ("torch_eager", "torch eager", "gpu_peer", 1.92, "bias_col+gelu_tanh"),
                                           ("cublaslt_fused", "cuBLASLt fused (nvmath)", "gpu_peer", 1.62,
                                            "bias_col+gelu_tanh"),
                                           ("cublas", "cuBLAS product alone", "gpu_peer", 1.58, "")):
        r = _rec(kernel, "bf16", family=family, ms=ms, n=8192, rung=15)
        r.label, r.epilogue, r.run_id = label, epi, run
        out.append(r)
    return out


def test_the_report_shows_fused_layers_apart_from_the_ladder():
    recs = [_rec("cublas", "bf16", family="gpu_peer", ms=0.20), _rec("wgmma", "bf16", ms=0.19)] + _layer_recs()
    res = Results(recs, [{"run_id": "r1", "notes": []}, {"run_id": "L1", "notes": []}])
    ctx = ReportContext(res)
    # The layer run's bare product is the layer's yardstick, not a point of the bf16 ladder at 8192.
    assert {r.m for r in ctx.gpu_records("GPU A, bf16")} == {4096}
    (key, layer), = ctx.layers().items()
    assert key[2] == "bias_col+gelu_tanh" and key[3] == (8192, 8192, 8192) and len(layer) == 4
    secs = build_report(res)
    sec = next(s for s in secs if s.title.startswith("Fused layer"))
    assert sec.title == "Fused layer bias_col+gelu_tanh, 8192 x 8192 x 8192, bf16, GPU A"
    t = sec.tables()[0]
    assert t.column("call")[0] == "cuBLAS product alone" and t.column("call")[1] == "gemmlab wgmma"
    row = dict(zip(t.column("call"), t.column("x torch eager")))
    assert row["gemmlab wgmma"] == "1.20x" and row["torch eager"] == "1.00x"
    text = sec.blocks[0].text
    assert "torch eager's 1.92 ms: 1.2x" in text and "0.988x its speed" in text


def test_format_sweeps_say_in_one_line_what_they_need(monkeypatch):
    from typer.testing import CliRunner

    from gemmlab.bench import peers
    from gemmlab.cli import app
    from gemmlab.runtime import device

    r = CliRunner().invoke(app, ["sweep", "--dtype", "bfloat16", "--sizes", "64"])
    if not device.gpu_available():
        assert r.exit_code == 1 and "bf16 sweep (--dtype bfloat16) runs on the GPU" in r.output
    monkeypatch.setattr(device, "gpu_available", lambda: True)
    monkeypatch.setattr(peers, "torch_unavailable_reason", lambda: "torch is not installed")
    r = CliRunner().invoke(app, ["sweep", "--dtype", "bfloat16", "--sizes", "64"])
    assert r.exit_code == 1 and "needs torch" in r.output and "torch is not installed" in r.output
    r = CliRunner().invoke(app, ["sweep", "--dtype", "float16", "-k", "cpu_naive", "--sizes", "64"])
    assert r.exit_code == 1 and "run fp32 only, not fp16" in r.output
    r = CliRunner().invoke(app, ["sweep", "--dtype", "float16", "-k", "sgemm", "--sizes", "64"])
    assert r.exit_code == 1 and "sgemm does not run fp16" in r.output and "wgmma" in r.output
