"""Reports from synthetic records: the sections exist, the figures plot what they claim, tables are right."""

import re

import pytest

from gemmlab.bench.records import Record, Results, derive
from gemmlab.report import build_report, sections, write_report
from gemmlab.report.context import ReportContext
from gemmlab.report.document import Figure, Section, Table

SIZES = (256, 1024, 4096)
# (kernel, family, rung, TFLOP/s at each size): invented, but shaped like a ladder
GPU_KERNELS = [
    ("naive", "gpu", 1, (0.3, 0.4, 0.5)),
    ("smem_tiled", "gpu", 3, (2.0, 6.0, 9.0)),
    ("blocktile_2d", "gpu", 5, (4.0, 15.0, 26.0)),
    ("cublas", "gpu_peer", None, (8.0, 35.0, 51.0)),
]
CPU_KERNELS = [("cpu_naive", 1, {256: 1.5}), ("cpu_blas", 5, {256: 200.0, 512: 400.0})]


def rec(kernel, family, rung, n, tflops, mode="compute", gpu="GPU A", run="run1", when="2026-01-01T00:00:00"):
    ms = 2 * n**3 / (tflops * 1e12) * 1e3
    if mode == "end_to_end":
        ms += 4 * 4 * n * n / 20e9 * 1e3  # copies at 20 GB/s
    r = Record(kernel=kernel, label=kernel, family=family, rung=rung, idea=f"idea of {kernel}", params={},
               dtype="float32", m=n, n=n, k=n, alpha=1.0, beta=0.0, mode=mode,
               l2="cold" if family != "cpu" else "warm", pinned=False if mode == "end_to_end" else None,
               method="events", samples=20, median_ms=ms, min_ms=ms * 0.98, max_ms=ms * 1.05, q1_ms=ms * 0.99,
               q3_ms=ms * 1.01, rel_error=1e-7, gpu=gpu, peak_fp32_tflops=66.9, peak_dram_gbps=3352.0,
               sm_mhz_min=1755.0, sm_mhz_max=1980.0, sm_clock_max_mhz=1980.0, processor="Test CPU",
               cc="9.0", sm_count=132, l2_bytes=50 << 20, run_id=run, measured_at=when)
    return derive(r)


def synthetic(gpu="GPU A", run="run1", when="2026-01-01T00:00:00", cpu=True) -> Results:
    recs = []
    for kernel, family, rung, rates in GPU_KERNELS:
        for n, t in zip(SIZES, rates):
            for mode in ("compute", "end_to_end"):
                recs.append(rec(kernel, family, rung, n, t, mode, gpu=gpu, run=run, when=when))
    if cpu:
        for kernel, rung, rates in CPU_KERNELS:
            for n, gflops in rates.items():
                recs.append(rec(kernel, "cpu", rung, n, gflops / 1e3, gpu=gpu, run=run, when=when))
    recs.append(derive(Record(kernel="coalesced", label="coalesced", family="gpu", rung=2, idea="", params={},
                              dtype="float32", m=4096, n=4096, k=4096, alpha=1.0, beta=0.0, mode="compute",
                              l2="cold", pinned=None, status="failed", rel_error=0.5, note="verification failed",
                              gpu=gpu, run_id=run)))
    return Results(recs, [{"run_id": run, "notes": [], "clocks_start": {"sm_clock_mhz": 1980},
                           "clocks_end": {"sm_clock_mhz": 1755, "throttle_reasons": 4}}])


@pytest.fixture(scope="module")
def built():
    return build_report(synthetic())


def by_name(secs, name) -> list[Section]:
    return [s for s in secs if s.name == name]


def only_figure(secs, name) -> Figure:
    figs = [f for s in by_name(secs, name) for f in s.figures()]
    assert len(figs) == 1, [f.name for f in figs]
    return figs[0]


def expected(kernel, mode="compute", value="tflops"):
    res = synthetic()
    return [(r.m, getattr(r, value)) for r in res.records if r.kernel == kernel and r.mode == mode and r.ok]


def test_every_section_is_there_in_order(built):
    names = [s.name for s in built]
    order = ["overview", "ladder_story", "throughput", "end_to_end", "cpu_and_gpu", "table1", "trust",
             "all_results", "method"]
    assert [n for n in dict.fromkeys(names)] == order


def test_throughput_figure_plots_each_kernel_with_cublas_as_the_heavy_black_line(built):
    ax = only_figure(built, "throughput").figure.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert set(lines) == {"naive", "smem_tiled", "blocktile_2d", "cublas"}
    for kernel in lines:
        pts = expected(kernel)
        assert list(lines[kernel].get_xdata()) == [n for n, _ in pts]
        assert list(lines[kernel].get_ydata()) == pytest.approx([v for _, v in pts])
    assert lines["cublas"].get_color() == "black"
    assert lines["cublas"].get_linewidth() > max(ln.get_linewidth() for k, ln in lines.items() if k != "cublas")
    assert ax.get_xlabel() == "N (M = N = K)" and ax.get_ylabel() == "TFLOP/s" and ax.get_xscale() == "log"


def test_end_to_end_figure_pairs_solid_and_dashed_lines(built):
    ax = only_figure(built, "end_to_end").figure.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert lines["cublas (compute only)"].get_linestyle() == "-"
    assert lines["cublas (end to end)"].get_linestyle() == "--"
    assert list(lines["cublas (end to end)"].get_ydata()) == pytest.approx([v for _, v in expected("cublas", "end_to_end")])
    assert lines["naive (compute only)"].get_color() == lines["naive (end to end)"].get_color()
    for k in ("naive", "blocktile_2d", "cublas"):  # end to end is never faster than the kernel alone
        assert all(e <= c for e, c in zip(lines[f"{k} (end to end)"].get_ydata(), lines[f"{k} (compute only)"].get_ydata()))


def test_percent_of_cublas_bars_are_the_measured_ratios(built):
    story = by_name(built, "ladder_story")[0]
    fig = story.figures()[0].figure
    ax = fig.axes[0]
    widths = [p.get_width() for p in ax.patches]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["naive", "smem_tiled", "blocktile_2d"]
    cub = dict(expected("cublas"))[4096]
    assert widths == pytest.approx([100 * dict(expected(k))[4096] / cub for k in labels])
    assert "% of cuBLAS" in ax.get_xlabel()


def test_ladder_story_table_tells_the_steps(built):
    story = by_name(built, "ladder_story")[0]
    table = story.tables()[0]
    assert table.column("kernel") == ["naive", "smem_tiled", "blocktile_2d", "cublas"]
    assert table.column("what changes")[0] == "idea of naive"
    assert table.column("x previous rung")[1] == f"{9.0 / 0.5:.2f}x"
    assert table.column("% of cuBLAS")[-1] == "100%"
    text = " ".join(b.text for b in story.blocks if hasattr(b, "text"))
    assert "4096" in story.title and "biggest single step" in text and "smem_tiled" in text


def test_cpu_against_gpu_is_on_a_log_scale_in_gflops(built):
    ax = only_figure(built, "cpu_and_gpu").figure.axes[0]
    assert ax.get_yscale() == "log" and "GFLOP/s" in ax.get_ylabel()
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert lines["cpu_blas"].get_linestyle() == "--" and lines["blocktile_2d"].get_linestyle() == "-"
    assert list(lines["cpu_blas"].get_ydata()) == pytest.approx([200.0, 400.0])
    assert list(lines["naive"].get_ydata()) == pytest.approx([300.0, 400.0, 500.0])


def test_table1_numbers(built):
    t: Table = by_name(built, "table1")[0].tables()[0]
    assert t.headers == ["kernel", "device", "time (ms)", "GFLOP/s", "eff. bandwidth (GB/s)", "% of peak compute",
                         "% of peak bandwidth"]
    row = dict(zip(t.headers, t.rows[t.column("kernel").index("blocktile_2d")]))
    ms = 2 * 4096**3 / 26e12 * 1e3
    assert float(row["time (ms)"]) == pytest.approx(ms, rel=1e-3)
    assert float(row["GFLOP/s"].replace(",", "")) == pytest.approx(26000, rel=1e-3)
    assert float(row["eff. bandwidth (GB/s)"].replace(",", "")) == pytest.approx(4 * 3 * 4096**2 / (ms * 1e-3) / 1e9, rel=1e-2)
    assert row["% of peak compute"] == f"{100 * 26 / 66.9:.1f}%"
    assert row["% of peak bandwidth"].endswith("%")


def test_overview_lists_failures_and_trust_reads_clocks(built):
    text = str([b for s in by_name(built, "overview") for b in s.blocks])
    assert "coalesced" in text and "failed" in text
    trust = str(by_name(built, "trust")[0].blocks)
    assert "1755" in trust and "software power cap" in trust


def test_the_chosen_size_follows_at():
    secs = build_report(synthetic(), at=1024)
    assert "N = 1024" in by_name(secs, "ladder_story")[0].title
    assert "N = 1024" in by_name(secs, "table1")[0].title


def test_ratios_use_the_same_runs_cublas():
    a = synthetic(run="run1", when="2026-01-01T00:00:00")
    b = synthetic(run="run2", when="2026-01-02T00:00:00")
    for r in b.records:  # the second run was on a slower day: everything 2x slower
        if r.median_ms:
            r.median_ms *= 2
    ctx = ReportContext(Results.merge(a, b))
    naive_b = next(r for r in b.records if r.kernel == "naive" and r.m == 4096 and r.mode == "compute")
    assert ctx.pct_of_reference(naive_b) == pytest.approx(100 * 0.5 / 51.0)
    assert next(r for r in ctx.records if r.kernel == "naive" and r.m == 4096).run_id == "run2"  # latest drawn


def test_two_gpus_get_their_own_figures():
    secs = build_report(Results.merge(synthetic(gpu="GPU A"), synthetic(gpu="GPU B", run="run2")))
    titles = [s.title for s in by_name(secs, "throughput")]
    assert len(titles) == 2 and any("GPU B" in t for t in titles)


def test_cpu_only_results_still_make_a_report():
    res = synthetic()
    res.records = [r for r in res.records if r.family == "cpu"]
    secs = build_report(res)
    names = {s.name for s in secs}
    assert "throughput" not in names and {"ladder_story", "cpu_and_gpu", "table1"} <= names


def test_a_section_is_added_with_one_line():
    def extra(ctx):
        return Section("An extra section", [Table(["a"], [["1"]])])

    try:
        sections.register(extra, after="table1")
        names = [s.name for s in build_report(synthetic())]
        assert names.index("extra") == max(i for i, n in enumerate(names) if n == "table1") + 1
    finally:
        sections.SECTIONS[:] = [(n, b) for n, b in sections.SECTIONS if n != "extra"]
    with pytest.raises(ValueError, match="no report section"):
        sections.register(extra, before="no_such_section")


def test_written_report_is_self_contained(tmp_path):
    paths = write_report(synthetic(), tmp_path)
    md = paths["markdown"].read_text()
    page = paths["html"].read_text()
    linked = re.findall(r"\]\((figures/[^)]+\.png)\)", md)
    assert linked and all((tmp_path / f).is_file() and (tmp_path / f).stat().st_size > 1000 for f in linked)
    assert page.count('src="data:image/png;base64,') == len(linked)
    assert not re.search(r'(src|href)="(https?:|//|figures/)', page)
    assert "<table>" in page and "blocktile_2d" in page and "| kernel |" in md


def _fp8(label, family, ms, scales, kernel="wgmma", run="fp8run"):
    r = Record(kernel=kernel, label=label, family=family, rung=15 if family == "gpu" else None, idea="x",
               params={"scales": scales}, dtype="float8_e4m3fn", m=4096, n=7168, k=16384, alpha=1.0, beta=0.0,
               mode="compute", l2="cold", pinned=None, precision="e4m3", rel_error=1.7e-3, verify_tol=1e-2,
               method="events", samples=10, median_ms=ms, min_ms=ms, max_ms=ms, q1_ms=ms, q3_ms=ms, gpu="GPU A",
               cc="9.0", sm_count=132, run_id=run, measured_at="2026-01-02T00:00:00")
    return derive(r)


def test_8_bit_products_get_their_own_section_beside_the_ladder():
    """Records of `gemmlab bench --dtype e4m3`: one section per shape, every granularity against torch._scaled_mm
    of the same run; they stay out of the ladder's sections, and the method names how 8-bit inputs are made."""
    fp8 = Results([_fp8("gemmlab wgmma (block)", "gpu", 0.9, "block"), _fp8("gemmlab wgmma (tensor)", "gpu", 0.65, "tensor"),
                   _fp8("torch._scaled_mm (tensor)", "gpu_peer", 0.7, "tensor", kernel="torch_scaled_mm")], [])
    secs = build_report(Results.merge(synthetic(), fp8))
    titles = [s.title for s in secs]
    (eight,) = [s for s in secs if s.title.startswith("8-bit products")]
    assert eight.title == "8-bit products (e4m3), 4096 x 7168 x 16384, GPU A"
    (table,) = [b for b in eight.blocks if isinstance(b, Table)]
    assert [row[0] for row in table.rows] == ["gemmlab wgmma (tensor)", "torch._scaled_mm (tensor)",
                                              "gemmlab wgmma (block)"]
    assert [row[3] for row in table.rows] == ["1.08x", "1.00x", "0.78x"]
    assert not any("e4m3" in t and "8-bit" not in t for t in titles)  # not in the ladder's sections
    method = next(s for s in secs if s.title == "How these numbers were measured")
    text = " ".join(method.blocks[0].items)
    assert "8-bit inputs (e4m3)" in text and "torch._scaled_mm" in text and "uniform random" in text


def _grouped(label, kernel, family, ms, dtype="bfloat16", run="grouprun"):
    r = Record(kernel=kernel, label=label, family=family, rung=15 if family == "gpu" else None, idea="x", params={},
               dtype=dtype, m=8 * 512, n=1408, k=2048, alpha=1.0, beta=0.0, mode="compute", l2="cold", pinned=None,
               precision="bf16", rel_error=1.6e-3, verify_tol=1e-2, method="events", samples=10, median_ms=ms,
               min_ms=ms, max_ms=ms, q1_ms=ms, q3_ms=ms, gpu="GPU A", cc="9.0", sm_count=132, run_id=run,
               measured_at="2026-01-03T00:00:00")
    return derive(r)


def test_grouped_products_get_their_own_section_out_of_the_ladder():
    """Records of `gemmlab bench --grouped`: one section per run, named by its problem (the run's metadata), every
    call against torch's grouped product of the same run; none of them lands in the BF16 ladder's sections."""
    run = {"run_id": "grouprun", "grouped": {"groups": 8, "tokens": 512, "n": 1408, "k": 2048, "dtype": "bfloat16",
                                             "spread": "skewed", "sizes": [0, 1000, 3000, 96, 0, 0, 0, 0],
                                             "model": {"tile": "128 x 256", "cluster": 1, "cluster_tiles": 198,
                                                       "clusters": 132, "rounds": 2, "last_round": 0.5,
                                                       "output_share": 0.9, "tiling": 0.675,
                                                       "least_bytes": 2.5e8, "dram_ms": 0.0746}}}
    grouped = Results([_grouped("gemmlab wgmma", "wgmma", "gpu", 0.20), _grouped("torch._grouped_mm", "torch_grouped_mm",
                                                                                  "gpu_peer", 0.22),
                       _grouped("loop of torch.mm", "torch_mm_loop", "gpu_peer", 0.5)], [run])
    secs = build_report(Results.merge(synthetic(), grouped))
    (sec,) = [s for s in secs if s.title.startswith("Grouped products")]
    assert sec.title == "Grouped products (bf16), 8 groups x 512 rows (skewed) x 1408 x 2048, GPU A"
    assert "8 groups of 0 to 3000 rows, 5 empty" in sec.blocks[0].text
    assert "198 cluster tiles in 2 rounds on 132 clusters (the last 50% full)" in sec.blocks[0].text
    assert "leaves 68% of the dense rate" in sec.blocks[0].text and "0.25 GB, takes 0.075 ms" in sec.blocks[0].text
    (table,) = [b for b in sec.blocks if isinstance(b, Table)]
    assert [row[0] for row in table.rows] == ["gemmlab wgmma", "torch._grouped_mm", "loop of torch.mm"]
    assert [row[3] for row in table.rows] == ["1.10x", "1.00x", "0.44x"]
    assert not any("bf16" in s.title.lower() and "Grouped" not in s.title for s in secs)


def test_tensor_parallel_rows_get_their_own_section_latest_run_per_problem():
    from gemmlab.bench import distributed as tp

    def row(world, seq, ours, m=8192):
        return tp.Row("all_gather", m, 8192, 8192, world, "nccl", "bfloat16", transport="copy",
                      seconds={"comm": 0.4e-3, "gemm_gemmlab": 0.7e-3, "sequential": seq, "gemmlab": ours,
                               "torch_fused": 1.0e-3}, errors={"gemmlab": 1e-3, "sequential": 1e-3})

    older = tp.to_results([row(2, 1.2e-3, 1.1e-3), row(4, 1.0e-3, 0.9e-3)])
    newer = tp.to_results([row(2, 1.2e-3, 0.8e-3)])
    for run, when in zip(older.runs + newer.runs, ("2026-01-01T00:00:00", "2026-01-01T00:00:01",
                                                    "2026-01-02T00:00:00")):
        run["started_at"] = when
    res = Results.merge(synthetic(), older, newer)
    ctx = ReportContext(res)
    groups = ctx.tensor_parallel()
    assert sorted((world, len(rows)) for (_, world, _, _), rows in groups.items()) == [(2, 1), (4, 1)]
    (two,) = [rows for (_, world, _, _), rows in groups.items() if world == 2]
    assert two[0]["seconds"]["gemmlab"] == 0.8e-3  # the later run of the same problem
    # its records are whole products over several GPUs: not points of the ladder's sections
    assert all(r.run_id not in {run["run_id"] for run in older.runs + newer.runs}
               for g in ctx.gpus() for r in ctx.gpu_records(g))
    secs = [s for s in build_report(res) if s.name == "tensor_parallel"]
    assert [s.title.split(" (")[0] for s in secs] == ["Tensor-parallel products over 2 GPUs",
                                                      "Tensor-parallel products over 4 GPUs"]
    table = secs[0].tables()[0]
    assert table.column("x sequential") == ["1.50x"] and table.column("comm / GEMM") == ["0.57 *"]
    fig = secs[0].figures()[0].figure
    widths = sorted(round(p.get_width(), 3) for p in fig.axes[0].patches)
    assert widths == [1.2, 1.5, 1.714]  # torch's fused operator, gemmlab, the ideal bound: x sequential
