"""The SM clock counted on the GPU (no GPU needed here): the median of cycles over nanoseconds, and the probe
and block-clock sources compile for the architectures the package targets."""

import pytest

from gemmlab.runtime import compiler
from gemmlab.runtime.clocks import ClockProbe, cycles_per_ns_mhz, sm_spans


def test_cycles_per_ns_is_the_clock_in_mhz():
    # 1,500 cycles in 1,000 ns is 1,500 MHz; empty and zero-length slots (blocks that did not run) are left out
    assert cycles_per_ns_mhz([(1500, 1000), (1600, 1000), (1400, 1000), (0, 0), (5, 0)]) == pytest.approx(1500.0)
    assert cycles_per_ns_mhz([]) is None and cycles_per_ns_mhz([(0, 0)]) is None


@pytest.mark.skipif(not compiler.nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_probe_compiles(arch):
    from pathlib import Path

    import gemmlab.runtime.clocks as clocks

    src = Path(clocks.__file__).parent / "cuda" / ClockProbe.SOURCE
    module = compiler.compile_file(src, ["clock_probe"], arch)
    assert module.lowered_names["clock_probe"]


def test_sm_spans_count_each_sm_from_its_first_block_to_its_last():
    # SM 0 ran two blocks one after the other (cycles 100-1100, 1150-2100; 0-700 ns and 720-1400 ns); SM 1 one
    # block; a block that did not run (all zero) is left out. SM 0: 2000 cycles over 1400 ns; SM 1: 1500 over 1000.
    recs = [(0, 100, 1100, 0, 700), (0, 1150, 2100, 720, 1400), (1, 5000, 6500, 10, 1010), (0, 0, 0, 0, 0)]
    assert sm_spans(recs) == (2000 + 1500, 1400 + 1000)
    assert sm_spans([]) == (0, 0)
