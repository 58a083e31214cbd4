"""The report's sections, as an ordered list of builders.

A builder is a function `ReportContext -> Section | list[Section] | None` (None: nothing to say for
these results). Another module adds its own section with one line:

    from gemmlab.report import sections
    sections.register(roofline_section, after="table1")

Builders render what the records hold; the few numbers they derive (ratios, steps between rungs,
percentages) are arithmetic on recorded values.
"""

from __future__ import annotations

import math
import statistics
from typing import Callable, Union

from ..bench.records import COMPUTE, END_TO_END, GPU, GPU_PEER, OK, Record
from ..bench.timing import GRAPH, throttle_names
from . import figures
from ..bench.formats import FORMATS
from .context import REFERENCE, ReportContext, l2_state
from .document import Bullets, Figure, Paragraph, Section, Table

Builder = Callable[[ReportContext], Union[Section, list[Section], None]]
_FORMAT_NAMES = list(FORMATS)


def format_tolerance(fmt: str) -> float:
    return FORMATS[fmt].verify_tol if fmt in FORMATS else FORMATS["fp32"].verify_tol
SECTIONS: list[tuple[str, Builder]] = []


def register(builder: Builder, name: str | None = None, *, before: str | None = None,
             after: str | None = None) -> Builder:
    """Add a section builder (at the end, or before/after a named one); returns it, so it decorates."""
    name = name or builder.__name__
    names = [n for n, _ in SECTIONS]
    if name in names:
        SECTIONS.pop(names.index(name))
        names.remove(name)
    if before is not None or after is not None:
        anchor = before if before is not None else after
        if anchor not in names:
            raise ValueError(f"no report section named {anchor!r}; known: {', '.join(names)}")
        i = names.index(anchor) + (1 if after is not None else 0)
    else:
        i = len(SECTIONS)
    SECTIONS.insert(i, (name, builder))
    return builder


def build(ctx: ReportContext) -> list[Section]:
    out: list[Section] = []
    for name, builder in SECTIONS:
        made = builder(ctx)
        for s in ([made] if isinstance(made, Section) else made or []):
            s.name = s.name or name
            out.append(s)
    return out


# ------------------------------------------------------------------------------------------ formatting


def num(v: float | None, digits: int = 3) -> str:
    """Three significant digits, no exponent for everyday magnitudes; '-' for nothing (or a non-finite value)."""
    if v is None or not math.isfinite(v):
        return "-"
    if v == 0:
        return "0"
    if abs(v) >= 10 ** digits:
        return f"{v:,.0f}"
    text = f"{v:.{digits}g}"
    return f"{float(text):f}".rstrip("0").rstrip(".") if "e" in text else text


def pct(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v:.1f}%" if v < 99.95 or v >= 100.05 else "100%"


def shape_text(r: Record) -> str:
    return str(r.m) if r.square else f"{r.m}x{r.n}x{r.k}"


def _rung(r: Record) -> str:
    if r.family == GPU_PEER:
        return "peer"
    return f"{r.rung:02d}" if r.rung is not None else "-"


# ------------------------------------------------------------------------------------------ sections


def overview(ctx: ReportContext) -> Section:
    s = Section(ctx.title, level=1)
    runs = ctx.runs()
    recs = ctx.results.records
    gpus = ctx.devices()
    if gpus:
        for g in gpus:
            r = next(x for x in ctx.records if x.gpu == g)
            s.blocks.append(Paragraph(
                f"**{g}**: compute capability {r.cc}, {r.sm_count} SMs, L2 {num((r.l2_bytes or 0) / 2**20)} MiB, "
                f"boost clock {num(r.sm_clock_max_mhz, 4)} MHz; fp32 peak {num(r.peak_fp32_tflops)} TFLOP/s "
                f"(SMs x FP32 lanes x 2 x clock), DRAM peak {num(r.peak_dram_gbps, 4)} GB/s. "
                f"Driver {r.driver or '?'}, CUDA runtime {r.cuda_runtime or '?'}, NVRTC {r.nvrtc or '?'}, "
                f"CuPy {r.cupy or '?'}."))
    elif ctx.cpu_records():
        s.blocks.append(Paragraph("No GPU results: this report shows the CPU ladder only."))
    if recs:
        any_r = recs[-1]
        s.blocks.append(Paragraph(
            f"Processor: {any_r.processor} ({any_r.cpu_count} logical cores). gemmlab {any_r.gemmlab_version}"
            f"{' at revision `' + any_r.git_revision + '`' if any_r.git_revision else ''}, Python {any_r.python}, "
            f"numpy {any_r.numpy}, numba {any_r.numba}"
            f"{', torch ' + any_r.torch if any_r.torch else ''}{', triton ' + any_r.triton if any_r.triton else ''}."))
    ok = len(ctx.results.ok())
    s.blocks.append(Paragraph(
        f"{len(recs)} measurements from {len(runs) or 'unknown'} run(s)"
        f"{' (' + ', '.join(run.get('run_id', '?') for run in runs) + ')' if runs else ''}: "
        f"{ok} timed, {len(recs) - ok} failed or not run. All times are medians of many samples; every "
        "kernel was verified against a float64 reference before it was timed."))
    notes = ctx.results.notes()
    bad = ctx.failures()
    items = [f"**{n}**" for n in notes]
    items += [f"{r.label} at {shape_text(r)} ({r.mode}): {_outcome(r)}" for r in bad[:20]]
    if len(bad) > 20:
        items.append(f"... and {len(bad) - 20} more failures (see the results files)")
    if items:
        s.blocks.append(Bullets(items))
    return s


def _outcome(r: Record) -> str:
    """Why a record is not drawn: its status and note, or, for status ok, that its time is not a time."""
    if r.status == OK:
        return ("not measured (no time recorded)" if r.median_ms is None else
                f"not measured (median {r.median_ms} ms is not a time)")
    return f"{r.status}, {r.note or 'no detail'}"


def _ladder_table(ctx: ReportContext, recs: list[Record], with_reference: bool) -> Table:
    headers = ["rung", "kernel", "what changes", "time (ms)", "TFLOP/s", "x previous rung"]
    if with_reference:
        headers.append("% of cuBLAS")
    rows = []
    prev: Record | None = None
    for r in recs:
        step = "-"
        if r.family != GPU_PEER and prev is not None and prev.family == r.family and r.median_ms:
            step = f"{prev.median_ms / r.median_ms:.2f}x"
        row = [_rung(r), r.label, r.idea, num(r.median_ms, 4), num(r.tflops), step]
        if with_reference:
            row.append(pct(ctx.pct_of_reference(r)))
        rows.append(row)
        if r.family != GPU_PEER:
            prev = r
    return Table(headers, rows, align=["l", "l", "l", "r", "r", "r", "r"][: len(headers)])


def ladder_story(ctx: ReportContext) -> list[Section]:
    out = []
    for g in ctx.gpus():
        n = ctx.size_at(g)
        if n is None:
            continue
        recs = ctx.at_size(ctx.gpu_records(g), n)
        rungs = [r for r in recs if r.family == GPU]
        ref = next((r for r in recs if r.kernel == REFERENCE), None)
        nf = ctx.format_of(g)
        s = Section(f"The GPU ladder on {g} at N = {n}")
        text = []
        if ref is not None:
            what = ("NVIDIA's tuned library in strict fp32" if nf.is_fp32 else
                    f"NVIDIA's tuned library ({nf.cublas})")
            peak = (f", {pct(ref.pct_peak_compute)} of the GPU's {nf.name} peak" if ref.pct_peak_compute is not None
                    else "")
            text.append(f"cuBLAS, {what}, runs this {n} x {n} x {n} product in "
                        f"{num(ref.median_ms)} ms: {num(ref.tflops)} TFLOP/s{peak}. It is the yardstick for every rung.")
        if not nf.is_fp32:
            text.append(f"Only the rungs that run {nf.name} appear here (the tensor-core rungs); the ladder below "
                        "them is fp32's.")
        if rungs:
            lo, hi = rungs[0], rungs[-1]
            text.append(f"gemmlab's ladder climbs from {num(lo.tflops)} TFLOP/s ({lo.label}"
                        f"{', ' + pct(ctx.pct_of_reference(lo)) + ' of cuBLAS' if ref else ''}) to "
                        f"{num(hi.tflops)} TFLOP/s ({hi.label}"
                        f"{', ' + pct(ctx.pct_of_reference(hi)) + ' of cuBLAS' if ref else ''}), "
                        f"{num(lo.median_ms / hi.median_ms)}x the throughput of the first rung. Each rung changes one thing, "
                        "named in the table; the step column says what that one change bought.")
            steps = [(rungs[i - 1].median_ms / rungs[i].median_ms, rungs[i]) for i in range(1, len(rungs))]
            if steps:
                best, r = max(steps, key=lambda x: x[0])
                text.append(f"The biggest single step is rung {_rung(r)} ({r.label}): {best:.1f}x, from "
                            f"this change: {r.idea}.")
                slow = [x for x in steps if x[0] < 1.0]
                if slow:
                    text.append("Slower than the rung below: " + "; ".join(
                        f"{r.label} ({st:.2f}x)" for st, r in slow) + ". A change that pays at one size can cost "
                        "at another; the throughput figure below shows where.")
        s.blocks.append(Paragraph(" ".join(text)))
        s.blocks.append(_ladder_table(ctx, recs, ref is not None))
        if ref is not None and len(recs) > 1:
            items = [(r.label, ctx.pct_of_reference(r)) for r in recs if r.kernel != REFERENCE]
            items = [(k, v) for k, v in items if v is not None]
            if items:
                s.blocks.append(Figure(f"pct_of_cublas_{_slug(g)}_{n}", figures.percent_of_reference(
                    items, f"Throughput relative to cuBLAS at N = {n}, {g}"),
                    f"Each kernel's throughput as a percentage of cuBLAS ({nf.cublas}) at N = {n}, measured "
                    "interleaved in the same run. The black line is cuBLAS."))
        out.append(s)
    cpu = ctx.cpu_records(square=True)
    if cpu:
        n = ctx.size_at(None)
        recs = ctx.at_size(cpu, n)
        s = Section(f"The CPU ladder at N = {n}")
        lo, hi = recs[0], recs[-1]
        text = (f"On {lo.processor or 'this processor'} the CPU ladder runs from {num(lo.gflops)} GFLOP/s "
                f"({lo.label}) to {num(hi.gflops)} GFLOP/s ({hi.label}) at N = {n}.")
        gpu_at = [r for g in ctx.gpus() for r in ctx.at_size(ctx.gpu_records(g), n)
                  if r.family == GPU and r.fmt == "fp32"]
        if gpu_at:
            best = min(gpu_at, key=lambda r: r.median_ms)
            text += (f" At the same size the fastest GPU rung ({best.label}) takes {num(best.median_ms)} ms against "
                     f"{num(hi.median_ms)} ms for {hi.label}: a ratio of {num(hi.median_ms / best.median_ms)} "
                     "(kernel time only; copies to the GPU not counted).")
        s.blocks.append(Paragraph(text))
        t = _ladder_table(ctx, recs, False)
        t.headers[4] = "GFLOP/s"
        for row, r in zip(t.rows, recs):
            row[4] = num(r.gflops)
        s.blocks.append(t)
        out.append(s)
    return out


def throughput(ctx: ReportContext) -> list[Section]:
    out = []
    for g in ctx.gpus():
        series = ctx.series(ctx.gpu_records(g, square=True))
        if not series:
            continue
        s = Section(f"Throughput against size, {g}")
        fmt = ctx.format_of(g).name
        l2 = l2_state(ctx.gpu_records(g, square=True))
        s.blocks.append(Figure(f"throughput_{_slug(g)}", figures.throughput_vs_size(
            series, REFERENCE if REFERENCE in series else None,
            f"{fmt} GEMM throughput, {g} (compute only, {l2})"),
            f"TFLOP/s against N for every kernel, kernel time only, {_l2_words(l2)}. The heavy "
            "black line is cuBLAS. Small sizes cannot fill the GPU (too few tiles for the SMs); sizes one "
            "above a power of two (2^k + 1) show the cost of partial tiles."))
        out.append(s)
    return out


def _l2_words(state: str) -> str:
    """How the timing treated the L2, for the state `l2_state` names."""
    return {"cold L2": "L2 flushed before every call", "warm L2": "L2 left warm between calls"}.get(
        state, f"measured with {state}")


def end_to_end(ctx: ReportContext) -> list[Section]:
    out = []
    for g in ctx.gpus():
        comp = ctx.series(ctx.gpu_records(g, COMPUTE, square=True))
        e2e = ctx.series(ctx.gpu_records(g, END_TO_END, square=True))
        if not e2e:
            continue
        keep = [k for k in comp if k in e2e]
        s = Section(f"Kernel only against end to end, {g}")
        e2e_recs = ctx.gpu_records(g, END_TO_END, square=True)
        pinned = {r.pinned for r in e2e_recs}
        memory = "pinned" if pinned == {True} else ("pageable" if pinned == {False} else "pinned and pageable")
        text = ("End to end counts what a caller with matrices in host memory waits for: copying A, B and C "
                f"to the GPU ({memory} host memory), the kernel, and copying C back.")
        n = ctx.size_at(g)
        ref_c = next((r for r in ctx.at_size(ctx.gpu_records(g, COMPUTE), n or 0) if r.kernel == REFERENCE), None)
        ref_e = next((r for r in ctx.at_size(e2e_recs, n or 0) if r.kernel == REFERENCE), None)
        if ref_c and ref_e:
            share = 100 * (1 - ref_c.median_ms / ref_e.median_ms)
            text += (f" At N = {n}, cuBLAS computes in {num(ref_c.median_ms)} ms but the whole round trip takes "
                     f"{num(ref_e.median_ms)} ms: the copies are {share:.0f}% of it, so beyond the top rungs a "
                     "faster kernel barely changes what the caller sees.")
        s.blocks.append(Paragraph(text))
        s.blocks.append(Figure(f"end_to_end_{_slug(g)}", figures.compute_vs_end_to_end(
            {k: comp[k] for k in keep}, {k: e2e[k] for k in keep}, f"Compute only (solid) and end to end (dashed), {g}"),
            "Solid: kernel time only. Dashed: host-to-device copies of A, B and C, the kernel, and the copy of "
            "C back, counted as one GEMM's 2*N^3 FLOPs."))
        out.append(s)
    return out


def cpu_and_gpu(ctx: ReportContext) -> Section | None:
    cpu = ctx.series(ctx.cpu_records(square=True), value=lambda r: r.gflops)
    if not cpu:
        return None
    gpu: dict[str, list] = {}
    groups = [g for g in ctx.gpus() if ctx.format_of(g).is_fp32]  # the CPU runs fp32
    for g in groups:
        for label, pts in ctx.series([r for r in ctx.gpu_records(g, square=True) if r.family == GPU or
                                      r.kernel == REFERENCE], value=lambda r: r.gflops).items():
            gpu[label if len(groups) == 1 else f"{label} ({g})"] = pts
    if gpu:
        s = Section("CPU and GPU")
        s.blocks.append(Paragraph(
            "The same product on the processor (numba loops and numpy's BLAS, dashed) and on the GPU (solid), "
            "in GFLOP/s on a logarithmic scale: equal steps up the axis are equal factors. The CPU baselines run "
            "only up to sizes that finish in seconds."))
        s.blocks.append(Figure("cpu_vs_gpu", figures.cpu_vs_gpu(gpu, cpu, "CPU against GPU (log scale)"),
                               "GFLOP/s against N, log scale. Dashed: CPU baselines; solid: GPU rungs and cuBLAS."))
        return s
    others = "; ".join(ctx.gpus())
    s = Section("CPU throughput against size")
    s.blocks.append(Paragraph(
        "The product on the processor (numba loops and numpy's BLAS), in GFLOP/s on a logarithmic scale: equal "
        "steps up the axis are equal factors. The CPU baselines run only up to sizes that finish in seconds. "
        + (f"No fp32 GPU results to set beside them: the GPU results here ({others}) are in other number "
           "formats." if others else "There are no GPU results in these files.")))
    s.blocks.append(Figure("cpu_vs_gpu", figures.cpu_vs_gpu({}, cpu, "CPU baselines (log scale)"),
                           "GFLOP/s against N, log scale, one dashed line per CPU baseline."))
    return s


def table1(ctx: ReportContext) -> list[Section]:
    out = []
    for g in ctx.gpus() + ([None] if ctx.cpu_records(square=True) and not ctx.gpus() else []):
        n = ctx.size_at(g)
        if n is None:
            continue
        recs = ctx.at_size(ctx.gpu_records(g) if g else [], n) + ctx.at_size(
            [r for r in ctx.cpu_records() if r.mode == COMPUTE], n)
        if not recs:
            continue
        nf = ctx.format_of(g) if g else FORMATS["fp32"]
        if g and not nf.is_fp32:
            recs = [r for r in recs if r.is_gpu]  # the CPU baselines are fp32's
        s = Section(f"Table 1: time, throughput and bandwidth at N = {n}" + (f", {g}" if g else ""), name="table1")
        rows = [[r.label, "GPU" if r.is_gpu else "CPU", num(r.median_ms, 4), num(r.gflops),
                 num(r.gbps), pct(r.pct_peak_compute), pct(r.pct_peak_bandwidth)] for r in recs]
        first = next((r for r in recs if r.peak_tflops or r.peak_fp32_tflops), None)
        caption = (f"Compute only, {l2_state(recs)}, medians. Effective bandwidth counts each matrix once: "
                   f"{nf.itemsize} x (MK + KN + MN) bytes (plus MN when beta != 0) over the time.")
        if first:
            peak = first.peak_tflops if first.peak_tflops is not None else first.peak_fp32_tflops
            kind = "fp32" if nf.is_fp32 else f"{nf.name} (dense tensor cores)"
            caption += (f" Peaks: {num(peak)} TFLOP/s {kind} and {num(first.peak_dram_gbps, 4)} GB/s "
                        "DRAM (datasheet)" + ("; CPU rows have no recorded peak." if nf.is_fp32 else "."))
        s.blocks.append(Table(["kernel", "device", "time (ms)", "GFLOP/s", "eff. bandwidth (GB/s)",
                               "% of peak compute", "% of peak bandwidth"], rows, caption=caption,
                              align=["l", "l", "r", "r", "r", "r", "r"]))
        out.append(s)
    return out


def fused_layers(ctx: ReportContext) -> list[Section]:
    """One table per fused layer measured (`gemmlab fused`): each call's time, its ratio to torch eager and
    to cuBLAS's bare product, and its error against the float64 layer."""
    out = []
    for (gpu, fmt, epilogue, shape, _), recs in ctx.layers().items():
        m, n, k = shape
        eager = next((r for r in recs if r.kernel == "torch_eager"), None)
        bare = next((r for r in recs if r.kernel == "cublas" and not r.epilogue), None)
        ours = next((r for r in recs if r.family == GPU), None)
        s = Section(f"Fused layer {epilogue}, {m} x {n} x {k}, {fmt}, {gpu}")
        text = (f"C = act(A @ B + bias) with the epilogue {epilogue}, {fmt} in and out. TFLOP/s count the product "
                "only (2 M N K); every call was checked against the layer in float64, and all were timed "
                "interleaved in one run.")
        if ours and eager:
            text += (f" gemmlab's one launch ({ours.label}) takes {num(ours.median_ms, 4)} ms against torch eager's "
                     f"{num(eager.median_ms, 4)} ms: {num(eager.median_ms / ours.median_ms)}x.")
        if ours and bare:
            text += (f" cuBLAS's product alone, without the bias and activation, takes {num(bare.median_ms, 4)} ms: "
                     f"the fused layer runs at {num(bare.median_ms / ours.median_ms)}x its speed.")
        s.blocks.append(Paragraph(text))
        rows = [[r.label, num(r.median_ms, 4), num(r.tflops),
                 f"{eager.median_ms / r.median_ms:.2f}x" if eager else "-",
                 f"{bare.median_ms / r.median_ms:.2f}x" if bare else "-",
                 f"{r.rel_error:.1e}" if r.rel_error is not None else "-", r.idea]
                for r in sorted(recs, key=lambda r: r.median_ms or 0)]
        s.blocks.append(Table(["call", "time (ms)", "TFLOP/s", "x torch eager", "x cuBLAS product", "rel. error",
                               "what it runs"], rows, align=["l", "r", "r", "r", "r", "r", "l"]))
        out.append(s)
    return out


def _calls_table(recs, peer, peer_name: str) -> Table:
    """The calls of one torch-level run, fastest first: time, TFLOP/s, the ratio to `peer` of the same run (its
    time over the call's) and the error against float64."""
    rows = [[r.label, num(r.median_ms, 4), num(r.tflops), f"{peer.median_ms / r.median_ms:.2f}x" if peer else "-",
             f"{r.rel_error:.1e}" if r.rel_error is not None else "-"]
            for r in sorted(recs, key=lambda r: r.median_ms or 0)]
    return Table(["call", "time (ms)", "TFLOP/s", f"x {peer_name}", "rel. error"], rows,
                 align=["l", "r", "r", "r", "r"])


def fp8_products(ctx: ReportContext) -> list[Section]:
    """One table per 8-bit product measured (`gemmlab bench --dtype e4m3`): each call (a scale granularity) with
    its time, TFLOP/s, ratio to torch._scaled_mm of the same run, and error against its dequantized float64
    product."""
    out = []
    for (gpu, fmt, shape, _), recs in ctx.fp8_products().items():
        m, n, k = shape
        peer = next((r for r in recs if r.kernel == "torch_scaled_mm"), None)
        scales = sorted({str(r.params.get("scales", "")) for r in recs if r.family == GPU} - {""})
        s = Section(f"8-bit products ({fmt}), {m} x {n} x {k}, {gpu}")
        s.blocks.append(Paragraph(
            f"C = (scale_a A) @ (scale_b B) with {fmt} inputs, B given as an N x K weight's transpose, bf16 out; "
            f"scales per {', '.join(scales) or 'tensor'}. Each call was checked against the float64 product of its "
            "own dequantized inputs (each 8-bit value times its scale), so the inputs' rounding is not counted, "
            f"within {num(recs[0].verify_tol, 2)}; then all were timed interleaved with the L2 flushed, as a torch "
            "user calls them. torch._scaled_mm (cuBLASLt) takes no block scales on the H100: beside block scales it "
            "runs per tensor, and gemmlab's per-tensor call shows what the block scales cost."))
        s.blocks.append(_calls_table(recs, peer, "torch._scaled_mm"))
        out.append(s)
    return out


def grouped_products(ctx: ReportContext) -> list[Section]:
    """One table per grouped problem measured (`gemmlab bench --grouped`): each call with its time, TFLOP/s of all
    groups, ratio to torch's grouped product of the same run, and error on the sampled rows."""
    out = []
    for (gpu, fmt, _), (about, recs) in ctx.grouped_products().items():
        sizes = about.get("sizes") or []
        peer = next((r for r in recs if r.kernel == "torch_grouped_mm"), None)
        s = Section(f"Grouped products ({fmt}), {about.get('groups')} groups x {about.get('tokens')} rows "
                    f"({about.get('spread')}) x {about.get('n')} x {about.get('k')}, {gpu}")
        s.blocks.append(Paragraph(
            f"Each group's rows of A times its own N x K weight (given transposed), {len(sizes)} groups of "
            f"{min(sizes) if sizes else '-'} to {max(sizes) if sizes else '-'} rows, "
            f"{sum(1 for x in sizes if x == 0)} empty. Every call was checked on up to 48 rows of each group against "
            "float64 products of its (dequantized) inputs, then all were timed interleaved with the L2 flushed, as a "
            "torch user calls them. TFLOP/s count the rows of all groups." + _grouped_model(about.get("model"))))
        s.blocks.append(_calls_table(recs, peer, "torch's grouped product"))
        out.append(s)
    return out


def tensor_parallel(ctx: ReportContext) -> list[Section]:
    """One section per GPU, world size, backend and format measured by `gemmlab bench --distributed`: the
    harness's table (each product against sequential NCCL + torch.matmul, the ideal bound and torch's fused
    operator; comm / GEMM; the model over the measurement), its verdict lines and a figure."""
    from ..bench import distributed as tp

    out = []
    for (gpu, world, backend, dtype), saved in ctx.tensor_parallel().items():
        rows = [tp.Row.from_dict(d) for d in saved]
        s = Section(f"Tensor-parallel products over {world} GPU{'' if world == 1 else 's'} ({backend}, {dtype})" + (f", {gpu}" if gpu else ""))
        s.blocks.append(Paragraph(
            "Each product is the full M x N x K over the GPUs: the all-gather's A gathered from row blocks before "
            "each rank's N / W columns, the reduce-scatter's K-slices summed and scattered by rows after. gemmlab's "
            "call (its `form`: the copy engines or the collective then one GEMM) is timed against NCCL's collective "
            "then torch.matmul (sequential) and torch's fused operator in the same processes, each call between "
            "barriers, the slowest rank's median; every call was first checked against float64. The ideal bound is "
            "the longer of the collective and the GEMM alone; comm / GEMM marks (*) the cases where the two are "
            "within 2 x, where overlap matters most."
            + (" On gloo (CPU processes) the times check the harness, not the speed." if backend == "gloo" else "")))
        s.blocks.append(Table(list(tp.TABLE_HEADER), tp.table(rows), align=["l", "l"] + ["r"] * (len(tp.TABLE_HEADER) - 2)))
        lines = tp.verdict(rows)
        if lines:
            s.blocks.append(Bullets(lines))
        items = []
        for r in rows:
            seq, ours = r.seconds.get("sequential"), r.seconds.get("gemmlab")
            if not seq or not ours:
                continue
            v = {"gemmlab": seq / ours}
            if r.seconds.get("torch_fused"):
                v["torch fused"] = seq / r.seconds["torch_fused"]
            if r.ideal:
                v["ideal"] = seq / r.ideal
            items.append((r.label, v))
        if items:
            name = _slug(f"tensor parallel {world} {backend} {dtype} {gpu}")
            s.blocks.append(Figure(name, figures.tensor_parallel(items, f"x sequential over {world} GPUs"),
                                   "Each call's speed against sequential NCCL + torch.matmul, and the ideal bound "
                                   "(the longer part alone)."))
        out.append(s)
    return out


def _grouped_model(m: dict | None) -> str:
    """The models' sentence of a grouped run (bench.grouped.model), or nothing."""
    if not m:
        return ""
    text = ""
    if "tile" in m:
        text += (f" gemmlab ran {m['tile']} tiles in clusters of {m['cluster']}: {m['cluster_tiles']} cluster tiles "
                 f"in {m['rounds']} rounds on {m['clusters']} clusters (the last {m['last_round']:.0%} full), "
                 f"{m['output_share']:.0%} of their area output: the tiling leaves {m['tiling']:.0%} of the dense "
                 "rate.")
    return text + (f" The operands' least traffic, {m['least_bytes'] / 1e9:.2f} GB, takes {m['dram_ms']:.3f} ms at "
                   "the DRAM's datasheet bandwidth.")


def trust(ctx: ReportContext) -> Section | None:
    recs = [r for r in ctx.records if r.is_gpu and r.run_id not in ctx.tensor_parallel_runs]
    if not recs and not ctx.records:
        return None
    s = Section("Is my number reasonable?")
    items = []
    mhz = [v for r in recs for v in (r.sm_mhz_min, r.sm_mhz_max) if v]
    if mhz:
        top = max((r.sm_clock_max_mhz or 0) for r in recs)
        items.append(f"SM clock read after each batch of samples: {num(min(mhz), 4)} to {num(max(mhz), 4)} MHz "
                     f"(boost {num(top, 4)} MHz). Batches under 75% of the maximum clock were thrown away: "
                     f"{sum(r.discarded for r in recs)} samples in all.")
    elif recs:
        items.append("The SM clock could not be read (nvidia-ml-py absent): no sample was checked for a "
                     "clock drop. Install nvidia-ml-py to enable the check.")
    for run in ctx.runs():
        start, end = run.get("clocks_start") or {}, run.get("clocks_end") or {}
        if start or end:
            items.append(f"Run {run.get('run_id')}: SM clock {start.get('sm_clock_mhz', '?')} MHz at the start, "
                         f"{end.get('sm_clock_mhz', '?')} MHz at the end; throttle reasons at the end: "
                         f"{', '.join(throttle_names(end.get('throttle_reasons'))) or 'none'}; temperature "
                         f"{start.get('temperature_c', '?')} -> {end.get('temperature_c', '?')} C.")
    spread = [(_spread(r), r) for r in ctx.records if _spread(r) is not None]
    if spread:
        most, worst = max(spread, key=lambda x: x[0])
        items.append(f"Spread (IQR / median) of the samples: typically "
                     f"{100 * statistics.median(x for x, _ in spread):.1f}%, at most {100 * most:.1f}% "
                     f"({worst.label} at {shape_text(worst)}, {worst.mode}).")
    if recs:
        graphs = sum(1 for r in recs if r.method == GRAPH)
        cold = sum(1 for r in recs if r.l2 == "cold")
        items.append(f"{cold} of {len(recs)} GPU measurements are cold-L2 (flushed or operands rotated); "
                     f"{graphs} were taken by CUDA-graph replay because one call was shorter than the launch "
                     "gaps an event pair would time.")
    by_fmt: dict[str, list[Record]] = {}
    for r in ctx.records:
        if r.rel_error is not None and math.isfinite(r.rel_error):
            by_fmt.setdefault(r.fmt, []).append(r)
    for fmt, rs in by_fmt.items():
        tol = next((r.verify_tol for r in rs if r.verify_tol), None) or format_tolerance(fmt)
        items.append(f"Largest relative error against the float64 reference, {fmt}: "
                     f"{max(r.rel_error for r in rs):.1e} (tolerance {tol:.0e}).")
    for g in ctx.gpus():
        n = ctx.size_at(g)
        ref = next((r for r in ctx.at_size(ctx.gpu_records(g), n or 0) if r.kernel == REFERENCE), None)
        if ref and ref.pct_peak_compute:
            nf = ctx.format_of(g)
            items.append(f"cuBLAS reached {pct(ref.pct_peak_compute)} of the {nf.name} peak at N = {n} on {g}. "
                         + ("At large sizes a strict-fp32 SGEMM should come within sight of the peak; far less points "
                            "at low clocks (above), another process on the GPU, or power capping." if nf.is_fp32 else
                            "The tensor cores' peak assumes the boost clock; at the board's power limit a large "
                            "product runs well below it (the SM clock read during the run is above)."))
    s.blocks.append(Bullets(items))
    return s


def _spread(r: Record) -> float | None:
    """(q3 - q1) / median, where the record has a time and both quartiles as finite numbers."""
    if not r.ok or r.q1_ms is None or r.q3_ms is None or not math.isfinite(r.q3_ms - r.q1_ms):
        return None
    return (r.q3_ms - r.q1_ms) / r.median_ms


def all_results(ctx: ReportContext) -> list[Section]:
    out = []
    for g in ctx.gpus():
        for mode, title in ((COMPUTE, "compute only"), (END_TO_END, "end to end")):
            recs = ctx.gpu_records(g, mode)
            if recs:
                out.append(_pivot(ctx, recs, f"All results, {g}, {title} (TFLOP/s)", lambda r: r.tflops))
    cpu = ctx.cpu_records()
    if cpu:
        out.append(_pivot(ctx, cpu, "All results, CPU (GFLOP/s)", lambda r: r.gflops))
    return out


def _pivot(ctx: ReportContext, recs: list[Record], title: str, value) -> Section:
    shapes = sorted({r.shape for r in recs}, key=lambda s: (s[0] * s[1] * s[2], s))
    cols = [str(m) if m == n == k else f"{m}x{n}x{k}" for m, n, k in shapes]
    cell = {(r.label, r.shape): value(r) for r in recs}
    rows = [[label] + [num(cell.get((label, sh))) for sh in shapes] for label in ctx.labels(recs)]
    return Section(title, [Table(["kernel", *cols], rows)])


def method(ctx: ReportContext) -> Section:
    every = sorted({r.fmt for r in ctx.records} or {"fp32"}, key=lambda f: _FORMAT_NAMES.index(f))
    eight = [f for f in every if FORMATS[f].is_fp8]
    fmts = [f for f in every if f not in eight]
    tols = ", ".join(f"{format_tolerance(f):.0e} for {f}" for f in every)
    inputs = ([] if not fmts else [
        "Inputs: uniform random in [-1, 1) (never zeros), row-major, in the number format of the run ("
        + ", ".join(fmts) + "; fp16 and bf16 rounded from the same fp32 values); C = alpha*A@B + beta*C."])
    if eight:
        inputs.append(f"8-bit inputs ({', '.join(eight)}): normal float32 values quantized by gemmlab.quantize at "
                      "the granularity named (per tensor, per row and column, or 1 x 128 and 128 x 128 blocks), B "
                      "as an N x K weight's transpose; the values read are the 8-bit values times their scales, and "
                      "the reference is their float64 product. The peer is torch._scaled_mm, called as a torch user "
                      "calls it (a new output each call).")
    return Section("How these numbers were measured", [Bullets([
        *inputs,
        "Verification before timing: each kernel's output is compared with a float64 product of the values it "
        f"read; a relative error above the format's tolerance ({tols}) marks it failed and it is not timed.",
        "GPU timing: CUDA events around each call on one stream, after a warm-up; the L2 is flushed (a "
        "memset of twice its size, enqueued before the start event) before every sample; calls shorter than "
        "0.1 ms are replayed from a CUDA graph over rotated copies of the operands, so launch gaps are not "
        "timed and the L2 stays cold.",
        "Sampling stops when the median's relative standard error falls under 0.5%, or the time budget is "
        "spent; the median is reported with min, max and quartiles.",
        "A kernel and its peers (cuBLAS: SGEMM in strict fp32, GemmEx with an explicit compute type in the "
        "other formats; torch.matmul, with TF32 off in fp32; gemmlab's Triton matmul) are timed interleaved in "
        "rounds, so ratios between them are measured side by side; ratios never cross number formats.",
        "CPU timing: the host's monotonic clock around each call, after a warm-up call that compiles it.",
        *(["Tensor-parallel products (`bench --distributed`): one process per GPU; each call between barriers, "
           "timed on the host around a synchronize, the slowest rank's time; candidates interleaved in rounds, "
           "the median over them; every call checked against the float64 product of the full operands first."]
          if ctx.tensor_parallel_runs else []),
        "docs/harness.md explains the method and why it was chosen.",
    ])])


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")[:60]


for _builder in (overview, ladder_story, throughput, end_to_end, cpu_and_gpu, table1, fused_layers, fp8_products,
                 grouped_products, tensor_parallel, trust, all_results, method):
    register(_builder)
