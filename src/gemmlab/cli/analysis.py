"""gemmlab micro | roofline | explain | profile | sawtooth | cliff | timeline: the numbers and what explains them."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..files import atomic_write
from ..kernels import registry
from ..runtime import device
from ..runtime.errors import GemmlabError
from ._app import app, console, fail
from .core import parse_params



def _why_not(r) -> str:
    """Why a measurement record holds no time: its verification error, or the note of a call that raised."""
    if r.rel_error is not None:
        return f"verification failed, relative error {r.rel_error:.1e}"
    return r.note or r.status

def _gpu_or_fail() -> device.DeviceInfo:
    try:
        return device.device_info()
    except GemmlabError as exc:
        fail(str(exc))


def _spec_or_fail(name: str, fp32: bool = False):
    try:
        spec = registry.get(name)
    except ValueError as exc:
        fail(str(exc))
    if fp32 and "float32" not in spec.dtypes:
        fail(f"the analysis models the fp32 rungs (4-byte operands, FP32 FMA); {spec.name} takes {', '.join(spec.dtypes)}")
    return spec


def _shape(size: int, m: Optional[int], n: Optional[int], k: Optional[int]) -> tuple[int, int, int]:
    M, N, K = m or size, n or size, k or size
    if min(M, N, K) < 1:
        fail(f"M, N and K must be positive, got {M} x {N} x {K}")
    return M, N, K


def _ceilings(dev, path: Optional[Path], measure: bool):
    """Ceilings from a file, the per-device cache, a fresh measurement, or the datasheet (in that order)."""
    from ..micro.ceilings import Ceilings, load_cached

    if path is not None:
        try:
            return Ceilings.load(path)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            fail(f"cannot read ceilings from {path}: {exc}")
    cached = load_cached(dev) if dev.index >= 0 else None
    if cached is not None:
        return cached
    if measure and dev.index >= 0:
        console.print("[dim]no measured ceilings for this GPU yet: running the microbenchmarks (gemmlab micro)[/dim]")
        return _run_micro(dev, None, 150.0, save=True)
    return Ceilings.datasheet(dev)


def _run_micro(dev, only, budget_ms: float, save: bool):
    from ..micro.bench import run_micro
    from ..micro.ceilings import Ceilings, cache_path

    try:
        results = run_micro(only, budget_ms=budget_ms)
    except ValueError as exc:
        fail(str(exc))
    ceil = Ceilings.from_results(results, dev)
    if save and not only:
        ceil.save(cache_path(dev))
    return ceil


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1f}%"


def _rate(v: Optional[float], unit: str) -> str:
    if v is None:
        return "-"
    return f"{v / 1e12:.2f} TFLOP/s" if unit == "FLOP/s" else f"{v / 1e9:,.0f} GB/s"


# ------------------------------------------------------------------------------------------- micro


@app.command()
def micro(
    only: Optional[list[str]] = typer.Option(None, "--only", help="run only these (repeatable): fp32_fma, "
                                             "tensor_fp16, tensor_bf16, tensor_fp16_wgmma, tensor_bf16_wgmma, "
                                             "dram_read, dram_write, dram_copy, memcpy_d2d, "
                                             "l2_read, smem_read, l1_read"),
    budget_ms: float = typer.Option(150.0, help="timing budget per benchmark, ms"),
    out: Optional[Path] = typer.Option(None, help="also write the ceilings as JSON here"),
    link: Optional[int] = typer.Option(None, "--link", help="instead: the link between this many GPUs (one process "
                                       "each): NCCL all-gather and reduce-scatter bus bandwidth by message size, "
                                       "and a peer copy"),
    backend: str = typer.Option("nccl", "--backend", help="with --link: nccl (GPUs) or gloo (CPU processes, small "
                                                          "messages: a check of the code)"),
) -> None:
    """Peak FMA, tensor-core, DRAM, L2, shared-memory and L1 rates, beside the datasheet and the SM clock."""
    if link is not None:
        _micro_link(link, backend, budget_ms, out)
        return
    dev = _gpu_or_fail()
    ceil = _run_micro(dev, only, budget_ms, save=True)
    t = Table(title=f"Microbenchmarks on {dev.name} (datasheet at the SM clock measured during each run)")
    for col in ("benchmark", "measured", "datasheet", "%", "SM MHz", "datasheet at boost", "% of boost"):
        t.add_column(col, justify="left" if col == "benchmark" else "right")
    for r in ceil.results:
        note = "" if r.published else " *"
        t.add_row(r.name, _rate(r.value, r.unit), _rate(r.datasheet_at_clock, r.unit) + note, _pct(r.pct_at_clock),
                  f"{r.sm_clock_mhz:.0f}" if r.sm_clock_mhz else "-", _rate(r.datasheet, r.unit), _pct(r.pct_datasheet))
    console.print(t)
    for r in ceil.results:
        console.print(f"[dim]{r.name}: {r.detail}; datasheet: {r.basis}; SM clock: {r.clock_basis}[/dim]",
                      highlight=False)
    if any(not r.published for r in ceil.results):
        console.print("[dim]* nominal figure: NVIDIA publishes no L2 bandwidth for this chip[/dim]")
    if any(r.sm_clock_mhz is None for r in ceil.results):
        console.print("[yellow]SM clock not sampled (nvidia-ml-py / NVML unavailable): % are against the boost clock only[/yellow]")
    if out:
        console.print(f"ceilings written to {ceil.save(out)}")


def _micro_link(world: int, backend: str, budget_ms: float, out: Optional[Path]) -> None:
    import json

    from ..files import atomic_write
    from ..micro import link as lk

    sizes = lk.SIZES if backend == "nccl" else (1 << 16, 1 << 20)
    try:
        with console.status(f"the link over {world} ranks ({backend})"):
            res = lk.measure_link(world, backend, sizes, budget_ms)
    except (ValueError, ImportError) as exc:
        fail(str(exc))
    t = Table(title=f"the link over {world} ranks ({backend}): bus bandwidth, NCCL's definition")
    for col in ("collective", "size", "time", "bus bandwidth"):
        t.add_column(col, justify="left" if col == "collective" else "right")
    for p in res.points:
        t.add_row(p.collective, f"{p.nbytes / 1e6:.1f} MB", f"{p.seconds * 1e6:.1f} us", f"{p.busbw / 1e9:.1f} GB/s")
    console.print(t)
    if res.peer_copy_bps:
        console.print(f"peer copy GPU 0 -> 1: {res.peer_copy_bps / 1e9:.1f} GB/s", highlight=False)
    lnk = res.link()
    console.print(f"model link (largest size): all-gather {lnk.all_gather_busbw / 1e9:.1f} GB/s, reduce-scatter "
                  f"{lnk.reduce_scatter_busbw / 1e9:.1f} GB/s (gemmlab explain --distributed {world} --busbw ...)",
                  highlight=False)
    if out:
        atomic_write(out, json.dumps(res.to_dict(), indent=1))
        console.print(f"written: {out}", highlight=False)


# ------------------------------------------------------------------------------------------- explain


@app.command()
def explain(
    kernel: str = typer.Argument(..., help="a rung name (gemmlab kernels)"),
    size: int = typer.Option(4096, "--size", "-s", help="M = N = K unless --m/--n/--k are given"),
    m: Optional[int] = typer.Option(None, "--m"),
    n: Optional[int] = typer.Option(None, "--n"),
    k: Optional[int] = typer.Option(None, "--k"),
    param: Optional[list[str]] = typer.Option(None, "--param", "-p", help="template parameter NAME=VALUE"),
    measure: bool = typer.Option(True, help="time the kernel when a GPU is present"),
    ncu: bool = typer.Option(False, help="also read ncu's counters for one launch"),
    ceilings: Optional[Path] = typer.Option(None, help="ceilings JSON (default: measured ones cached for this GPU)"),
    preset: Optional[str] = typer.Option(None, "--device", help="model a preset device instead (h100)"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32, tf32, float16 or bfloat16 (default: the "
                                                              "rung's own)"),
    out_dtype: Optional[str] = typer.Option(None, "--out-dtype", help="C's dtype (default: the inputs')"),
    sustained_s: float = typer.Option(1.0, "--sustained", help="seconds of calls back to back for the power part "
                                                               "(clock, draw, the limit; 0: none)"),
    distributed: Optional[int] = typer.Option(None, "--distributed", help="a tensor-parallel product over this many "
                                              "GPUs (M x N x K the full product; model only): whether the link or "
                                              "the math limits it"),
    kind: str = typer.Option("all_gather", "--kind", help="with --distributed: all_gather (column-parallel) or "
                                                          "reduce_scatter (row-parallel)"),
    busbw: Optional[float] = typer.Option(None, "--busbw", help="with --distributed: the link's bus bandwidth, GB/s "
                                                                "(default: the reference host's, for 2 or 4 GPUs)"),
) -> None:
    """What limits KERNEL at M x N x K: the numbers, the model against measurement, and a paragraph."""
    from ..analysis import facts
    from ..analysis.explain import explain as explain_kernel
    from ..analysis.models import model_format, typed_params

    spec = _spec_or_fail(kernel)
    M, N, K = _shape(size, m, n, k)
    if distributed is not None:
        from ..analysis.tensor_parallel import explain_tensor_parallel

        try:
            v = explain_tensor_parallel(kind, M, N, K, distributed, kernel=spec.name, dtype=dtype or "bfloat16",
                                        busbw=None if busbw is None else busbw * 1e9, device=preset)
        except ValueError as exc:
            fail(str(exc))
        p = v.prediction
        t = Table(title=f"{kind} {M}x{N}x{K} over {distributed} GPUs (model)")
        for col in ("quantity", "value"):
            t.add_column(col)
        for name, val in (("each rank's GEMM", "x".join(map(str, v.rank_shape))), ("GEMM", f"{p.gemm_s * 1e3:.3f} ms"),
                          ("collective", f"{p.comm_s * 1e3:.3f} ms at {v.busbw / 1e9:.0f} GB/s"),
                          ("sequential", f"{p.sequential_s * 1e3:.3f} ms"), ("ideal overlap", f"{p.ideal_s * 1e3:.3f} ms"),
                          ("ring pipeline", f"{p.overlapped_s * 1e3:.3f} ms ({p.efficiency:.0%} of ideal)"),
                          ("limited by", p.limiter)):
            t.add_row(name, val)
        console.print(t)
        console.print(v.paragraph, highlight=False)
        return
    params = parse_params(param)
    try:
        fmt = model_format(spec, dtype, None, out_dtype)
        typed_params(spec, params, fmt)
        dev, is_preset = facts.resolve(preset)
    except ValueError as exc:
        fail(str(exc))
    if not is_preset and fmt.out_dtype != fmt.dtype and (measure or ncu):
        console.print(f"[yellow]model only: timings and counters are taken with C in the inputs' dtype, not "
                      f"{fmt.out_dtype}[/yellow]", highlight=False)
        measure = ncu = False
    measured_s = clock = counters = power = None
    if is_preset:
        why = "" if preset else f" (GPU unavailable: {device.gpu_unavailable_reason()})"
        console.print(f"[yellow]model only, on the {dev.name} facts{escape(why)}[/yellow]", highlight=False)
    else:
        from ..analysis.measure import resolve_params
        from ..bench.measure import callable_params, measure_one as time_kernel

        params = callable_params(spec.name, resolve_params(spec, M, N, K, params, dev, fmt.element))
        if measure:
            r = time_kernel(spec.name, M, N, K, params, fmt=fmt.name)
            if not r.ok:
                fail(f"{spec.name} at {M}x{N}x{K} was not timed: {_why_not(r)}")
            measured_s, clock = r.seconds, r.sm_clock_mhz
            if sustained_s > 0:
                power = _power_state(spec.name, M, N, K, params, fmt.name, sustained_s)
        if ncu:
            counters = _ncu_or_note([(spec.name, M, N, K, params)], fmt.name)
            counters = counters[0] if counters else None
    ceil = _ceilings(dev, ceilings, measure and not is_preset)
    e = explain_kernel(spec, M, N, K, params or None, dev, ceil, measured_s, clock, counters, dtype=fmt.dtype,
                       precision=fmt.precision, out_dtype=fmt.out_dtype, power=power)
    t = Table(title=f"{spec.name} {fmt.name} {e.model.params}  {M}x{N}x{K}  ({ceil.source} ceilings)")
    for col in ("quantity", "model", "measured"):
        t.add_column(col)
    for row in e.rows:
        t.add_row(*row)
    console.print(t)
    b = Table(title="time bounds (the longest is the limiter)")
    for col in ("resource", "work", "bound", "of the limiter"):
        b.add_column(col, justify="left" if col == "resource" else "right")
    for row in e.bound_rows:
        b.add_row(*row)
    console.print(b)
    console.print(e.paragraph, highlight=False)


def _power_state(name: str, M: int, N: int, K: int, params: dict, fmt: str, seconds: float):
    """The kernel run back to back for `seconds` (bench.sustained): its clock, draw and the board's limit."""
    from ..analysis.explain import PowerState
    from ..bench.sustained import sustained_call

    s = sustained_call(name, M, N, K, params, fmt=fmt, seconds=seconds)
    limit = device.clocks_now(device.device_info().index).get("power_limit_w")
    if s.probe_mhz:
        return PowerState(s.ms, s.probe_mhz, s.watts, limit, s.power_limited, "counted on an SM between calls")
    return PowerState(s.ms, s.sm_mhz, s.watts, limit, s.power_limited, "NVML's reading")


# ------------------------------------------------------------------------------------------- profile


def _ncu_or_note(entries, fmt: str = "fp32"):
    from ..analysis import ncu as ncu_mod

    runs = [ncu_mod.ProfileRun(name, M, N, K, dict(p or {}), fmt) for name, M, N, K, p in entries]
    try:
        return ncu_mod.profile(runs)
    except ncu_mod.NcuUnavailable as exc:
        console.print(f"[yellow]no counters: {escape(str(exc))}; falling back to time-based checks[/yellow]", highlight=False)
        return None


@app.command()
def profile(
    kernels: list[str] = typer.Argument(..., help="rung names"),
    size: int = typer.Option(2048, "--size", "-s", help="M = N = K unless --m/--n/--k are given"),
    m: Optional[int] = typer.Option(None, "--m"),
    n: Optional[int] = typer.Option(None, "--n"),
    k: Optional[int] = typer.Option(None, "--k"),
    param: Optional[list[str]] = typer.Option(None, "--param", "-p", help="NAME=VALUE, applied to every kernel"),
    dtype: str = typer.Option("float32", "--dtype", help="float32, tf32, float16 or bfloat16 (the operands and C; "
                                                          "the tensor-core rungs take the last three)"),
) -> None:
    """ncu counters of one launch per kernel (DRAM, L2, L1, bank conflicts, occupancy) beside the model."""
    from ..analysis import ncu as ncu_mod
    from ..analysis.bounds import predict
    from ..analysis.explain import fmt_bytes, fmt_count, fmt_s
    from ..analysis.measure import resolve_params
    from ..analysis.models import model_format, model_kernel
    from ..bench.measure import callable_params, measure_one as time_kernel

    dev = _gpu_or_fail()
    M, N, K = _shape(size, m, n, k)
    given = parse_params(param)
    specs = [_spec_or_fail(x) for x in kernels]
    try:
        fmts = [model_format(s, dtype) for s in specs]
        entries = [(s.name, M, N, K, callable_params(s.name, resolve_params(s, M, N, K, given, dev, f.element)))
                   for s, f in zip(specs, fmts)]
    except ValueError as exc:
        fail(str(exc))
    fmt = fmts[0]

    def model(name, p):
        return model_kernel(name, M, N, K, p, dev, dtype=fmt.dtype, precision=fmt.precision)

    ceil = _ceilings(dev, None, True)
    counters = _ncu_or_note(entries, fmt.name)
    if counters is None:
        t = Table(title=f"time-based check at {M}x{N}x{K} {fmt.name} (no counters)")
        for col in ("kernel", "limiter (model)", "bound", "measured", "bound / measured", "SM MHz"):
            t.add_column(col)
        for name, *_, p in entries:
            r = time_kernel(name, M, N, K, p, fmt=fmt.name)
            pred = predict(model(name, p), ceil, r.sm_clock_mhz)
            t.add_row(name, pred.limiter.resource, fmt_s(pred.seconds), fmt_s(r.seconds),
                      f"{pred.seconds / r.seconds:.2f}" if r.ok else "failed",
                      f"{r.sm_clock_mhz:.0f}" if r.sm_clock_mhz else "-")
        console.print(t)
        return
    t = Table(title=f"ncu (--clock-control none, cold L2) against the model at {M}x{N}x{K} {fmt.name}")
    for col in ("kernel", "DRAM model / ncu", "L1<->L2 model / ncu", "sum ratio", "SMs<->xbar model / ncu",
                "L1 hit model / ncu",
                "smem wavefronts model / ncu", "bank conflicts ld / st", "occupancy theor. / achieved", "SM MHz",
                "time"):
        t.add_column(col, justify="left" if col == "kernel" else "right")
    for (name, *_, p), c in zip(entries, counters):
        mdl = model(name, p)
        cmp_ = ncu_mod.compare_traffic(mdl, c)
        hit = c.get("l1_global_load_hit_sectors"), c.get("l1_global_load_sectors")
        t.add_row(
            name, f"{fmt_bytes(cmp_.model_dram)} / {fmt_bytes(cmp_.measured_dram)}",
            f"{fmt_bytes(cmp_.model_l2)} / {fmt_bytes(cmp_.measured_l2)}",
            f"{cmp_.sum_ratio:.2f}" if cmp_.sum_ratio else "-",
            (f"{fmt_bytes(cmp_.model_delivered)} / {fmt_bytes(cmp_.measured_delivered)} ({cmp_.delivered_ratio:.2f})"
             if cmp_.delivered_ratio else "-"),
            f"{100 * mdl.cache.l1_hit_rate:.0f}% / " + (f"{100 * hit[0] / hit[1]:.0f}%" if hit[0] is not None and hit[1] else "-"),
            f"{fmt_count(mdl.l1.smem_load_wavefronts)} / {fmt_count(c.get('smem_load_wavefronts'))}",
            f"{fmt_count(c.get('smem_load_bank_conflicts'))} / {fmt_count(c.get('smem_store_bank_conflicts'))}",
            f"{100 * mdl.occupancy.fraction:.0f}% / " + (f"{c.get('achieved_occupancy_pct'):.0f}%" if c.get("achieved_occupancy_pct") is not None else "-"),
            f"{c.sm_clock_mhz:.0f}" if c.sm_clock_mhz else "-", fmt_s(c.get("duration_s")))
    console.print(t)
    l2_metric = counters[0].l2_compared_bytes[1] if counters else ""
    console.print(f"[dim]L1<->L2 measured as {l2_metric}; a sum ratio within 0.75..1.25 is within the model's stated 25%. "
                  "SMs<->xbar: what the crossbar delivered to the SMs and took from them (l1tex__m_xbar2l1tex_read_bytes + "
                  "l1tex__m_l1tex2xbar_write_bytes), every SM counted: a box two SMs share is counted once in L2's "
                  "sectors and twice here.[/dim]")
    dropped = sorted({d for c in counters for d in c.dropped})
    if dropped:
        console.print(f"[dim]metrics this ncu does not know, left out: {', '.join(dropped)}[/dim]")


# ------------------------------------------------------------------------------------------- roofline


@app.command()
def roofline(
    size: int = typer.Option(4096, "--size", "-s", help="square size of every kernel's point"),
    kernel: Optional[list[str]] = typer.Option(None, "--kernel", "-k", help="rungs (default: all)"),
    out: Path = typer.Option(Path("roofline.png"), help="figure file"),
    ceilings: Optional[Path] = typer.Option(None, help="ceilings JSON (default: measured ones cached for this GPU)"),
    model_only: bool = typer.Option(False, help="plot the model's attainable rates (no GPU needed)"),
    budget_ms: float = typer.Option(150.0, help="timing budget per kernel, ms"),
    dtype: str = typer.Option("float32", "--dtype", help="float32 (the FP32 ladder), tf32, float16 or bfloat16 (the "
                                                          "tensor-core rungs; their peak is the roof)"),
) -> None:
    """Roofline with the measured ceilings and every kernel's point at one size, in one number format."""
    from ..analysis import facts
    from ..analysis.bounds import compute_rate, predict
    from ..analysis.figures import RooflinePoint, roofline_figure
    from ..analysis.models import model_format, model_kernel
    from ..analysis.report import wavefront_bps
    from ..bench.measure import callable_params
    from ..micro.ceilings import Ceilings

    if model_only:
        dev, _ = facts.resolve(None)
    else:
        dev = _gpu_or_fail()
    dt, precision = ("float32", "tf32") if dtype == "tf32" else (dtype, None)
    if kernel:
        specs = [_spec_or_fail(x) for x in kernel]
    else:  # the format's ladder that this GPU runs (all of it for the model)
        specs = [s for s in registry.specs_for(dt, precision)
                 if model_only or registry.cc_problem(s, dev.compute_capability) is None]
    try:
        fmts = {s.name: model_format(s, dt, precision) for s in specs}
    except ValueError as exc:
        fail(str(exc))
    if not specs:
        fail(f"no rung runs {dtype} on {dev.name}")
    ceil = _ceilings(dev, ceilings, not model_only)
    mhz = ceil.sm_clock_mhz or dev.sm_clock_khz / 1e3
    # The roof: the fastest unit among the rungs' (wgmma's tensor rate over mma.sync's, FP32 FMA for fp32).
    unit_rates = [compute_rate(f, dev, ceil, mhz) for f in fmts.values()]
    resource, roof, basis = max(unit_rates, key=lambda u: u[1])
    roof_label = f"{'FP32' if resource == 'FMA' else next(iter(fmts.values())).name} peak {roof / 1e12:.1f} TFLOP/s ({basis})"
    points = []
    t = Table(title=f"roofline points at {size}^3 ({'model' if model_only else 'measured'})")
    for col in ("kernel", "TFLOP/s", "FLOP/B DRAM", "FLOP/B L2", "FLOP/B L1/shared", "limiter (model)", "SM MHz"):
        t.add_column(col, justify="left" if col == "kernel" else "right")
    for s in specs:
        f = fmts[s.name]
        if model_only:
            p = s.heuristic(size, size, size, dev.sm_count, f.element) if s.heuristic else None
            mdl = model_kernel(s, size, size, size, p, dev, dtype=f.dtype, precision=f.precision)
            pred = predict(mdl, ceil)
            rate, clock, lim = pred.attainable_flops, None, pred.limiter.resource
        else:
            from ..analysis.bounds import verdict
            from ..bench.measure import measure_one as time_kernel

            r = time_kernel(s.name, size, size, size, None, budget_ms=budget_ms, fmt=f.name)
            if not r.ok:
                console.print(f"[red]{s.name} was not timed ({_why_not(r)}); left out[/red]")
                continue
            mdl = model_kernel(s, size, size, size, callable_params(s.name, r.params), dev, dtype=f.dtype,
                               precision=f.precision)
            pred = predict(mdl, ceil, r.sm_clock_mhz)
            rate, clock, lim = 2.0 * size**3 / r.seconds, r.sm_clock_mhz, verdict(pred, r.seconds)
        points.append(RooflinePoint(s.name, rate, {"DRAM": mdl.dram_intensity, "L2": mdl.l2_intensity,
                                                   "L1": mdl.l1_intensity}, not model_only, clock))
        t.add_row(s.name, f"{rate / 1e12:.2f}", f"{mdl.dram_intensity:.3g}", f"{mdl.l2_intensity:.3g}",
                  f"{mdl.l1_intensity:.3g}", lim, f"{clock:.0f}" if clock else "-")
    console.print(t)
    fig = roofline_figure(ceil, points, f"{dev.name}, {size}^3, {dtype}",
                          Ceilings.datasheet(dev) if ceil.source == "measured" else None, wavefront_bps(dev, ceil),
                          peak=(roof_label, roof))
    out.parent.mkdir(parents=True, exist_ok=True)
    _save_figure(fig, out)
    console.print(f"roofline written to {out} (ceilings: {ceil.source})")


# ------------------------------------------------------------------------------------------- sawtooth


@app.command()
def sawtooth(
    kernel: Optional[str] = typer.Argument(None, help="a rung (default: the one kernel='auto' runs)"),
    m: int = typer.Option(4096, "--m", help="fixed M"),
    k: int = typer.Option(4096, "--k", help="fixed K"),
    n_from: int = typer.Option(1024, help="first N"),
    n_to: int = typer.Option(2048, help="last N"),
    step: int = typer.Option(16, help="step in N"),
    param: Optional[list[str]] = typer.Option(None, "--param", "-p", help="NAME=VALUE (default: the rung's defaults)"),
    out: Path = typer.Option(Path("sawtooth.png"), help="figure file"),
    model_only: bool = typer.Option(False, help="draw the model alone (no GPU needed)"),
    budget_ms: float = typer.Option(40.0, help="timing budget per size, ms"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32, tf32, float16 or bfloat16 (default: the "
                                                              "rung's own)"),
) -> None:
    """Tile and wave quantization across N: the measured sawtooth with the model overlaid."""
    from .. import api
    from ..analysis import facts
    from ..analysis.figures import sawtooth_figure
    from ..analysis.models import model_format, sawtooth_quants, typed_params
    from ..analysis.quantization import fit_sawtooth, model_time_units

    try:
        spec = _spec_or_fail(kernel) if kernel else api.choose_kernel(dtype or "float32")
        fmt = model_format(spec, dtype)
        params = typed_params(spec, parse_params(param), fmt)
    except ValueError as exc:
        fail(str(exc))
    if n_from < 1 or n_to < n_from or step < 1:
        fail(f"need 1 <= --n-from <= --n-to and --step >= 1, got {n_from}..{n_to} step {step}")
    shapes = [(m, n, k) for n in range(n_from, n_to + 1, step)]
    dev = facts.resolve(None)[0] if model_only else _gpu_or_fail()
    quants, geo, b = sawtooth_quants(spec, params, shapes, dev)
    ns = [s[1] for s in shapes]
    if model_only:
        curve = [2.0 * q.m * q.n * q.k / model_time_units(q, 1.0) for q in quants]
        top = max(curve)
        fig = sawtooth_figure(ns, [c / top for c in curve], title=f"{spec.name} {geo.tile_m}x{geo.tile_n} tiles, "
                              f"{b} per SM: model only (M = {m}, K = {k}, {dev.name})", tile_n=geo.tile_n,
                              model_label="quantization model, one block fills an SM", ylabel="relative rate")
        out.parent.mkdir(parents=True, exist_ok=True)
        _save_figure(fig, out)
        console.print(f"model-only sawtooth written to {out}")
        return
    from ..analysis.measure import calibrate_single_block_speed, sweep

    cal = calibrate_single_block_speed(spec.name, params, k, fmt=fmt.name)
    console.print(f"{spec.name} {params}: {b} block(s) per SM; single-block speed s1 = {cal.single_block_speed:.2f}"
                  + (f" ({cal.note})" if cal.note else ""), highlight=False)
    meas = sweep(spec.name, shapes, params, budget_ms=budget_ms, fmt=fmt.name)
    bad = [r for r in meas if not r.ok]
    if bad:
        fail(f"{spec.name} at N = {bad[0].n} was not timed: {_why_not(bad[0])}")
    fit = fit_sawtooth(quants, [r.seconds for r in meas], cal.single_block_speed)
    fig = sawtooth_figure(ns, fit.predicted_tflops, fit.measured_tflops, fit.rel_errors,
                          f"{spec.name} {fmt.name} {geo.tile_m}x{geo.tile_n} tiles, M = {m}, K = {k}, {dev.name}", geo.tile_n,
                          f"quantization model (s1 = {fit.single_block_speed:.2f}, one fitted scale)")
    out.parent.mkdir(parents=True, exist_ok=True)
    _save_figure(fig, out)
    console.print(f"model vs measured over {len(shapes)} sizes: {100 * fit.within_10pct:.0f}% of points within 10%, "
                  f"median error {100 * fit.median_abs_error:.1f}%, 90th percentile {100 * fit.p90_abs_error:.1f}%, "
                  f"max {100 * fit.max_abs_error:.1f}%")
    console.print(f"sawtooth written to {out}")


# ------------------------------------------------------------------------------------------- cliff


@app.command()
def cliff(
    kernel: str = typer.Argument("naive", help="a rung"),
    sizes: str = typer.Option("512,1024,1536,2048,2560,3072,4096", help="comma-separated square sizes"),
    out: Path = typer.Option(Path("cliff.png"), help="figure file"),
    model_only: bool = typer.Option(False, help="the model alone (no GPU needed)"),
    budget_ms: float = typer.Option(100.0, help="timing budget per size, ms"),
) -> None:
    """The L2 cliff: where A, B and C stop fitting in L2, and the kernel's predicted and measured fall-off."""
    from ..analysis import facts
    from ..analysis.cliff import falloff, l2_cliff
    from ..analysis.figures import cliff_figure

    spec = _spec_or_fail(kernel, fp32=True)
    try:
        ns = [int(x) for x in sizes.split(",") if x.strip()]
    except ValueError:
        fail(f"--sizes must be comma-separated integers, got {sizes!r}")
    dev = facts.resolve(None)[0] if model_only else _gpu_or_fail()
    ceil = _ceilings(dev, None, not model_only)
    cl = l2_cliff(spec, ns, None, dev, ceil)
    measured = None
    if not model_only:
        from ..analysis.measure import sweep

        measured = {r.n: r.tflops for r in sweep(spec.name, [(x, x, x) for x in ns], budget_ms=budget_ms) if r.ok}
    reread = f"; the model has it re-read operands from N = {cl.n_reread}" if cl.n_reread else ""
    t = Table(title=f"L2 cliff, {spec.name}: A+B+C fit in L2 up to N = {cl.n_all_fit}; A+B up to "
                    f"{cl.n_operands_fit}{reread}")
    for col in ("N", "DRAM reads / compulsory (model)", "limiter (model)", "TFLOP/s model", "TFLOP/s measured"):
        t.add_column(col, justify="right")
    for p in cl.points:
        t.add_row(str(p.n), f"{p.dram_reread:.1f}", p.prediction.limiter.resource, f"{p.predicted_tflops:.3g}",
                  f"{measured[p.n]:.3g}" if measured and p.n in measured else "-")
    console.print(t)
    pred = cl.predicted_falloff()
    if pred != pred:  # nan: no sizes on one side of the cliff
        console.print(f"[yellow]no fall-off to compare: give sizes on both sides of N = {cl.n_all_fit}[/yellow]")
    else:
        line = f"rate past the cliff over the rate below it: model x {pred:.2f}"
        if measured:
            meas = falloff(sorted(measured), [measured[x] for x in sorted(measured)], cl.n_all_fit)
            line += f", measured x {meas:.2f}"
        console.print(line)
    out.parent.mkdir(parents=True, exist_ok=True)
    _save_figure(cliff_figure(cl, measured, f"L2 cliff: {spec.name} on {dev.name}"), out)
    console.print(f"figure written to {out}")


# ------------------------------------------------------------------------------------------- timeline


@app.command()
def timeline(
    kernel: str = typer.Argument("wgmma", help="a rung with a traced build (its spec's trace)"),
    size: int = typer.Option(4096, "--size", "-s", help="M = N = K unless --m/--n/--k are given"),
    m: Optional[int] = typer.Option(None, "--m"),
    n: Optional[int] = typer.Option(None, "--n"),
    k: Optional[int] = typer.Option(None, "--k"),
    dtype: str = typer.Option("bfloat16", "--dtype", help="float16 or bfloat16 (bfloat16 needs torch)"),
    activation: Optional[str] = typer.Option(None, help="a fused column bias and this activation ('none': the bias "
                                                        "alone)"),
    param: Optional[list[str]] = typer.Option(None, "--param", "-p", help="NAME=VALUE (default: what auto picks)"),
    peak: float = typer.Option(4096.0, help="the SM's dense peak, FLOP per clock, for the main loop's efficiency "
                                            "(H100 fp16 / bf16: 4096)"),
    out: Optional[Path] = typer.Option(None, help="figure: SMs over time, each tile's wait, main loop, epilogue"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="the summary and every unit's times, as JSON"),
) -> None:
    """Where a kernel's time goes, tile by tile, measured inside it: one launch of its traced build."""
    import json

    from ..analysis import timeline as tl_mod
    from .core import _operand

    spec = _spec_or_fail(kernel)
    if spec.trace is None:
        with_trace = [s.name for s in registry.all_specs() if s.trace is not None]
        fail(f"{spec.name} has no traced build; these have: {', '.join(with_trace)}")
    if dtype not in ("float16", "bfloat16"):
        fail(f"--dtype takes float16 or bfloat16, got {dtype!r}")
    M, N, K = _shape(size, m, n, k)
    params = parse_params(param)
    _gpu_or_fail()
    cp = device.require_cupy()
    g = cp.random.default_rng(0)
    a, _ = _operand(g.uniform(-1, 1, (M, K), dtype=cp.float32), dtype)
    b, _ = _operand(g.uniform(-1, 1, (K, N), dtype=cp.float32), dtype)
    extra = {}
    if activation is not None:
        extra = {"bias": g.uniform(-1, 1, N, dtype=cp.float32), "activation": None if activation == "none" else activation}
    try:
        tl = tl_mod.record(a, b, kernel=spec.name, **extra, **params)
    except (ValueError, TypeError) as exc:
        fail(str(exc))
    s = tl_mod.summarise(tl, flop_per_clock=peak)
    shown = " ".join(f"{key}={v}" for key, v in s["params"].items())
    console.print(f"{spec.name} {shown}  {M}x{N}x{K} {dtype}"
                  + (f", bias + {activation}" if activation else "")
                  + f": {s['duration_us']:.1f} us at {s['clock_ghz']:.2f} GHz (the SMs' own clocks), "
                  f"{s['blocks']} blocks, {s['units']} units over {s['tiles']} tiles", highlight=False)
    if s["truncated"]:
        console.print(f"[yellow]records incomplete: {escape(s['truncated'])}[/yellow]", highlight=False)
    table = Table(title="per consumer, averaged over blocks and consumers")
    for col in ("phase", "cycles", "share"):
        table.add_column(col, justify="right" if col != "phase" else "left")
    for p in tl_mod.PHASES:
        table.add_row(p, f"{s['phases_cycles'][p]:,.0f}", f"{100 * s['phases_share'][p]:.1f}%")
    console.print(table)
    eff = s.get("main_efficiency")
    console.print(f"main loop: {s['main_cycles_per_kstep']:.0f} cycles per k step (range "
                  f"{s['main_cycles_per_kstep_range'][0]:.0f}-{s['main_cycles_per_kstep_range'][1]:.0f})"
                  + (f", {s['ideal_cycles_per_kstep']:.0f} at the peak: {100 * eff:.1f}% of it" if eff else ""),
                  highlight=False)
    if s.get("epilogue_detail"):
        console.print("epilogue through TMA stores (median cycles): " + ", ".join(
            f"{key} {v:.0f}" for key, v in s["epilogue_detail"].items()), highlight=False)
    segs = tl_mod.segments(tl)
    if out is not None:
        from ..analysis.figures import timeline_figure

        fig = timeline_figure(segs, f"{spec.name} {shown}, {M}x{N}x{K} {dtype}, {s['duration_us']:.1f} us")
        out.parent.mkdir(parents=True, exist_ok=True)
        _save_figure(fig, out)
        console.print(f"timeline written to {out}")
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(json_out, json.dumps({"summary": s, "segments": segs}, indent=1))
        console.print(f"summary and segments written to {json_out}")


def _save_figure(fig, out) -> None:
    """The figure into `out` (its suffix names the format), written atomically."""
    import io

    buf = io.BytesIO()
    fmt = Path(out).suffix.lstrip(".").lower() or "png"
    fig.savefig(buf, format=fmt, dpi=130)
    atomic_write(out, buf.getvalue())
