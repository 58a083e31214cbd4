"""The tensor-core rung (mma_sync) without a GPU: compiles for sm_80 and sm_90 without local memory (fp16,
bf16 and tf32), its SASS has HMMA, its spec explains bad parameters, and matmul refuses bad precision /
epilogue arguments."""

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import gemmlab
from gemmlab.kernels import compile_spec, get, specs_for_dtype
from gemmlab.kernels.rungs import mma_sync as tc
from gemmlab.runtime import compiler

needs_nvrtc = pytest.mark.skipif(not compiler.nvrtc_available(), reason="NVRTC (cuda-bindings) not installed")
SPEC = get("mma_sync")
TYPE_SETS = [dict(A_TYPE=a, C_TYPE=c) for a in tc.INPUT_TYPES.values() for c in tc.C_TYPES.values()]


def _cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia.cu13

        cand = Path(list(nvidia.cu13.__path__)[0]) / "bin" / "cuobjdump"
        return str(cand) if cand.exists() else None
    except ImportError:
        return None


# Every type combination on sm_90; on sm_80 one output type per input type (the main loop is what
# differs between architectures, and compiling is most of this file's CI time).
COMPILE_CASES = [("sm_90", t) for t in TYPE_SETS] + [("sm_80", t) for t in TYPE_SETS if t["C_TYPE"] == 1]


@needs_nvrtc
@pytest.mark.parametrize("arch,types", COMPILE_CASES, ids=lambda v: v if isinstance(v, str) else f"a{v['A_TYPE']}c{v['C_TYPE']}")
def test_compiles_without_local_memory(arch, types):
    mod = compile_spec(SPEC, types, arch)
    r = mod.resources[SPEC.name_expression(SPEC.validate(types))]
    assert r.registers > 0 and not r.uses_local_memory, r
    threads = SPEC.launch(256, 256, 256, SPEC.validate(types)).threads_per_block
    assert r.registers * threads <= 65536


@needs_nvrtc
@pytest.mark.parametrize("params", [dict(BM=128, BN=256, WM=64, WN=64, STAGES=3), dict(BM=64, BN=64, WM=32, WN=32, STAGES=2),
                                    dict(BM=64, BN=128, BK=16, WM=32, WN=64, STAGES=4)], ids=str)
def test_other_tiles_compile_without_spills(params):
    mod = compile_spec(SPEC, params, "sm_90")
    r = mod.resources[SPEC.name_expression(SPEC.validate(params))]
    assert not r.uses_local_memory, r


@needs_nvrtc
@pytest.mark.parametrize("a_type,mnemonic", [(1, "HMMA.16816.F32"), (2, "HMMA.16816.F32.BF16")])
def test_sass_has_tensor_core_instructions(a_type, mnemonic):
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found")
    mod = compile_spec(SPEC, dict(A_TYPE=a_type), "sm_90")
    env = dict(os.environ, PATH=f"{Path(tool).parent}{os.pathsep}{os.environ.get('PATH', '')}")  # its nvdisasm
    sass = subprocess.run([tool, "-sass", str(mod.cubin_path)], capture_output=True, text=True, check=True,
                          env=env).stdout
    assert mnemonic in sass
    for op in ("LDSM.16.M88.4", "LDSM.16.MT88.4", "LDGSTS"):  # ldmatrix (A, B transposed) and cp.async
        assert op in sass, op


@needs_nvrtc
@pytest.mark.parametrize("params", [dict(A_TYPE=tc.TF32, BK=16), dict(A_TYPE=tc.TF32, BK=32, C_TYPE=3),
                                    dict(A_TYPE=tc.TF32, BM=64, BN=64, BK=8, WM=32, WN=32, STAGES=2)], ids=str)
def test_tf32_compiles_without_spills(params):
    for arch in ("sm_80", "sm_90"):
        mod = compile_spec(SPEC, params, arch)
        r = mod.resources[SPEC.name_expression(SPEC.validate(params))]
        assert r.registers > 0 and not r.uses_local_memory, (arch, r)


@needs_nvrtc
def test_tf32_sass_rounds_and_uses_tf32_tensor_cores():
    """m16n8k8 tf32 HMMA; A through ldmatrix (not transposed), B through 32-bit LDS (no LDSM.MT), inputs
    rounded by cvt.rna.tf32 (in the PTX; ptxas may fold it into another instruction in SASS)."""
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found")
    params = dict(A_TYPE=tc.TF32, BK=16)
    mod = compile_spec(SPEC, params, "sm_90")
    env = dict(os.environ, PATH=f"{Path(tool).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    sass = subprocess.run([tool, "-sass", str(mod.cubin_path)], capture_output=True, text=True, check=True,
                          env=env).stdout
    assert "HMMA.1688.F32.TF32" in sass
    assert "LDSM.16.M88.4" in sass and "LDSM.16.MT88" not in sass and "LDGSTS" in sass
    assert "cvt.rna.tf32.f32" in SPEC.source_path.with_name("epilogue.cuh").read_text()


def test_registry_filters_by_dtype():
    fp32 = specs_for_dtype("float32")
    assert SPEC not in fp32 and fp32 and all("float32" in s.dtypes for s in fp32)
    hopper = [get(n) for n in ("tma_wgmma", "warp_specialized", "persistent", "wgmma")]  # the Hopper steps, in order
    assert specs_for_dtype("bfloat16") == [SPEC, *hopper] == specs_for_dtype("float16")
    assert get("skinny") in specs_for_dtype("bfloat16", ladder=False)  # a rung for some shapes: not the ladder
    assert gemmlab.api.choose_kernel("bfloat16", (8, 0)).name == "mma_sync"
    assert gemmlab.api.choose_kernel("bfloat16", (9, 0)).name == "wgmma"
    assert gemmlab.api.choose_kernel().name == fp32[-1].name
    with pytest.raises(TypeError, match="compute capability 7.5"):
        gemmlab.api.choose_kernel("float16", (7, 5))


def test_spec_constraints_name_the_parameter():
    with pytest.raises(ValueError, match="BK = 24"):
        SPEC.validate({"BK": 24})
    with pytest.raises(ValueError, match="STAGES = 5 .* shared"):
        SPEC.validate({"BM": 256, "BN": 256, "BK": 64, "WM": 128, "WN": 64, "STAGES": 5})
    with pytest.raises(ValueError, match="registers"):
        SPEC.validate({"BM": 256, "BN": 256, "WM": 128, "WN": 128})
    with pytest.raises(ValueError, match="A_TYPE = 4"):
        SPEC.validate({"A_TYPE": 4})
    assert tc.smem_bytes(SPEC.defaults) == 2 * 4 * (128 * 40 + 32 * 136)


def test_tf32_constraints_and_shared_memory():
    with pytest.raises(ValueError, match="BK = 8 must be a multiple of 16 for fp16"):
        SPEC.validate({"BK": 8, "A_TYPE": 1})
    SPEC.validate({"BK": 8, "A_TYPE": tc.TF32})  # m16n8k8: BK = 8 is a whole step
    with pytest.raises(ValueError, match="BK = 64: at most 32 for tf32"):
        SPEC.validate({"BK": 64, "A_TYPE": tc.TF32})
    # 4-byte elements: rows of A padded by 4 floats (16 bytes), rows of B by 8 floats (32 bytes).
    p = SPEC.validate({"A_TYPE": tc.TF32, "BK": 16})
    assert tc.smem_bytes(p) == 4 * 4 * (128 * (16 + 4) + 16 * (128 + 8))
    assert tc.smem_bytes(p) == tc.smem_bytes(SPEC.defaults)  # the tf32 default stage: fp16's bytes
    with pytest.raises(ValueError, match=r"STAGES = 5 .* 4-byte elements .* shared"):
        SPEC.validate({"A_TYPE": tc.TF32, "BM": 256, "BN": 256, "BK": 32, "WM": 128, "WN": 64, "STAGES": 5})
    assert SPEC.type_defaults["tf32"] == {"BK": 16}
    assert "tf32" in SPEC.precisions and "float32" not in SPEC.dtypes  # the strict fp32 ladder stays fp32


def test_kernel_layout_comment_matches_the_padding():
    """The header's conflict-free argument rests on these pitches: A rows BK + 16 bytes (an odd number of
    16-byte units for BK a multiple of 8 floats), B rows BN + 8 floats (8 words mod 32 for BN a multiple
    of 32)."""
    src = SPEC.source_path.read_text()
    assert "constexpr int A_PITCH = BK + CHUNK, B_PITCH = BN + 8;" in src
    for bk in (8, 16, 32):
        assert ((bk + 4) * 4 // 16) % 2 == 1
    for bn in (32, 64, 128, 256):
        assert (bn + 8) % 32 == 8
        banks = {((t * (bn + 8)) + g) % 32 for t in range(4) for g in range(8)}  # lane (g, t) reads B[t][g]
        assert len(banks) == 32


def test_epilogue_flags_match_the_kernel():
    src = SPEC.source_path.with_name("epilogue.cuh").read_text()
    assert "#define EPI_ACT_GELU_ERF 3" in src and "#define EPI_RESIDUAL 32" in src
    assert tc.epilogue_flags("col", "gelu_tanh", True) == 2 | (2 << 2) | 32
    assert tc.epilogue_flags(None, None, False) == 0


H = np.ones((4, 4), np.float16)
F = np.ones((4, 4), np.float32)


@pytest.mark.parametrize("call,err,match", [
    (lambda: gemmlab.matmul(H, H, precision="tf32"), ValueError, "precision='tf32' does not fit float16"),
    (lambda: gemmlab.matmul(F, F, precision="bf16"), ValueError, "precision='bf16' does not fit float32"),
    (lambda: gemmlab.matmul(H, H, precision="fp32"), ValueError, "precision='fp32' does not fit float16"),
    (lambda: gemmlab.matmul(F, F, precision="fp8"), ValueError, "precision='fp8' is not one of"),
    (lambda: gemmlab.matmul(F, F, kernel="pipelined", bias=np.ones(4, np.float32)), ValueError,
     "kernel pipelined takes no fused epilogue .* that do: sgemm"),
    (lambda: gemmlab.matmul(F, F, kernel="naive", activation="relu"), ValueError, "kernel naive takes no fused epilogue"),
    (lambda: gemmlab.matmul(F, F, out_dtype="float16"), ValueError, "strict fp32 kernels write float32"),
    (lambda: gemmlab.matmul(F, F, bias=np.ones(5, np.float32)), ValueError, "bias must have N = 4 elements"),
    (lambda: gemmlab.matmul(F, F, residual=np.ones((4, 4), np.float16)), TypeError, "residual must have the output dtype float32"),
    (lambda: gemmlab.matmul(F, F, activation="gelu"), ValueError, "activation='gelu' is not one of"),
    (lambda: gemmlab.matmul(F, F, precision="tf32", kernel="sgemm"), TypeError, "kernel sgemm has no precision='tf32' mode .* mma_sync"),
    (lambda: gemmlab.matmul(F, F, precision="tf32", kernel="mma_sync", A_TYPE=3), ValueError, "A_TYPE is set from"),
    (lambda: gemmlab.matmul(F, F, precision="tf32", kernel="mma_sync", BK=12), ValueError, "BK = 12 must be a multiple of 8 for tf32"),
    (lambda: gemmlab.matmul(F, F, precision="tf32", kernel="mma_sync", BK=64), ValueError, "BK = 64: at most 32 for tf32"),
    (lambda: gemmlab.matmul(F, F, precision="tf32", kernel="auto", BK=16), ValueError, "need a named kernel"),
    (lambda: gemmlab.matmul(F, F, np.ones((4, 4), np.float16), precision="tf32", out_dtype="float32"), TypeError,
     "C is float16 but the output dtype is float32"),
    (lambda: gemmlab.matmul(F, F, precision="tf32", out_dtype="bfloat16", residual=F), TypeError, "residual must have the output dtype bfloat16"),
    (lambda: gemmlab.matmul(F, F, precision="tf32", bias=np.ones((2, 2), np.float32)), ValueError, "bias must have N = 4"),
    (lambda: gemmlab.matmul(H, H, activation="tanh"), ValueError, "activation='tanh' is not one of"),
    (lambda: gemmlab.matmul(H, H, out_dtype="int8"), ValueError, "out_dtype='int8'"),
    (lambda: gemmlab.matmul(H, H, kernel="sgemm"), TypeError, "kernel sgemm takes float32"),
    (lambda: gemmlab.matmul(F, F, kernel="mma_sync"), TypeError,
     r"kernel mma_sync takes float16 or bfloat16 inputs \(float32 with precision='tf32'\)"),
    (lambda: gemmlab.matmul(H, H, kernel="mma_sync", A_TYPE=1), ValueError, "A_TYPE is set from the arrays"),
    (lambda: gemmlab.matmul(H, H, kernel="mma_sync", BK=24), ValueError, "BK = 24"),
    (lambda: gemmlab.matmul(H, H, kernel="auto", BK=32), ValueError, "need a named kernel"),
    (lambda: gemmlab.matmul(H, F), TypeError, "A is float16, B is float32"),
    (lambda: gemmlab.matmul(H, H, np.ones((4, 4), np.float16), out_dtype="float32"), TypeError, "C is float16 but the output dtype is float32"),
    (lambda: gemmlab.matmul(H, H, kernel="cpu_naive", bias=np.ones(4)), ValueError, "CPU kernel cpu_naive"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_bad_arguments_are_refused_before_any_gpu_is_needed(call, err, match):
    with pytest.raises(err, match=match):
        call()


def test_out_dtype_spellings():
    label = gemmlab.formats.dtype_label
    assert [label(x) for x in ("bf16", "float16", np.float32, np.dtype("float16"), "fp32")] == \
        ["bfloat16", "float16", "float32", "float16", "float32"]
