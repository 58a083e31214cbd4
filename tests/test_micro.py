"""Microbenchmarks without a GPU: sources compile without spills, datasheet formulas, ceilings files,
the clock sampler's no-NVML path."""

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from gemmlab.analysis.facts import H100_SXM
from gemmlab.micro import datasheet
from gemmlab.micro.bench import BENCHMARKS, CUDA_DIR, WGMMA_WARPGROUPS, run_one
from gemmlab.micro.ceilings import Ceilings, MicroResult
from gemmlab.runtime.clocks import ClockSampler
from gemmlab.runtime import compiler

from test_tensor_cores import _cuobjdump

needs_nvrtc = pytest.mark.skipif(not compiler.nvrtc_available(), reason="NVRTC (cuda-bindings) not installed")
WGMMA_EXPRS = [f"wgmma_peak<{bf16}, {WGMMA_WARPGROUPS}>" for bf16 in (0, 1)]
EXPRESSIONS = {
    "fma.cu": ["fma_peak<8, 32>"],
    "mma.cu": ["mma_peak<0, 8>", "mma_peak<1, 8>"],
    "stream.cu": ["stream_read", "stream_write", "stream_copy"],
    "l2.cu": ["l2_read<4>"],
    "smem.cu": ["smem_read<8>"],
    "l1.cu": ["l1_read<8>"],
    "wgmma.cu": WGMMA_EXPRS,  # an empty body off sm_90a (see the sm_90a test below)
}


def test_every_source_is_covered():
    assert sorted(p.name for p in Path(CUDA_DIR).glob("*.cu")) == sorted(EXPRESSIONS)


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source", sorted(EXPRESSIONS))
def test_sources_compile_without_local_memory(source, arch):
    mod = compiler.compile_file(Path(CUDA_DIR) / source, EXPRESSIONS[source], arch)
    for expr in EXPRESSIONS[source]:
        r = mod.resources[expr]
        assert r.registers > 0, f"no resource report for {expr}"
        assert not r.uses_local_memory, f"{expr} on {arch}: {r}"
        assert r.registers * 256 <= 65536  # every kernel launches 256-thread blocks
    assert mod.cubin[:4] == b"\x7fELF"


@needs_nvrtc
@pytest.mark.parametrize("bf16", [0, 1])
def test_wgmma_peak_for_sm_90a(bf16):
    """The wgmma kernel is all there on sm_90a (128 accumulators, 40 KiB of operands), keeps its accumulators in
    registers, is not serialised by ptxas, and where a disassembler is at hand its SASS issues HGMMA."""
    expr = WGMMA_EXPRS[bf16]
    mod = compiler.compile_file(Path(CUDA_DIR) / "wgmma.cu", [expr], "sm_90a")
    r = mod.resources[expr]
    assert r.registers >= 128 and not r.uses_local_memory, r
    assert r.smem_static == 40 * 1024
    assert 65536 // (r.registers * 128 * WGMMA_WARPGROUPS) >= 1
    assert "serialized" not in mod.log  # ptxas says so when it has to wait for each wgmma in turn
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found: SASS not checked")
    env = dict(os.environ, PATH=f"{Path(tool).parent}{os.pathsep}{os.environ.get('PATH', '')}")  # its nvdisasm
    sass = subprocess.run([tool, "-sass", str(mod.cubin_path)], capture_output=True, text=True, check=True,
                          env=env).stdout
    mnemonic = "HGMMA.64x256x16.F32.BF16 " if bf16 else "HGMMA.64x256x16.F32 "
    assert sass.count(mnemonic) >= 4, sass[:2000]
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass  # the wait leaves one commit group queued
    assert "HMMA" not in sass


def test_wgmma_benchmarks_listed_and_sm_90_only():
    names = list(BENCHMARKS)
    assert names[names.index("tensor_bf16") + 1:][:2] == ["tensor_fp16_wgmma", "tensor_bf16_wgmma"]
    for cc in ((8, 0), (8, 9), (10, 0)):
        other = dataclasses.replace(H100_SXM, compute_capability=cc)
        assert run_one("tensor_fp16_wgmma", other) is None and run_one("tensor_bf16_wgmma", other) is None
    assert datasheet.for_benchmark("tensor_bf16_wgmma", H100_SXM) == datasheet.tensor(H100_SXM, "bfloat16")


def test_tensor_ceiling_is_the_faster_kernel():
    mma, wg = _result("tensor_bf16", 669e12, "FLOP/s"), _result("tensor_bf16_wgmma", 800e12, "FLOP/s")
    both = Ceilings.from_results([mma, wg], H100_SXM)
    assert both.tensor_bf16_flops == 800e12 and both.tensor_source("bfloat16") == "tensor_bf16_wgmma"
    assert both.tensor_fp16_flops is None and both.tensor_source("float16") is None
    only = Ceilings.from_results([_result("tensor_fp16", 300e12, "FLOP/s"), mma], H100_SXM)
    assert only.tensor_bf16_flops == 669e12 and only.tensor_source("bfloat16") == "tensor_bf16"
    assert only.tensor_fp16_flops == 300e12
    assert Ceilings.datasheet(H100_SXM).tensor_source("bfloat16") is None


def test_h100_datasheet_figures():
    d = H100_SXM
    assert datasheet.fp32_fma(d).value == pytest.approx(132 * 128 * 2 * 1.98e9)      # 66.9 TFLOP/s
    assert datasheet.fp32_fma(d, 1500).value == pytest.approx(132 * 128 * 2 * 1.5e9)
    assert datasheet.dram(d).value == pytest.approx(2.619e9 * 2 * 640)                  # 3.35 TB/s
    assert datasheet.smem(d).value == pytest.approx(132 * 128 * 1.98e9)                 # 33.5 TB/s
    assert datasheet.tensor(d, "bfloat16").value == pytest.approx(132 * 4096 * 1.98e9)
    assert not datasheet.l2(d).published
    for name in BENCHMARKS:
        assert datasheet.for_benchmark(name, d) is not None


def test_no_bf16_tensor_figure_before_ampere():
    volta = dataclasses.replace(H100_SXM, compute_capability=(7, 0))
    assert datasheet.tensor(volta, "bfloat16") is None
    assert datasheet.tensor(volta, "float16").value > 0


def _result(name, value, unit="B/s"):
    return MicroResult(name, value, unit, 1.0, 0.01, 20, 1900.0, 2619.0, 2 * value, 2.1 * value, "b", "d")


def test_ceilings_round_trip_and_fallbacks(tmp_path):
    ceil = Ceilings.from_results([_result("fp32_fma", 60e12, "FLOP/s"), _result("dram_read", 3e12),
                                  _result("l2_read", 8e12)], H100_SXM)
    assert ceil.source == "measured" and ceil.fp32_flops == 60e12 and ceil.sm_clock_mhz == 1900.0
    assert ceil.smem_bps == Ceilings.datasheet(H100_SXM).smem_bps   # not measured: datasheet
    assert ceil.results[0].pct_datasheet == pytest.approx(50.0)
    back = Ceilings.load(ceil.save(tmp_path / "c.json"))
    assert back == ceil
    (tmp_path / "bad.json").write_text('{"format": 99}')
    with pytest.raises(ValueError):
        Ceilings.load(tmp_path / "bad.json")


def test_clock_sampler_without_nvml_reports_none(monkeypatch):
    import gemmlab.runtime.clocks as clocks

    monkeypatch.setattr(clocks, "_nvml", lambda: None)
    with ClockSampler() as cs:
        pass
    assert cs.sm_mhz is None and "nvidia-ml-py" in cs.reason
