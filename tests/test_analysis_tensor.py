"""The analysis on the tensor-core rungs and their formats (no GPU): element sizes, compute peaks per
format and instruction, the specs' traffic in bytes against hand counts, the persistent grid's
quantization, and explain for every rung in every format it takes."""

import pytest
from typer.testing import CliRunner

from gemmlab.analysis import explain, model_kernel, predict
from gemmlab.analysis.bounds import compute_rate
from gemmlab.analysis.facts import H100_SXM as H100
from gemmlab.analysis.models import model_format
from gemmlab.cli import app
from gemmlab.formats import REDUCED_PRECISIONS
from gemmlab.kernels import all_specs
from gemmlab.micro.ceilings import Ceilings

SHEET = Ceilings.datasheet(H100)


@pytest.fixture
def no_nvrtc(monkeypatch):
    """Occupancy from threads and shared memory alone: no compile (seconds per instantiation)."""
    from gemmlab.runtime import compiler

    monkeypatch.setattr(compiler, "nvrtc_available", lambda: False)


def formats_of(spec):
    return [(d, None) for d in spec.dtypes] + [(REDUCED_PRECISIONS[p], p) for p in spec.precisions]


def model(name, m, n, k, params=None, dtype=None, precision=None, out_dtype=None):
    return model_kernel(name, m, n, k, params, H100, compile=False, dtype=dtype, precision=precision,
                        out_dtype=out_dtype)


@pytest.mark.parametrize("name, dtype, precision, elem, out_elem, unit", [
    ("wgmma", "bfloat16", None, 2, 2, "tensor cores (wgmma)"),
    ("wgmma", "float32", "tf32", 4, 4, "tensor cores (wgmma)"),
    ("mma_sync", "float16", None, 2, 2, "tensor cores (mma.sync)"),
    ("mma_sync", "float32", "tf32", 4, 4, "tensor cores (mma.sync)"),
    ("skinny", "bfloat16", None, 2, 2, "tensor cores (mma.sync)"),
    ("skinny", "float32", None, 4, 4, "FP32 FMA"),
    ("naive", "float32", None, 4, 4, "FP32 FMA"),
])
def test_element_sizes_and_unit_per_format(name, dtype, precision, elem, out_elem, unit):
    from gemmlab.kernels import get

    f = model_format(get(name), dtype, precision)
    assert (f.elem, f.out_elem, f.unit) == (elem, out_elem, unit)
    assert model_format(get("wgmma"), "bfloat16", None, "float32").out_elem == 4


def test_peaks_per_format_at_a_clock():
    mhz = 1755.0
    limit = H100.sm_count * 4096 * mhz * 1e6  # dense fp16 / bf16 FLOPs per clock per SM on sm_90, at 1755 MHz
    bf16 = compute_rate(model_format(_spec("wgmma"), "bfloat16"), H100, SHEET, mhz)
    tf32 = compute_rate(model_format(_spec("wgmma"), "tf32"), H100, SHEET, mhz)
    mma = compute_rate(model_format(_spec("mma_sync"), "bfloat16"), H100, SHEET, mhz)
    fp32 = compute_rate(model_format(_spec("skinny"), "float32"), H100, SHEET, mhz)
    assert bf16[0] == "tensor" and bf16[1] <= limit and bf16[1] == pytest.approx(limit)
    assert tf32[1] == pytest.approx(bf16[1] / 2)
    assert mma[1] == pytest.approx(0.67 * bf16[1])
    assert fp32[0] == "FMA" and fp32[1] == pytest.approx(H100.sm_count * 128 * 2 * mhz * 1e6)
    # A bound at a lower clock is longer in proportion.
    m = model("wgmma", 4096, 4096, 4096)
    at = {c: predict(m, SHEET, c).bound("tensor").seconds for c in (1980.0, 1320.0)}
    assert at[1320.0] == pytest.approx(at[1980.0] * 1980 / 1320)


def _spec(name):
    from gemmlab.kernels import get

    return get(name)


def test_mma_sync_traffic_in_bytes_by_hand():
    # 1000 x 700 x 300, 128 x 128 tiles: 8 tile rows, 6 tile columns.
    m = model("mma_sync", 1000, 700, 300, {"BM": 128, "BN": 128}, dtype="bfloat16")
    a, b, c = 2 * 1000 * 300 * 6, 2 * 300 * 700 * 8, 2 * 1000 * 700
    assert (2 * m.traffic.a_loads, 2 * m.traffic.b_loads) == (a, b)
    assert m.requested_bytes == a + b + c
    t = model("mma_sync", 1000, 700, 300, {"BM": 128, "BN": 128}, dtype="float32", precision="tf32")
    assert t.params["BK"] == 16 and t.requested_bytes == 2 * (a + b + c)


def test_wgmma_traffic_in_bytes_by_hand():
    # 1000 x 700 x 300, 128 x 256 tiles: 8 tile rows, 3 tile columns; clusters of two tile rows share B.
    p = {"BM": 128, "BN": 256, "CLUSTER": 2}
    m = model("wgmma", 1000, 700, 300, p, dtype="float16")
    a, b, c = 2 * 1000 * 300 * 3, 2 * 300 * 700 * 4, 2 * 1000 * 700
    assert m.requested_bytes == a + b + c
    assert model("wgmma", 1000, 700, 300, {**p, "CLUSTER": 1}).requested_bytes == a + 2 * b + c
    # Multicast: the L1 -> L2 loads are the requested ones, B once per cluster.
    assert m.cache.l2_load_bytes == pytest.approx(a + b, rel=0.02)
    assert (m.geometry.tile_m, m.geometry.tile_n) == (128, 256)


def test_skinny_traffic_in_bytes_by_hand():
    # 8 x 4096 x 1024, 8 warps of 16 columns: 32 column blocks, one tile of MT = 8 rows.
    p = {"MT": 8, "NT": 1, "WARPS": 8, "UNROLL": 4, "STAGES": 4, "COPY": 0, "SCHED": 0, "SPLIT": 1}
    m = model("skinny", 8, 4096, 1024, p, dtype="bfloat16")
    a, b, c = 2 * 8 * 1024 * 32, 2 * 1024 * 4096, 2 * 8 * 4096
    assert m.requested_bytes == a + b + c
    assert model("skinny", 8, 4096, 1024, {**p, "COPY": 3, "STAGES": 2}, dtype="bfloat16").requested_bytes == 8 * a + b + c
    assert model("skinny", 8, 4096, 1024, p, dtype="float32").requested_bytes == 2 * (a + b + c)


def test_wgmma_persistent_grid_quantization_by_hand():
    p = {"BM": 128, "BN": 256, "CLUSTER": 2}
    m = model("wgmma", 4096, 4096, 4096, p)
    q = m.quant
    assert m.resident == 132 and m.occupancy.blocks_per_sm == 1
    assert (q.tiles, q.full_waves, q.busiest_sm_blocks) == (512, 4, 4)      # 32 x 16 tiles, 132 at once
    assert q.wave_efficiency == pytest.approx(512 / (4 * 132))
    # 33 tile rows: the clusters round them up to 34 (the extra block computes padding), 544 tiles, 5 rounds.
    q = model("wgmma", 33 * 128, 4096, 4096, p).quant
    assert (q.tiles, q.full_waves) == (544, 5) and q.tile_efficiency == pytest.approx(528 / 544)
    # Fewer tiles than resident blocks: one round.
    q = model("wgmma", 1024, 1024, 1024, p).quant
    assert (q.tiles, q.full_waves, q.busiest_sm_blocks) == (32, 1, 1)


def test_a_last_round_in_parts_counts_as_a_fraction_of_a_round(no_nvrtc):
    """320 tiles of 128 x 256 on 132 SMs (clusters of one): 3 rounds of whole tiles, the last 56 tiles in
    halves (stream_k_parts) make it 2.5; the busiest SM runs 2.5 tiles' work."""
    p = {"BM": 128, "BN": 256, "CLUSTER": 1, "B_LAYOUT": 2}
    whole = model("wgmma", 2048, 5120, 13824, {**p, "STREAM_K": 0}).quant
    parts = model("wgmma", 2048, 5120, 13824, {**p, "STREAM_K": 1}).quant
    assert (whole.tiles, whole.full_waves, whole.last_parts, whole.busiest_sm_blocks) == (320, 3, 1, 3)
    assert (parts.tiles, parts.full_waves, parts.last_parts, parts.busiest_sm_blocks) == (320, 3, 2, 2.5)
    assert parts.wave_efficiency == pytest.approx(320 / (2.5 * 132))
    assert parts.balance_efficiency == pytest.approx(320 / (2.5 * 132))
    # whole rounds: nothing to cut
    q = model("wgmma", 4096, 4096, 4096, {"BM": 128, "BN": 256, "CLUSTER": 2, "STREAM_K": 1}).quant
    assert q.last_parts == 1
    e = explain("wgmma", 2048, 5120, 13824, device=H100, dtype="bfloat16", params={**p, "STREAM_K": 1})
    assert any("the last in 2 parts along K" in r[1] for r in e.rows)


def test_block_scales_add_the_promotion_to_the_tensor_time(no_nvrtc):
    """PROMOTE 1: one FMA per output element per k step of 128 on the CUDA cores; 128 x 256 tiles at 8 bits:
    32768 FMAs a step against 128 x 256 x 128 MACs on the tensor cores, a quarter of their time at H100's rates,
    and not overlapped with them (measured), so the bound is 1.25 x the tensor cores' and limits the kernel."""
    p = {"PROMOTE": 1, "DEFER": 0, "B_LAYOUT": 2}
    e = explain("wgmma", 4096, 7168, 16384, device=H100, dtype="float8_e4m3fn", params=p)
    bounds = {b.resource: b for b in e.prediction.bounds}
    assert bounds["promotion"].amount == pytest.approx(2.0 * 7 * 128 * 256 * 128 * 132)
    assert 1.2 < bounds["promotion"].seconds / bounds["tensor"].seconds < 1.3
    assert e.prediction.limiter.resource == "promotion"
    assert "the two times add" in e.paragraph
    plain = explain("wgmma", 4096, 7168, 16384, device=H100, dtype="float8_e4m3fn", params={"B_LAYOUT": 2})
    assert "promotion" not in {b.resource for b in plain.prediction.bounds}


def test_split_over_k_counts_each_unit_over_its_slice(no_nvrtc):
    """Rung 15's split: 64 units of one 64 x 128 tile over 1/64 of K each; the busiest SM's tensor work is one
    slice, so the bound is DRAM (the operands' 33.6 MB), and the slabs are counted as scratch traffic."""
    p = {"BM": 64, "BN": 128, "SCHEDULE": 2, "STAGES": 6, "HELD": 2, "CLUSTER": 1, "SPLIT_K": 64}
    m = model("wgmma", 64, 64, 131072, p, dtype="bfloat16")
    q = m.quant
    assert (q.splits, q.tiles, q.full_waves, q.busiest_sm_blocks) == (64, 64, 1, 1)
    assert q.tile_efficiency == pytest.approx(0.5) and q.k_per_block == 131072 / 64
    assert m.traffic.scratch == 64 * 64 * 64
    pred = predict(m, SHEET)
    assert pred.limiter.resource == "DRAM"
    tensor = pred.bound("tensor")
    assert tensor.amount == pytest.approx(2 * 64 * 128 * 131072 / 64 * 132)  # one slice on the busiest SM
    unsplit = predict(model("wgmma", 64, 64, 131072, {**p, "SPLIT_K": 1}, dtype="bfloat16"), SHEET)
    assert unsplit.limiter.resource == "tensor" and unsplit.bound("tensor").seconds > 30 * tensor.seconds


def test_grouped_persistent_order_reads_less_from_dram_than_row_major():
    grouped = model("wgmma", 8192, 16384, 4096, {"GROUP_M": 16})
    row_major = model("wgmma", 8192, 16384, 4096, {"GROUP_M": 1})
    assert grouped.cache.dram_read_bytes < row_major.cache.dram_read_bytes
    assert grouped.cache.dram_read_bytes >= grouped.cache.compulsory_read_bytes


@pytest.mark.parametrize("spec", [s for s in all_specs() if s.dtypes != ("float32",)], ids=lambda s: s.name)
def test_explain_every_tensor_rung_in_every_format(spec, no_nvrtc):
    m = 8 if spec.fits_shape else 512
    for dtype, precision in formats_of(spec):
        e = explain(spec, m, 1024, 1024, device=H100, dtype=dtype, precision=precision)
        assert e.model.fmt.dtype == dtype and e.prediction.seconds > 0
        assert e.prediction.limiter.seconds == max(b.seconds for b in e.prediction.bounds)
        assert e.paragraph.startswith(f"Model only: {spec.name}")
        assert any(r[0].startswith("compute peak at 1980 MHz") for r in e.rows)


def test_explain_wgmma_on_the_preset_states_its_clock(no_nvrtc):
    r = CliRunner().invoke(app, ["explain", "wgmma", "--device", "h100"], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "tensor" in r.output and "1980 MHz" in r.output and "preset's boost clock" in r.output
    r = CliRunner().invoke(app, ["explain", "mma_sync", "--dtype", "tf32", "--size", "1024", "--device", "h100"],
                           terminal_width=200)
    assert r.exit_code == 0 and "tf32" in r.output, r.output
    r = CliRunner().invoke(app, ["explain", "mma_sync", "--dtype", "float32", "--device", "h100"])
    assert r.exit_code != 0 and "tf32" in r.output


@pytest.mark.parametrize("name", ["tma_wgmma", "warp_specialized", "persistent"])
def test_hopper_steps_traffic_in_bytes_by_hand(name):
    # 1000 x 700 x 300 in fp16. Rungs 12 and 13: one block per tile, A once per tile column, B once per tile
    # row. Rung 14: B once per cluster of two tile rows (multicast).
    p = {"BM": 128, "BN": 128} if name == "tma_wgmma" else {"BM": 128, "BN": 256}
    rows, cols = 8, (6 if name == "tma_wgmma" else 3)
    m = model(name, 1000, 700, 300, p, dtype="float16")
    b_reads = 4 if name == "persistent" else rows
    assert m.requested_bytes == 2 * 1000 * 300 * cols + 2 * 300 * 700 * b_reads + 2 * 1000 * 700
    assert (m.geometry.tile_m, m.geometry.tile_n) == (p["BM"], p["BN"])
    if name == "persistent":  # the launcher caps the grid at one resident block per SM, in whole clusters
        assert m.resident and m.resident % 2 == 0


def test_explain_names_power_where_the_kernel_ran_at_the_limit(no_nvrtc):
    """The power part: run back to back at the board's limit, the limiter is power, and the clock, the draw and
    the share of the tensor peak at that clock are stated; below the limit the model's verdict stands."""
    from gemmlab.analysis.explain import PowerState

    flops = 2 * 8192**3
    at_limit = PowerState(ms=flops / 700e12 * 1e3, sm_mhz=1500.0, watts=699.0, limit_w=700.0, power_limited=True)
    e = explain("wgmma", 8192, 8192, 8192, device=H100, dtype="bfloat16", power=at_limit)
    assert e.limiter == "power"
    peak_at_1500 = e.prediction.compute_peak * 1500 / e.prediction.sm_clock_mhz
    assert "limited by power" in e.paragraph and "699 W of its 700 W limit" in e.paragraph
    assert "1500 MHz" in e.paragraph and f"{100 * 700e12 / peak_at_1500:.1f}% of the" in e.paragraph
    rows = {r[0].strip(): r[2] for r in e.rows}
    assert rows["board draw (of the limit)"] == "699 W of 700 W (at the limit)"
    assert rows["SM clock"] == "1500 MHz (NVML)"
    # a rate above the peak at the clock measured is impossible: no share over 100 % is printed
    slow_clock = PowerState(ms=at_limit.ms, sm_mhz=1000.0, watts=699.0, limit_w=700.0, power_limited=True)
    e = explain("wgmma", 8192, 8192, 8192, device=H100, dtype="bfloat16", power=slow_clock)
    assert "higher clock than measured" in e.paragraph and "%" not in e.paragraph.split("limited by power")[1]
    below = PowerState(ms=at_limit.ms, sm_mhz=1980.0, watts=400.0, limit_w=700.0, power_limited=False)
    e = explain("wgmma", 8192, 8192, 8192, device=H100, dtype="bfloat16", power=below)
    assert e.limiter != "power" and "below the limit" in e.paragraph
    # the draw alone within 5 % of the limit counts, where NVML named no reason
    near = PowerState(ms=at_limit.ms, sm_mhz=1600.0, watts=680.0, limit_w=700.0, power_limited=False)
    assert near.at_limit and not PowerState(1.0, None, None, None, False).at_limit


def test_profile_runs_carry_their_format():
    from dataclasses import asdict

    from gemmlab.analysis.ncu import ProfileRun

    r = ProfileRun("wgmma", 4096, 4096, 4096, {}, "bf16")
    assert asdict(r)["fmt"] == "bf16" and r.label == "wgmma 4096x4096x4096 bf16"
    assert ProfileRun("naive", 64, 64, 64).label == "naive 64x64x64"


def test_cp_async_into_rows_off_a_sector_is_carried_twice(no_nvrtc):
    """Rung 11 pads its shared-memory rows by 16 bytes (conflict-free ldmatrix). Where the pitch is an odd
    number of 16-byte chunks every other row starts half a sector off, and the crossbar carries those rows'
    sectors twice: 1.5x what the tiles ask for (H100: 3.29 GB against 2.18 at 4096^3 bf16)."""
    from gemmlab.kernels import registry

    spec = registry.get("mma_sync")
    bf16 = spec.traffic(4096, 4096, 4096, spec.validate({"BK": 32, "BN": 128, "A_TYPE": 2}))
    assert (bf16.a_carried, bf16.b_carried) == (1.5, 1.5)        # pitches of 80 and 272 bytes
    tf32 = spec.traffic(4096, 4096, 4096, spec.validate({"BK": 16, "BN": 128, "A_TYPE": 3}))
    assert (tf32.a_carried, tf32.b_carried) == (1.5, 1.0)        # 80 bytes; B padded by 32: 544
    m = model("mma_sync", 4096, 4096, 4096, {"BM": 128, "BN": 128, "BK": 32}, dtype="bfloat16")
    asked = 2 * 4096 ** 3 * 2 / 128                                # A and B once per tile column / row
    assert m.cache.xbar_load_bytes == pytest.approx(1.5 * asked)
    assert m.cache.l1_requested_bytes == pytest.approx(asked)
    # The TMA rung after it copies whole boxes into unpadded (swizzled) rows: nothing carried twice.
    t = model("tma_wgmma", 4096, 4096, 4096, {"BM": 128, "BN": 128}, dtype="bfloat16")
    assert t.cache.xbar_load_bytes == pytest.approx(asked)


def test_two_sms_of_a_tpc_share_l2_lookups(no_nvrtc):
    """Blocks 2j and 2j+1 start on the two SMs of one TPC, and what they read together L2 looks up once. In
    grouped order they are vertically adjacent tiles and share B: with one block per SM (warp-specialised,
    128 x 256 tiles) L2 reads A once per tile and B once per pair, for every wave; with two blocks per SM
    (tma_wgmma) only the first wave is paired."""
    ws = model("warp_specialized", 4096, 4096, 4096, {"BM": 128, "BN": 256, "GROUP_M": 8}, dtype="bfloat16")
    a = 4096 ** 3 * 2 / 256                  # A once per tile column
    b = 4096 ** 3 * 2 / 128                  # B once per tile row
    assert ws.cache.xbar_load_bytes == pytest.approx(a + b)
    assert ws.cache.l2_load_bytes == pytest.approx(a + b / 2)
    t = model("tma_wgmma", 4096, 4096, 4096, {"BM": 128, "BN": 128, "GROUP_M": 8}, dtype="bfloat16")
    per_tile = 2 * 128 * 4096 * 2            # its A rows and B columns over K
    first_wave = 2 * 132                     # two blocks per SM
    assert t.cache.xbar_load_bytes - t.cache.l2_load_bytes == pytest.approx(first_wave / 2 * per_tile / 2)


def test_delivered_bytes_count_every_block_of_a_cluster(no_nvrtc):
    """The crossbar delivers a multicast box to every block of the cluster: the model's bytes to the SMs are
    those of the same tiles without clusters; without multicast they are its L1 <-> L2 bytes."""
    from gemmlab.analysis.ncu import Counters, ProfileRun, compare_traffic, delivered_model

    p = {"BM": 128, "BN": 256, "CLUSTER": 2}
    shared = model("wgmma", 4096, 4096, 4096, p, dtype="bfloat16")
    alone = model("wgmma", 4096, 4096, 4096, {**p, "CLUSTER": 1}, dtype="bfloat16")
    assert delivered_model(shared) == pytest.approx(alone.cache.delivered_bytes)
    assert shared.cache.l2_bytes < 0.75 * alone.cache.delivered_bytes  # B once per cluster in L2's reads
    # Without clusters the two SMs of a TPC (vertically adjacent tiles in grouped order) still read B
    # together, and L2 looks it up once: the same L2 bytes, twice the delivered ones for B.
    assert alone.cache.l2_bytes == pytest.approx(shared.cache.l2_bytes)
    steps = model("warp_specialized", 4096, 4096, 4096, dtype="bfloat16")
    assert delivered_model(steps) == steps.cache.delivered_bytes > steps.cache.l2_bytes
    c = Counters(ProfileRun("wgmma", 4096, 4096, 4096, {}, "bf16"), "k",
                 {"dram_read_bytes": 1.5e8, "dram_write_bytes": 3e7, "l2_bytes": 1e9, "l2_from_l1_sectors": 3e7,
                  "xbar_read_bytes": 1.6e9, "xbar_write_bytes": 3.4e7})
    cmp_ = compare_traffic(shared, c)
    assert cmp_.measured_delivered == pytest.approx(1.634e9) and cmp_.model_delivered == pytest.approx(alone.cache.delivered_bytes)
    assert cmp_.delivered_ratio == pytest.approx(alone.cache.delivered_bytes / 1.634e9)
