"""GPU correctness: every rung x the shape suite x (alpha, beta), against a float64 reference.

Fresh random inputs for every case; C is poisoned with NaN before each run so an element the kernel
does not write fails; the whole output is checked (a NaN anywhere fails), and the error must be
||C - ref|| / ||ref|| < 1e-5.
"""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import gemmlab
from gemmlab import api
from gemmlab.kernels import get, specs_for_dtype
from shapes import ALPHA_BETA, DEGENERATE, gpu_suite

pytestmark = pytest.mark.gpu
TOL = 1e-5
FP32 = specs_for_dtype("float32")  # the fp32 ladder (tensor-core rungs: tests/test_tensor_gpu.py)


def _cp():
    import cupy

    return cupy


def _rel(c, ref, scale=None):
    """The error's norm over the reference's, or over `scale`'s: the magnitudes fp32 sums carry (|alpha| |A||B|
    + |beta| |C|), which bound the error where alpha A B and beta C cancel (1 x 1 x 1 with a beta)."""
    c = np.asarray(c, dtype=np.float64)
    assert np.isfinite(c).all(), f"{np.count_nonzero(~np.isfinite(c))} non-finite elements"
    den = np.linalg.norm(ref if scale is None else scale)
    return np.linalg.norm(c - ref) / den if den else np.linalg.norm(c)


def _case(rng, m, n, k):
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    c = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    return a, b, c


def _check(kernel, params, m, n, k, alpha, beta, rng):
    cp = _cp()
    a, b, c0 = _case(rng, m, n, k)
    ref = alpha * (a.astype(np.float64) @ b.astype(np.float64)) + beta * c0.astype(np.float64)
    da, db = cp.asarray(a), cp.asarray(b)
    dc = cp.asarray(c0) if beta != 0 else cp.full((m, n), cp.nan, dtype=cp.float32)
    out = gemmlab.matmul(da, db, dc, alpha=alpha, beta=beta, kernel=kernel, **params)
    assert out is dc
    scale = abs(alpha) * (np.abs(a).astype(np.float64) @ np.abs(b)) + abs(beta) * np.abs(c0)
    err = _rel(dc.get(), ref, scale)
    assert err < TOL, f"{kernel} {params} {m}x{n}x{k} alpha={alpha} beta={beta}: rel. error {err:.2e}"


def _three_runs(params, m, n, k, rng):
    """sgemm with `params` three times on one problem (C = 0.5 A B - 2 C): the three results and the float64
    reference, for tests of split-K's sums (right, and the same bits every run)."""
    cp = _cp()
    a, b, c0 = _case(rng, m, n, k)
    ref = 0.5 * (a.astype(np.float64) @ b.astype(np.float64)) - 2.0 * c0
    da, db = cp.asarray(a), cp.asarray(b)
    outs = []
    for _ in range(3):
        dc = cp.asarray(c0)
        gemmlab.matmul(da, db, dc, alpha=0.5, beta=-2.0, kernel="sgemm", **params)
        outs.append(dc.get())
    return outs, ref


def _callable(params, spec=None):
    """`params` without the type parameters, which a call sets from its arrays and refuses from the caller."""
    spec = spec or get("sgemm")
    return {name: v for name, v in params.items() if name not in spec.type_params}


def _variants(spec):
    """Defaults plus a few other valid parameter sets, so non-default tiles are exercised too (without the
    type parameters, which a call sets from its arrays and refuses from the caller)."""
    space = spec.search_space()
    picks = [spec.defaults] + space[:: max(1, len(space) // 3)][:3]
    out = []
    for p in picks:
        p = _callable(p, spec)
        if p not in out:
            out.append(p)
    return out


@pytest.mark.parametrize("spec", FP32, ids=lambda s: s.name)
@pytest.mark.parametrize("mnk", gpu_suite(), ids=lambda t: "x".join(map(str, t)))
def test_rung_shape_suite(spec, mnk, rng):
    m, n, k = mnk
    for alpha, beta in ALPHA_BETA:
        _check(spec.name, {}, m, n, k, alpha, beta, rng)


@pytest.mark.parametrize("spec", FP32, ids=lambda s: s.name)
def test_rung_parameter_variants(spec, rng):
    for p in _variants(spec):
        for m, n, k in [(129, 67, 33), (64, 64, 64), (1, 300, 17)]:
            _check(spec.name, p, m, n, k, 1.25, 0.5, rng)


@pytest.mark.parametrize("spec", FP32, ids=lambda s: s.name)
@pytest.mark.parametrize("mnk", DEGENERATE)
def test_degenerate_sizes(spec, mnk, rng):
    cp = _cp()
    m, n, k = mnk
    c = cp.asarray(rng.uniform(-1, 1, (m, n)).astype(np.float32))
    want = 0.5 * c.get()
    out = gemmlab.matmul(cp.ones((m, k), cp.float32), cp.ones((k, n), cp.float32), c, beta=0.5, kernel=spec.name)
    if k == 0:
        np.testing.assert_allclose(out.get(), want)
    assert out.shape == (m, n)


def test_numpy_in_numpy_out(rng):
    a, b, _ = _case(rng, 70, 50, 30)
    out = gemmlab.matmul(a, b)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    assert _rel(out, a.astype(np.float64) @ b) < TOL


def test_numpy_c_is_updated_in_place(rng):
    a, b, c = _case(rng, 33, 65, 17)
    ref = 2 * (a.astype(np.float64) @ b) - c
    out = gemmlab.matmul(a, b, c, alpha=2.0, beta=-1.0)
    assert out is c and _rel(c, ref) < TOL


def test_cupy_in_cupy_out_without_copies(rng):
    cp = _cp()
    a, b, _ = _case(rng, 100, 80, 60)
    out = gemmlab.matmul(cp.asarray(a), cp.asarray(b))
    assert isinstance(out, cp.ndarray)
    assert _rel(out.get(), a.astype(np.float64) @ b) < TOL


def test_torch_in_torch_out(rng):
    torch = pytest.importorskip("torch")
    a, b, c = _case(rng, 65, 33, 129)
    ta, tb, tc = (torch.from_numpy(x).cuda() for x in (a, b, c))
    out = gemmlab.matmul(ta, tb)
    assert isinstance(out, torch.Tensor) and out.is_cuda
    assert _rel(out.cpu().numpy(), a.astype(np.float64) @ b) < TOL
    out2 = gemmlab.matmul(ta, tb, tc, beta=1.0)
    assert out2 is tc
    assert _rel(tc.cpu().numpy(), a.astype(np.float64) @ b + c) < TOL


def test_strided_and_transposed_views(rng):
    cp = _cp()
    big = cp.asarray(rng.uniform(-1, 1, (200, 300)).astype(np.float32))
    a = big[10:110, 5:70]          # rows spaced by 300: used in place with lda = 300
    b = big[:65, 100:180]
    bt = cp.asarray(rng.uniform(-1, 1, (80, 65)).astype(np.float32)).T  # column-major: copied
    for bb in (b, bt):
        out = gemmlab.matmul(a, bb, kernel="blocktile_2d")
        assert _rel(out.get(), a.get().astype(np.float64) @ bb.get()) < TOL
    # C as a strided view is written in place, leaving the rest of its base untouched.
    base = cp.full((120, 120), 7.0, dtype=cp.float32)
    cv = base[::2, 10:90]
    gemmlab.matmul(a[:60], b, cv, kernel="smem_tiled")
    assert _rel(cv.get(), a[:60].get().astype(np.float64) @ b.get()) < TOL
    assert float(base[1::2].sum()) == 7.0 * base[1::2].size


def test_beta_zero_never_reads_c(rng):
    cp = _cp()
    a, b, _ = _case(rng, 40, 40, 40)
    c = cp.full((40, 40), cp.nan, dtype=cp.float32)
    for spec in FP32:
        gemmlab.matmul(cp.asarray(a), cp.asarray(b), c, beta=0.0, kernel=spec.name)
        assert bool(cp.isfinite(c).all()), spec.name


def test_overlapping_c_is_refused(rng):
    cp = _cp()
    x = cp.asarray(rng.uniform(-1, 1, (64, 64)).astype(np.float32))
    with pytest.raises(ValueError, match="shares memory"):
        gemmlab.matmul(x, x, x)


def test_host_and_device_mixed_is_refused(rng):
    cp = _cp()
    a, b, _ = _case(rng, 8, 8, 8)
    with pytest.raises(TypeError, match="all be host arrays or all device arrays"):
        gemmlab.matmul(a, cp.asarray(b))


HOST_COST_SCRIPT = """
import gc, sys, time
import cupy as cp
import numpy as np
import gemmlab

rng = np.random.default_rng(0)
a = cp.asarray(rng.uniform(-1, 1, (64, 64)).astype(np.float32))
b = cp.asarray(rng.uniform(-1, 1, (64, 64)).astype(np.float32))
c = cp.empty((64, 64), dtype=cp.float32)
for _ in range(50):
    gemmlab.matmul(a, b, c, kernel="smem_tiled")
cp.cuda.Device().synchronize()
per_call = []
gc.collect()
gc.disable()
for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(200):
        gemmlab.matmul(a, b, c, kernel="smem_tiled")
    per_call.append((time.perf_counter() - t0) / 200)
    cp.cuda.Device().synchronize()
print(min(per_call) * 1e6)
"""


def test_host_overhead_under_20us(tmp_path):
    """Once compiled, a call on device arrays costs the host < 20 µs (small problems are not Python-bound).

    Measured in a fresh process: a user's process, not one that has run hundreds of tests and holds their
    modules, plans and memory pools."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", HOST_COST_SCRIPT], env=env, capture_output=True, text=True, check=True)
    best = float(out.stdout.split()[-1])
    print(f"host cost per matmul call: {best:.1f} us")
    assert best < 20, f"{best:.1f} us per call"


def test_first_compile_and_launch_under_a_second_and_cached_for_the_next_process(tmp_path):
    env = dict(os.environ, GEMMLAB_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=os.pathsep.join(sys.path))
    code = (
        "import time, cupy as cp, gemmlab\n"
        "from gemmlab import api\n"
        "a = cp.ones((256, 256), cp.float32); cp.cuda.Device().synchronize()\n"
        "t = time.perf_counter(); gemmlab.matmul(a, a, kernel='blocktile_2d'); cp.cuda.Device().synchronize()\n"
        "dt = time.perf_counter() - t\n"
        "p = api.prepare(api.registry.get('blocktile_2d'))\n"
        "print(f'{dt:.3f}', p.compile_seconds > 0)\n"
    )
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
    print(f"first compile + launch {first[0]} s, from the cache {second[0]} s")
    assert float(first[0]) < 1.0 and first[1] == "True"
    assert second[1] == "False", "the second process compiled again instead of using the disk cache"


def test_auto_runs_the_top_rung(rng):
    a, b, _ = _case(rng, 50, 50, 50)
    assert api.choose_kernel().name == FP32[-1].name
    assert _rel(gemmlab.matmul(a, b, kernel="auto"), a.astype(np.float64) @ b) < TOL


def test_cublas_peer_is_strict_fp32(rng):
    cp = _cp()
    from gemmlab.bench.peers import cublas_sgemm

    a, b, c = _case(rng, 513, 257, 1031)
    da, db, dc = cp.asarray(a), cp.asarray(b), cp.asarray(c)
    cublas_sgemm(da, db, dc, alpha=0.5, beta=2.0)
    ref = 0.5 * (a.astype(np.float64) @ b) + 2.0 * c
    assert _rel(dc.get(), ref) < TOL  # TF32 would give ~1e-3


@pytest.mark.parametrize("mnk,split", [((67, 45, 3001), 4), ((33, 17, 20), 8), ((64, 64, 65536), 32), ((130, 260, 4099), 2),
                                       ((70, 130, 5000), 12), ((64, 64, 131072), 128), ((65, 67, 300), 64)])
def test_split_k_is_correct_and_deterministic(mnk, split, rng):
    """Slices of K summed in groups of up to eight, then the group sums (the last block of each group, then of
    each tile): right, with groups of unequal size (12 = 8 + 4), with more slices than steps of K (empty
    slices), and the same bits on every run."""
    m, n, k = mnk
    p = dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, SPLIT_K=split)
    outs, ref = _three_runs(p, m, n, k, rng)
    assert _rel(outs[0], ref) < TOL
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


@pytest.mark.parametrize("mnk,split,c_stage", [
    ((67, 45, 3001), 4, 0), ((130, 261, 4099), 2, 0), ((70, 130, 5000), 12, 0), ((65, 67, 300), 64, 0),
    ((300, 520, 2000), 8, 0), ((67, 45, 3001), 4, 1), ((130, 261, 4099), 2, 1), ((65, 67, 300), 64, 1),
    ((300, 520, 2000), 8, 1)])
def test_split_k_summed_by_the_second_kernel(mnk, split, c_stage, rng):
    """REDUCE = 2: the slices' slabs are summed by sgemm_split_reduce, a second launch, under either C_STAGE
    (1 is what the heuristic sets where N is off a multiple of 4): right with alpha and beta, odd N (padded slab
    rows) and more slices than steps, and the same bits on every run (a fixed order per element)."""
    m, n, k = mnk
    p = dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, SPLIT_K=split, REDUCE=2, C_STAGE=c_stage)
    outs, ref = _three_runs(p, m, n, k, rng)
    assert _rel(outs[0], ref) < TOL
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def test_auto_picks_split_k_for_long_k(rng):
    cp = _cp()
    spec = get("sgemm")
    assert spec.heuristic(64, 64, 131072, 132)["SPLIT_K"] > 1
    a, b, _ = _case(rng, 64, 64, 131072)
    out = gemmlab.matmul(cp.asarray(a), cp.asarray(b))
    assert _rel(out.get(), a.astype(np.float64) @ b) < TOL


@pytest.mark.parametrize("order", [1, 2, 3, 4, 5, 6])
def test_sgemm_every_ffma_order_is_correct(order, rng):
    """The FFMA order changes only the instruction schedule: every one gives the right product, on blocks
    inside C (the unchecked loop), at its edges and with rows that are not 16-byte aligned (odd N)."""
    for m, n, k in [(300, 520, 77), (130, 261, 40)]:
        _check("sgemm", dict(_callable(get("sgemm").defaults), ORDER=order), m, n, k, 1.25, 0.5, rng)


def test_sgemm_every_shape_class_is_correct(rng):
    from gemmlab.kernels.rungs.sgemm import SHAPE_CLASSES

    for cfg, *_ in SHAPE_CLASSES:
        for m, n, k in [(300, 520, 77), (130, 261, 40), (1, 300, 17)]:
            _check("sgemm", cfg, m, n, k, 1.25, 0.5, rng)


def test_sgemm_four_byte_b_copies_are_correct(rng):
    """B_COPY = 4 (what the heuristic runs when N is not a multiple of 4): every shape class, on blocks inside
    C, at its edges (odd N: B's rows unaligned, columns past N zero-filled) and with a partial last step."""
    from gemmlab.kernels.rungs.sgemm import SHAPE_CLASSES

    for cfg, *_ in SHAPE_CLASSES:
        for m, n, k in [(300, 520, 77), (130, 261, 40), (1, 300, 17), (333, 777, 999)]:
            _check("sgemm", dict(cfg, B_COPY=4), m, n, k, 1.25, 0.5, rng)


def test_sgemm_c_through_shared_memory_is_correct(rng):
    """C_STAGE = 1 (what the heuristic runs when N is not a multiple of 4: C's rows written a row at a time
    through shared memory): every shape class, N odd and a multiple of 4, tiles at the edges in both
    directions, with beta reading C and with beta = 0 over a NaN-poisoned C (_check), against float64."""
    from gemmlab.kernels.rungs.sgemm import SHAPE_CLASSES

    for cfg, *_ in SHAPE_CLASSES:
        for m, n, k in [(300, 521, 77), (130, 261, 40), (1, 300, 17), (333, 777, 999), (129, 1001, 300)]:
            for alpha, beta in ((1.25, 0.5), (-1.0, 0.0)):
                _check("sgemm", dict(cfg, B_COPY=4, C_STAGE=1), m, n, k, alpha, beta, rng)


@pytest.mark.parametrize("wave,split,b_copy,c_stage", [(8, 4, 16, 0), (7, 8, 16, 0), (7, 2, 4, 0), (24, 16, 4, 0),
                                                       (26, 4, 16, 0), (7, 2, 4, 1), (8, 4, 4, 1), (26, 4, 4, 1)])
def test_sgemm_split_tail_is_correct_and_deterministic(wave, split, b_copy, c_stage, rng):
    """WAVE = W: the tiles of the whole waves of W run whole (through slab 0 and the epilogue, or with C_STAGE
    straight to C a row at a time), the rest are split SPLIT_K ways. 300 x 301 in 64 x 64 tiles is 25 tiles:
    a tail of 1 (W = 8, 24), 4 (W = 7) and 25 (W = 26: more slots than tiles, every tile split). Right with
    alpha and beta, and the same bits on every run."""
    m, n, k = 300, 301 if b_copy == 4 else 300, 1000
    p = dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, SPLIT_K=split, WAVE=wave, B_COPY=b_copy,
             C_STAGE=c_stage)
    spec = get("sgemm")
    tiles = 5 * 5
    tail = tiles % wave
    assert spec.launch(m, n, k, spec.validate(p)).blocks == tiles - tail + tail * split
    outs, ref = _three_runs(p, m, n, k, rng)
    assert _rel(outs[0], ref) < TOL
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def test_sgemm_heuristic_split_tail_runs(rng):
    """A shape whose last wave the heuristic splits (on this device's SM count) gives the right product."""
    from gemmlab.runtime import device

    sms = device.device_info().sm_count
    spec = get("sgemm")
    for m, n, k in [(2047, 2049, 1023), (1500, 1100, 700)]:
        p = spec.heuristic(m, n, k, sms)
        if p["WAVE"] > 1:
            _check("sgemm", p, m, n, k, 1.0, 0.0, rng)
            return
    pytest.skip(f"no tested shape gets a split tail on {sms} SMs")


def test_sgemm_stages_unaligned_b_for_large_products(rng):
    """N = 1031: B's rows are not 16-byte aligned, so a product this large (2^30 multiply-adds or more) runs
    on a row-padded copy of B; right on the first call and on the repeat (which must not take the fast
    path with the unpadded B)."""
    for _ in range(2):
        _check("sgemm", {}, 1030, 1031, 1027, 1.25, 0.5, rng)
