"""The SM clock counted on the GPU (no GPU needed here): the median of cycles over nanoseconds, and the probe
and block-clock sources compile for the architectures the package targets."""

import pytest

from gemmlab.runtime import compiler
from gemmlab.runtime.clocks import ClockProbe, cycles_per_ns_mhz


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
