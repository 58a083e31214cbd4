"""gemmlab bench: the main job. The whole ladder, its peers and the CPU baselines, timed and reported."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ._app import app, console
from . import _measure


@app.command()
def bench(
    sizes: Optional[str] = typer.Option(None, help="square sizes, e.g. 512,1000 or 256..4096 (powers of two); "
                                                   "default: the standard sweep, 128 to 4096"),
    shape: Optional[list[str]] = typer.Option(None, "--shape", help="an M x N x K problem, e.g. 4096x1024x512 (repeatable)"),
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k",
                                               help="rungs, peers (cublas, torch, triton) or CPU baselines; default: all"),
    neighbours: bool = typer.Option(False, help="add 2^k-1 and 2^k+1 beside every power of two in --sizes"),
    budget_ms: Optional[float] = typer.Option(None, help="time budget per kernel and size, ms (default 150; "
                                                                    "with --suite 80)"),
    pinned: bool = typer.Option(False, help="pinned host memory for the end-to-end timings"),
    no_peers: bool = typer.Option(False, "--no-peers", help="leave out cuBLAS, torch and Triton"),
    no_cpu: bool = typer.Option(False, "--no-cpu", help="leave out the CPU baselines"),
    cpu_scale: Optional[float] = typer.Option(None, help="CPU baselines run up to max_cube x this (default 0.25)"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="operands and output: float32 (the default: the whole "
                                                              "ladder), float16 or bfloat16 (the tensor-core rungs, "
                                                              "fp32 accumulation; bfloat16 needs torch); with --suite: "
                                                              "bfloat16, float32 or both (the default)"),
    precision: Optional[str] = typer.Option(None, "--precision", help="tf32: float32 operands on the tensor cores "
                                                                      "(the rungs and peers that offer it)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="results and report directory "
                                                                 "(default gemmlab-results/<run id>)"),
    at: Optional[int] = typer.Option(None, help="the size the report's tables use (default: the largest with cuBLAS; "
                                                "a size without results warns in one line and takes the default)"),
    batch: Optional[int] = typer.Option(None, "--batch", help="instead of the ladder: a batch of this many products "
                                                               "of each --shape (or --sizes) in one gemmlab launch, "
                                                               "against torch.bmm, torch.matmul and a loop of torch.mm"),
    shared: str = typer.Option("none", "--shared", help="with --batch: none, a (one A for every product) or b "
                                                        "(one B: x @ W)"),
    suite: bool = typer.Option(False, "--suite", help="instead of the ladder: the shape suite, kernel=\"auto\" "
                                                      "against torch.matmul (cuBLAS) on 45 shapes in five groups"),
    only: Optional[str] = typer.Option(None, "--only", help="with --suite: groups, comma-separated (square, odd, "
                                                            "llm, long_k, wide)"),
    quick: bool = typer.Option(False, "--quick", help="with --suite: every third shape"),
    distributed: Optional[int] = typer.Option(None, "--distributed", help="instead of the ladder: tensor-parallel "
                                              "products over this many GPUs (one process each, NCCL): gemmlab's "
                                              "overlapped all-gather + GEMM and GEMM + reduce-scatter against the "
                                              "sequential collective + torch.matmul and torch's fused operators; "
                                              "--shape for the full products (default: three reference shapes)"),
    backend: str = typer.Option("nccl", "--backend", help="with --distributed: nccl (GPUs) or gloo (CPU processes, "
                                                          "float32: a check of the harness, not of speed)"),
    scales: Optional[str] = typer.Option(None, "--scales", help="with an 8-bit --dtype (e4m3, e5m2): the scales' "
                                                                "granularity, tensor, row or block (1 x 128 of A, "
                                                                "128 x 128 of B), comma-separated (default all three)"),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="with --suite: spread the shapes over this many GPUs of "
                                                            "this host (one process each, torch beside gemmlab on "
                                                            "each), merged into one result"),
    balanced: bool = typer.Option(False, "--balanced", help="with --distributed: also two products whose collective "
                                                            "and GEMM the reference model puts nearest each other "
                                                            "(N or K = (W - 1) x GEMM rate / bus bandwidth), where "
                                                            "overlap matters most"),
    chunks: str = typer.Option("1", "--chunks", help="with --distributed: row pieces per shard of gemmlab's rings, "
                                                     "comma-separated (each timed; the first is the model's)"),
    grouped: Optional[int] = typer.Option(None, "--grouped", help="instead of the ladder: grouped products of "
                                                                  "this many groups (a mixture-of-experts layer; "
                                                                  "--shape TxNxK: rows per group, N, K; without "
                                                                  "one, the built-in MoE shapes) against "
                                                                  "torch._grouped_mm and a loop of matmuls"),
    spread: str = typer.Option("uniform,skewed", "--spread", help="with --grouped: the groups' sizes, uniform "
                                                                  "and / or skewed (empty groups included)"),
) -> None:
    """Benchmark the ladder (compute only and end to end) against cuBLAS, torch, Triton and the CPU;
    write results (JSON, CSV) and the report (Markdown, HTML). Without a GPU: the CPU ladder only.
    With --batch: batched products against torch; with --suite: the shape suite against torch
    (GPU and torch needed for both)."""
    if distributed is not None:
        _bench_distributed(distributed, backend, shape, dtype, budget_ms, out, chunks, balanced)
        return
    if balanced:
        from ._app import fail

        fail("--balanced goes with --distributed N")
    if grouped is not None or "--spread" in sys.argv:
        _bench_grouped(grouped, spread, shape, dtype, budget_ms, out)
        return
    if dtype is not None and _is_fp8(dtype):
        _bench_fp8(dtype, scales, sizes, shape, budget_ms, out)
        return
    if scales is not None:
        from ._app import fail

        fail("--scales goes with an 8-bit --dtype (e4m3, e5m2)")
    if suite:
        _reject_with_suite(sizes=sizes, shape=shape, kernel=kernel, batch=batch, precision=precision)
        _bench_suite(dtype, only, quick, budget_ms, out, gpus)
        return
    if only is not None or quick or gpus is not None:
        from ._app import fail

        fail(f"{'--only' if only is not None else '--quick' if quick else '--gpus'} goes with --suite")
    # The main job: no choice of sizes, shapes, kernels or format. On a GPU with tensor cores it adds the BF16
    # section and a fused layer (bench.main_job) to the FP32 ladder, in one report.
    main_job = not (sizes or shape or kernel or neighbours or dtype or precision or batch is not None)
    dtype = dtype or "float32"
    if batch is not None:
        _bench_batch(batch, shared, sizes, shape, dtype, budget_ms, out)
        return
    plan = _measure.build_plan(sizes=sizes, shapes=shape, kernels=kernel, neighbours=neighbours, no_peers=no_peers,
                               no_cpu=no_cpu, budget_ms=budget_ms, pinned=pinned, cpu_scale=cpu_scale,
                               dtype=dtype, precision=precision)
    command = " ".join(["gemmlab", *sys.argv[1:]])
    results, interrupted, sweep = _measure.run(plan, command=command)
    if main_job and not interrupted and not no_peers:
        interrupted = _tensor_section(results, command, budget_ms)
    if not interrupted:
        _measure.nothing_measured(results, sweep)
    target = out or _measure.default_out(sweep)
    paths = _measure.write_outputs(results, target, report=True, at=at)
    _measure.summary(results, at)
    console.print(f"results: {paths['json']} and {paths['csv']}", highlight=False)
    console.print(f"report:  {paths['html']} (self-contained) and {paths['markdown']}", highlight=False)
    if interrupted:
        console.print(f"[yellow]interrupted: kept {len(results)} measurements[/yellow]")
        raise typer.Exit(130)
    if any(not r.ok for r in results.records):
        raise typer.Exit(1)


def _tensor_section(results, command: str, budget_ms: Optional[float]) -> bool:
    """The main job's BF16 section and fused layer, merged into `results`; True when interrupted."""
    from rich.markup import escape

    from ..bench import main_job
    from ..runtime import device

    if device.gpu_unavailable_reason():  # (said already: the GPU part was skipped)
        return False
    why = main_job.why_not()
    if why:
        console.print(f"[dim]no tensor-core section: {escape(why)}[/dim]", highlight=False)
        return False
    more, interrupted, _ = _measure.run(main_job.tensor_plan(budget_ms), command=command)
    results.records += more.records
    results.runs += more.runs
    if interrupted:
        return True
    try:
        with console.status(f"fused layer: {escape(main_job.LAYER.describe())}"):
            layer = main_job.measure_layer(command, budget_ms)
    except KeyboardInterrupt:
        return True
    results.records += layer.records
    results.runs += layer.runs
    return False


def _require_gpu_and_torch(command: str) -> None:
    from ..bench.peers import torch_unavailable_reason
    from ..runtime import device
    from ._app import fail

    reason = device.gpu_unavailable_reason() or torch_unavailable_reason()
    if reason:
        fail(f"{command} times GPU calls beside torch's: {reason}")


def _bench_batch(batch: int, shared: str, sizes, shapes, dtype: str, budget_ms, out) -> None:
    from ..bench import batched as bz
    from ..bench.sweep import parse_shape, parse_sizes
    from ._app import fail

    try:
        problems = [parse_shape(s) for s in shapes or []] + [(n, n, n) for n in (parse_sizes(sizes) if sizes else [])]
        if not problems:
            raise ValueError("--batch needs the products' shape: --shape MxNxK (repeatable) or --sizes")
        batches = [bz.Batch(batch, m, n, k, dtype=dtype, shared=shared) for m, n, k in problems]
        for b in batches:
            b.check()
    except ValueError as exc:
        fail(str(exc))
    _require_gpu_and_torch("gemmlab bench --batch")
    _measure_problems(batches, bz.measure, bz.BMM, "torch.bmm",
                      "medians, cold L2; TFLOP/s of the whole batch", 1, out, report=False, budget_ms=budget_ms)


def _measure_problems(problems, measure, peer_kernel: str, peer_name: str, caption: str, digits: int, out,
                      report: bool, budget_ms) -> None:
    """Each problem measured (`measure(problem, ...)` -> Results: gemmlab's calls and peers), a table per problem
    with every call against `peer_kernel` of the same run, the run's notes and failures, then the results (and
    the report, where `report`) written; exit status 1 where a gemmlab call failed."""
    from rich.markup import escape
    from rich.table import Table

    from ..bench.records import Results

    merged = Results([], [])
    failed = False
    for problem in problems:
        with console.status("starting") as status:
            res = measure(problem, budget_ms=budget_ms or 300.0, command=" ".join(["gemmlab", *sys.argv[1:]]),
                          on_progress=lambda t: status.update(escape(t)))
        merged.records += res.records
        merged.runs += res.runs
        peer = next((r for r in res.records if r.kernel == peer_kernel and r.ok), None)
        t = Table(title=f"{problem.describe()} ({caption})")
        for col in ("call", "time", "TFLOP/s", f"x {peer_name}", "rel. error"):
            t.add_column(col, justify="left" if col == "call" else "right", no_wrap=col == "call")
        for r in sorted((r for r in res.records if r.ok), key=lambda r: r.median_ms):
            t.add_row(escape(r.label), _measure._time(r.median_ms), f"{r.tflops:.{digits}f}",
                      f"{peer.median_ms / r.median_ms:.3f}" if peer else "-", f"{r.rel_error:.1e}")
        console.print(t)
        for note in (n for run in res.runs for n in run.get("notes", [])):
            console.print(f"[dim]{escape(note)}[/dim]", highlight=False)
        for r in res.records:
            if not r.ok:
                failed = failed or r.family == "gpu"
                console.print(f"[red]{escape(f'{r.label}: {r.status}: {r.note}')}[/red]", highlight=False)
    target = out or Path("gemmlab-results") / merged.runs[0]["run_id"]
    paths = _measure.write_outputs(merged, target, report=report, at=None)
    console.print("written: " + ", ".join(str(p) for key, p in paths.items() if key != "figures"), highlight=False)
    if failed:
        raise typer.Exit(1)


def _bench_distributed(world: int, backend: str, shapes, dtype: Optional[str], budget_ms, out, chunks: str,
                       balanced: bool = False) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ..bench import distributed as tp
    from ..bench.records import Results, load
    from ..bench.sweep import parse_shape
    from ._app import fail

    try:
        problems = [parse_shape(s) for s in shapes] if shapes else list(tp.SHAPES)
        dt = dtype or ("float32" if backend == "gloo" else "bfloat16")
        if balanced:
            if backend != "nccl":
                raise ValueError("--balanced takes its shapes from the GPUs' reference rates: it goes with NCCL")
            problems += [s for s in tp.balanced_shapes(world, dt) if s not in problems]
        try:
            pieces = tuple(int(c) for c in chunks.split(","))
        except ValueError:
            raise ValueError(f"--chunks takes positive integers, comma-separated, got {chunks!r}") from None
        with console.status(f"{world} processes on {backend}"):
            rows = tp.run(world, problems, backend=backend, dtype=dt, budget_ms=budget_ms or 300.0, chunks=pieces)
    except (ValueError, ImportError) as exc:
        fail(str(exc))
    t = Table(title=f"tensor-parallel products over {world} ranks ({backend}, {dt}; medians of the slowest rank)")
    for col in tp.TABLE_HEADER:
        t.add_column(col, justify="left" if col in ("kind", "M x N x K") else "right")
    for cells in tp.table(rows):
        t.add_row(*cells)
    console.print(t)
    for r in rows:  # the other chunkings of gemmlab's rings
        more = [f"{'the ring' if c == 'gemmlab_ring' else 'the ring in ' + c.split('_')[1] + ' pieces'} {v * 1e3:.3f} ms"
                for c, v in r.seconds.items() if c.startswith("gemmlab_") and v]
        if more:
            console.print(f"{r.kind} {r.m}x{r.n}x{r.k}: " + ", ".join(more), highlight=False)
    for line in tp.verdict(rows):
        console.print(line, highlight=False)
    results = tp.to_results(rows, command=" ".join(["gemmlab", *sys.argv[1:]]))
    target = out or Path("gemmlab-results") / results.runs[0]["run_id"]
    earlier = target / "results.json"
    if earlier.exists():  # (another world size or backend into the same directory: one report of all of them)
        try:
            results = Results.merge(load([earlier]), results)
        except ValueError as exc:  # (not overwritten: this run goes into a directory of its own inside it)
            target = target / results.runs[0]["run_id"]
            console.print(f"[yellow]warning: {escape(str(exc))}; this run is written to {target}[/yellow]",
                          highlight=False)
    paths = _measure.write_outputs(results, target, report=True, at=None)
    console.print("written: " + ", ".join(str(p) for key, p in paths.items() if key != "figures"), highlight=False)


def _bench_grouped(groups: Optional[int], spread: str, shapes, dtype: Optional[str], budget_ms, out) -> None:
    """Grouped products (bench.grouped) against torch's grouped product, bmm and a loop: a table per problem."""
    from ..bench import grouped as gp
    from ..bench.sweep import parse_shape
    from ..formats import dtype_label
    from ._app import fail

    try:
        if groups is None:
            raise ValueError("--spread goes with --grouped G")
        dt = dtype_label(dtype) if dtype else "bfloat16"
        spreads = [s.strip() for s in spread.split(",") if s.strip()]
        dims = [(groups, *parse_shape(s)) for s in shapes] if shapes else [d for d in gp.SHAPES if d[0] == groups]
        if not dims:
            raise ValueError(f"--grouped {groups} needs --shape TxNxK (rows per group, N, K); the built-in shapes "
                             f"have {', '.join(str(g) for g in sorted({d[0] for d in gp.SHAPES}))} groups")
        problems = [gp.Problem(g, t, n, k, dt, sp) for g, t, n, k in dims for sp in spreads]
        for p in problems:
            p.check()
    except ValueError as exc:
        fail(str(exc))
    _require_gpu_and_torch("gemmlab bench --grouped")
    _measure_problems(problems, gp.measure, gp.GROUPED_MM, "torch's grouped product",
                      "medians, cold L2; TFLOP/s of all groups", 0, out, report=True, budget_ms=budget_ms)


def _is_fp8(dtype: str) -> bool:
    from ..formats import dtype_label, is_fp8

    try:
        return is_fp8(dtype_label(dtype))
    except ValueError:
        return False


def _bench_fp8(dtype: str, scales: Optional[str], sizes, shapes, budget_ms, out) -> None:
    """8-bit products at each granularity against torch._scaled_mm (bench.fp8): a table per problem."""
    from ..bench import fp8
    from ..bench.sweep import parse_shape, parse_sizes
    from ..formats import dtype_label
    from ._app import fail

    try:
        dims = [parse_shape(s) for s in shapes or []] + [(n, n, n) for n in (parse_sizes(sizes) if sizes else [])]
        dims = dims or [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 7168, 16384)]
        kinds = scales.split(",") if scales else list(fp8.GRANULARITIES)
        problems = [fp8.Problem(m, n, k, dtype_label(dtype), kind) for m, n, k in dims for kind in kinds]
        for p in problems:
            p.check()
    except ValueError as exc:
        fail(str(exc))
    _require_gpu_and_torch(f"gemmlab bench --dtype {dtype}")
    _measure_problems(problems, fp8.measure, fp8.SCALED_MM, "torch._scaled_mm", "medians, cold L2, bf16 out", 0,
                      out, report=True, budget_ms=budget_ms)


def _reject_with_suite(**given) -> None:
    """--suite runs its own shapes and dtypes against torch: the ladder's and the batch's options do not apply."""
    from ._app import fail

    wrong = [name for name, value in given.items() if value is not None and value != []]
    if wrong:
        fail(f"--suite runs its own shapes against torch.matmul; --{wrong[0]} does not go with it")


def _bench_suite(dtype: Optional[str], only: Optional[str], quick: bool, budget_ms, out, gpus: Optional[int] = None) -> None:
    from rich.markup import escape

    from ..bench import suite as st
    from ._app import fail

    try:
        dtypes = st.parse_dtypes(dtype)
        groups = st.parse_groups(only)
        if budget_ms is not None and not budget_ms > 0:
            raise ValueError(f"--budget-ms must be positive, got {budget_ms}")
        if gpus is not None and gpus < 1:
            raise ValueError(f"--gpus must be >= 1, got {gpus}")
    except ValueError as exc:
        fail(str(exc))
    command = " ".join(["gemmlab", *sys.argv[1:]])
    if gpus is not None and gpus > 1:
        # (torch is imported by each GPU's process, not here: importing it first would add its seconds to the
        # spread run's start, before the processes begin theirs)
        import importlib.util

        from ..runtime import device

        reason = device.gpu_unavailable_reason() or (None if importlib.util.find_spec("torch") else
                                                     "torch is not installed")
        if reason:
            fail(f"gemmlab bench --suite times GPU calls beside torch's: {reason}")
        have = device.require_cupy().cuda.runtime.getDeviceCount()
        if have < gpus:
            fail(f"--gpus {gpus}: this host has {have} GPUs")
        with console.status(f"the suite over {gpus} GPUs"):
            res = st.measure_spread(gpus, dtypes, groups, quick, budget_ms or st.DEFAULT_BUDGET_MS, command)
        console.print(escape(res.runs[0]["notes"][-1]), highlight=False, soft_wrap=True)
    else:
        _require_gpu_and_torch("gemmlab bench --suite")
        with console.status("starting") as status:
            res = st.measure(dtypes, groups, quick, budget_ms or st.DEFAULT_BUDGET_MS,
                             on_progress=lambda t: status.update(escape(t)), command=command)
    summaries = st.summarize(res)
    for dt, rows in st.pairs(res).items():
        console.print(_suite_table(dt, rows))
    for s in summaries.values():
        console.print(escape(s.line()), style="red" if s.failures else None, highlight=False, soft_wrap=True)
    for r in res.records:
        if not r.ok and r.family == "gpu":
            console.print(f"[red]{escape(f'{r.dtype} {r.m}x{r.n}x{r.k}: {r.status}: {r.note}')}[/red]",
                          highlight=False, soft_wrap=True)
    target = out or Path("gemmlab-results") / res.runs[0]["run_id"]
    paths = _measure.write_outputs(res, target, report=False, at=None)
    console.print("written: " + ", ".join(str(p) for key, p in paths.items() if key != "figures"), highlight=False)
    if any(s.failures for s in summaries.values()):
        raise typer.Exit(1)


def _suite_table(dtype: str, rows):
    """One row per shape: its group, M, N, K, B's layout, the rung kernel="auto" ran, both times, gemmlab's
    TFLOP/s, x cuBLAS, the error."""
    from rich.table import Table

    from ..bench import suite as st
    from ..kernels import registry

    names = {s.rung: s.name for s in registry.all_specs()}
    t = Table(title=f"shape suite, {dtype} (medians, cold L2; x cuBLAS: torch.matmul time / gemmlab time)")
    for col in ("group", "M", "N", "K", "B layout", "rung", "torch ms", "gemmlab ms", "TFLOP/s", "x cuBLAS",
                "rel. error"):
        t.add_column(col, justify="left" if col in ("group", "B layout", "rung") else "right", no_wrap=True)
    for p in rows:
        g = st.group_of(p.shape)
        timed = p.ratio is not None
        rung = p.gemmlab.rung
        t.add_row(g, *map(str, p.shape), st.b_layout(g), f"{rung} {names.get(rung, '')}" if rung else "-",
                  f"{p.torch.median_ms:.4f}" if timed else "", f"{p.gemmlab.median_ms:.4f}" if timed else "",
                  f"{p.gemmlab.tflops:.1f}" if timed else "", f"{p.ratio:.3f}" if timed else "[red]FAILED[/red]",
                  f"{p.gemmlab.rel_error:.1e}" if p.gemmlab.rel_error is not None else "-")
    return t


@app.command()
def fused(
    size: int = typer.Option(8192, "--size", "-s", help="M = N = K unless --shape is given"),
    shape: Optional[str] = typer.Option(None, "--shape", help="M x N x K, e.g. 16384x4096x14336"),
    dtype: str = typer.Option("bfloat16", "--dtype", help="bfloat16 or float16 (A, B and C)"),
    bias: str = typer.Option("column", "--bias", help="column (length N, a linear layer's), row (length M) or none"),
    activation: str = typer.Option("gelu_tanh", "--activation", help="gelu_tanh, gelu_erf, relu, silu or none"),
    compile_mode: Optional[str] = typer.Option(None, "--compile", metavar="MODE",
                                               help="also time torch.compile in this mode (default, "
                                                    "max-autotune, ...); compiling takes a while"),
    budget_ms: float = typer.Option(300.0, help="time budget per call, ms"),
    seed: int = typer.Option(0),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="results directory (default gemmlab-results/<run id>)"),
    report: bool = typer.Option(False, help="also write the report beside the results"),
) -> None:
    """A fused GEMM layer, act(A @ B + bias), in one gemmlab launch against torch eager, torch.compile, cuBLASLt's
    own fused epilogue (where nvmath-python is installed) and cuBLAS's product alone; verified, then timed."""
    from rich.markup import escape
    from rich.table import Table

    from ..bench import fused as fz
    from ..bench.sweep import parse_shape
    from ._app import fail

    try:
        m, n, k = parse_shape(shape) if shape else (size, size, size)
        layer = fz.Layer(m, n, k, dtype=dtype, bias=bias, activation=activation)
        layer.check()
    except ValueError as exc:
        fail(str(exc))
    _require_gpu_and_torch("gemmlab fused")
    with console.status("starting") as status:
        res = fz.measure(layer, compile_mode=compile_mode, budget_ms=budget_ms, seed=seed,
                         command=" ".join(["gemmlab", *sys.argv[1:]]), on_progress=lambda t: status.update(escape(t)))
    recs = res.records
    eager = next((r for r in recs if r.kernel == fz.EAGER and r.ok), None)
    bare = next((r for r in recs if r.kernel == fz.BARE and r.ok), None)
    t = Table(title=f"{m} x {n} x {k} {layer.dtype}: {layer.describe()} (medians, cold L2; TFLOP/s of the product)",
              caption="x eager: against torch eager; x product: against cuBLAS's product alone (not the same work)")
    for col in ("call", "time", "TFLOP/s", "x eager", "x product", "rel. error"):
        t.add_column(col, justify="left" if col == "call" else "right", no_wrap=col == "call")
    for r in sorted((r for r in recs if r.ok), key=lambda r: r.median_ms):
        t.add_row(escape(r.label), _measure._time(r.median_ms), f"{r.tflops:.1f}",
                  f"{eager.median_ms / r.median_ms:.3f}" if eager else "-",
                  f"{bare.median_ms / r.median_ms:.3f}" if bare else "-", f"{r.rel_error:.1e}")
    console.print(t)
    for note in res.notes():
        console.print(f"[yellow]{escape(note)}[/yellow]", highlight=False)
    for r in recs:
        if not r.ok:
            console.print(f"[red]{escape(f'{r.label}: {r.status}: {r.note}')}[/red]", highlight=False)
    target = out or Path("gemmlab-results") / res.runs[0]["run_id"]
    paths = _measure.write_outputs(res, target, report=report, at=None)
    console.print("written: " + ", ".join(str(p) for key, p in paths.items() if key != "figures"), highlight=False)
    if any(not r.ok for r in recs if r.family == "gpu"):
        raise typer.Exit(1)
