"""8-bit inputs without a GPU: the formats table, the scales' layouts and their errors, the choice of rung and
parameters, quantize / dequantize, and the torch operator's fake (what torch.compile traces)."""

import pytest

import gemmlab
from gemmlab import formats
from gemmlab.api import checks, explain_choice



@pytest.fixture
def torch():
    """torch, where the test needs tensors (8-bit tensors are torch's); the rest runs without it."""
    return pytest.importorskip("torch")


def test_formats_table_knows_the_8_bit_types():
    for dt, name in (("float8_e4m3fn", "e4m3"), ("float8_e5m2", "e5m2")):
        f = formats.number_format(dt)
        assert f.name == name and f.itemsize == 1 and f.is_fp8 and f.out_dtype == "bfloat16" and f.needs_torch
        assert formats.element_bytes(dt) == 1 and formats.ELEMENT_TYPES[dt] in (5, 6)
    assert formats.dtype_label("e4m3") == "float8_e4m3fn" and formats.dtype_label("e5m2") == "float8_e5m2"
    # the scales' kinds sit above the epilogue's own six bits, which split-K's second launch takes alone
    flags = formats.epilogue_flags("col", "silu", True, "row", "col")
    assert flags & 63 == formats.epilogue_flags("col", "silu", True) and flags >> 6 == 2 | 2 << 2


@pytest.mark.parametrize("shape, mode", [((), "tensor"), ((1,), "tensor"), ((1, 1), "tensor"), ((64, 1), "row"),
                                         ((64,), "row")])
def test_scale_a_layouts(shape, mode, torch):
    assert _mode("scale_a", torch.ones(shape)) == mode


@pytest.mark.parametrize("shape, mode", [((1,), "tensor"), ((1, 128), "col"), ((128,), "col")])
def test_scale_b_layouts(shape, mode, torch):
    assert _mode("scale_b", torch.ones(shape)) == mode


def test_block_scale_layouts(torch):
    """1 x 128 blocks of A (M x ceil(K / 128)) and 128 x 128 blocks of B (ceil(K / 128) x ceil(N / 128)); where a
    block layout coincides with another (K <= 128) the other is taken, which means the same product."""
    assert _mode("scale_a", torch.ones(64, 2)) == "block"                      # K = 256
    assert _mode("scale_a", torch.ones(64, 3), k=257) == "block"               # a partial last block
    assert _mode("scale_b", torch.ones(2, 1)) == "block"                       # K = 256, N = 128
    assert _mode("scale_b", torch.ones(3, 2), n=129, k=300) == "block"
    assert _mode("scale_b", torch.ones(1, 2), n=200, k=128) == "block"         # one k block, two of columns
    assert _mode("scale_a", torch.ones(64, 1), k=128) == "row"                 # one k block: per row
    assert _mode("scale_b", torch.ones(1, 1), k=100) == "tensor"
    req = checks.Request(dtype="float8_e4m3fn", precision="fp8", out="bfloat16", m=64, n=128, k=256, kernel="auto",
                         params=(), bias=None, activation=None, residual=False, has_c=False, scale_a="block",
                         scale_b="tensor")
    assert req.block_scales and req.flags >> 6 == 3 | 1 << 2


def _mode(name, s, m=64, n=128, k=256, dtype="float8_e4m3fn"):
    """checks.scale_mode with the placement check passed (these tensors are on the CPU)."""
    from gemmlab import arrays

    real = arrays.kind_of
    arrays.kind_of = lambda x: arrays.TORCH_CUDA if x is s else real(x)
    try:
        return checks.scale_mode(name, s, m, n, dtype, k)
    finally:
        arrays.kind_of = real


def test_scale_errors_name_the_fault(torch):
    with pytest.raises(ValueError, match=r"or M x ceil\(K / 128\) = 64 x 2"):
        _mode("scale_a", torch.ones(64, 3))                 # three k blocks at K = 256
    with pytest.raises(ValueError, match=r"or ceil\(K / 128\) x ceil\(N / 128\) = 2 x 1"):
        _mode("scale_b", torch.ones(1, 2))                  # the transpose of B's blocks
    with pytest.raises(ValueError, match=r"scale_b must be one element, 1 x N = 1 x 128"):
        _mode("scale_b", torch.ones(128, 1))                # N x 1: the transpose of what is meant
    with pytest.raises(ValueError, match="scale_a must be"):
        _mode("scale_a", torch.ones(63, 1))
    with pytest.raises(ValueError, match="8-bit inputs"):
        checks.scale_mode("scale_a", 2.0, 64, 128, "bfloat16", 256)
    with pytest.raises(TypeError, match="float tensor"):
        _mode("scale_a", torch.ones(64, 1, dtype=torch.int32))
    with pytest.raises(TypeError, match="on the GPU"):
        checks.scale_mode("scale_a", torch.ones(1), 64, 128, "float8_e4m3fn", 256)
    with pytest.raises(ValueError, match="finite"):
        checks.scale_mode("scale_a", float("inf"), 64, 128, "float8_e4m3fn", 256)
    assert checks.scale_mode("scale_a", 0.5, 64, 128, "float8_e4m3fn", 256) is None   # a number: into alpha


def test_calls_refused_before_any_gpu_work(torch):
    a = torch.zeros(8, 32, dtype=torch.float8_e4m3fn)
    w = torch.zeros(16, 32, dtype=torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="the kernels write"):
        gemmlab.matmul(a, w.t(), torch.zeros(8, 16, dtype=torch.float8_e4m3fn))     # an 8-bit C
    with pytest.raises(ValueError, match="one product per call"):
        gemmlab.matmul(a.unsqueeze(0), w.t(), scale_a=2.0)
    with pytest.raises(TypeError, match="one dtype"):
        gemmlab.matmul(a, w.t().to(torch.float8_e5m2))
    with pytest.raises(ValueError, match="CPU kernel"):
        gemmlab.matmul(a.float().numpy(), w.t().float().numpy(), kernel="cpu_naive", scale_a=2.0)


def test_numbers_fold_into_alpha(torch):
    from gemmlab.api.call import fold_scales

    t = torch.ones(1)
    assert fold_scales(2.0, 0.5, 3.0) == (3.0, None, None)
    alpha, sa, sb = fold_scales(2.0, t, 0.25)
    assert alpha == 0.5 and sa is t and sb is None


def test_rung_15_takes_8_bit_inputs_with_b_k_major_only():
    c = explain_choice("float8_e4m3fn", shape=(4096, 4096, 4096), cc=(9, 0), sm_count=132, b_kmajor=True)
    assert c.spec.name == "wgmma" and c.params["A_TYPE"] == 5 and c.params["B_LAYOUT"] == 2
    assert c.params["C_TYPE"] == formats.C_TYPES["bfloat16"]                # bf16 out by default
    with pytest.raises(ValueError, match="K-major"):
        explain_choice("e5m2", shape=(4096, 4096, 4096), cc=(9, 0), sm_count=132, b_kmajor=False)
    with pytest.raises(TypeError, match="no GPU kernel"):
        explain_choice("e4m3", shape=(4096, 4096, 4096), cc=(8, 0), sm_count=108, b_kmajor=True)
    spec = gemmlab.kernels()[14]
    assert spec.name == "wgmma"
    assert spec.problems({**spec.defaults, "A_TYPE": 5, "B_LAYOUT": 2, "BN": 192})      # 192 is 16-bit only
    assert not spec.problems({**spec.defaults, "A_TYPE": 6, "B_LAYOUT": 2})


@pytest.mark.parametrize("granularity, scale_shape", [("tensor", (1, 1)), ("row", (37, 1)), ("col", (1, 300)),
                                                      ("1x128", (37, 3)), ("128x128", (1, 3))])
@pytest.mark.parametrize("dtype, bound", [("e4m3", 2**-4), ("e5m2", 2**-3)])
def test_quantize_round_trip(granularity, scale_shape, dtype, bound, torch):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 300, generator=g) * torch.logspace(-2, 2, 300).reshape(1, -1)
    q, s = gemmlab.quantize(x, dtype, granularity)
    assert q.dtype == getattr(torch, formats.dtype_label(dtype)) and tuple(s.shape) == scale_shape
    assert s.dtype == torch.float32
    back = gemmlab.dequantize(q, s)
    # every element within the format's half-step of its own magnitude, or of the slice's smallest normal
    top = {"e4m3": 448.0, "e5m2": 57344.0}[dtype]
    tiny = {"e4m3": 2.0**-6, "e5m2": 2.0**-14}[dtype]
    err = (back - x).abs()
    from gemmlab.api.quantize import _expand

    assert bool((err <= bound * x.abs() + tiny * _expand(s, x.shape)).all())
    assert float(q.float().abs().max()) == top            # the largest element lands on the format's top


def test_quantize_refuses_what_no_scale_represents(torch):
    with pytest.raises(ValueError, match="NaN"):
        gemmlab.quantize(torch.tensor([[1.0, float("nan")]]))
    with pytest.raises(ValueError, match="granularity"):
        gemmlab.quantize(torch.ones(2, 2), "e4m3", "block")  # the blocks are named by their shape
    with pytest.raises(ValueError, match="8-bit float"):
        gemmlab.quantize(torch.ones(2, 2), "bfloat16")
    with pytest.raises(ValueError, match="2-D"):
        gemmlab.quantize(torch.ones(4))
    q, s = gemmlab.quantize(torch.zeros(3, 4), "e4m3", "row")
    assert bool((s == 1).all()) and bool((q.float() == 0).all())


def test_the_operator_traces_with_a_fake(torch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    from gemmlab.torch.ops import scaled_matmul_op

    with FakeTensorMode():
        a = torch.empty(64, 256, dtype=torch.float8_e4m3fn)
        b = torch.empty(128, 256, dtype=torch.float8_e4m3fn).t()
        y = scaled_matmul_op(a, b, torch.empty(64, 1), None, None, None, None, 1.0, 0.0, None, None, "auto", "")
        assert tuple(y.shape) == (64, 128) and y.dtype == torch.bfloat16
        y = scaled_matmul_op(a, b, None, None, None, None, None, 1.0, 0.0, "silu", torch.float32, "auto", "")
        assert y.dtype == torch.float32


def test_the_8_bit_bench_refuses_by_name():
    """gemmlab bench --dtype e4m3 times 8-bit products against torch._scaled_mm (bench.fp8; GPU and torch);
    what it cannot take is refused in one line before any GPU work, and sweeps send 8-bit formats there."""
    from typer.testing import CliRunner

    from gemmlab.bench import fp8
    from gemmlab.cli import app

    run = CliRunner().invoke
    res = run(app, ["bench", "--dtype", "e4m3", "--scales", "cube"])
    assert res.exit_code != 0 and "--scales 'cube' is not one of tensor, row, block" in res.output
    res = run(app, ["bench", "--dtype", "e5m2", "--shape", "64x64x30"])
    assert res.exit_code != 0 and "K = 30" in res.output and "multiple of 16" in res.output
    res = run(app, ["bench", "--scales", "row"])
    assert res.exit_code != 0 and "--scales goes with an 8-bit --dtype" in res.output
    res = run(app, ["sweep", "--dtype", "e4m3"])
    assert res.exit_code != 0 and "sweeps do not time e4m3" in res.output and "gemmlab bench --dtype" in res.output
    with pytest.raises(ValueError, match="M, N and K must be positive"):
        fp8.Problem(0, 8, 16).check()
    with pytest.raises(ValueError, match="8-bit bench takes"):
        fp8.Problem(8, 8, 16, dtype="bfloat16").check()
    assert fp8.Problem(4096, 7168, 16384, "float8_e4m3fn", "block").describe() == \
        "4096 x 7168 x 16384 e4m3, scales per block"
