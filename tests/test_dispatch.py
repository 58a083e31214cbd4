"""kernel="auto" without a GPU: which rung it picks for a dtype, precision, compute capability, epilogue and
operands, why (explain_choice, `gemmlab run --explain --cc`), and that a new rung is picked up from its
spec alone (min_cc, exact targets, operand rules) with no change to the API."""

import sys
from dataclasses import replace
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from gemmlab import api
from gemmlab.cli import app
from gemmlab.kernels import cc_problem, get, registry, specs_for, takes
from gemmlab.kernels.spec import Workspace
from gemmlab.runtime import device
from gemmlab.tuned import TunedCache

runner = CliRunner()
MMA = get("mma_sync")
SGEMM = get("sgemm")


def _with_rungs(monkeypatch, *specs):
    """The registry plus `specs` (new rungs on top), for this test only."""
    reg = dict(registry.REGISTRY)
    for s in specs:
        reg[s.name] = s
    monkeypatch.setattr(registry, "REGISTRY", dict(sorted(reg.items(), key=lambda kv: kv[1].rung)))


def test_strict_fp32_is_the_default_and_tf32_only_on_request():
    assert api.choose_kernel("float32", (9, 0)).name == "sgemm"
    assert api.choose_kernel("float32", (9, 0), "fp32").name == "sgemm"
    assert api.choose_kernel("float32", (9, 0), "tf32").name == "wgmma"
    assert api.choose_kernel("float32", (8, 0), "tf32").name == "mma_sync"
    assert takes(MMA, "float32", "tf32") and not takes(MMA, "float32") and not takes(SGEMM, "float32", "tf32")
    assert MMA not in registry.specs_for_dtype("float32")  # ladder, tuner and analysis never meet tf32
    assert [s.name for s in specs_for("float32", "tf32")] == ["mma_sync", "wgmma"]
    with pytest.raises(TypeError, match="float32 at precision 'tf32' on compute capability 7.5"):
        api.choose_kernel("float32", (7, 5), "tf32")


def test_cc_problems_name_what_the_rung_needs():
    assert cc_problem(MMA, (8, 0)) is None and cc_problem(MMA, (9, 0)) is None
    assert "8.0 or newer, the device is 7.5" in cc_problem(MMA, (7, 5))
    exact = replace(MMA, name="exact", rung=90, min_cc=(9, 0), targets=("sm_90a",))
    assert cc_problem(exact, (9, 0)) is None
    assert "built for sm_90a only, the device is 10.0" in cc_problem(exact, (10, 0))
    assert "9.0 or newer, the device is 8.9" in cc_problem(exact, (8, 9))


def test_a_new_rung_is_chosen_from_its_spec_alone(monkeypatch):
    """A rung with a higher min_cc and an exact target (like sm_90a) wins where it runs, and only there."""
    hopper = replace(MMA, name="hopper_only", rung=90, min_cc=(9, 0), targets=("sm_90a",), precisions=())
    _with_rungs(monkeypatch, hopper)
    assert api.choose_kernel("bfloat16", (9, 0)).name == "hopper_only"
    assert api.choose_kernel("float16", (8, 9)).name == "mma_sync"
    assert api.choose_kernel("float16", (10, 0)).name == "mma_sync"  # sm_90a code does not run on sm_100
    assert api.choose_kernel("float32", (9, 0), "tf32").name == "wgmma"  # it offers no tf32; wgmma does
    choice = api.explain_choice("bfloat16", cc=(8, 6))
    verdicts = {c.name: c for c in choice.candidates}
    assert not verdicts["hopper_only"].fits and "9.0 or newer, the device is 8.6" in verdicts["hopper_only"].reason
    assert verdicts["mma_sync"].reason.startswith("chosen")


def test_operand_rules_send_auto_to_the_next_rung(monkeypatch):
    seen = []

    def problems(a_ptr, lda, b_ptr, ldb, element_bytes):
        seen.append((a_ptr, lda, b_ptr, ldb, element_bytes))
        return [] if lda % 8 == 0 else [f"lda = {lda} is not a multiple of 8"]

    picky = replace(MMA, name="picky", rung=91, precisions=(), operand_rules=problems)
    _with_rungs(monkeypatch, picky)
    assert api.choose_kernel("float16", (9, 0), operands=(256, 64, 512, 64)).name == "picky"
    # the next rung down stages operands its copy engine cannot read, so it takes them
    assert api.choose_kernel("float16", (9, 0), operands=(256, 63, 512, 64)).name == "wgmma"
    assert seen[-1] == (256, 63, 512, 64, 2)
    assert api.choose_kernel("float16", (9, 0)).name == "picky"  # operands unknown: the rule is checked per call
    _, cands = api.dispatch._decide("float16", "fp16", (9, 0), False, (256, 63, 512, 64))
    assert "operands: lda = 63 is not a multiple of 8" in {c.name: c for c in cands}["picky"].reason


def test_an_epilogue_skips_rungs_without_one(monkeypatch):
    plain = replace(SGEMM, name="plain_fp32", rung=92, arguments=("workspace",), type_params=())
    _with_rungs(monkeypatch, plain)
    assert api.choose_kernel("float32", (9, 0)).name == "plain_fp32"
    assert api.choose_kernel("float32", (9, 0), epilogue=True).name == "sgemm"
    why = {c.name: c.reason for c in api.explain_choice("float32", cc=(9, 0), epilogue=True).candidates}
    assert "takes no fused epilogue" in why["plain_fp32"]
    assert SGEMM.epilogue and MMA.epilogue


def test_explain_choice_gives_parameters_and_their_source():
    c = api.explain_choice("float32", "tf32", shape=(4096, 4096, 4096), cc=(8, 9))  # Ada: no wgmma
    assert c.spec.name == "mma_sync" and c.precision == "tf32" and c.params_source == "defaults"
    assert c.params["A_TYPE"] == 3 and c.params["C_TYPE"] == 1 and c.params["BK"] == 16  # tf32 defaults
    assert "tf32 defaults BK=16" in c.params_detail
    text = c.describe()
    assert "mma_sync (rung 11)" in text and "chosen: the highest rung that fits" in text
    assert "runs float32 at fp32, not float32 at tf32" in text  # why sgemm was passed over
    assert "A_TYPE=3" in text

    h = api.explain_choice("float32", shape=(128, 128, 65536), cc=(9, 0), sm_count=132)
    assert h.spec.name == "sgemm" and h.params_source == "heuristic" and h.params["SPLIT_K"] > 1
    assert "132 SMs" in h.params_detail

    g = api.explain_choice("float32", shape=(512, 512, 512), cc=(9, 0), kernel="sgemm", params={"BM": 128})
    assert g.named and g.params_source == "given" and g.params["BM"] == 128

    o = api.explain_choice("float32", "tf32", shape=(256, 256, 256), cc=(8, 0), out_dtype="bf16")
    assert o.params["C_TYPE"] == 3


def test_explain_choice_reads_the_devices_tuned_entry(monkeypatch, tmp_path):
    info = SimpleNamespace(name="test device", compute_capability=(9, 0), sm_count=132)
    cache = TunedCache("test-device", tmp_path / "tuned.json", {})
    tuned = dict(SGEMM.defaults, BM=128, BN=128, WM=64, WN=32, TM=8, TN=8)
    cache.store("sgemm", "m-le4096.n-le4096.k-le4096", tuned, 40.0)
    monkeypatch.setattr(api.dispatch, "tuned_cache", lambda _info: cache)
    c = api.explain_choice("float32", shape=(4096, 4096, 4096), info=info)
    assert c.params_source == "tuned" and c.params["BM"] == 128 and "sgemm/float32/m-le4096" in c.params_detail
    # tf32 entries are keyed apart from strict fp32 ones
    assert api.resolve_params(MMA, 4096, 4096, 4096, info, element="tf32")[1] == "defaults"
    # a what-if for another compute capability does not read this device's entries
    w = api.explain_choice("float32", shape=(4096, 4096, 4096), info=info, cc=(8, 0))
    assert w.params_source == "defaults" and "no device to read tuned entries from" in w.params_detail


def test_a_tuned_entry_takes_the_shapes_own_alignment(monkeypatch, tmp_path):
    """A tuned entry is measured on its shape class's members, which may be aligned where this shape is not:
    B_COPY and C_STAGE follow this shape's N (C through shared memory, B in 4-byte copies where N is off a
    multiple of 4), the rest is the entry's, and the detail says what moved."""
    info = SimpleNamespace(name="test device", compute_capability=(9, 0), sm_count=132)
    cache = TunedCache("test-device", tmp_path / "tuned.json", {})
    tuned = dict(SGEMM.defaults, BM=128, BN=128, BK=16, WM=64, WN=32, TM=8, TN=8, C_STAGE=0, B_COPY=16)
    cache.store("sgemm", "m-le4096.n-le4096.k-le4096", tuned, 40.0)
    monkeypatch.setattr(api.dispatch, "tuned_cache", lambda _info: cache)
    aligned, source, detail = api.resolve_params(SGEMM, 4096, 4096, 4096, info)
    assert source == "tuned" and aligned["C_STAGE"] == 0 and aligned["B_COPY"] == 16
    assert "from this shape" not in detail
    odd, source, detail = api.resolve_params(SGEMM, 4000, 4001, 4000, info)
    assert source == "tuned" and odd["C_STAGE"] == 1 and odd["B_COPY"] == 4 and odd["BN"] == 128
    assert "C_STAGE=1" in detail and "B_COPY=4" in detail
    SGEMM.validate(odd)
    # a tile whose ring cannot stage C (BK = 8: 6,240 floats for 9,216) keeps the entry's C_STAGE
    small = dict(tuned, BK=8)
    assert not SGEMM.problems(small) and SGEMM.problems(dict(small, C_STAGE=1))
    cache.store("sgemm", "m-le4096.n-le4096.k-le4096", small, 40.0)
    kept, _, _ = api.resolve_params(SGEMM, 4000, 4001, 4000, info)
    assert kept["C_STAGE"] == 0 and kept["B_COPY"] == 4
    SGEMM.validate(kept)


def test_explain_refuses_bad_precision():
    with pytest.raises(ValueError, match="precision='bf16' does not fit float32"):
        api.explain_choice("float32", "bf16", cc=(9, 0))
    with pytest.raises(TypeError, match="float32"):
        api.explain_choice("float64", cc=(9, 0))


# ------------------------------------------------------------------------------------------- CLI


def test_run_explain_with_a_compute_capability_needs_no_gpu():
    r = runner.invoke(app, ["run", "--explain", "--cc", "8.9", "--precision", "tf32", "--size", "4096"],
                      terminal_width=200)
    assert r.exit_code == 0, r.output
    assert 'kernel="auto" for float32 inputs at tf32 on compute capability 8.9: mma_sync (rung 11)' in r.output
    assert "BK=16" in r.output and "A_TYPE=3" in r.output
    r = runner.invoke(app, ["run", "--explain", "--cc", "9.0", "--precision", "tf32", "--size", "4096"],
                      terminal_width=200)
    assert r.exit_code == 0 and "compute capability 9.0: wgmma (rung 15)" in r.output, r.output


def test_run_cc_shows_the_fp32_heuristic_and_a_named_kernel_that_cannot_run():
    r = runner.invoke(app, ["run", "--cc", "sm_90", "--sms", "132", "--m", "128", "--n", "128", "--k", "65536"],
                      terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "sgemm (rung 10)" in r.output and "heuristic" in r.output and "SPLIT_K=" in r.output
    r = runner.invoke(app, ["run", "mma_sync", "--cc", "7.5", "--dtype", "float16"], terminal_width=200)
    assert r.exit_code != 0 and "needs compute capability 8.0 or newer" in r.output


@pytest.mark.parametrize("args,match", [
    (["run", "--cc", "hopper"], "--cc takes a compute capability"),
    (["run", "--cc", "9.0", "--dtype", "float64"], "--dtype takes float32, float16 or bfloat16"),
    (["run", "--cc", "9.0", "--dtype", "float16", "--precision", "tf32"], "precision='tf32' does not fit float16"),
    (["run", "cpu_naive", "--explain"], "CPU baseline"),
])
def test_run_explain_refuses_bad_options_in_one_line(args, match):
    r = runner.invoke(app, args, terminal_width=200)
    assert r.exit_code != 0 and match in r.output


@pytest.mark.skipif(device.gpu_available(), reason="checks the no-GPU message")
def test_run_explain_without_gpu_or_cc_says_what_to_give():
    r = runner.invoke(app, ["run", "--explain"], terminal_width=200)
    assert r.exit_code != 0 and "--cc" in r.output


def test_operand_staging_follows_the_specs():
    """sgemm copies an unaligned B into padded rows only for products of 2^30 multiply-adds or more, and only
    when it reads a row-major B in 16-byte pieces; wgmma stages both operands whatever the size."""
    stage = SGEMM.staging.letters
    assert stage(333, 777, 999, SGEMM.validate({})) == ""
    assert stage(4097, 4097, 4097, SGEMM.validate({})) == "B"
    assert stage(4097, 4097, 4097, SGEMM.validate({"B_COPY": 4})) == ""
    assert stage(4097, 4097, 4097, SGEMM.validate({"B_LAYOUT": 2})) == ""  # B^T read in 4-byte pieces, as A
    assert get("wgmma").staging.letters(1, 1, 1, get("wgmma").defaults) == "AB"


def test_sgemm_heuristic_copies_unaligned_b_in_four_byte_pieces():
    """N not a multiple of 4: four-byte B copies on every tile, split or not, except 128 x 256 on the products
    the API pads B for (16-byte copies of the padded B)."""
    seen = set()
    for m, n, k in [(333, 777, 999), (2047, 2049, 1023), (4097, 4097, 4097), (100, 101, 50), (129, 1001, 300),
                    (6000, 601, 200), (1000, 3001, 200), (1000, 3001, 800)]:
        p = SGEMM.heuristic(m, n, k, 132)
        tile = (p["BM"], p["BN"])
        seen.add((tile, p["SPLIT_K"] > 1))
        padded = tile == (128, 256) and m * n * k >= SGEMM.staging.min_macs
        assert p["B_COPY"] == (16 if padded else 4), (m, n, k, p)
        SGEMM.validate(p)
    assert {((64, 64), False), ((128, 128), True), ((128, 128), False), ((128, 64), False)} <= seen, seen
    for m, n, k in [(4096, 4096, 4096), (1000, 1000, 1000), (64, 64, 131072)]:
        assert SGEMM.heuristic(m, n, k, 132)["B_COPY"] == 16


def test_sgemm_writes_c_through_shared_memory_when_n_is_off_a_multiple_of_4():
    """C's rows are 16-byte aligned only when N is a multiple of 4: otherwise C_STAGE = 1 on every tile (the
    staged rows fit every class's ring); a ring too small for them is refused, naming C_STAGE."""
    for m, n, k in [(333, 777, 999), (2047, 2049, 1023), (1000, 3001, 200), (100, 101, 50), (4096, 4095, 64),
                    (4096, 4096, 4096), (1000, 1000, 1000), (64, 64, 131072), (7, 8, 9)]:
        p = SGEMM.heuristic(m, n, k, 132)
        assert p["C_STAGE"] == int(n % 4 != 0), (m, n, k, p)
        SGEMM.validate(p)
    with pytest.raises(ValueError, match="C_STAGE = 1"):
        SGEMM.validate(dict(BM=64, BN=64, BK=8, WM=32, WN=32, TM=4, TN=8, STAGES=3, C_STAGE=1))
    assert SGEMM.validate(dict(BM=64, BN=64, BK=8, WM=32, WN=32, TM=4, TN=8, STAGES=3))["C_STAGE"] == 0


def test_sgemm_split_tail_geometry_and_choice():
    """WAVE = W > 1 splits only the tiles past the last whole wave of W: tiles - tail + tail x SPLIT_K blocks.
    The heuristic offers it where the last wave is partial (4097^3 on 132 SMs: 33 x 33 tiles of 128 x 128
    against 264 slots), never where the waves are whole or the tiles fewer than one wave."""
    base = dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=4, TN=8, SPLIT_K=4)
    for wave, blocks in [(1, 25 * 4), (7, 21 + 4 * 4), (8, 24 + 1 * 4), (25, 25), (26, 25 * 4)]:
        p = SGEMM.validate(dict(base, WAVE=wave))
        assert SGEMM.launch(300, 300, 1000, p).blocks == blocks, wave
    p = SGEMM.heuristic(4097, 4097, 4097, 132)
    tiles = -(-4097 // p["BM"]) * -(-4097 // p["BN"])
    assert p["WAVE"] > 1 and p["SPLIT_K"] > 1 and tiles > p["WAVE"] and tiles % p["WAVE"]
    for m, n, k in [(4096, 4096, 4096), (8192, 8192, 8192), (64, 64, 131072), (1000, 1000, 1000)]:
        assert SGEMM.heuristic(m, n, k, 132)["WAVE"] == 1, (m, n, k)


def test_sgemm_split_summing_follows_the_split():
    """Two slices and split tails are summed in the kernel; four or more by the second kernel, whose launch
    only such parameter sets get; REDUCE = 2 with a split tail is refused by name."""
    from gemmlab.kernels.rungs import sgemm

    assert sgemm._reduce_for(2, 1) == 1 and sgemm._reduce_for(4, 1) == 2 and sgemm._reduce_for(8, 264) == 1
    for m, n, k in [(256, 256, 65536), (333, 777, 999), (64, 64, 131072), (4096, 4096, 4096), (4097, 4097, 4097)]:
        p = SGEMM.heuristic(m, n, k, 132)
        assert p["REDUCE"] == sgemm._reduce_for(p["SPLIT_K"], p["WAVE"]), (m, n, k, p)
        after = SGEMM.second_kernel.geometry(m, n, k, SGEMM.validate(p))
        assert (after is not None) == (p["REDUCE"] == 2)
        if after is not None:
            assert after.blocks * after.threads_per_block >= m * -(-n // 4)
    with pytest.raises(ValueError, match="REDUCE = 2 .* WAVE = 1"):
        SGEMM.validate(dict(SPLIT_K=4, WAVE=132, REDUCE=2))
    with pytest.raises(ValueError, match="REDUCE = 3"):
        SGEMM.validate(dict(SPLIT_K=4, REDUCE=3))


def test_sgemm_split_slices_may_be_shorter_when_the_second_kernel_sums_them():
    """Splitting stops at 256 k per slice for two slices, at 96 k once the second kernel sums them, and the
    128 x 256 tile is split only into slices of 1024 k or more."""
    from gemmlab.kernels.rungs import sgemm

    assert sgemm._split_for(78, 660, 999) == 8        # 333 x 777 x 999 in 64 x 64 tiles: 125 k slices
    assert sgemm._split_for(78, 660, 500) == 1        # two slices of 250 k: not worth it
    assert sgemm._split_for(32, 132, 1000, 1024) == 1  # 1000^3 in 128 x 256 tiles
    assert sgemm._split_for(2, 132, 65536, 1024) == 64


def test_sgemm_split_workspace_rows_are_padded_to_four_floats():
    p = SGEMM.validate(dict(SPLIT_K=4))
    ws = SGEMM.workspace(333, 777, 999, p, 0)
    assert ws.floats == 4 * 333 * 780 and ws.ints == 3 * 4 * 2 and ws.scalars == ()
    assert SGEMM.workspace(333, 777, 999, SGEMM.validate({}), 0) == Workspace()


def test_an_epilogue_may_bring_the_rungs_preferred_parameters_unless_the_caller_names_them():
    """GELU with erf runs rung 15 without the deferred stores (spec.epilogue_params); the caller's own
    DEFER wins, and the other activations keep the default."""
    erf = api.explain_choice("bfloat16", shape=(8192, 8192, 8192), cc=(9, 0), sm_count=132, epilogue=True,
                             activation="gelu_erf")
    assert erf.spec.name == "wgmma" and erf.params["DEFER"] == 0 and "for gelu_erf: DEFER=0" in erf.params_detail
    tanh = api.explain_choice("bfloat16", shape=(8192, 8192, 8192), cc=(9, 0), sm_count=132, epilogue=True,
                              activation="gelu_tanh")
    assert tanh.params["DEFER"] == 1 and "for gelu" not in tanh.params_detail
    named = api.explain_choice("bfloat16", shape=(8192, 8192, 8192), cc=(9, 0), kernel="wgmma", epilogue=True,
                               activation="gelu_erf", params={"DEFER": 1})
    assert named.params["DEFER"] == 1
    assert api.epilogue_params(registry.get("wgmma"), "gelu_erf", {"DEFER": 1}) == {}
    assert api.epilogue_params(registry.get("mma_sync"), "gelu_erf", None) == {}


def test_computes_transposed_only_where_the_swap_saves_a_copy_of_b():
    from gemmlab.api import dispatch
    from gemmlab.kernels import get

    mma, sgemm, wgmma, skinny = get("mma_sync"), get("sgemm"), get("wgmma"), get("skinny")
    tr = dispatch.computes_transposed
    assert tr(mma, 128, 11008, 4096, True, False)                     # A and C far smaller than B
    assert tr(mma, 64, 5120, 13824, True, False)
    assert not tr(mma, 128, 11008, 4096, False, False)                # B row-major: read as it is
    assert not tr(mma, 4096, 4096, 4096, True, False)                 # swapping copies as much as it saves
    assert not tr(mma, 2048, 5504, 2048, True, False)
    for reads_bt in (sgemm, wgmma, skinny):                           # read B^T in place (B_LAYOUT)
        assert not tr(reads_bt, 128, 11008, 4096, True, False), reads_bt.name
    assert tr(sgemm, 2048, 11008, 4096, True, False, 132)               # rung 10's own rule: transposed_b
    assert not tr(sgemm, 128, 11008, 4096, True, False, 132)
    assert not tr(mma, 128, 11008, 4096, True, True)                  # a batch
    assert not tr(mma, 0, 11008, 4096, True, False)


def test_explain_choice_says_when_the_product_is_computed_transposed():
    from gemmlab import api
    from gemmlab.kernels import get

    c = api.explain_choice("bfloat16", shape=(128, 11008, 4096), cc=(8, 0), sm_count=108, b_kmajor=True)
    assert c.transposed and c.spec.name == "mma_sync"
    assert "computed as C^T = B^T A^T" in c.describe() and "M x N x K = 11008 x 128 x 4096" in c.describe()
    plain = api.explain_choice("bfloat16", shape=(128, 11008, 4096), cc=(8, 0), sm_count=108)
    assert not plain.transposed and "computed as" not in plain.describe()
    fp32 = api.explain_choice("float32", shape=(128, 11008, 4096), cc=(9, 0), sm_count=132, b_kmajor=True)
    assert fp32.spec.name == "sgemm" and not fp32.transposed and fp32.params["B_LAYOUT"] == 2
    sgemm = get("sgemm")
    assert fp32.params == sgemm.validate(sgemm.heuristic(128, 11008, 4096, 132) | {"BATCHED": 0, "B_LAYOUT": 2})
    row = api.explain_choice("float32", shape=(128, 11008, 4096), cc=(9, 0), sm_count=132)
    assert row.params["B_LAYOUT"] == 1


def test_sgemm_reads_b_transposed_in_place():
    """B^T given (a linear layer's weight as W.t()): rung 10 copies it as it copies A, into k-major rows padded
    by 16 bytes, with no staging and no swap; a layout it does not know is refused by name."""
    p = SGEMM.validate({"B_LAYOUT": 2})
    rows = SGEMM.validate({})
    assert SGEMM.launch(4096, 4096, 4096, p).smem - SGEMM.launch(4096, 4096, 4096, rows).smem == \
        4 * p["STAGES"] * p["BK"] * 4
    for c in sys.modules[SGEMM.heuristic.__module__].SHAPE_CLASSES:  # every tile the heuristic picks
        SGEMM.validate(dict(c.cfg, B_LAYOUT=2))
    with pytest.raises(ValueError, match="B_LAYOUT = 3"):
        SGEMM.validate({"B_LAYOUT": 3})
    t = api.explain_choice("float32", shape=(128, 5504, 2048), cc=(9, 0), sm_count=132, b_kmajor=True)
    assert t.spec.name == "sgemm" and t.params["B_LAYOUT"] == 2 and not t.transposed


def test_sgemm_reads_copies_or_swaps_a_transposed_b_by_its_model():
    """Small M reads W in place (its copy would outweigh the product); M = 64 with a long K swaps (the swapped
    product's 128-row tiles against 64 x 64); large M copies W^T or swaps where x and C are smaller than W;
    a product that may not be swapped (a batch, a named rung) reads or copies; explain_choice says which."""
    from gemmlab.api import dispatch

    tb = dispatch.transposed_b
    assert [tb(SGEMM, m, 11008, 4096, 132, True) for m in (128, 512, 1024)] == ["read"] * 3
    assert tb(SGEMM, 64, 5120, 13824, 132, True) == "swap" and tb(SGEMM, 64, 5120, 13824, 132, False) == "read"
    assert tb(SGEMM, 2048, 11008, 4096, 132, True) == "swap" and tb(SGEMM, 2048, 11008, 4096, 132, False) == "copy"
    assert tb(SGEMM, 4096, 12288, 4096, 132, True) == "copy"
    assert tb(SGEMM, 0, 11008, 4096, 132, True) != "swap"
    assert tb(SGEMM, 4096, 11008, 4096, None, True) == "read"           # no SM count: in place
    assert tb(get("wgmma"), 16384, 11008, 4096, 132, True) == "read"      # no rule of its own, a B_LAYOUT
    assert tb(get("mma_sync"), 128, 11008, 4096, 132, True) == "swap"     # no B_LAYOUT: the copies' sizes
    assert tb(get("mma_sync"), 4096, 4096, 4096, 132, True) == "copy"
    assert not dispatch.reads_b_transposed(SGEMM, 128, 11008, 4096, False, 132)  # row-major: nothing to decide
    big = api.explain_choice("float32", shape=(4096, 12288, 4096), cc=(9, 0), sm_count=132, b_kmajor=True)
    assert big.params["B_LAYOUT"] == 1 and "copied into a row-major B" in big.describe()
    assert (big.params["BM"], big.params["BN"]) == (128, 256)
    swapped = api.explain_choice("float32", shape=(2048, 11008, 4096), cc=(9, 0), sm_count=132, b_kmajor=True)
    assert swapped.transposed and "computed as C^T" in swapped.describe()


def test_sgemm_split_fills_the_wave_where_a_power_of_two_leaves_it_a_third_empty():
    """43 tiles of 128 x 256 split three ways make 129 blocks on 132 SMs (two ways: 86); 216 tiles of 64 x 64
    three ways 648 of 660 slots. A fill predicted within 5% of the power of two, or short of 90% of the slots,
    is not taken (the long-K shapes keep their measured splits)."""
    from gemmlab.kernels.rungs import sgemm

    assert sgemm._fill_split(43, 132, 4096, 1024) == 3
    assert sgemm._fill_split(43, 132, 2048, 1024) == 2          # slices of 1024 k at least on this tile
    assert sgemm._fill_split(216, 660, 5120) == 3
    assert sgemm._fill_split(300, 264, 4096) == 1                # more tiles than slots
    assert SGEMM.heuristic(64, 13824, 5120, 132, "float32", True)["SPLIT_K"] == 3
    assert SGEMM.heuristic(512, 512, 512, 132)["SPLIT_K"] == 4   # a fill of 5 would leave half the slots empty
    assert SGEMM.heuristic(256, 256, 65536, 132)["SPLIT_K"] == 64
    p = SGEMM.heuristic(128, 11008, 4096, 132, "float32", True)
    assert p["SPLIT_K"] == 3 and p["REDUCE"] == 1
