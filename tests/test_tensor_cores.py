"""The tensor-core rung (mma_sync) without a GPU: compiles for sm_80 and sm_90 without local memory, its
SASS has HMMA, its spec explains bad parameters, and matmul refuses bad precision / epilogue arguments."""

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
TYPE_SETS = [dict(A_TYPE=a, C_TYPE=c) for a in tc.A_TYPES.values() for c in tc.C_TYPES.values()]


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


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("types", TYPE_SETS, ids=lambda t: f"a{t['A_TYPE']}c{t['C_TYPE']}")
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


def test_registry_filters_by_dtype():
    fp32 = specs_for_dtype("float32")
    assert SPEC not in fp32 and fp32 and all("float32" in s.dtypes for s in fp32)
    assert specs_for_dtype("bfloat16") == [SPEC] == specs_for_dtype("float16")
    assert gemmlab.api.choose_kernel("bfloat16", (8, 0)).name == "mma_sync"
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
    with pytest.raises(ValueError, match="A_TYPE = 3"):
        SPEC.validate({"A_TYPE": 3})
    assert tc.smem_bytes(SPEC.defaults) == 2 * 4 * (128 * 40 + 32 * 136)


def test_epilogue_flags_match_the_kernel():
    src = SPEC.source_path.read_text()
    assert "#define EPI_ACT_GELU_ERF 3" in src and "#define EPI_RESIDUAL 32" in src
    assert tc.epilogue_flags("col", "gelu_tanh", True) == 2 | (2 << 2) | 32
    assert tc.epilogue_flags(None, None, False) == 0


H = np.ones((4, 4), np.float16)
F = np.ones((4, 4), np.float32)


@pytest.mark.parametrize("call,err,match", [
    (lambda: gemmlab.matmul(F, F, precision="tf32"), ValueError, "precision='tf32'"),
    (lambda: gemmlab.matmul(F, F, precision="bf16"), ValueError, "precision='bf16' does not fit float32"),
    (lambda: gemmlab.matmul(H, H, precision="fp32"), ValueError, "precision='fp32' does not fit float16"),
    (lambda: gemmlab.matmul(F, F, precision="fp8"), ValueError, "precision='fp8' is not one of"),
    (lambda: gemmlab.matmul(F, F, bias=np.ones(4, np.float32)), ValueError, "bias is a fused epilogue"),
    (lambda: gemmlab.matmul(F, F, activation="relu"), ValueError, "activation is a fused epilogue"),
    (lambda: gemmlab.matmul(F, F, out_dtype="float16"), ValueError, "out_dtype is a fused epilogue"),
    (lambda: gemmlab.matmul(H, H, activation="tanh"), ValueError, "activation='tanh' is not one of"),
    (lambda: gemmlab.matmul(H, H, out_dtype="int8"), ValueError, "out_dtype='int8'"),
    (lambda: gemmlab.matmul(H, H, kernel="sgemm"), TypeError, "kernel sgemm takes float32"),
    (lambda: gemmlab.matmul(F, F, kernel="mma_sync"), TypeError, "kernel mma_sync takes float16 or bfloat16"),
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
    label = gemmlab.api._dtype_label
    assert [label(x) for x in ("bf16", "float16", np.float32, np.dtype("float16"), "fp32")] == \
        ["bfloat16", "float16", "float32", "float16", "float32"]
