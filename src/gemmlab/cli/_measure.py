"""What `bench` and `sweep` share: building a plan from options, running it with a progress bar,
keeping what was measured on Ctrl-C, writing results (and the report), printing the summary."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.markup import escape
from rich.table import Table

from ..bench import sweep as sw
from ..bench.formats import number_format
from ..bench.records import COMPUTE, END_TO_END, Results
from ..runtime import device
from ._app import console, fail


def build_plan(
    *,
    sizes: Optional[str],
    shapes: Optional[Sequence[str]],
    kernels: Optional[Sequence[str]],
    neighbours: bool = False,
    no_peers: bool = False,
    no_cpu: bool = False,
    budget_ms: Optional[float] = None,
    reps: Optional[int] = None,
    modes: Optional[str] = None,
    warm_l2: bool = False,
    pinned: bool = False,
    alpha: float = 1.0,
    beta: float = 0.0,
    seed: int = 0,
    cpu_scale: Optional[float] = None,
    dtype: str = "float32",
    precision: Optional[str] = None,
) -> sw.Plan:
    """A sweep plan from command-line options; exits with one line on a bad option."""
    try:
        nf = number_format(dtype, precision)
    except ValueError as exc:
        fail(str(exc))
    if nf.is_fp8:
        fail(f"sweeps do not time {nf.name} (8-bit operands come with scales and a K-major B): gemmlab bench --dtype "
             f"{nf.name} [--shape MxNxK] [--scales tensor,row,block] times it against torch._scaled_mm")
    gpu = device.gpu_available()
    if not nf.is_fp32 and not gpu:
        fail(f"the {nf.name} sweep (--dtype {dtype}{' --precision ' + precision if precision else ''}) runs on "
             f"the GPU, and there is none: {device.gpu_unavailable_reason()}")
    if nf.needs_torch:
        from ..bench.peers import torch_unavailable_reason

        reason = torch_unavailable_reason()
        if reason:
            fail(f"the {nf.name} sweep needs torch (its operands are torch tensors: CuPy has no bfloat16): {reason}")
    plan = sw.default_plan(gpu=True, fmt=nf.name)  # the full menu; trimmed below
    try:
        if kernels:
            plan.gpu, plan.peers, plan.cpu = sw.split_names([k for item in kernels for k in item.split(",") if k])
            if plan.cpu and not nf.is_fp32:
                fail(f"the CPU baselines ({', '.join(n for n, _ in plan.cpu)}) run fp32 only, not {nf.name}")
            wrong = [n for n, _ in plan.gpu if n not in sw.all_gpu_rungs(nf)]
            if wrong:
                fail(f"{', '.join(wrong)} {'does' if len(wrong) == 1 else 'do'} not run {nf.name}; the rungs that "
                     f"do: {', '.join(sw.all_gpu_rungs(nf)) or 'none'}")
        custom: list[tuple[int, int, int]] = []
        if sizes:
            sq = sw.parse_sizes(sizes)
            custom += [(s, s, s) for s in (sw.with_neighbours(sq) if neighbours else sq)]
        for item in shapes or []:
            custom += [sw.parse_shape(t) for t in item.split(",") if t.strip()]
    except ValueError as exc:
        fail(str(exc))
    if custom:
        plan.shapes = sorted(set(custom), key=lambda s: (s[0] * s[1] * s[2], s))
    if no_peers:
        plan.peers = []
    if no_cpu:
        plan.cpu = []
    if not gpu:
        # No GPU: the CPU ladder only, at the sizes asked for or the small default ones.
        plan.cpu_shapes = plan.shapes if custom else [(s, s, s) for s in sw.DEFAULT_CPU_SIZES]
    if modes:
        chosen = tuple(m.strip().replace("-", "_") for m in modes.split(",") if m.strip())
        chosen = tuple(END_TO_END if m in ("e2e", END_TO_END) else m for m in chosen)
        bad = [m for m in chosen if m not in (COMPUTE, END_TO_END)]
        if bad or not chosen:
            fail(f"--modes takes compute and/or end_to_end (e2e), got {modes!r}")
        plan.modes = chosen
    if warm_l2:
        plan.l2 = "warm"
    if budget_ms is not None:
        if budget_ms <= 0:
            fail(f"--budget-ms must be positive, got {budget_ms}")
        plan.timing = plan.timing.with_(budget_ms=budget_ms)
        plan.e2e_timing = plan.e2e_timing.with_(budget_ms=max(budget_ms / 2, 1.0))
        plan.cpu_timing = plan.cpu_timing.with_(budget_ms=budget_ms)
    if reps is not None:
        if reps < 1:
            fail(f"--reps must be at least 1, got {reps}")
        plan.timing, plan.e2e_timing, plan.cpu_timing = (
            t.with_(fixed_samples=reps) for t in (plan.timing, plan.e2e_timing, plan.cpu_timing))
    if cpu_scale is not None:
        if not cpu_scale > 0:
            fail(f"--cpu-scale must be positive, got {cpu_scale}")
        plan.cpu_scale = cpu_scale
    return replace(plan, pinned=pinned, alpha=alpha, beta=beta, seed=seed)


def run(plan: sw.Plan, command: str) -> tuple[Results, bool, sw.Sweep]:
    """Run with a progress bar (description, bar, %, elapsed, ETA); Ctrl-C keeps what was measured."""
    if plan.gpu or plan.peers:
        reason = device.gpu_unavailable_reason()
        if reason:
            console.print(f"[yellow]GPU part skipped: {escape(reason)}[/yellow]", highlight=False)
            if plan.cpu:
                console.print("[yellow]Running the CPU ladder only.[/yellow]", highlight=False)
    interrupted = False
    columns = (TextColumn("{task.description:<34}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
               TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as prog:
        task = prog.add_task("starting", total=1.0)
        sweep = sw.Sweep(plan, command=command)
        prog.update(task, total=sweep.total_work)
        sweep.on_progress = lambda work, text: prog.update(task, advance=work, description=escape(text[:34]))
        try:
            for _ in sweep:
                pass
        except KeyboardInterrupt:
            interrupted = True
    results = sweep.finish(interrupted=interrupted)
    for note in sweep.notes:
        if not note.startswith("GPU part skipped"):
            console.print(f"[yellow]{escape(note)}[/yellow]", highlight=False)
    return results, interrupted, sweep


def nothing_measured(results: Results, sweep: sw.Sweep) -> None:
    """Exit with status 2 and the reason where a run measured nothing (no GPU for the GPU part, CPU baselines
    only at sizes above their limit, ...): an empty report is not a result."""
    if results.records:
        return
    why = list(sweep.notes)
    gpu_reason = device.gpu_unavailable_reason() if (sweep.plan.gpu or sweep.plan.peers) else None
    if gpu_reason and not any(n.startswith("GPU part skipped") for n in why):
        why.insert(0, f"GPU part skipped: {gpu_reason}")
    if sweep.plan.cpu and not why:
        from ..bench.runners import cpu_runner

        cube = max(cpu_runner(name, params).max_cube for name, params in sweep.plan.cpu) * sweep.plan.cpu_scale
        why.append(f"the CPU baselines run where (M N K)^(1/3) <= {cube:.0f} (max_cube x --cpu-scale)")
    fail("nothing was measured: " + ("; ".join(why) or "no kernel and size was left to run"), code=2)


def default_out(sweep: sw.Sweep) -> Path:
    return Path("gemmlab-results") / sweep.run_id


def report_size(results: Results, at: Optional[int], warn: bool = True) -> Optional[int]:
    """`at` where it is a size with timed results; else None (the default size), with one warning line: the
    measurements are made and saved by then, so a size without results must not throw them away."""
    from ..report import size_problem

    problem = size_problem(results, at)
    if problem is None:
        return at
    if warn:
        console.print(f"[yellow]warning: --at {at}: {escape(problem)}; the report uses its default size[/yellow]",
                      highlight=False, soft_wrap=True)
    return None


def write_outputs(results: Results, out: Path, report: bool, at: Optional[int]) -> dict[str, Path]:
    """Save the results (JSON and CSV) and, with `report`, write the report at `at` (see `report_size`)."""
    paths = {p.suffix.lstrip("."): p for p in results.save(out)}
    if report:
        from ..report import write_report

        where = out if not out.suffix else out.parent
        paths.update(write_report(results, where, at=report_size(results, at)))
    return paths


def summary(results: Results, at: Optional[int]) -> None:
    """One line per kernel at the reported size: time | TFLOP/s | GB/s | x cuBLAS | end to end | error."""
    from ..report.context import ReportContext, l2_state, ladder_key

    ctx = ReportContext(results, at=report_size(results, at, warn=False))
    groups = [(g, ctx.size_at(g), ctx.gpu_records(g)) for g in ctx.gpus()]
    if ctx.cpu_records(square=True):
        groups.append((None, ctx.size_at(None), ctx.cpu_records()))
    for gpu, n, recs in groups:
        if n is None:
            continue
        rows = ctx.at_size([r for r in recs if r.mode == COMPUTE], n)
        e2e = {r.label: r for r in ctx.at_size([r for r in recs if r.mode == END_TO_END], n)}
        fmt = ctx.format_of(gpu).name if gpu else "fp32"
        name = (gpu.rsplit(", ", 1)[0] if fmt != "fp32" else gpu) if gpu else "CPU"
        t = Table(title=f"{escape(name)} at N = {n} ({fmt}, medians, {l2_state(rows)})")
        for col in ("kernel", "time", "TFLOP/s" if gpu else "GFLOP/s", "GB/s", "x cuBLAS", "end to end", "rel. error"):
            t.add_column(col, justify="left" if col == "kernel" else "right")
        for r in sorted(rows, key=ladder_key):
            ratio = ctx.pct_of_reference(r) if gpu else None
            e = e2e.get(r.label)
            t.add_row(escape(r.label), _time(r.median_ms), _fixed(r.tflops if gpu else r.gflops, 2 if gpu else 1),
                      _fixed(r.gbps, 0),
                      f"{ratio / 100:.2f}" if ratio is not None else "-", _time(e.median_ms) if e else "-",
                      f"{r.rel_error:.1e}" if r.rel_error is not None else "-")
        console.print(t)
    for r in ctx.failures():
        console.print(f"[red]{escape(f'{r.label} at {r.m}x{r.n}x{r.k} ({r.mode}): {r.status}: {r.note}')}[/red]",
                      highlight=False)


def _fixed(v: Optional[float], digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _time(ms: Optional[float]) -> str:
    if ms is None:
        return "-"
    return f"{ms * 1e3:.1f} us" if ms < 1 else f"{ms:.3f} ms"
