"""bench.measure, the one function that measures a kernel, without a GPU: the parameters it passes to a call
(the type parameters left to the call), the names it refuses, and the one-line reason it gives where this
machine cannot run GPU work."""

import pytest

from gemmlab.bench.measure import callable_params, measure, measure_one
from gemmlab.kernels import get
from gemmlab.runtime import device
from gemmlab.runtime.errors import GemmlabError


def test_the_type_parameters_are_left_to_the_call():
    full = get("sgemm").validate({"BM": 64, "BN": 64, "BK": 16, "WM": 32, "WN": 32, "TM": 4, "TN": 8})
    assert {"BATCHED", "B_LAYOUT"} <= set(full)
    p = callable_params("sgemm", full)
    assert "BATCHED" not in p and "B_LAYOUT" not in p and p["BM"] == 64
    assert callable_params("naive", None) == {}


def test_names_that_are_not_gpu_kernels_are_refused_by_name():
    with pytest.raises(ValueError, match="cpu_naive is a CPU baseline"):
        measure(["cpu_naive"], (64, 64, 64))
    with pytest.raises(ValueError, match="unknown kernel 'nope'.*sgemm"):
        measure_one("nope", 64, 64, 64)


@pytest.mark.skipif(device.gpu_available(), reason="checks the message without a GPU")
def test_without_a_gpu_the_reason_is_one_line():
    with pytest.raises(GemmlabError) as info:
        measure_one("sgemm", 64, 64, 64)
    assert "GPU part skipped" in str(info.value) and "\n" not in str(info.value)


def test_a_kernel_the_sweep_left_out_is_named_with_the_reason(monkeypatch):
    """Where the sweep measured some kernels but skipped one (a rung this GPU cannot run), measure() says which
    and why instead of returning a record of another kernel."""
    from gemmlab.bench import measure as m
    from gemmlab.bench.records import Record, Results

    def fake_run_plan(plan, on_record=None):
        rec = Record(kernel="cublas", label="cublas", family="gpu_peer", rung=None, idea="", params={},
                     dtype="float32", m=64, n=64, k=64, alpha=1.0, beta=0.0, mode="compute", l2="cold", pinned=None)
        return Results([rec], [{"notes": ["rung wgmma needs compute capability 9.0 (this GPU: 8.0): skipped"]}])

    monkeypatch.setattr(m, "run_plan", fake_run_plan)
    got = m.measure(["cublas"], (64, 64, 64))
    assert got[0].kernel == "cublas"
    with pytest.raises(GemmlabError, match="sgemm was not measured: rung wgmma needs compute capability 9.0"):
        m.measure(["cublas", "sgemm"], (64, 64, 64))
