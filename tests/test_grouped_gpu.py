"""GPU correctness of grouped products (gemmlab.grouped_matmul, rung 15's BATCHED 2): every element of every
group against a float64 reference, outputs poisoned with NaN first; group sizes uniform, skewed, empty and not
multiples of the tile; B row-major and given as W.transpose(1, 2); the contiguous layout (offsets on the GPU or
the host) and the masked one (counts); a bias per group or shared, each activation; 8-bit inputs with scales
per tensor, per row and per group; rows that no group owns left as they were; CUDA graphs replaying new
counts; torch._grouped_mm beside it where this torch has it.

Per-element bound, as in test_batched_gpu: |out - ref| <= u_out |ref| + e (|A| |B|)_ij + tiny, e = 1e-5 for
fp32 accumulation of exact inputs (2^-9 for 8-bit products, which Hopper sums in fewer bits). A row of the
wrong group, a wrong expert's weights or a missed store is off by about |ref|, far outside it.
"""

import numpy as np
import pytest

import gemmlab
from gemmlab.api.call import _activate
from gemmlab.runtime import device

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not (device.gpu_available() and device.device_info().compute_capability >= (9, 0)):
    pytest.skip("grouped products run on rung 15 (sm_90)", allow_module_level=True)

UNIT = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}


def _rand(shape, dtype, gen):
    return (torch.rand(shape, generator=gen, device="cuda") * 2 - 1).to(getattr(torch, dtype))


def _f64(x):
    return x.double().cpu().numpy()


def _reference(a, b, spans, bias=None, activation=None, alpha=1.0, rows_scale=None, group_scale=None):
    """float64 out and |A| |B| per owned row, NaN elsewhere; spans: (group, first row, rows)."""
    a64, b64 = a, b
    ref = np.full((a64.shape[0], b64.shape[2]), np.nan)
    mag = np.full_like(ref, np.nan)
    for g, r0, rows in spans:
        if rows == 0:
            continue
        x = a64[r0:r0 + rows]
        z = alpha * (x @ b64[g])
        if rows_scale is not None:
            z = z * rows_scale[r0:r0 + rows, None]
        if group_scale is not None:
            z = z * group_scale[g]
        if bias is not None:
            z = z + (bias[g] if bias.ndim == 2 else bias)
        ref[r0:r0 + rows] = _activate(z, activation)  # the CPU path's float64 epilogue
        m = np.abs(x) @ np.abs(b64[g]) * abs(alpha)
        if rows_scale is not None:
            m = m * np.abs(rows_scale[r0:r0 + rows, None])
        if group_scale is not None:
            m = m * np.abs(group_scale[g])
        mag[r0:r0 + rows] = m
    return ref, mag


def _check(out, ref, mag, out_dtype, eps, what):
    c = _f64(out).reshape(ref.shape)
    owned = ~np.isnan(ref)
    assert np.isfinite(c[owned]).all(), f"{what}: {np.count_nonzero(~np.isfinite(c[owned]))} non-finite owned elements"
    bound = UNIT[out_dtype] * np.abs(ref) + eps * mag + 1e-30
    bad = owned & ~(np.abs(c - ref) <= bound)
    if bad.any():
        idx = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {bad.sum()} of {owned.sum()} elements off; first {idx}: {c[idx]} against "
                             f"{ref[idx]} (bound {bound[idx]:.2e})")
    return c


def _spans_of_sizes(sizes):
    out, r = [], 0
    for g, s in enumerate(sizes):
        out.append((g, r, s))
        r += s
    return out


@pytest.fixture
def gen():
    g = torch.Generator(device="cuda")
    g.manual_seed(31)
    return g


SIZES = {"uniform": [256, 256, 256, 256], "skewed": [0, 1, 300, 0, 17, 640, 129, 3], "one": [200],
         "empty_ends": [0, 0, 130, 0], "many": [5, 64, 0, 128, 1, 70, 0, 0, 33, 200, 7, 100, 0, 2, 250, 9] * 3}


@pytest.mark.parametrize("sizes", list(SIZES), ids=str)
@pytest.mark.parametrize("dtype,kn,layout", [("bfloat16", (128, 256), "kmajor"), ("bfloat16", (200, 300), "rows"),
                                             ("float16", (384, 128), "kmajor"), ("bfloat16", (1000, 520), "rows"),
                                             ("bfloat16", (64, 1000), "kmajor")], ids=str)
def test_grouped_products_match_float64(sizes, dtype, kn, layout, gen):
    k, n = kn
    sizes = SIZES[sizes]
    g = len(sizes)
    t = sum(sizes) + 5  # five rows past the last group: no group owns them
    a = _rand((t, k), dtype, gen)
    w = _rand((g, n, k), dtype, gen)
    b = w.transpose(1, 2) if layout == "kmajor" else w.transpose(1, 2).contiguous()
    ends = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device="cuda")
    out = torch.full((t, n), float("nan"), dtype=getattr(torch, dtype), device="cuda")
    res = gemmlab.grouped_matmul(a, b, ends, out=out)
    assert res is out
    ref, mag = _reference(_f64(a), _f64(b), _spans_of_sizes(sizes))
    c = _check(out, ref, mag, dtype, 1e-5, f"{dtype} {sizes} K={k} N={n} {layout}")
    assert np.isnan(c[sum(sizes):]).all(), "rows past the last group were written"
    # a new output, offsets from the host, and a repeat call (the cached plan) with other values
    again = gemmlab.grouped_matmul(a * 0.5, b, list(np.cumsum(sizes)))
    _check(again, ref * 0.5, mag * 0.5, dtype, 1e-5, "repeat call, host offsets")


@pytest.mark.parametrize("activation", [None, "relu", "gelu_tanh", "gelu_erf", "silu"])
@pytest.mark.parametrize("per_group", [True, False])
def test_grouped_epilogue_per_group(activation, per_group, gen):
    sizes = [130, 0, 256, 77, 300]
    g, k, n = len(sizes), 256, 384
    a = _rand((sum(sizes), k), "bfloat16", gen)
    b = _rand((g, n, k), "bfloat16", gen).transpose(1, 2)
    bias = torch.randn((g, n) if per_group else (n,), generator=gen, device="cuda")
    ends = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device="cuda")
    out = gemmlab.grouped_matmul(a, b, ends, bias=bias, activation=activation, alpha=0.75)
    ref, mag = _reference(_f64(a), _f64(b), _spans_of_sizes(sizes), _f64(bias), activation, 0.75)
    _check(out, ref, mag + 1e-6, "bfloat16", 1e-5, f"{activation} per_group={per_group}")


@pytest.mark.parametrize("room,counts", [(128, [128, 0, 5, 127]), (200, [1, 200, 199, 0, 64, 65, 3, 100]),
                                         (64, [64] * 12)], ids=str)
def test_masked_layout(room, counts, gen):
    g, k, n = len(counts), 512, 256
    a = _rand((g, room, k), "bfloat16", gen)
    b = _rand((g, n, k), "bfloat16", gen).transpose(1, 2)
    cnt = torch.tensor(counts, dtype=torch.int32, device="cuda")
    out = torch.full((g, room, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    gemmlab.grouped_matmul(a, b, counts=cnt, out=out, activation="silu")
    spans = [(i, i * room, c) for i, c in enumerate(counts)]
    ref, mag = _reference(_f64(a).reshape(g * room, k), _f64(b), spans, activation="silu")
    c = _check(out, ref, mag, "bfloat16", 1e-5, f"masked {room} {counts}")
    for i, cn in enumerate(counts):
        assert np.isnan(c.reshape(g, room, n)[i, cn:]).all(), f"group {i}: rows past its count were written"


def test_masked_layout_replays_new_counts_in_a_cuda_graph(gen):
    g, room, k, n = 8, 64, 256, 512
    a = _rand((g, room, k), "bfloat16", gen)
    b = _rand((g, n, k), "bfloat16", gen).transpose(1, 2)
    cnt = torch.tensor([3, 0, 64, 10, 1, 0, 33, 7], dtype=torch.int32, device="cuda")
    out = torch.zeros((g, room, n), dtype=torch.bfloat16, device="cuda")
    gemmlab.grouped_matmul(a, b, counts=cnt, out=out)  # the plan and the kernel exist before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gemmlab.grouped_matmul(a, b, counts=cnt, out=out)
    for counts in ([64] * 8, [0, 1, 2, 3, 4, 5, 6, 7], [17, 64, 0, 0, 9, 40, 2, 63]):
        out.fill_(float("nan"))
        cnt.copy_(torch.tensor(counts, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        spans = [(i, i * room, c) for i, c in enumerate(counts)]
        ref, mag = _reference(_f64(a).reshape(g * room, k), _f64(b), spans)
        _check(out, ref, mag, "bfloat16", 1e-5, f"graph replay with counts {counts}")


def test_offsets_out_of_order_on_the_gpu_stay_inside_the_arrays(gen):
    """Ends on the GPU are not checked on the host: a decreasing end is taken as the one before it and ends
    past T as T, so nothing outside A and C is touched, and the groups that are well formed are right."""
    t, k, n = 300, 128, 256
    a = _rand((t, k), "bfloat16", gen)
    b = _rand((4, n, k), "bfloat16", gen).transpose(1, 2)
    ends = torch.tensor([100, 50, 250, 10**6], dtype=torch.int32, device="cuda")
    out = gemmlab.grouped_matmul(a, b, ends)
    torch.cuda.synchronize()
    ref, mag = _reference(_f64(a), _f64(b), [(0, 0, 100), (1, 100, 0), (2, 100, 150), (3, 250, 50)])
    _check(out, ref, mag, "bfloat16", 1e-5, "clamped ends")


@pytest.mark.parametrize("scales", ["tensor", "row_group", "row_column"])
def test_grouped_8_bit(scales, gen):
    sizes = [256, 0, 129, 300, 64]
    g, k, n = len(sizes), 512, 384
    t = sum(sizes)
    a = _rand((t, k), "bfloat16", gen).to(torch.float8_e4m3fn)
    b = _rand((g, n, k), "bfloat16", gen).to(torch.float8_e4m3fn).transpose(1, 2)
    ends = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device="cuda")
    if scales == "tensor":
        sa, sb = torch.tensor([0.5], device="cuda"), 2.0
        rows, per_group = np.full(t, 0.5), np.full((g, n), 2.0)
    elif scales == "row_group":
        sa = torch.rand((t, 1), generator=gen, device="cuda") + 0.5
        sb = torch.rand((g,), generator=gen, device="cuda") + 0.5
        rows, per_group = _f64(sa).reshape(-1), np.repeat(_f64(sb)[:, None], n, axis=1)
    else:
        sa = torch.rand((t,), generator=gen, device="cuda") + 0.5
        sb = torch.rand((g, n), generator=gen, device="cuda") + 0.5
        rows, per_group = _f64(sa), _f64(sb)
    out = gemmlab.grouped_matmul(a, b, ends, scale_a=sa, scale_b=sb, out_dtype="float32")
    ref, mag = _reference(_f64(a), _f64(b), _spans_of_sizes(sizes), rows_scale=rows, group_scale=per_group)
    _check(out, ref, mag, "float32", 2.0**-9, f"e4m3 scales {scales}")


def test_against_torch_grouped_mm(gen):
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no _grouped_mm")
    sizes = [128, 0, 384, 200, 56]
    g, k, n = len(sizes), 1024, 768
    a = _rand((sum(sizes), k), "bfloat16", gen)
    w = _rand((g, n, k), "bfloat16", gen)
    ends = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device="cuda")
    ours = gemmlab.grouped_matmul(a, w.transpose(1, 2), ends)
    theirs = torch._grouped_mm(a, w.transpose(1, 2), offs=ends)
    ref, mag = _reference(_f64(a), _f64(w.transpose(1, 2)), _spans_of_sizes(sizes))
    _check(ours, ref, mag, "bfloat16", 1e-5, "gemmlab")
    _check(theirs, ref, mag, "bfloat16", 1e-5, "torch._grouped_mm")


def test_bad_calls_name_what_is_wrong(gen):
    a = _rand((100, 64), "bfloat16", gen)
    b = _rand((4, 64, 128), "bfloat16", gen)
    ends = torch.tensor([10, 20, 30, 100], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="exactly one of offsets"):
        gemmlab.grouped_matmul(a, b)
    with pytest.raises(ValueError, match="one integer per group"):
        gemmlab.grouped_matmul(a, b, ends[:3])
    with pytest.raises(ValueError, match="must not decrease"):
        gemmlab.grouped_matmul(a, b, [10, 5, 30, 100])
    with pytest.raises(ValueError, match="inner dimensions"):
        gemmlab.grouped_matmul(a, _rand((4, 65, 128), "bfloat16", gen), ends)
    with pytest.raises(ValueError, match="bias must be"):
        gemmlab.grouped_matmul(a, b, ends, bias=torch.zeros(3, 128, device="cuda"))
    with pytest.raises(TypeError, match="one dtype"):
        gemmlab.grouped_matmul(a, b.half(), ends)
    with pytest.raises(ValueError, match="out must be"):
        gemmlab.grouped_matmul(a, b, ends, out=torch.empty(100, 127, dtype=torch.bfloat16, device="cuda"))


def test_torch_compile_traces_the_operator(gen):
    sizes = [100, 0, 300, 28]
    g, k, n = len(sizes), 256, 384
    a = _rand((sum(sizes), k), "bfloat16", gen)
    w = _rand((g, n, k), "bfloat16", gen)
    bias = torch.randn(g, n, generator=gen, device="cuda")
    ends = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device="cuda")

    def layer(x, ends):
        return gemmlab.grouped_matmul(x, w.transpose(1, 2), ends, bias=bias, activation="silu") * 2

    compiled = torch.compile(layer, fullgraph=True)
    got = compiled(a, ends)
    ref, mag = _reference(_f64(a), _f64(w.transpose(1, 2)), _spans_of_sizes(sizes), _f64(bias), "silu")
    _check(got, ref * 2, mag * 2 + 1e-6, "bfloat16", 1e-5, "torch.compile")
    with torch.no_grad():
        again = compiled(a * 0.5, ends)  # (new values, the same graph)
    assert torch.equal(again, layer(a * 0.5, ends))


@pytest.mark.parametrize("params", [dict(BM=64, BN=64, SCHEDULE=2, HELD=2, STAGES=12, CLUSTER=1),
                                    dict(BM=128, BN=64, CLUSTER=2)], ids=str)
@pytest.mark.parametrize("layout", ["kmajor", "rows"])
def test_grouped_64_column_tiles(params, layout, gen):
    """64-column tiles over groups of every size (empty ones and ones under a tile among them), N off the tile."""
    sizes = SIZES["many"]
    g, k, n = len(sizes), 320, 200
    t = sum(sizes)
    a = _rand((t, k), "bfloat16", gen)
    w = _rand((g, n, k), "bfloat16", gen)
    b = w.transpose(1, 2) if layout == "kmajor" else w.transpose(1, 2).contiguous()
    out = torch.full((t, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    gemmlab.grouped_matmul(a, b, list(np.cumsum(sizes)), out=out, activation="relu", kernel="wgmma", **params)
    ref, mag = _reference(_f64(a), _f64(b), _spans_of_sizes(sizes), activation="relu")
    _check(out, ref, mag, "bfloat16", 1e-5, f"64-column tiles {params} {layout}")
