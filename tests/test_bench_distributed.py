"""The tensor-parallel harness (`gemmlab bench --distributed`) on CPU processes (gloo): every candidate checked
against float64 and timed, the model's predictions beside the measurement, the JSON it writes, and the cases
it refuses by name. Its speed figures mean nothing on gloo; NCCL runs are for GPUs."""

import json

import pytest

from gemmlab.bench import distributed as tp


def _gloo():
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    return torch


@pytest.mark.parametrize("world", [1, 2])
def test_every_candidate_is_checked_and_timed_on_gloo(world):
    _gloo()
    rows = tp.run(world, [(8, 12, 16)], backend="gloo", dtype="float32", budget_ms=20, rounds=2)
    assert [r.kind for r in rows] == ["all_gather", "reduce_scatter"]
    for r in rows:
        assert (r.m, r.n, r.k, r.world, r.backend) == (8, 12, 16, world, "gloo")
        assert r.errors.get("gemmlab", 1) < 1e-5 and r.errors.get("sequential", 1) < 1e-5, (r.errors, r.notes)
        for name in ("gemmlab", "sequential", "comm", "gemm_gemmlab", "gemm_torch", "host_gemmlab"):
            assert r.seconds[name] is not None and r.seconds[name] > 0, (name, r.seconds)
        assert r.seconds["torch_fused"] is None and "NCCL" in r.notes["torch_fused"]
        if world > 1:
            p = r.predicted
            assert p["busbw"] > 0 and p["ideal"] > 0 and p["sequential"] > 0
            assert p["overlapped"] >= p["ideal"] and p["gemmlab"] >= p["overlapped"] or r.transport == "sequential"
            # the model's parts: each one's time queued back to back; the timing's floor beside them
            assert {"comm", "gemm_gemmlab", "gemm_torch"} <= set(r.gpu) and min(r.gpu.values()) > 0
        assert r.seconds["floor"] is not None and r.seconds["floor"] < r.seconds["gemmlab"]
        cells = tp.table([r])[0]
        assert len(cells) == len(tp.TABLE_HEADER) and cells[1] == "8x12x16"


def test_cases_refused_by_name():
    torch = _gloo()
    with pytest.raises(ValueError, match="M and N must be positive multiples of 3"):
        tp.run(3, [(8, 12, 16)], kinds=("all_gather",), backend="gloo")
    with pytest.raises(ValueError, match="M and K must be positive multiples of 2"):
        tp.run(2, [(8, 12, 15)], kinds=("reduce_scatter",), backend="gloo")
    with pytest.raises(ValueError, match="backend must be"):
        tp.run(2, [(8, 12, 16)], backend="mpi")
    with pytest.raises(ValueError, match="kind must be one of"):
        tp.run(2, [(8, 12, 16)], kinds=("all_reduce",), backend="gloo")
    if torch.cuda.device_count() < 64:
        with pytest.raises(ValueError, match="64 ranks on NCCL need 64 GPUs"):
            tp.run(64, [(64, 64, 64)], backend="nccl")


def test_the_cli_prints_and_writes_the_rows(tmp_path):
    _gloo()
    from typer.testing import CliRunner

    from gemmlab.cli import app

    res = CliRunner().invoke(app, ["bench", "--distributed", "2", "--backend", "gloo", "--shape", "8x12x16",
                                   "--budget-ms", "20", "--out", str(tmp_path), "--chunks", "1,2"])
    assert res.exit_code == 0, res.output
    assert "tensor-parallel products over 2 ranks" in res.output and "2 pieces" in res.output
    doc = json.loads((tmp_path / "results.json").read_text())
    rows = [run["distributed"] for run in doc["runs"]]
    assert [r["kind"] for r in rows] == ["all_gather", "reduce_scatter"] and rows[0]["ideal"] > 0
    assert rows[0]["seconds"]["gemmlab_2"] > 0 and rows[0]["errors"]["gemmlab_2"] < 1e-5
    # a record per call timed, each the whole product; the report's section with its table and figure
    kinds = {(r["kernel"], r["params"]["kind"]) for r in doc["records"]}
    assert {("gemmlab", "all_gather"), ("sequential", "reduce_scatter"), ("gemmlab_2", "all_gather")} <= kinds
    report = (tmp_path / "report.md").read_text()
    assert "Tensor-parallel products over 2 GPUs (gloo, float32)" in report and "comm / GEMM" in report
    assert "never slower than sequential" in report and list((tmp_path / "figures").glob("tensor_parallel*.png"))
    # gloo ran on no GPU: no GPU paragraph, and the method says how these calls were timed
    assert "****" not in report and "No GPU results" not in report and "timed on the host around a synchronize" in report
    # a second world size into the same directory: one results file and one report with both
    again = CliRunner().invoke(app, ["bench", "--distributed", "1", "--backend", "gloo", "--shape", "8x12x16",
                                     "--budget-ms", "20", "--out", str(tmp_path)])
    assert again.exit_code == 0, again.output
    report = (tmp_path / "report.md").read_text()
    assert "over 2 GPUs (gloo" in report and "over 1 GPU (gloo" in report
    bad = CliRunner().invoke(app, ["bench", "--distributed", "2", "--backend", "gloo", "--chunks", "0"])
    assert bad.exit_code != 0 and "chunks must be positive" in bad.output
    bad = CliRunner().invoke(app, ["bench", "--distributed", "3", "--backend", "gloo", "--shape", "8x12x16"])
    assert bad.exit_code != 0 and "multiples of 3" in bad.output


def test_the_link_microbenchmark_on_gloo(tmp_path):
    _gloo()
    from gemmlab.micro import link as lk

    res = lk.measure_link(2, "gloo", sizes=(1 << 12, 1 << 16), budget_ms=10, rounds=2)
    assert [(p.collective, p.nbytes) for p in res.points] == [("all_gather", 4096), ("reduce_scatter", 4096),
                                                              ("all_gather", 65536), ("reduce_scatter", 65536)]
    for p in res.points:
        assert p.seconds > 0 and p.busbw == pytest.approx(p.nbytes / 2 / p.seconds)
    link = res.link()
    assert link.all_gather_busbw == res.points[2].busbw and link.reduce_scatter_busbw == res.points[3].busbw
    assert res.peer_copy_bps is None
    with pytest.raises(ValueError, match="at least 2 ranks"):
        lk.measure_link(1, "gloo")
    with pytest.raises(ValueError, match="sizes must be at least 4 bytes"):
        lk.measure_link(2, "gloo", sizes=(2,))
    from typer.testing import CliRunner

    from gemmlab.cli import app

    r = CliRunner().invoke(app, ["micro", "--link", "2", "--backend", "gloo", "--budget-ms", "10",
                                 "--out", str(tmp_path / "link.json")])
    assert r.exit_code == 0, r.output
    assert "bus bandwidth" in r.output and "model link" in r.output and (tmp_path / "link.json").exists()


def test_balance_says_which_cases_the_ideal_bound_judges():
    def row(comm, gemm):
        return tp.Row("all_gather", 8, 8, 8, 2, "nccl", "bfloat16", seconds={"comm": comm, "gemm_gemmlab": gemm})

    assert row(1.0, 2.0).balance == pytest.approx(0.5) and row(1.0, 2.0).balanced
    assert row(2.0, 1.0).balanced and row(1.0, 1.0).balanced
    assert row(1.0, 2.01).balanced is False and row(2.01, 1.0).balanced is False
    assert row(None, 1.0).balance is None and row(None, 1.0).balanced is None
    d = row(0.3, 1.2).to_dict()
    assert d["balance"] == pytest.approx(0.25) and d["balanced"] is False and d["ideal"] == 1.2
    r = row(0.9, 1.0)
    r.seconds.update(sequential=1.9, gemmlab=1.0)
    cells = tp.table([r])[0]
    assert cells[tp.TABLE_HEADER.index("comm / GEMM")] == "0.90 *"


def test_the_verdict_counts_each_criterion_per_world():
    def row(kind, world, comm, gemm, seq, ours, fused=None, pred=None):
        r = tp.Row(kind, 8192, 8192, 8192, world, "nccl", "bfloat16",
                   seconds={"comm": comm, "gemm_gemmlab": gemm, "sequential": seq, "gemmlab": ours,
                            "torch_fused": fused})
        r.predicted = pred or {}
        return r

    rows = [row("all_gather", 2, 0.2, 1.0, 1.2, 1.1, fused=1.3, pred={"sequential": 1.25, "gemmlab": 1.5}),
            row("reduce_scatter", 2, 0.8, 1.0, 1.8, 1.2, fused=1.1, pred={"sequential": 1.8, "gemmlab": 1.2}),
            row("all_gather", 4, 1.0, 1.0, 2.0, 2.1)]
    lines = tp.verdict(rows)
    assert "W=2: never slower than sequential: 2 of 2 (worst 1.09, AG 8192x8192x8192)" in lines
    # only the reduce-scatter is balanced (0.8 / 1.0); its share of the ideal bound: 1.0 / 1.2
    assert ("W=2: of the ideal bound where comm / GEMM is within 2 x: 1 case(s), 83%-83% (worst RS 8192x8192x8192)"
            in lines)
    assert "W=2: at or above torch's fused operator: 1 of 2 (0.92-1.18 x)" in lines
    assert "W=2: model within 15%: sequential 2 of 2, gemmlab 1 of 2" in lines
    assert "W=4: never slower than sequential: 0 of 1 (worst 0.95, AG 8192x8192x8192)" in lines
    assert not any(line.startswith("W=4: at or above") for line in lines)  # (no fused operator measured)
    back = tp.Row.from_dict(rows[1].to_dict())
    assert back.balance == rows[1].balance and back.seconds == rows[1].seconds


def test_balanced_shapes_put_the_collective_near_the_gemm():
    from gemmlab.distributed import model

    for world in (2, 4, 8):
        shapes = tp.balanced_shapes(world)
        (m, n, k), (m2, n2, k2) = shapes
        assert (m, k) == (16384, 8192) and (m2, n2) == (16384, 8192) and n == k2 and n % (256 * world) == 0
        rate, bw = model.REFERENCE_RATE["bfloat16"], model.reference_busbw(world)
        for kind, (mm, nn, kk) in (("all_gather", shapes[0]), ("reduce_scatter", shapes[1])):
            p = model.predict(kind, mm, nn, kk, world, 2 * mm * nn * kk / world / rate, model.Link(bw, bw))
            assert 1 / 1.25 <= p.comm_s / p.gemm_s <= 1.25, (world, kind, p.comm_s / p.gemm_s)
    with pytest.raises(ValueError, match="2 or more GPUs"):
        tp.balanced_shapes(1)
    with pytest.raises(ValueError, match="no reference GEMM rate"):
        tp.balanced_shapes(2, "float64")


def test_balanced_is_refused_where_it_means_nothing():
    from typer.testing import CliRunner

    from gemmlab.cli import app

    res = CliRunner().invoke(app, ["bench", "--distributed", "2", "--backend", "gloo", "--balanced"])
    assert res.exit_code != 0 and "goes with NCCL" in res.output
    res = CliRunner().invoke(app, ["bench", "--balanced"])
    assert res.exit_code != 0 and "--balanced goes with --distributed" in res.output
