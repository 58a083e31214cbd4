"""Every rung compiles through NVRTC for each target architecture, with no GPU, within resource limits."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gemmlab.kernels import all_specs, compile_spec, get
from gemmlab.runtime import compiler
from gemmlab.runtime.errors import CompileError

pytestmark = pytest.mark.skipif(not compiler.nvrtc_available(), reason="NVRTC (cuda-bindings) not installed")

ARCHS = ["sm_80", "sm_86", "sm_89", "sm_90"]


def _param_sets(spec):
    """The defaults and two samples spread over the search space (element-type parameters stay at their
    defaults: tests/test_tensor_cores.py and tests/test_wgmma.py compile every type combination)."""
    types = spec.type_params
    space = [p for p in spec.search_space() if all(p[t] == spec.defaults[t] for t in types)]
    step = max(1, len(space) // 2)
    sets = [spec.defaults] + space[::step]
    unique = []
    for p in sets:
        if p not in unique:
            unique.append(p)
    return unique


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.name)
def test_rung_compiles_within_resource_limits(spec, arch):
    """The defaults (what the ladder runs) never touch local memory; sampled tuner candidates fit the SM.
    A rung built for exact targets (wgmma: sm_90a) compiles for the one matching `arch` and is refused,
    naming its targets, everywhere else."""
    if spec.target_arch(arch) is None:
        with pytest.raises(ValueError, match="built for"):
            compile_spec(spec, spec.defaults, arch)
        return
    for p in _param_sets(spec) if arch == "sm_90" else [spec.defaults]:
        mod = compile_spec(spec, p, arch)
        r = mod.resources[spec.name_expression(p)]
        assert r.registers > 0, f"no resource report parsed for {spec.name} {p}"
        if p == spec.defaults:
            assert not r.uses_local_memory, f"{spec.name} {p} on {arch}: {r}"
        assert r.registers <= 255
        threads = spec.launch(256, 256, 256, p).threads_per_block
        assert r.registers * threads <= 65536, f"{spec.name} {p}: {r.registers} regs x {threads} threads"
        assert r.smem_static <= 48 * 1024
        assert mod.cubin[:4] == b"\x7fELF"


def test_parse_ptxas_report():
    log = textwrap.dedent("""\
        ptxas info    : 0 bytes gmem
        ptxas info    : Compiling entry function '_Z3fooILi4EEvPf' for 'sm_90'
        ptxas info    : Function properties for _Z3fooILi4EEvPf
        ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
        ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 400 bytes cmem[0]
        ptxas info    : Compiling entry function '_Z3barv' for 'sm_90'
        ptxas info    : Function properties for _Z3barv
        ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 8 registers, 352 bytes cmem[0]
        """)
    got = compiler.parse_ptxas_report(log)
    foo = got["_Z3fooILi4EEvPf"]
    assert (foo.registers, foo.smem_static, foo.stack_frame, foo.spill_stores, foo.spill_loads, foo.barriers) == (40, 4096, 16, 8, 4, 1)
    assert foo.uses_local_memory
    bar = got["_Z3barv"]
    assert (bar.registers, bar.smem_static, bar.barriers) == (8, 0, 0) and not bar.uses_local_memory


def _write_kernel(dirpath: Path, body: str = "x[0] = V;", header: str = "#define V 1.0f") -> Path:
    (dirpath / "inc.cuh").write_text(header + "\n")
    src = dirpath / "k.cu"
    src.write_text('#include "inc.cuh"\ntemplate <int N> __global__ void k(float* x) { ' + body + " }\n")
    return src


def test_disk_cache_hit_and_key_covers_included_headers(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path / "cache"))
    src = _write_kernel(tmp_path)
    first = compiler.compile_file(src, ["k<1>"], "sm_90")
    assert not first.from_disk_cache
    compiler.clear_memory_cache()
    second = compiler.compile_file(src, ["k<1>"], "sm_90")
    assert second.from_disk_cache and second.cubin == first.cubin
    # Changing only the header must compile afresh.
    compiler.clear_memory_cache()
    (tmp_path / "inc.cuh").write_text("#define V 2.0f\n")
    third = compiler.compile_file(src, ["k<1>"], "sm_90")
    assert not third.from_disk_cache
    # So must another architecture or another instantiation.
    assert not compiler.compile_file(src, ["k<1>"], "sm_80").from_disk_cache
    assert not compiler.compile_file(src, ["k<2>"], "sm_90").from_disk_cache


def test_corrupt_cache_entry_is_recompiled(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path / "cache"))
    src = _write_kernel(tmp_path)
    mod = compiler.compile_file(src, ["k<3>"], "sm_90")
    mod.cubin_path.with_suffix(".json").write_text("{not json")
    compiler.clear_memory_cache()
    again = compiler.compile_file(src, ["k<3>"], "sm_90")
    assert not again.from_disk_cache
    assert json.loads(again.cubin_path.with_suffix(".json").read_text())["lowered_names"]["k<3>"].startswith("_Z")


def test_second_process_finds_the_cache(tmp_path):
    env = dict(os.environ, GEMMLAB_CACHE_DIR=str(tmp_path / "cache"))
    code = ("from gemmlab.kernels import get, compile_spec; "
            "m = compile_spec(get('blocktile_2d'), {}, 'sm_90'); print(m.from_disk_cache)")
    outs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()
            for _ in range(2)]
    assert outs == ["False", "True"]


def test_compile_error_shows_the_compiler_log(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path / "cache"))
    src = _write_kernel(tmp_path, body="x[0] = undefined_name;")
    with pytest.raises(CompileError, match="undefined_name"):
        compiler.compile_file(src, ["k<1>"], "sm_90")


def test_fail_on_local_memory_switch(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GEMMLAB_FAIL_ON_LOCAL", "1")
    # A run-time-indexed array larger than the register file lands in local memory (a stack frame).
    src = _write_kernel(tmp_path, body="float a[512]; for (int i = 0; i < 512; ++i) a[i] = x[i]; a[(int)x[998]] = x[997]; x[0] = a[(int)x[999]];")
    with pytest.raises(CompileError, match="local memory"):
        compiler.compile_file(src, ["k<1>"], "sm_90")


@pytest.mark.parametrize("arch,expected", [("90", "sm_90"), ("sm_90a", "sm_90a"), ("compute_86", "sm_86")])
def test_normalise_arch(arch, expected):
    assert compiler.normalise_arch(arch) == expected


def test_normalise_arch_rejects_nonsense():
    with pytest.raises(ValueError, match="sm_XY"):
        compiler.normalise_arch("hopper")


def test_a_log_without_a_report_gives_unknown_resources_until_one_is_needed(tmp_path, monkeypatch):
    """NVRTC can return an empty log (a process holding a CUDA context): say 'unknown', never zeros."""
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path / "cache"))
    src = _write_kernel(tmp_path)
    real = compiler._nvrtc_compile

    def without_log(*args, **kwargs):
        cubin, ptx, lowered, _ = real(*args, **kwargs)
        return cubin, ptx, lowered, ""

    monkeypatch.setattr(compiler, "_nvrtc_compile", without_log)
    mod = compiler.compile_file(src, ["k<5>"], "sm_90")
    assert mod.resources["k<5>"].known is False and not mod.report_complete
    monkeypatch.setattr(compiler, "_nvrtc_compile", real)
    compiler.clear_memory_cache()
    # The cubin is good: a plain request takes it from the disk cache, report or no report ...
    cached = compiler.compile_file(src, ["k<5>"], "sm_90")
    assert cached.from_disk_cache and not cached.report_complete
    # ... and a request that needs the report compiles again and gets it.
    again = compiler.compile_file(src, ["k<5>"], "sm_90", need_report=True)
    assert not again.from_disk_cache and again.resources["k<5>"].known and again.resources["k<5>"].registers > 0
    compiler.clear_memory_cache()
    assert compiler.compile_file(src, ["k<5>"], "sm_90").report_complete


# ---- scripts/sass_mix.py: the main loop's instruction mix, read from the SASS.


def _sass_mix():
    import importlib.util

    if "sass_mix" in sys.modules:
        return sys.modules["sass_mix"]
    path = Path(__file__).resolve().parents[1] / "scripts" / "sass_mix.py"
    spec = importlib.util.spec_from_file_location("sass_mix", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sass_mix"] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


def _listing(rows):
    """nvdisasm -c -hex style text: (label or None, instruction text, stall cycles) per row."""
    out, addr = [], 0
    for label, text, stall in rows:
        if label:
            out.append(f"{label}:")
        if text:
            out.append(f"        /*{addr:04x}*/                   {text} ;                 /* 0x{addr:016x} */")
            out.append(f"                                                                 /* 0x{stall << 41:016x} */")
            addr += 16
    return out


def test_sass_mix_counts_the_steady_state_path_of_the_main_loop():
    """A loop whose body branches (edge loads or interior loads) is counted along the interior path: the
    one with the most FFMAs, then the most bytes loaded from global memory."""
    sm = _sass_mix()
    rows = [
        (None, "MOV R1, c[0x0][0x28]", 1),
        (".L_x_0", "FFMA R4, R5.reuse, R6, R4", 1),
        (None, "FFMA R7, R5, R8, R7", 1),
        (None, "@P0 BRA `(.L_x_1)", 5),
        (None, "LDG.E.128.CONSTANT R8, desc[UR4][R2.64]", 1),  # interior: one 16-byte load
        (None, "BRA `(.L_x_2)", 5),
        (".L_x_1", "LDG.E.CONSTANT R8, desc[UR4][R2.64]", 1),   # edge: a 4-byte load and more work
        (None, "IADD3 R9, R9, 0x1, RZ", 1),
        (None, "IADD3 R10, R9, 0x1, RZ", 1),
        (".L_x_2", "@!PT LDS RZ, [RZ]", 1),
        (None, "LDS.128 R12, [R3+0x10]", 2),
        (None, "FFMA R13, R12, R14, R13", 1),
        (None, "ISETP.NE.AND P1, PT, R0, RZ, PT", 4),
        (None, "@P1 BRA `(.L_x_0)", 5),
        (None, "EXIT", 5),
    ]
    instrs, labels = sm.parse(_listing(rows))
    loops = sm.main_loop(instrs, labels)
    assert len(loops) == 1
    r = sm.report(loops[0])
    assert r["histogram"] == {"FFMA": 3, "BRA": 3, "LDG.128": 1, "LDS.32@!PT": 1, "LDS.128": 1, "ISETP": 1}
    assert r["instructions"] == 10 and r["ffma_fraction"] == pytest.approx(0.3)
    assert r["lds_per_128_ffma"] == pytest.approx(128 / 3)  # the never-executed LDS is not counted
    assert r["stall_cycles"] == 1 + 1 + 5 + 1 + 5 + 1 + 2 + 1 + 4 + 5
    assert r["static_body"] == {"instructions": 13, "ffma": 3, "inner_loops": 0}
    assert r["reuse_hits"] == 1  # R5 in the first slot of the second FFMA comes from the reuse cache


def test_sgemm_main_loop_is_dense():
    """Rung 10's main loop at the default tile: 16 x 8 results x 8 k of FFMAs per step, six LDS.128 per
    128 FFMAs, nothing from local memory, and at least 92% of its instructions FFMAs."""
    sm = _sass_mix()
    try:
        sm.find_nvdisasm()
    except SystemExit:
        pytest.skip("nvdisasm not found")
    info, loops = sm.analyse("sgemm", {}, "sm_90")
    r = sm.report(loops[0])
    assert r["ffma"] == 16 * 8 * 8
    assert r["histogram"]["LDS.128"] == 6 * 8
    assert not any(k.startswith(("LDL", "STL")) for k in r["histogram"])
    assert r["ffma_fraction"] >= 0.92, r["histogram"]
    assert info["spill_stores"] == 0 and info["stack_frame"] == 0


# (SPLIT_K, WAVE, B_COPY, REDUCE, B_LAYOUT, C_STAGE): no split; a split tail (WAVE) with either B copy; every
# tile split, in two or 64 slices summed in the kernel, or summed by the second kernel; B in 16- and 4-byte
# copies; B^T read in place unsplit, with a split tail and split in two (the form with the most live registers;
# the second kernel's sum adds none), on the oldest and the newest architecture (BT_ARCHS: the compile time of
# every form on all four is more than this suite's budget allows); C written through shared memory (C_STAGE,
# an N off a multiple of 4) unsplit with either B copy or B^T, and with a split tail. (scripts/spill_sweep.py
# compiles more splits of each.)
SGEMM_FORMS = ((1, 1, 16, 1, 1, 0), (1, 1, 4, 1, 1, 0), (4, 264, 16, 1, 1, 0), (8, 264, 4, 1, 1, 0),
               (2, 1, 4, 1, 1, 0), (64, 1, 4, 1, 1, 0), (8, 1, 16, 2, 1, 0), (1, 1, 16, 1, 2, 0), (4, 264, 16, 1, 2, 0),
               (2, 1, 16, 1, 2, 0), (1, 1, 4, 1, 1, 1), (1, 1, 16, 1, 1, 1), (8, 264, 4, 1, 1, 1), (1, 1, 16, 1, 2, 1))
BT_ARCHS = ("sm_80", "sm_90")


@pytest.mark.parametrize("arch", ARCHS)
def test_sgemm_every_form_fits_its_blocks_per_sm_without_spills(arch):
    """Every tile the shape heuristic can pick, in every form it can pick (split-K with and without a split
    tail, either sum, either B copy, B row-major or B^T), fits the register budget its MIN_BLOCKS sets (so
    that many blocks share an SM) without touching local memory, on every architecture. One module per architecture: the
    instantiations share one parse."""
    spec = get("sgemm")
    classes = sys.modules[spec.heuristic.__module__].SHAPE_CLASSES
    params = []
    for c in classes:
        assert c.cfg["MIN_BLOCKS"] == c.per_sm
        for split, wave, b_copy, reduce, layout, c_stage in SGEMM_FORMS:
            if (wave == 1 or c.tail) and (layout == 1 or arch in BT_ARCHS):
                params.append((c.per_sm, spec.validate(dict(c.cfg, SPLIT_K=split, WAVE=wave, B_COPY=b_copy,
                                                            REDUCE=reduce, B_LAYOUT=layout, C_STAGE=c_stage))))
    exprs = [spec.name_expression(p) for _, p in params]
    resources = compiler.compile_file(spec.source_path, exprs + [spec.second_kernel.name], arch,
                                      need_report=True).resources
    assert not resources[spec.second_kernel.name].uses_local_memory
    for (per_sm, p), expr in zip(params, exprs):
        r = resources[expr]
        assert r.registers > 0 and not r.uses_local_memory, f"{arch} {p}: {r}"
        assert r.registers * spec.launch(4096, 4096, 4096, p).threads_per_block * per_sm <= 65536, (p, r.registers)
