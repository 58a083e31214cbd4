"""GPU correctness of 8-bit products (rung 15, e4m3 / e5m2, sm_90a) against float64 products of the dequantized
inputs: every scale layout, both formats, every output type, shapes that are not multiples of the tile, the
split over K, the fused epilogue, the BLAS rule, poisoned outputs, and the refusals. Skipped on GPUs other
than sm_90."""

import math

import pytest

import gemmlab
from gemmlab.formats import FORMATS
from gemmlab.kernels import get

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
SPEC = get("wgmma")
FORMAT_OF = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
# K multiples of 16 (rows of 16 bytes for the copy engine, as torch._scaled_mm asks); the rest anything.
SHAPES = [(1, 16, 16), (64, 128, 128), (129, 264, 144), (1000, 1000, 1008), (7, 304, 4112), (300, 8, 64),
          (2048, 2048, 2048), (64, 4096, 8192), (130, 136, 16)]
LAYOUTS = [("tensor", "tensor"), ("row", "col"), ("tensor", "col"), ("row", "tensor"), ("number", "number"),
           (None, None)]


@pytest.fixture(autouse=True)
def _hopper_only():
    from gemmlab.runtime import device

    arch = device.device_info().arch
    if SPEC.target_arch(arch) is None:
        pytest.skip(f"8-bit products need sm_90a; this GPU is {arch}")


def _operands(m, n, k, dtype, gen):
    """A (M x K) and W (N x K) quantized per row, on the GPU, with their float64 dequantized values."""
    x = torch.randn(m, k, generator=gen, device="cuda") * 2.0
    w = torch.randn(n, k, generator=gen, device="cuda") * 0.5
    qa, sa = gemmlab.quantize(x, dtype, "row")
    qw, sw = gemmlab.quantize(w, dtype, "row")
    return qa, sa, qw, sw


def _scales(kind_a, kind_b, sa, sw):
    """The call's scale arguments for a layout, and the scales the reference multiplies (M x 1, 1 x N)."""
    def one(kind, s, side):
        if kind is None:
            return None, torch.ones_like(s[:1, :1] if side == "a" else s.t()[:1, :1])
        if kind == "number":
            v = float(s.flatten()[0])
            return v, torch.full((1, 1), v, device=s.device)
        if kind == "tensor":
            t = s.flatten()[:1].clone()
            return t, t.reshape(1, 1)
        return (s, s) if side == "a" else (s.t(), s.t())
    ga, ra = one(kind_a, sa, "a")
    gb, rb = one(kind_b, sw, "b")
    return ga, gb, ra, rb


def _reference(qa, qw, ra, rb):
    """(ra * A) @ (W^T * rb) in float64: ra M x 1 or 1 x 1, rb 1 x N or 1 x 1."""
    return (qa.double() * ra.double()) @ (qw.double().t() * rb.double())


def _rel(out, ref):
    ref = ref.double()
    return float((out.double() - ref).norm() / max(ref.norm(), 1e-30))


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("mnk", SHAPES, ids=lambda t: "x".join(map(str, t)))
def test_shapes_and_outputs_against_float64(dtype, mnk):
    m, n, k = mnk
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    qa, sa, qw, sw = _operands(m, n, k, dtype, gen)
    tol = FORMATS[FORMAT_OF[dtype]].verify_tol
    ref = _reference(qa, qw, sa, sw.t())
    for out_dtype in (None, "float16", "float32"):
        out = gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sw.t(), out_dtype=out_dtype)
        assert out.dtype == (torch.bfloat16 if out_dtype is None else getattr(torch, out_dtype))
        assert tuple(out.shape) == (m, n)
        err = _rel(out, ref)
        assert err <= tol, f"{dtype} -> {out_dtype} {m}x{n}x{k}: rel. error {err:.2e}"


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_every_scale_layout(layout):
    m, n, k = 520, 392, 712 + 8
    gen = torch.Generator(device="cuda").manual_seed(5)
    qa, sa, qw, sw = _operands(m, n, k, "float8_e4m3fn", gen)
    ga, gb, ra, rb = _scales(*layout, sa, sw)
    out = gemmlab.matmul(qa, qw.t(), scale_a=ga, scale_b=gb, out_dtype="float32")
    err = _rel(out, _reference(qa, qw, ra, rb))
    assert err <= 1e-3, f"{layout}: rel. error {err:.2e}"    # fp32 output: only the accumulation's error


def test_every_element_with_a_fused_epilogue_and_the_blas_rule():
    """act(alpha * (sa A)(sb B) + bias) + R, element by element, into a C poisoned with NaN; and beta * C."""
    m, n, k = 300, 264, 400
    gen = torch.Generator(device="cuda").manual_seed(11)
    qa, sa, qw, sw = _operands(m, n, k, "float8_e4m3fn", gen)
    bias = torch.randn(n, generator=gen, device="cuda")
    res = torch.randn(m, n, generator=gen, device="cuda").bfloat16()
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemmlab.matmul(qa, qw.t(), c, alpha=0.5, scale_a=sa, scale_b=sw.t(), bias=bias, activation="silu", residual=res)
    z = 0.5 * _reference(qa, qw, sa, sw.t()) + bias.double()
    ref = z * torch.sigmoid(z) + res.double()
    assert not torch.isnan(c).any()
    # Each element within 5 % of itself or of a tenth of the product's RMS: the tensor cores accumulate 8-bit
    # products in fewer bits than fp32, an absolute error of about 2e-3 x RMS, large against a small element.
    floor = 0.1 * float(ref.pow(2).mean().sqrt())
    diff = (c.double() - ref).abs() / (ref.abs() + floor)
    assert float(diff.max()) <= 5e-2, f"worst element {float(diff.max()):.2e}"
    c0 = torch.randn(m, n, generator=gen, device="cuda")
    c1 = c0.clone()
    gemmlab.matmul(qa, qw.t(), c1, alpha=2.0, beta=-1.0, scale_a=sa, scale_b=sw.t())
    assert _rel(c1, 2.0 * _reference(qa, qw, sa, sw.t()) - c0.double()) <= 1e-3


@pytest.mark.parametrize("params", [dict(BM=128, BN=128, CLUSTER=1), dict(BM=64, BN=128, SCHEDULE=2, HELD=2, STAGES=6),
                                    dict(BM=64, BN=128, SCHEDULE=2, HELD=2, STAGES=8, CLUSTER=1),
                                    dict(BM=64, BN=64, SCHEDULE=2, HELD=2, STAGES=8, CLUSTER=1),
                                    dict(BM=128, BN=64, STAGES=8, CLUSTER=1, SPLIT_K=2),
                                    dict(BM=128, BN=256, CLUSTER=2), dict(BM=64, BN=128, SCHEDULE=2, HELD=2, STAGES=6,
                                                                          SPLIT_K=4, CLUSTER=1),
                                    dict(BM=128, BN=256, STAGES=3, DEFER=0)], ids=str)
def test_tilings_and_the_split_over_k(params):
    for m, n, k in [(129, 264, 144), (520, 392, 1024), (256, 2100, 4096)]:
        gen = torch.Generator(device="cuda").manual_seed(m + n + k)
        qa, sa, qw, sw = _operands(m, n, k, "float8_e5m2", gen)
        out = gemmlab.matmul(qa, qw.t(), kernel="wgmma", scale_a=sa, scale_b=sw.t(), out_dtype="float32", **params)
        assert _rel(out, _reference(qa, qw, sa, sw.t())) <= 1e-3, (params, m, n, k)


def test_unaligned_rows_are_staged():
    m, n, k = 100, 200, 72   # rows of 72 bytes: copied into 128-byte rows first
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(m, k + 8, generator=gen, device="cuda")[:, 3:3 + k]
    qa, sa = gemmlab.quantize(x, "e4m3", "row")
    qa = torch.empty(m, k + 5, device="cuda", dtype=qa.dtype)[:, 5:].copy_(qa)   # an odd base address
    w = torch.randn(n, k, generator=gen, device="cuda")
    qw, sw = gemmlab.quantize(w, "e4m3", "row")
    out = gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sw.t(), out_dtype="float32")
    assert _rel(out, _reference(qa, qw, sa, sw.t())) <= 1e-3


def test_refusals_name_the_fault():
    gen = torch.Generator(device="cuda").manual_seed(1)
    qa, sa, qw, sw = _operands(64, 128, 256, "float8_e4m3fn", gen)
    with pytest.raises(ValueError, match="K-major"):
        gemmlab.matmul(qa, qw.t().contiguous(), scale_a=sa, scale_b=sw.t())   # B row-major
    with pytest.raises(ValueError, match=r"M x ceil\(K / 128\) = 64 x 2"):
        gemmlab.matmul(qa, qw.t(), scale_a=torch.ones(64, 3, device="cuda"), scale_b=sw.t())
    with pytest.raises(ValueError, match="PROMOTE = 1"):  # block scales need cooperative tiles of 128 rows
        gemmlab.matmul(qa, qw.t(), kernel="wgmma", scale_a=torch.ones(64, 2, device="cuda"), scale_b=sw.t(), BM=64,
                       SCHEDULE=2)
    with pytest.raises(ValueError, match="scale_b must be"):
        gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sw)                  # N x 1, not 1 x N
    with pytest.raises(TypeError, match="one dtype"):
        gemmlab.matmul(qa, qw.t().to(torch.float8_e5m2), scale_a=sa, scale_b=sw.t())
    with pytest.raises(ValueError, match="out_dtype"):
        gemmlab.matmul(qa, qw.t(), out_dtype="float8_e4m3fn")
    with pytest.raises(ValueError, match="one product"):
        gemmlab.matmul(qa.unsqueeze(0).expand(2, -1, -1), qw.t(), scale_a=2.0)


def test_repeat_calls_and_graph_capture():
    """The second call takes the cached plan (scales re-read each call: new values, same tensors); a CUDA
    graph replays the product with the scales' current values."""
    gen = torch.Generator(device="cuda").manual_seed(2)
    qa, sa, qw, sw = _operands(256, 512, 512, "float8_e4m3fn", gen)
    sb = sw.t().contiguous()
    first = gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb, out_dtype="float32")
    sa.mul_(2.0)
    second = gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb, out_dtype="float32")
    assert torch.allclose(second, 2 * first, rtol=1e-6, atol=0)
    out = torch.empty(256, 512, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gemmlab.matmul(qa, qw.t(), out, scale_a=sa, scale_b=sb)
    sa.mul_(0.5)
    g.replay()
    torch.cuda.synchronize()
    assert torch.allclose(out, first, rtol=1e-6, atol=0)
    assert math.isfinite(float(out.abs().max()))


def test_torch_compile_traces_the_8_bit_product():
    """Under torch.compile the product goes through torch.ops.gemmlab.scaled_matmul, whole graph, same result."""
    gen = torch.Generator(device="cuda").manual_seed(4)
    qa, sa, qw, sw = _operands(256, 384, 512, "float8_e4m3fn", gen)
    bias = torch.randn(384, generator=gen, device="cuda")

    def layer(x, xs, w, ws):
        return gemmlab.matmul(x, w.t(), scale_a=xs, scale_b=ws.t(), bias=bias, activation="gelu_tanh", alpha=0.5)

    eager = layer(qa, sa, qw, sw)
    compiled = torch.compile(layer, fullgraph=True)(qa, sa, qw, sw)
    assert compiled.dtype == torch.bfloat16
    assert torch.equal(compiled, eager)


# ------------------------------------------------------------------------------------------------ block scales

def _block_operands(m, n, k, dtype, gen, a_kind="1x128", b_kind="128x128"):
    """A quantized per 1 x 128 block (or `a_kind`), W per 128 x 128 block (or `b_kind`), with a spread of
    magnitudes along K so that the blocks' scales differ; the call's scales and the float64 reference."""
    x = torch.randn(m, k, generator=gen, device="cuda") * torch.logspace(-1, 1, k, device="cuda")
    w = torch.randn(n, k, generator=gen, device="cuda") * torch.logspace(1, -1, k, device="cuda")
    qa, sa = gemmlab.quantize(x, dtype, a_kind)
    qw, sw = gemmlab.quantize(w, dtype, b_kind)
    ref = gemmlab.dequantize(qa, sa).double() @ gemmlab.dequantize(qw, sw).double().t()
    return qa, sa, qw, sw.t(), ref


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("mnk", [(1, 16, 16), (64, 128, 256), (129, 264, 144), (1000, 1000, 1008), (7, 304, 4112),
                                 (300, 8, 64), (2048, 2048, 2048), (130, 136, 400)], ids=lambda t: "x".join(map(str, t)))
def test_block_scales_against_float64(dtype, mnk):
    """1 x 128 blocks of A, 128 x 128 of B (partial blocks at the edges of K and N), every output type,
    NaN-poisoned outputs; fp32 outputs within 1e-3 of the float64 product of the dequantized inputs."""
    m, n, k = mnk
    gen = torch.Generator(device="cuda").manual_seed(m + 5 * n + 7 * k)
    qa, sa, qw, sb, ref = _block_operands(m, n, k, dtype, gen)
    for out_dtype in ("float32", "bfloat16", "float16"):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
        gemmlab.matmul(qa, qw.t(), out, scale_a=sa, scale_b=sb)
        assert not torch.isnan(out).any(), (mnk, out_dtype)
        tol = 1e-3 if out_dtype == "float32" else FORMATS[FORMAT_OF[dtype]].verify_tol
        assert _rel(out, ref) <= tol, (dtype, mnk, out_dtype, _rel(out, ref))


@pytest.mark.parametrize("kinds", [("1x128", "128x128"), ("1x128", "tensor"), ("row", "128x128"),
                                   ("1x128", "col"), ("tensor", "128x128")], ids=str)
def test_block_scales_beside_the_other_kinds(kinds):
    """A block scale on one side and a scale per tensor, row or column on the other; and A's block scales in
    column-major order (strides read in place), B's as a contiguous copy of the transpose."""
    m, n, k = 520, 392, 1000
    gen = torch.Generator(device="cuda").manual_seed(17)
    a_kind, b_kind = kinds
    qa, sa, qw, sb, ref = _block_operands(m, n, k, "float8_e4m3fn", gen, a_kind, {"col": "row"}.get(b_kind, b_kind))
    out = gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb, out_dtype="float32")
    assert _rel(out, ref) <= 1e-3, (kinds, _rel(out, ref))
    if a_kind == "1x128":
        sa_cm = sa.t().contiguous().t()  # the same values, M-major
        out2 = gemmlab.matmul(qa, qw.t(), scale_a=sa_cm, scale_b=sb.contiguous(), out_dtype="float32")
        assert torch.equal(out, out2)


@pytest.mark.parametrize("params", [dict(), dict(CLUSTER=1), dict(CLUSTER=1, SPLIT_K=4), dict(STREAM_K=1),
                                    dict(DEFER=0), dict(STAGES=4), dict(BN=128, STREAM_K=1)], ids=str)
def test_block_scales_on_every_schedule(params):
    """Clusters of one and two, the split over K (each unit promotes its own steps), stream-K in parts, the
    deferred stores or not, 128- and 256-column tiles; shapes with several tiles per block and a partial last
    round."""
    from gemmlab.kernels.rungs import wgmma

    for m, n, k in [(129, 264, 1040), (1100, 1500, 2048), (4352, 512, 2048)]:
        gen = torch.Generator(device="cuda").manual_seed(m + n + k)
        qa, sa, qw, sb, ref = _block_operands(m, n, k, "float8_e5m2", gen)
        out = gemmlab.matmul(qa, qw.t(), kernel="wgmma", scale_a=sa, scale_b=sb, out_dtype="float32", **params)
        assert _rel(out, ref) <= 1e-3, (params, m, n, k, _rel(out, ref))
    p = {**SPEC.defaults, "A_TYPE": 5, "B_LAYOUT": 2, "BM": 128, "BN": 128, "STAGES": 6, "PROMOTE": 1, "STREAM_K": 1}
    assert wgmma.stream_k(4352, 512, 2048, {**p, "CLUSTER": 2}, 132)[1] >= 2  # (the parts are taken there)


def test_block_scales_keep_long_k_accurate():
    """The point of promoting each k step into fp32: at K = 16384 the error of an fp32 output stays at the
    accumulation's own (per 128-k step), where one scale per tensor lets the tensor cores' narrower sums grow."""
    m, n, k = 256, 512, 16384
    gen = torch.Generator(device="cuda").manual_seed(23)
    qa, sa, qw, sb, ref = _block_operands(m, n, k, "float8_e4m3fn", gen)
    err_block = _rel(gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb, out_dtype="float32"), ref)
    x = gemmlab.dequantize(qa, sa)
    w = gemmlab.dequantize(qw, sb.t())
    ta, tsa = gemmlab.quantize(x, "e4m3", "tensor")
    tw, tsw = gemmlab.quantize(w, "e4m3", "tensor")
    ref_t = (ta.double() * tsa.double()) @ (tw.double() * tsw.double()).t()
    err_tensor = _rel(gemmlab.matmul(ta, tw.t(), scale_a=tsa, scale_b=tsw, out_dtype="float32"), ref_t)
    assert err_block <= 2e-4 and err_block < err_tensor, (err_block, err_tensor)


def test_block_scales_with_the_epilogue_repeat_calls_and_a_graph():
    """act(alpha (A B) + bias) + R element by element into NaN-poisoned C; new scale values on a repeat call
    (the cached plan reads them again) and in a captured graph's replay."""
    m, n, k = 300, 264, 1000
    gen = torch.Generator(device="cuda").manual_seed(29)
    qa, sa, qw, sb, ref = _block_operands(m, n, k, "float8_e4m3fn", gen)
    bias = torch.randn(n, generator=gen, device="cuda")
    res = torch.randn(m, n, generator=gen, device="cuda").bfloat16()
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemmlab.matmul(qa, qw.t(), c, alpha=0.5, scale_a=sa, scale_b=sb, bias=bias, activation="gelu_tanh", residual=res)
    ref_c = torch.nn.functional.gelu(0.5 * ref + bias.double(), approximate="tanh") + res.double()
    floor = 0.1 * float(ref_c.pow(2).mean().sqrt())
    assert float(((c.double() - ref_c).abs() / (ref_c.abs() + floor)).max()) <= 5e-2
    first = gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb, out_dtype="float32")
    sa.mul_(2.0)
    second = gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb, out_dtype="float32")
    assert torch.allclose(second, 2 * first, rtol=1e-6, atol=0)
    out = torch.empty(m, n, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gemmlab.matmul(qa, qw.t(), out, scale_a=sa, scale_b=sb)
    sa.mul_(0.5)
    g.replay()
    torch.cuda.synchronize()
    assert torch.allclose(out, first, rtol=1e-6, atol=0)



@pytest.mark.parametrize("scales", ["tensor", "row", "block"])
def test_the_8_bit_bench_verifies_and_times_each_call(scales):
    """bench.fp8 (gemmlab bench --dtype e4m3): every call checked against its own dequantized float64 product,
    then timed; block scales beside gemmlab's and torch's per-tensor products."""
    from gemmlab.bench import fp8

    res = fp8.measure(fp8.Problem(512, 384, 1024, "float8_e4m3fn", scales), budget_ms=20)
    labels = [r.label for r in res.records]
    assert len(labels) == (3 if scales == "block" else 2), labels
    for r in res.records:
        assert r.ok and r.rel_error <= r.verify_tol and r.median_ms > 0 and r.tflops > 0, (r.label, r.status, r.note)
    assert any(r.kernel == fp8.SCALED_MM for r in res.records)
