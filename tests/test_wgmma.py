"""Rung 15 (wgmma) without a GPU: built for sm_90a only, no local memory, SASS with HGMMA and TMA copies,
its spec and the tensor-map checks name what is wrong."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from gemmlab.kernels import compile_spec, get
from gemmlab.kernels.rungs import wgmma
from gemmlab.runtime import compiler, tma

from test_tensor_cores import _cuobjdump

needs_nvrtc = pytest.mark.skipif(not compiler.nvrtc_available(), reason="NVRTC (cuda-bindings) not installed")
SPEC = get("wgmma")


def test_targets_only_sm_90a():
    assert SPEC.target_arch("sm_90") == "sm_90a" and SPEC.target_arch("sm_90a") == "sm_90a"
    for arch in ("sm_80", "sm_86", "sm_89", "sm_100"):
        assert SPEC.target_arch(arch) is None
        with pytest.raises(ValueError, match="built for sm_90a only"):
            SPEC.require_target(arch)
    assert get("sgemm").target_arch("sm_89") == "sm_89"


@needs_nvrtc
@pytest.mark.parametrize("params", [{}, dict(BM=256, BN=128, STAGES=3), dict(BM=128, BN=128, STAGES=6), dict(A_TYPE=1, C_TYPE=3),
                                    dict(A_TYPE=3, B_LAYOUT=2), dict(A_TYPE=3, BN=128, C_TYPE=3, B_LAYOUT=2),
                                    dict(C_TYPE=3, DEFER=0), dict(A_TYPE=1, C_TYPE=2, DEFER=0), dict(C_TYPE=3),
                                    dict(A_TYPE=1, C_TYPE=2), dict(C_TYPE=3, STREAM_K=1),
                                    dict(A_TYPE=1, C_TYPE=2, STREAM_K=1), dict(C_TYPE=3, CLUSTER=1),
                                    dict(C_TYPE=2, BM=256, BN=128, STAGES=3),
                                    dict(BN=128, SCHEDULE=2, STAGES=5), dict(B_LAYOUT=2),
                                    dict(BM=64, BN=256, SCHEDULE=2, STAGES=5, HELD=2),
                                    dict(A_TYPE=3, B_LAYOUT=3), dict(A_TYPE=3, B_LAYOUT=3, BN=128, CLUSTER=1, C_TYPE=3),
                                    dict(A_TYPE=3, B_LAYOUT=3, BM=64, BN=128, SCHEDULE=2, STAGES=6, HELD=2),
                                    dict(C_TYPE=3, BN=192),  # clusters over half the k rows of B's chunks
                                    dict(C_TYPE=3, BN=192, CLUSTER=1, STREAM_K=1, B_LAYOUT=2),
                                    dict(A_TYPE=5, C_TYPE=3, B_LAYOUT=2, CLUSTER=1, STREAM_K=1),
                                    dict(A_TYPE=5, C_TYPE=3, B_LAYOUT=2, PROMOTE=1, DEFER=0),  # block scales
                                    dict(A_TYPE=6, C_TYPE=1, B_LAYOUT=2, PROMOTE=1, BN=128, CLUSTER=1, STREAM_K=1),
                                    dict(C_TYPE=3, BM=64, BN=128, SCHEDULE=2, STAGES=6, HELD=2, CLUSTER=1, SPLIT_K=4),
                                    dict(C_TYPE=3, B_LAYOUT=2, BATCHED=2),  # grouped products
                                    dict(A_TYPE=5, C_TYPE=3, B_LAYOUT=2, BATCHED=2, CLUSTER=1),
                                    # the deeper rings of the small-C rules: tf32 swapped, 8-bit ping-pong
                                    dict(A_TYPE=3, B_LAYOUT=3, BN=128, CLUSTER=1, STAGES=6),
                                    dict(A_TYPE=5, C_TYPE=3, B_LAYOUT=2, BM=64, BN=128, SCHEDULE=2, STAGES=8, HELD=2,
                                         CLUSTER=1)],
                         ids=str)
def test_compiles_without_local_memory(params):
    p = SPEC.validate(params)
    mod = compile_spec(SPEC, p, "sm_90")
    r = mod.resources[SPEC.name_expression(p)]
    assert r.registers > 0 and not r.uses_local_memory, r
    assert r.registers * wgmma.THREADS <= 65536


@needs_nvrtc
def test_a_residual_on_the_tma_stores_is_prefetched_into_l2():
    """Builds whose stores go through TMA box by box (DEFER 0, 16-bit C) bring a residual's lines into L2 a few k
    steps before a tile's last (cp.async.bulk.prefetch.L2: UBLKPF in the SASS); the deferred stores' builds, which
    take no residual there, do not."""
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found")
    env = dict(os.environ, PATH=f"{Path(tool).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for defer, expected in ((0, True), (1, False)):
        mod = compile_spec(SPEC, dict(C_TYPE=3, B_LAYOUT=2, DEFER=defer), "sm_90")
        sass = subprocess.run([tool, "-sass", str(mod.cubin_path)], capture_output=True, text=True, check=True,
                              env=env).stdout
        assert ("UBLKPF.L2" in sass) == expected, defer


@needs_nvrtc
@pytest.mark.parametrize("a_type,b_layout,bn,mnemonic", [(1, 1, 256, "HGMMA.64x256x16.F32 "),
                                                         (2, 1, 256, "HGMMA.64x256x16.F32.BF16"),
                                                         (2, 2, 256, "HGMMA.64x256x16.F32.BF16"),
                                                         (3, 2, 256, "HGMMA.64x256x8.F32.TF32"),
                                                         (3, 3, 256, "HGMMA.64x256x8.F32.TF32"),
                                                         (2, 1, 64, "HGMMA.64x64x16.F32.BF16"),
                                                         (1, 2, 64, "HGMMA.64x64x16.F32 ")])
def test_sass_has_hgmma_and_tma(a_type, b_layout, bn, mnemonic):
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found")
    mod = compile_spec(SPEC, dict(A_TYPE=a_type, B_LAYOUT=b_layout, BN=bn), "sm_90")
    env = dict(os.environ, PATH=f"{Path(tool).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    sass = subprocess.run([tool, "-sass", str(mod.cubin_path)], capture_output=True, text=True, check=True,
                          env=env).stdout
    assert mnemonic in sass
    # B row-major (K x N) is read N-major, with the transpose bit; B^T given (or tf32) K-major, without
    assert ("tnspB" in sass) == (b_layout == 1)
    # B_LAYOUT 3: the wgmma's A operand from registers (HGMMA ... R, gdesc), else both from shared memory
    rs = re.search(r"HGMMA\.\S+ R\d+, R\d+, gdesc", sass) is not None
    assert rs == (b_layout == 3)
    for op in ("UTMALDG.2D", "SYNCS.PHASECHK", "USETMAXREG"):  # TMA loads, mbarrier waits, setmaxnreg
        assert op in sass, op
    assert "HMMA" not in sass and "LDSM" not in sass  # no mma.sync / ldmatrix path left in it


@pytest.mark.parametrize("params,match", [
    (dict(BM=64), "BM = 64 needs the ping-pong schedule"), (dict(BM=32), "BM = 32"), (dict(BN=96), "BN = 96"),
    (dict(BN=64, A_TYPE=3, B_LAYOUT=2), "BN = 64 is built for fp16 / bf16 and 8-bit"), (dict(BM=256, BN=256), "accumulators per consumer"),
    (dict(STAGES=5), "shared memory"), (dict(SCHEDULE=2), "in ping-pong needs 256 accumulators"),
    (dict(SCHEDULE=3), "SCHEDULE = 3"), (dict(A_TYPE=3), "B_LAYOUT must be 2"), (dict(B_LAYOUT=3), "B_LAYOUT = 3 .* is the tf32 path"), (dict(B_LAYOUT=4), "B_LAYOUT = 4"), (dict(BM=256, BN=128, STAGES=4), "shared memory"), (dict(A_TYPE=4), "A_TYPE = 4"),
    (dict(CLUSTER=4), "CLUSTER = 4"),
])
def test_spec_names_bad_parameters(params, match):
    with pytest.raises(ValueError, match=match):
        SPEC.validate(params)


def test_smem_and_geometry():
    p = SPEC.defaults
    assert wgmma.smem_bytes(p) == 4 * (128 + 256) * 64 * 2 + 128 * 40 * 4 + 1024
    # a 16-bit output: each consumer's region holds two TMA-store boxes of its 64 rows x 128 bytes
    assert wgmma.smem_bytes({**p, "C_TYPE": 3}) == 4 * (128 + 256) * 64 * 2 + 2 * 64 * 256 + 1024 <= wgmma.SMEM_LIMIT
    g = SPEC.launch(4096, 4096, 4096, p)
    assert g.grid == (32 * 16, 1, 1) and g.block == (384, 1, 1)
    assert SPEC.launch(129, 257, 1, p).grid == (2 * 2, 1, 1)
    # Clusters of two vertically adjacent tiles: an odd tile-row count is rounded up to whole clusters.
    assert p["CLUSTER"] == 2 and SPEC.launch(257, 257, 1, p).grid == (4 * 2, 1, 1)
    assert SPEC.launch(257, 257, 1, {**p, "CLUSTER": 1}).grid == (3 * 2, 1, 1)


def test_traffic_counts_b_once_per_cluster():
    p = SPEC.defaults
    one, two = (SPEC.traffic_model(4096, 4096, 4096, {**p, "CLUSTER": c}) for c in (1, 2))
    assert one.a_loads == two.a_loads == 4096 * 4096 * 16
    assert one.b_loads == 4096 * 4096 * 32 and two.b_loads == 4096 * 4096 * 16


def test_resident_blocks_are_whole_clusters():
    from types import SimpleNamespace as NS

    from gemmlab import api

    geo = SPEC.launch(4096, 4096, 4096, SPEC.defaults)
    asked = []

    def kernel(fit, per_sm=None):
        return NS(max_active_clusters=lambda cl, block, smem: asked.append((cl, block, smem)) or fit,
                  max_active_blocks=lambda block, smem: per_sm)

    p2, p1 = {**SPEC.defaults, "CLUSTER": 2}, {**SPEC.defaults, "CLUSTER": 1}
    assert api.resident_blocks(SPEC, p2, kernel(60), geo, 132) == 120  # the driver's count of clusters
    assert asked == [(2, geo.block, geo.smem)]
    assert api.resident_blocks(SPEC, p2, kernel(None), geo, 133) == 132  # no answer: SMs in whole clusters
    assert api.resident_blocks(SPEC, p1, kernel(None), geo, 133) == 133 and len(asked) == 2
    assert api.resident_blocks(SPEC, p1, kernel(None, per_sm=3), geo, 132) == 396  # no clusters: blocks per SM


def test_operand_problems_name_the_operand():
    assert wgmma.operand_problems(0x1000, 64, 0x2000, 128) == []
    errs = wgmma.operand_problems(0x1002, 64, 0x2000, 100)
    assert any("A's base address" in e for e in errs) and any("B's rows are 100 elements" in e for e in errs)


def test_tensor_maps_are_described_per_layout():
    """A's map in boxes of BM rows x a 128-byte k step, B's in a k step x 64 columns (row-major B) or in the
    cluster's share of BN rows x a k step (B^T given, K-major), C's only where the copy engine may store it;
    the transposed tf32 path swaps A and B."""
    p = SPEC.validate({"C_TYPE": 3})
    a, b, c = wgmma.tensor_maps(256, 512, 1024, p)
    assert (a.operand, a.rows, a.cols, a.box_rows, a.box_cols, a.elem_bytes) == ("A", 256, 1024, 128, 64, 2)
    assert (b.operand, b.rows, b.cols, b.box_rows, b.box_cols) == ("B", 1024, 512, 64, 64)
    assert c.operand == "C" and c.optional and (c.box_rows, c.box_cols) == (64, 64) and c.elem_bytes == 0
    _, bt, _ = wgmma.tensor_maps(256, 512, 1024, {**p, "B_LAYOUT": 2})
    assert (bt.rows, bt.cols, bt.box_rows, bt.box_cols) == (512, 1024, 128, 64)  # 256 / CLUSTER 2 rows each
    tf32 = SPEC.validate({"A_TYPE": 3, "B_LAYOUT": 3, "C_TYPE": 1})
    first, second, ct = wgmma.tensor_maps(256, 512, 1024, tf32)
    assert (first.operand, first.box_rows, first.box_cols, first.elem_bytes) == ("B", 32, 32, 4)
    assert second.operand == "A" and (ct.box_rows, ct.box_cols) == (32, 32)
    assert wgmma.tensor_maps(256, 512, 1024, SPEC.validate({"C_TYPE": 1}))[2] is None  # fp32 C of 16-bit inputs
    # BN 192 in clusters of two: three chunks of 64 columns do not split over two blocks, so each block copies
    # half the k rows of every chunk (32-row boxes); 128 and 256 keep whole chunks per block.
    assert wgmma.tensor_maps(256, 576, 1024, SPEC.validate({"C_TYPE": 3, "BN": 192}))[1].box_rows == 32
    assert wgmma.tensor_maps(256, 576, 1024, SPEC.validate({"C_TYPE": 3, "BN": 192, "CLUSTER": 1}))[1].box_rows == 64
    assert wgmma.tensor_maps(256, 512, 1024, SPEC.validate({"C_TYPE": 3, "BN": 128}))[1].box_rows == 64


def test_l2_fills_are_narrowed_for_rows_that_straddle_lines():
    """256-byte L2 fills where every row starts on a 128-byte line, narrower ones where rows straddle them."""
    assert tma.l2_promotion(6144) == 256 and tma.l2_promotion(128) == 256
    assert tma.l2_promotion(6000) == tma.STRADDLING_PROMOTION == 128 and tma.l2_promotion(16) == 128
    assert set(tma.L2_PROMOTIONS) >= {tma.l2_promotion(r) for r in (16, 6000, 6144)}


def test_tensor_map_checks():
    assert tma.check_2d(0x1000, 2, 100, 64, 64, 128, 64, 128) == []
    errs = tma.check_2d(0x1008, 2, 100, 63, 63, 300, 128, 128)
    text = "; ".join(errs)
    assert "16-byte aligned" in text and "row stride 63" in text and "box 300 x 128" in text
    assert "exceed the 128-byte swizzle span" in "; ".join(tma.check_2d(0x1000, 2, 8, 128, 128, 8, 128, 128))
    with pytest.raises(tma.TensorMapError, match="a tensor map is 128 bytes"):
        tma.kernel_arg(b"\0" * 64)
    arg = tma.kernel_arg(bytes(range(128)))
    assert arg.dtype.itemsize == 128 and bytes(arg.tobytes()) == bytes(range(128))


def test_fused_activation_runs_the_plain_defaults():
    """A fused activation once defaulted to the ping-pong schedule (its epilogue went through shared memory
    and was worth hiding); written straight from the registers it is cheap, and the cooperative default
    measured faster fused too (docs/journal.md)."""
    from gemmlab import api

    plain = api.explain_choice("bfloat16", shape=(4096, 4096, 4096), cc=(9, 0), sm_count=132)
    fused = api.explain_choice("bfloat16", shape=(4096, 4096, 4096), cc=(9, 0), sm_count=132, epilogue=True)
    assert plain.spec.name == fused.spec.name == "wgmma" and plain.params == fused.params
    assert plain.params["SCHEDULE"] == wgmma.COOPERATIVE and plain.params["BN"] == 256


def test_shape_heuristic():
    from gemmlab import api

    def params(m, n, k):
        c = api.explain_choice("bfloat16", shape=(m, n, k), cc=(9, 0), sm_count=132)
        assert c.spec.name == "wgmma" and c.params_source == "heuristic"
        return c.params

    assert params(8192, 8192, 8192) == SPEC.validate({"C_TYPE": 3})  # large: the defaults (bf16 out)
    # four rounds of tiles or fewer, rows in whole 128-byte lines: no clusters; rows across lines: clusters
    assert params(4096, 4096, 4096) == SPEC.validate({"C_TYPE": 3, "CLUSTER": 1})
    assert params(3000, 5000, 2000)["CLUSTER"] == 2 and params(4096, 4096, 4000)["CLUSTER"] == 2
    small = params(1024, 1024, 1024)  # 32 default tiles for 132 SMs: 64 x 128 ping-pong tiles, no clusters
    assert (small["BM"], small["BN"], small["CLUSTER"], small["SCHEDULE"]) == (64, 128, 1, wgmma.PINGPONG)
    ragged = params(1000, 1000, 1000)  # not in whole tiles, rows across lines, one wave: the same in clusters
    assert (ragged["BM"], ragged["BN"], ragged["CLUSTER"], ragged["SCHEDULE"]) == (64, 128, 2, wgmma.PINGPONG)
    two_waves = params(1200, 1200, 1200)  # 190 such tiles: 128 x 128 cooperative ones, no clusters
    assert (two_waves["BM"], two_waves["BN"], two_waves["CLUSTER"], two_waves["SCHEDULE"]) == (128, 128, 1, 1)
    short = params(8192, 4096, 1024)  # K <= 1024 in whole lines: the defaults without clusters
    assert (short["BM"], short["BN"], short["CLUSTER"], short["SCHEDULE"]) == (128, 256, 1, wgmma.COOPERATIVE)
    short_few = params(2048, 2048, 512)  # the same with one wave of default tiles: 64 x 256 ping-pong tiles
    assert (short_few["BM"], short_few["BN"], short_few["CLUSTER"], short_few["SCHEDULE"]) == (64, 256, 1, 2)
    across = params(3000, 3000, 1000)  # rows across lines: 128 x 128 ping-pong tiles in clusters
    assert (across["BN"], across["CLUSTER"], across["SCHEDULE"]) == (128, 2, wgmma.PINGPONG)
    one_wave = params(2048, 2048, 2048)  # 128 default tiles: the defaults without clusters
    assert (one_wave["BM"], one_wave["BN"], one_wave["CLUSTER"], one_wave["SCHEDULE"]) == (128, 256, 1, wgmma.COOPERATIVE)
    wide_c = params(16384, 16384, 256)  # four k steps: the defaults (deferred stores) without clusters
    assert (wide_c["BM"], wide_c["BN"], wide_c["CLUSTER"], wide_c["SCHEDULE"]) == (128, 256, 1, wgmma.COOPERATIVE)
    few = params(128, 11008, 4096)  # 86 tiles of 128 x 128 fill more than half the SMs: those, cooperative,
    assert (few["BM"], few["BN"], few["SCHEDULE"]) == (128, 128, wgmma.COOPERATIVE)
    assert few["STAGES"] == wgmma.SMALL_C_STAGES > SPEC.defaults["STAGES"]  # in a deeper ring (they stream B)
    fewer = params(128, 4096, 16384)  # 32 of them would not: 64 x 128 ping-pong tiles
    assert (fewer["BM"], fewer["BN"], fewer["SCHEDULE"]) == (64, 128, wgmma.PINGPONG)
    assert params(4096, 1024, 4096)["BN"] == 256  # one wave but a long K: the defaults
    # 192-column tiles where their rounds take at most 0.8 of the 256-column ones' (fp16 / bf16 only)
    assert wgmma.narrow_tiles_pay(3000, 3000, 132, 2) and params(3000, 3000, 3000)["BN"] == 192
    assert params(3000, 3000, 8192)["BN"] == 192
    for m, n, k in ((5000, 5000, 5000), (4096, 4096, 4096), (8192, 8192, 8192), (2500, 2500, 2500)):
        assert params(m, n, k)["BN"] == 256, (m, n, k)
    assert SPEC.heuristic(3000, 3000, 3000, 132, "bfloat16")["BN"] == 192
    for element in ("tf32", "float32"):
        assert SPEC.heuristic(3000, 3000, 3000, 132, element).get("BN", 256) == 256
    for m, n, k in ((1024, 1024, 1024), (1000, 1000, 1000), (2048, 2048, 2048), (8192, 4096, 1024)):  # tf32 too
        for layout in (2, 3):
            SPEC.validate({**SPEC.heuristic(m, n, k, 132), "A_TYPE": 3, "B_LAYOUT": layout})
        for c_type in (2, 3):  # 16-bit outputs (the TMA store's shared memory) fit every pick
            SPEC.validate({**SPEC.heuristic(m, n, k, 132), "C_TYPE": c_type})


@needs_nvrtc
def test_transpose_helper_compiles_for_every_target():
    from gemmlab.kernels import transpose

    for arch in ("sm_80", "sm_86", "sm_89", "sm_90"):
        for t in ("unsigned int", "unsigned short"):
            expr = f"transpose_tiles<{t}>"
            r = compiler.compile_file(transpose.SOURCE, [expr], arch).resources[expr]
            assert r.registers > 0 and not r.uses_local_memory


@needs_nvrtc
def test_sass_of_clusters():
    """CLUSTER 2 copies its share of B with multicast TMA and syncs the cluster; CLUSTER 1 is an ordinary
    kernel (no cluster attribute, no multicast)."""
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found")
    env = dict(os.environ, PATH=f"{Path(tool).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    dump = {}
    for cl in (1, 2):
        mod = compile_spec(SPEC, dict(CLUSTER=cl), "sm_90")
        dump[cl] = [subprocess.run([tool, flag, str(mod.cubin_path)], capture_output=True, text=True, check=True,
                                   env=env).stdout for flag in ("-sass", "-elf")]
    assert "UTMALDG.2D.MULTICAST" in dump[2][0] and "UCGABAR_WAIT" in dump[2][0]
    assert "EIATTR_CTA_PER_CLUSTER" in dump[2][1]
    assert "MULTICAST" not in dump[1][0] and "EIATTR_CTA_PER_CLUSTER" not in dump[1][1]


def _units(c, clusters, tiles, sk, k_tiles, parts=0):
    """The kernel's work_unit, unit by unit (a model of the device code: whole tiles, then the run or the part)."""
    dp = tiles - sk
    whole = (dp - 1 - c) // clusters + 1 if c < dp else 0
    out = [(c + i * clusters, 0, k_tiles, i * k_tiles) for i in range(whole)]
    if sk and parts:
        if c < sk * parts:
            q = c % parts
            out.append((dp + c // parts, k_tiles * q // parts, k_tiles * (q + 1) // parts, whole * k_tiles))
    elif sk:
        steps = sk * k_tiles
        s0, s1 = steps * c // clusters, steps * (c + 1) // clusters
        t = s0 // k_tiles
        while t * k_tiles < s1:
            b = t * k_tiles
            lo, hi = max(b, s0), min(b + k_tiles, s1)
            out.append((dp + t, lo - b, hi - b, whole * k_tiles + lo - s0))
            t += 1
    return out


@pytest.mark.parametrize("tiles,clusters,k_tiles", [(1024, 66, 128), (70, 66, 8), (3584, 66, 64), (133, 132, 9),
                                                    (200, 7, 8), (1000, 66, 8)])
def test_stream_k_covers_every_k_step_once_and_shares_a_tile_between_two_clusters_at_most(tiles, clusters, k_tiles):
    sk = tiles % clusters + clusters
    seen = {}
    for c in range(clusters):
        units = _units(c, clusters, tiles, sk, k_tiles)
        ring = 0
        for j, (t, kb, ke, r) in enumerate(units):
            assert r == ring and 0 <= kb < ke <= k_tiles  # the ring follows the k steps taken, none empty
            ring += ke - kb
            if kb > 0:  # a partial writer: only a cluster's first stream-K unit starts inside a tile
                assert t >= tiles - sk and (j == 0 or units[j - 1][0] < tiles - sk)
            seen.setdefault(t, []).append((c, kb, ke))
    assert sorted(seen) == list(range(tiles))
    for t, parts in seen.items():
        parts.sort(key=lambda x: x[1])
        assert parts[0][1] == 0 and parts[-1][2] == k_tiles
        assert all(a[2] == b[1] for a, b in zip(parts, parts[1:]))  # contiguous, no overlap
        assert len(parts) <= 2
        if len(parts) == 2:  # the owner (kb = 0) takes the sums of the next cluster
            assert parts[1][0] == parts[0][0] + 1
    # the work is even: the whole tiles are whole rounds, so every cluster takes the same k steps, give or take one
    assert (tiles - sk) % clusters == 0
    load = [sum(ke - kb for _, kb, ke, _ in _units(c, clusters, tiles, sk, k_tiles)) for c in range(clusters)]
    assert max(load) - min(load) <= 1


@pytest.mark.parametrize("tiles,clusters,k_tiles", [(320, 132, 216), (344, 66, 64), (289, 66, 64), (133, 132, 9),
                                                    (70, 66, 2), (200, 7, 16)])
def test_stream_k_parts_cover_every_k_step_once_and_start_together(tiles, clusters, k_tiles):
    """The last round's tiles in parts: each part a cluster's one stream unit, all at the ring position after
    the whole rounds; the owner of a tile (kb = 0) is followed by its parts' clusters in order."""
    sk = tiles % clusters
    parts = min(clusters // sk, 4, k_tiles)
    seen = {}
    for c in range(clusters):
        units = _units(c, clusters, tiles, sk, k_tiles, parts)
        ring = 0
        for t, kb, ke, r in units:
            assert r == ring and 0 <= kb < ke <= k_tiles
            ring += ke - kb
            seen.setdefault(t, []).append((c, kb, ke))
        assert len(units) <= (tiles - sk) // clusters + 1
    assert sorted(seen) == list(range(tiles))
    for t, got in seen.items():
        got.sort(key=lambda x: x[1])
        assert got[0][1] == 0 and got[-1][2] == k_tiles
        assert all(a[2] == b[1] for a, b in zip(got, got[1:]))
        assert len(got) == (parts if t >= tiles - sk else 1)
        assert [x[0] for x in got] == list(range(got[0][0], got[0][0] + len(got)))  # the owner, then c + 1, ...
    # every part of every stream tile starts where the whole rounds end
    assert {_units(c, clusters, tiles, sk, k_tiles, parts)[-1][3] for c in range(sk * parts)} == {
        (tiles - sk) // clusters * k_tiles}


def test_stream_k_parts_take_a_partial_last_round_after_whole_ones():
    p = {**SPEC.defaults, "CLUSTER": 1, "B_LAYOUT": 2}
    # 320 tiles of 128 x 256 on 132 SMs: 2.4 rounds run as 3; halves make the last one half as long
    assert wgmma.cluster_tiles(2048, 5120, p) == 320 and wgmma.stream_k_parts(2048, 5120, 13824, p, 132) == 2
    assert wgmma.stream_k(2048, 5120, 13824, {**p, "STREAM_K": 1}, 132) == (56, 2)
    assert wgmma.stream_k(2048, 5120, 13824, p, 132) == (0, 0)  # STREAM_K 0: none, whatever pays
    # clusters of two: 344 cluster tiles on 66 clusters, 14 left over: four parts each (at most SK_MAX_PARTS)
    assert wgmma.stream_k_parts(2048, 11008, 4096, SPEC.defaults, 132) == 4
    assert wgmma.stream_k_parts(2048, 5120, 13824, p, 128) == 2 and wgmma.stream_k_parts(2048, 5120, 13824, p, 160) == 0
    assert wgmma.stream_k_parts(8192, 8192, 8192, SPEC.defaults, 132) == 0  # 34 of 66: more than half busy
    assert wgmma.stream_k_parts(16384, 14336, 4096, SPEC.defaults, 132) == 0  # 55 rounds: 1.2 % to save
    assert wgmma.stream_k_parts(2048, 5120, 14 * 64, p, 132) == 0  # 14 k steps: halves of 7 are too short
    assert wgmma.stream_k_parts(1024, 2048, 8192, p, 132) == 0  # one partial round: split_for's
    assert wgmma.stream_k_parts(2048, 5120, 13824, {**p, "SCHEDULE": 2, "BN": 128}, 132) == 0  # ping-pong
    assert wgmma.stream_k_parts(2048, 5120, 13824, {**p, "SPLIT_K": 2}, 132) == 0
    assert wgmma.stream_k_parts(2048, 5120, 13824, {**p, "BATCHED": 1}, 132) == 0
    # 8-bit inputs: 128 elements per k step; tf32: 32
    assert wgmma.stream_k_parts(2048, 5120, 16 * 128, {**p, "A_TYPE": 5}, 132) == 2
    assert wgmma.stream_k_parts(2048, 5120, 15 * 128, {**p, "A_TYPE": 5}, 132) == 0


def test_the_heuristic_takes_parts_where_they_pay():
    assert wgmma._heuristic(2048, 5120, 13824, 132, "bfloat16", True).get("STREAM_K") == 1
    assert wgmma._heuristic(2048, 11008, 4096, 132, "bfloat16").get("STREAM_K") == 1
    for shape in ((8192, 8192, 8192), (4096, 4096, 4096), (16384, 14336, 4096), (64, 8192, 8192)):
        assert not wgmma._heuristic(*shape, 132, "bfloat16").get("STREAM_K"), shape
    # against 192-column tiles, as measured both ways (narrow_tiles_pay)
    p = wgmma._heuristic(1024, 5120, 13824, 132, "bfloat16", True)
    assert p.get("STREAM_K") == 1 and p.get("BN", 256) == 256, p
    for shape in ((3000, 3000, 3000), (3000, 3000, 8192), (512, 11008, 4096)):
        p = wgmma._heuristic(*shape, 132, "bfloat16", True)
        assert p.get("BN") == 192 and not p.get("STREAM_K"), (shape, p)


def test_stream_k_takes_the_last_rounds_where_they_leave_sms_idle():
    p = {**SPEC.defaults, "STREAM_K": 1}
    assert wgmma.stream_k_tiles(8192, 8192, 8192, SPEC.defaults, 132) == 0  # not the default
    assert wgmma.cluster_tiles(8192, 8192, p) == 1024
    assert wgmma.stream_k_tiles(8192, 8192, 8192, p, 132) == 1024 % 66 + 66  # 15.5 rounds: 3 % saved
    assert wgmma.stream_k_tiles(16384, 14336, 4096, p, 132) == 3584 % 66 + 66  # 54.3 rounds: 1.3 %
    assert wgmma.stream_k_tiles(8192, 8192, 8192, p, 128) == 0  # whole rounds (1024 = 16 x 64)
    assert wgmma.stream_k_tiles(2048, 2048, 8192, p, 132) == 0  # one round or less
    assert wgmma.stream_k_tiles(8192, 8192, 448, p, 132) == 0  # 7 k steps per tile: too short
    assert wgmma.stream_k_tiles(8192, 8192, 8192, {**p, "SCHEDULE": 2, "BN": 128}, 132) == 0  # ping-pong
    assert any("STREAM_K = 1 needs the cooperative" in e for e in SPEC.problems({**p, "SCHEDULE": 2, "BN": 128}))
    # where the panels of the stream-K tiles would not stay in L2, or stream-K would be much of the work
    assert wgmma.stream_k_tiles(4096, 4096, 4096, p, 132) == 0  # 3.9 rounds
    assert wgmma.stream_k_tiles(16384, 4096, 14336, p, 132) == 0  # rows of 28 KB
    assert wgmma.stream_k_tiles(256 * 67 * 8, 256, 1024, p, 132) == 67 * 8 % 66 + 66  # 8.1 rounds
    assert wgmma.stream_k_tiles(256 * 6601, 256, 1024, p, 132) == 0  # 101 rounds for 100.02: too little saved
    tf32 = {**p, "A_TYPE": 3, "B_LAYOUT": 3, "C_TYPE": 1}  # tiles of C^T; 32 k per step, 4 bytes each
    assert wgmma.cluster_tiles(1000, 8192 * 4, tf32) == 128 * 4 and wgmma.stream_k_tiles(1000, 8192 * 4, 4096, tf32, 132) == 512 % 66 + 66
    assert wgmma.stream_k_tiles(8192, 8192, 8192, tf32, 132) == 0  # rows of 32 KB
    assert wgmma.stream_k_tiles(1000, 8192 * 4, 224, tf32, 132) == 0  # 7 steps of 32
    assert wgmma.stream_k_tiles(8192, 8192, 1 << 30, p, 132) == 0  # the kernel's 32-bit run arithmetic


def test_the_stream_k_rule_can_be_widened_for_tests(monkeypatch):
    """The GPU tests exercise stream-K on small problems by lowering SK_MIN_ROUNDS; the rule reads it."""
    monkeypatch.setattr(wgmma, "SK_MIN_ROUNDS", 1)
    assert wgmma.stream_k_tiles(4096, 4096, 4096, {**SPEC.defaults, "STREAM_K": 1}, 132) == 256 % 66 + 66


def test_zero_is_a_parameter_value_only_for_switches():
    assert SPEC.problems({"STREAM_K": 0}) == [] and SPEC.problems({"STREAM_K": 1}) == []
    assert any("STREAM_K=-1 must be positive" in e for e in SPEC.problems({"STREAM_K": -1}))
    assert any("STAGES=0 must be positive" in e for e in SPEC.problems({"STAGES": 0}))


def test_group_height_minimises_the_wave_footprint():
    from gemmlab.kernels.rungs import wgmma as w

    # 128 x 256 tiles, 132 resident: 16 tile rows x 8.25 columns (2048 + 2112) beats 8 x 16.5 (1024 + 4224)
    assert w.wave_footprint(16, 128, 256, 132, 64) == pytest.approx(2048 + 132 / 16 * 256)
    assert w.wave_footprint(8, 128, 256, 132, 64) > w.wave_footprint(16, 128, 256, 132, 64)
    assert w.best_group(128, 256, 132, 64) == 16
    # square tiles want a lower group than wide ones; a short matrix caps it (the smallest equal choice)
    assert w.best_group(128, 128, 16, 64) == 4
    assert w.best_group(128, 256, 132, 2) == 4
    assert w.best_group(128, 256, 132, 1) == 1
    for shape in [(4096, 4096, 4096), (1000, 1000, 1000), (256, 16384, 4096)]:
        p = w._heuristic(*shape, 132)
        assert p["GROUP_M"] in w.GROUP_CHOICES
        assert p["GROUP_M"] == w.best_group(p.get("BM", 128), p.get("BN", 256), 132, -(-shape[0] // p.get("BM", 128)))


# ------------------------------------------------------------------------------------------ split-K

def _split_begin(s, split, k_tiles):
    """The kernel's split_begin: slice s's first k step."""
    return s * (k_tiles // split) + min(s, k_tiles % split)


@pytest.mark.parametrize("tiles_one,split,clusters,k_tiles", [(1, 128, 132, 2048), (4, 32, 132, 1024), (16, 8, 132, 256),
                                                             (3, 7, 5, 40), (2, 64, 66, 4), (5, 3, 2, 1)])
def test_split_units_cover_every_k_step_of_every_tile_once(tiles_one, split, clusters, k_tiles):
    """A model of split_unit: unit u = c + i P is slice u // tiles_one of tile u % tiles_one; the slices of a
    tile partition its k steps (empty where there are fewer steps than slices); a cluster's ring position
    is the k steps of its earlier units."""
    covered = {}
    for c in range(clusters):
        ring = 0
        i = 0
        while c + i * clusters < tiles_one * split:
            u = c + i * clusters
            s, tile = divmod(u, tiles_one)
            kb, ke = _split_begin(s, split, k_tiles), _split_begin(s + 1, split, k_tiles)
            assert 0 <= kb <= ke <= k_tiles and ke - kb in (k_tiles // split, k_tiles // split + 1)
            covered.setdefault(tile, []).append((kb, ke))
            ring += ke - kb
            i += 1
    for tile in range(tiles_one):
        parts = sorted(covered[tile])
        assert len(parts) == split and parts[0][0] == 0 and parts[-1][1] == k_tiles
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))


def test_split_heuristic_and_rules():
    # long K on a C of a few 128 x 128 tiles: split so that one wave of units fills the SMs
    p = SPEC.heuristic(64, 64, 131072, 132)
    assert p["SPLIT_K"] == 64 and (p["BM"], p["SCHEDULE"], p["CLUSTER"]) == (64, wgmma.PINGPONG, 1)
    for m, n, k, split in ((256, 256, 65536, 16), (512, 512, 16384, 4), (128, 4096, 16384, 2),
                           (128, 4096, 11008, 2)):  # one wave of 64 x 128 ping-pong units
        p = SPEC.heuristic(m, n, k, 132)
        assert p["SPLIT_K"] == split and (p["BM"], p["BN"], p["SCHEDULE"]) == (64, 128, wgmma.PINGPONG), (m, n, k)
    ragged = SPEC.heuristic(100, 4000, 11008, 132)  # not whole 64 x 128 tiles: 128 x 128, one wave of units
    assert (ragged["SPLIT_K"], ragged.get("BM", 128), ragged["BN"]) == (4, 128, 128)
    assert SPEC.heuristic(64, 64, 8192, 132)["SPLIT_K"] == 4  # 128 k steps: slices of SPLIT_MIN_STEPS
    # not split: slices would be under SPLIT_MIN_STEPS, or the tiles occupy enough SMs unsplit
    for m, n, k in ((1024, 1024, 1024), (4096, 4096, 4096), (2048, 2048, 2048), (1000, 1000, 1000), (64, 64, 4000),
                    (8192, 8192, 8192), (128, 11008, 4096), (512, 512, 512), (128, 8192, 8192)):
        assert wgmma.split_for(m, n, k, 132) == 1, (m, n, k)
    # 8-bit inputs split 64 x 128 tiles only where they keep a quarter of the SMs or fewer (half of 16-bit's
    # share); at M <= 128 the heuristic then runs 64 x 64 tiles (narrow_small_m), split less or not at all
    for m, n, k, split16, split8, pick16, pick8 in ((64, 8192, 8192, 2, 1, (64, 1), (64, 1)),
                                                    (128, 4096, 8192, 2, 1, (64, 1), (64, 1)),
                                                    (64, 8192, 4096, 2, 1, (64, 1), (64, 1)),
                                                    (64, 4096, 8192, 4, 4, (64, 2), (64, 1)),
                                                    (64, 2048, 8192, 4, 4, (64, 2), (64, 2)),
                                                    (256, 1024, 8192, 4, 4, (128, 4), (128, 4))):
        assert wgmma.split_for(m, n, k, 132) == split16 and wgmma.split_for(m, n, k, 132, 1) == split8, (m, n, k)
        for element, pick in (("float8_e4m3fn", pick8), ("bfloat16", pick16)):
            p = SPEC.heuristic(m, n, k, 132, element, True)
            assert (p["BN"], p.get("SPLIT_K", 1)) == pick, (m, n, k, element, p)
    # every pick is valid, and a batch never splits
    for m, n, k in ((64, 64, 131072), (256, 256, 65536), (129, 264, 4104), (1, 8, 1 << 20), (128, 4096, 11008)):
        for a_type, layout, element in ((3, 2, "tf32"), (3, 3, "tf32"), (1, 2, "float16"), (5, 2, "float8_e4m3fn")):
            # every element type and layout takes its pick
            SPEC.validate({**SPEC.heuristic(m, n, k, 132, element), "A_TYPE": a_type, "B_LAYOUT": layout})
        p = SPEC.validate({**SPEC.heuristic(m, n, k, 132), "C_TYPE": 3})
        assert p["SPLIT_K"] in wgmma.SPLIT_CHOICES
        geo = SPEC.launch(m, n, k, p)
        assert geo.grid[0] == wgmma.cluster_tiles(m, n, p) * p["CLUSTER"] * p["SPLIT_K"]
        slabs = p["SPLIT_K"] * m * ((n + 3) // 4 * 4)
        lanes = wgmma.SPLIT_LANES if p["SPLIT_K"] >= wgmma.SPLIT_MANY else 1
        for q in (p, {**p, "SPLIT_SUM": wgmma.SPLIT_SECOND}):
            ws = SPEC.workspace(m, n, k, q, 132)
            after = SPEC.second_kernel.geometry(m, n, k, q)
            if wgmma.split_last_sums(q):
                # a few slices: the last unit of each tile part sums (a slot per slice and part, a counter per part,
                # the scalar 1), no second launch
                parts = wgmma.split_parts(m, n, q)
                assert q["SPLIT_K"] <= wgmma.SPLIT_LAST_MAX and after is None
                assert (ws.floats, ws.ints, ws.scalars) == (parts * q["SPLIT_K"] * wgmma.consumer_rows(q) * q["BN"],
                                                            parts, (0, 1))
            else:
                assert (ws.floats, ws.ints, ws.scalars) == (slabs, 0, (0, 0))
                assert after.blocks * after.threads_per_block >= m * ((n + 3) // 4) * lanes
        assert SPEC.second_kernel.name_for(p) == f"wgmma_split_reduce<3, {lanes}>"
    assert SPEC.batch_params["SPLIT_K"] == 1
    assert SPEC.second_kernel.geometry(4096, 4096, 4096, SPEC.defaults) is None
    assert SPEC.workspace(4096, 4096, 4096, SPEC.defaults, 132).floats == 0
    # who sums: the last unit for 2-4 slices whose other sums are at most 96 KB a block, unless SPLIT_SUM 2 says
    # the second launch; the second from 8 slices
    pp = dict(BM=64, BN=128, SCHEDULE=2, STAGES=6, HELD=2, CLUSTER=1)
    for tiles, split, how, last in ((pp, 2, 1, True), (pp, 4, 1, True), (pp, 8, 1, False), (pp, 2, 2, False),
                                    ({}, 1, 1, False), (dict(BN=128), 2, 1, True), (dict(BN=128), 4, 1, False),
                                    ({}, 2, 1, False)):
        p = SPEC.validate(dict(tiles, SPLIT_K=split, SPLIT_SUM=how))
        assert wgmma.split_last_sums(p) == last, (tiles, split, how)
    # the ping-pong tiles' parts are whole tiles, the cooperative ones' halves
    pp = SPEC.validate(dict(BM=64, BN=128, SCHEDULE=2, STAGES=6, HELD=2, CLUSTER=1, SPLIT_K=2))
    assert wgmma.split_parts(64, 4096, pp) == 32 and wgmma.split_parts(200, 520, SPEC.validate(dict(SPLIT_K=2))) == 2 * 3 * 2
    for bad in (dict(SPLIT_K=4, STREAM_K=1), dict(SPLIT_K=4, BATCHED=1)):
        with pytest.raises(ValueError, match="SPLIT_K = 4 goes without"):
            SPEC.validate(bad)
    # the traffic model counts the slabs (fp32, written and read back)
    t = SPEC.traffic(64, 64, 131072, SPEC.validate(dict(SPLIT_K=128, BN=128, CLUSTER=1)))
    assert t.scratch == 128 * 64 * 64


def test_split_reduce_launch_constants_match_the_header():
    text = (Path(compiler.__file__).parents[1] / "kernels" / "cuda" / "epilogue.cuh").read_text()
    for name in ("SPLIT_REDUCE_THREADS",):
        m = re.search(rf"#define {name} (\d+)", text)
        assert m and int(m.group(1)) == getattr(wgmma, name), name
    kernel = (Path(compiler.__file__).parents[1] / "kernels" / "cuda" / "15_wgmma.cu").read_text()
    m = re.search(r"#define SPLIT_LAST_MAX (\d+)", kernel)
    assert m and int(m.group(1)) == wgmma.SPLIT_LAST_MAX


def test_rings_for_tiles_that_stream_b_fit_every_output_and_input():
    """The deeper rings of the small-C rules (SMALL_C_STAGES for one round of 128 x 128 tiles, FP8_PINGPONG_STAGES
    for unsplit 64 x 128 ping-pong tiles of 8-bit inputs without clusters) fit shared memory with every output
    type, and go where the rules say: 8-bit ping-pong tiles only when unsplit, 16-bit ones keep their six slots."""
    for m, n, k in ((128, 11008, 4096), (200, 6000, 4096), (256, 8192, 1024)):
        for element, a_type, layout in (("bfloat16", 2, 2), ("float16", 1, 1), ("tf32", 3, 3), ("float8_e4m3fn", 5, 2)):
            p = SPEC.heuristic(m, n, k, 132, element, layout == 2)
            assert (p.get("BM", 128), p["BN"], p["STAGES"]) == (128, 128, wgmma.SMALL_C_STAGES), (m, n, k, element, p)
            for c_type in (1, 2, 3):
                SPEC.validate({**p, "A_TYPE": a_type, "B_LAYOUT": layout, "C_TYPE": c_type})
    for m, n, k in ((64, 8192, 8192), (128, 4096, 8192), (64, 28672, 4096), (16, 8192, 8192), (256, 4096, 8192),
                    (64, 8192, 2048)):
        p = SPEC.heuristic(m, n, k, 132, "float8_e4m3fn", True)
        if (p.get("SCHEDULE"), p.get("BN"), p.get("SPLIT_K", 1), p["CLUSTER"]) == (wgmma.PINGPONG, 128, 1, 1):
            assert p["STAGES"] == wgmma.FP8_PINGPONG_STAGES, (m, n, k, p)
            for c_type in (1, 2, 3):
                SPEC.validate({**p, "A_TYPE": 5, "B_LAYOUT": 2, "C_TYPE": c_type})
        bf16 = SPEC.heuristic(m, n, k, 132, "bfloat16", True)
        assert bf16.get("BN") == 64 or bf16.get("STAGES", 4) <= 6, (m, n, k)  # (64 x 64 tiles: their own rings)
    for shape in ((256, 4096, 8192), (64, 8192, 2048)):  # M past 128, or K too short for 64 x 64 tiles
        fp8 = SPEC.heuristic(*shape, 132, "float8_e4m3fn", True)
        assert (fp8["SCHEDULE"], fp8["BN"], fp8["STAGES"]) == (wgmma.PINGPONG, 128, wgmma.FP8_PINGPONG_STAGES)
    split = SPEC.heuristic(256, 1024, 8192, 132, "float8_e4m3fn", True)  # split units keep the plain ring
    assert split["SPLIT_K"] > 1 and split["STAGES"] == wgmma.PINGPONG_64x128["STAGES"]
    stages = next(q.choices for q in SPEC.params if q.name == "STAGES")
    assert wgmma.FP8_PINGPONG_STAGES in stages and {wgmma.NARROW_STAGES, wgmma.NARROW_SPLIT_STAGES} <= set(stages)


def test_narrow_tiles_for_small_m():
    """64 x 64 ping-pong tiles (narrow_small_m) where M <= 128 and 64 x 128 tiles would be split: unsplit in a
    ring of NARROW_STAGES where they put blocks on NARROW_MIN_SHARE of the SMs and K is short; split in two
    where K is long and two slices fit one wave, and as far as that share where they are few; the 64 x 128
    split where two slices of a long K do not fit one wave, or M is past 128; never for tf32 (no 64-column
    wgmma); and every pick fits shared memory with every input and output type."""
    np_ = dict(BM=64, BN=64, SCHEDULE=wgmma.PINGPONG, HELD=2, CLUSTER=1)
    for m, n, k, split in ((64, 4096, 4096, 1), (128, 4096, 4096, 1), (64, 8192, 4096, 1), (48, 4096, 4096, 1),
                           (64, 2048, 4096, 2), (32, 4096, 8192, 2), (64, 4096, 11008, 2), (128, 2048, 8192, 2),
                           (64, 1536, 16384, 4), (64, 64, 131072, 64), (1, 8, 1 << 20, 64), (64, 5120, 13824, 1),
                           (128, 4096, 8192, 1)):
        for element in ("bfloat16", "float16"):
            p = SPEC.heuristic(m, n, k, 132, element, True)
            assert {q: p[q] for q in np_} == np_ and p.get("SPLIT_K", 1) == split, (m, n, k, element, p)
            assert p["STAGES"] == (wgmma.NARROW_STAGES if split == 1 else wgmma.NARROW_SPLIT_STAGES)
            for a_type, layout in ((2, 2), (1, 1), (5, 2), (6, 2)):
                for c_type in (1, 2, 3):
                    SPEC.validate({**p, "A_TYPE": a_type, "B_LAYOUT": layout, "C_TYPE": c_type})
        assert SPEC.heuristic(m, n, k, 132, "tf32").get("BN", 256) != 64, (m, n, k)
    for m, n, k in ((96, 8192, 8192), (128, 4096, 11008), (128, 4096, 16384), (128, 8192, 16384), (256, 2048, 8192),
                    (128, 11008, 4096), (64, 4096, 2048), (128, 8192, 4096)):
        assert SPEC.heuristic(m, n, k, 132, "bfloat16", True)["BN"] != 64, (m, n, k)
    # a long K whose two slices do not fit one wave: unsplit where the two rates put that no slower than the split
    assert wgmma.narrow_beats_split(64, 5120, 13824, 2, 192, 2)       # 52.4 against 54.9 us
    assert not wgmma.narrow_beats_split(128, 4096, 11008, 2, 192, 2)  # 37.6 against 36.9 us
    # where K is long in 16 bits it is not in 8: 64 x 4096 x 8192 runs unsplit in e4m3, in two slices in bf16
    assert "SPLIT_K" not in SPEC.heuristic(64, 4096, 8192, 132, "float8_e4m3fn", True)
    assert SPEC.heuristic(64, 4096, 8192, 132, "bfloat16", True)["SPLIT_K"] == 2
    # fewer SMs: a GPU of 66 holds half the tiles in one wave
    assert SPEC.heuristic(128, 4096, 4096, 66, "bfloat16", True)["BN"] != 64
    assert SPEC.heuristic(64, 4096, 4096, 66, "bfloat16", True)["BN"] == 64


@needs_nvrtc
@pytest.mark.parametrize("params", [dict(SPLIT_K=8, BN=128, CLUSTER=1, C_TYPE=3),
                                    dict(SPLIT_K=128, BM=64, BN=128, SCHEDULE=2, STAGES=6, HELD=2, CLUSTER=1, C_TYPE=2),
                                    dict(SPLIT_K=2, C_TYPE=1), dict(SPLIT_K=32, BN=128, CLUSTER=1, B_LAYOUT=2, C_TYPE=3),
                                    dict(SPLIT_K=8, A_TYPE=3, B_LAYOUT=3, BN=128, CLUSTER=1),
                                    dict(SPLIT_K=8, A_TYPE=3, B_LAYOUT=2, C_TYPE=3),
                                    dict(SPLIT_K=4, BM=64, BN=128, SCHEDULE=2, STAGES=6, HELD=2, CLUSTER=1, C_TYPE=3,
                                         B_LAYOUT=2),
                                    dict(SPLIT_K=4, A_TYPE=3, B_LAYOUT=3, BN=128, CLUSTER=1)],
                         ids=str)
def test_split_builds_without_local_memory(params):
    p = SPEC.validate(params)
    mod = compile_spec(SPEC, p, "sm_90")
    for expr in (SPEC.name_expression(p), SPEC.second_kernel.name_for(p)):
        r = mod.resources[expr]
        assert r.registers > 0 and not r.uses_local_memory, (expr, r)


def test_dependent_second_kernels_wait_before_reading():
    """A second kernel launched as a programmatic dependent may start before the rung's grid has finished: its
    body must wait (grid_dependency_wait) before anything else, and the rung's kernel lets it be scheduled
    (grid_dependents_launch). The driver structures of the launch have the sizes the driver reads."""
    import ctypes

    from gemmlab.kernels import registry
    from gemmlab.runtime import launch

    assert ctypes.sizeof(launch._LaunchAttribute) == 72 and ctypes.sizeof(launch._LaunchConfig) == 56
    dependent = [s for s in registry.all_specs() if s.second_kernel is not None and s.second_kernel.dependent]
    assert SPEC in dependent
    for spec in dependent:
        text = spec.source_path.read_text()
        name = spec.second_kernel.name_for(spec.defaults).split("<")[0]
        body = text[text.index(name + "("):]
        body = body[body.index("{") + 1:]
        first = body.strip().split(";")[0]
        assert first.startswith("grid_dependency_wait()"), (spec.name, first)
        assert "grid_dependents_launch()" in text, spec.name
