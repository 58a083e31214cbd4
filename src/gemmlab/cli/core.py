"""gemmlab info | kernels | run."""

from __future__ import annotations

import time
from typing import Optional

import numpy as np
import typer
from rich.table import Table

from .. import __version__, api
from ..kernels import registry
from ..runtime import compiler, device
from ..runtime.errors import GemmlabError
from ._app import app, console, fail


def parse_params(items: list[str] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            fail(f"--param expects NAME=VALUE, got {item!r}")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            fail(f"--param {name}: {value!r} is not an integer")
    return out


def _gpu_or_fail() -> device.DeviceInfo:
    try:
        return device.device_info()
    except GemmlabError as exc:
        fail(str(exc))


# ------------------------------------------------------------------------------------------- info


@app.command()
def info() -> None:
    """The GPU's properties (as CUDA reports them), derived peaks, clocks and software versions."""
    versions = {"gemmlab": __version__}
    try:
        versions["NVRTC"] = ".".join(map(str, compiler.nvrtc_version()))
    except GemmlabError as exc:
        versions["NVRTC"] = f"unavailable ({exc})"
    if not device.gpu_available():
        for k, v in versions.items():
            console.print(f"{k}: {v}")
        fail(f"GPU unavailable: {device.gpu_unavailable_reason()}")
    d = device.device_info()
    cp = device.require_cupy()
    versions["CuPy"] = cp.__version__
    versions["CUDA driver"] = f"{d.driver_version // 1000}.{d.driver_version % 1000 // 10}"
    versions["CUDA runtime"] = f"{d.runtime_version // 1000}.{d.runtime_version % 1000 // 10}"

    t = Table(title=f"Device {d.index}: {d.name}", show_header=False)
    t.add_column("property", style="bold")
    t.add_column("value")
    rows = [
        ("compute capability", f"{d.compute_capability[0]}.{d.compute_capability[1]} ({d.arch})"),
        ("multiprocessors (SMs)", str(d.sm_count)),
        ("global memory", f"{d.global_mem_bytes / 2**30:.1f} GiB"),
        ("L2 cache", f"{d.l2_bytes / 2**20:.1f} MiB"),
        ("shared memory per block", f"{d.smem_per_block // 1024} KiB (opt-in up to {d.smem_per_block_optin // 1024} KiB)"),
        ("shared memory per SM", f"{d.smem_per_sm // 1024} KiB"),
        ("registers per block / per SM", f"{d.regs_per_block} / {d.regs_per_sm}"),
        ("warp size", str(d.warp_size)),
        ("max threads per block / per SM", f"{d.max_threads_per_block} / {d.max_threads_per_sm}"),
        ("SM clock (max)", f"{d.sm_clock_khz / 1e3:.0f} MHz"),
        ("memory clock", f"{d.mem_clock_khz / 1e3:.0f} MHz, {d.mem_bus_bits}-bit bus"),
        ("FP32 lanes per SM", str(d.fp32_lanes_per_sm)),
        ("peak FP32 (SMs x lanes x 2 x clock)", f"{d.peak_fp32_tflops:.1f} TFLOP/s"),
        ("peak DRAM bandwidth (datasheet)", f"{d.peak_dram_gbps:.0f} GB/s"),
    ]
    clocks = device.clocks_now(d.index)
    if clocks:
        rows.append(("SM clock now", f"{clocks['sm_clock_mhz']} MHz (max {clocks['sm_clock_max_mhz']} MHz)"))
        rows.append(("temperature / power", f"{clocks['temperature_c']} C / {clocks['power_w']:.0f} W"))
    for k, v in versions.items():
        rows.append((k, v))
    for k, v in rows:
        t.add_row(k, v)
    console.print(t)


# ------------------------------------------------------------------------------------------- kernels


@app.command()
def kernels(
    arch: Optional[str] = typer.Option(None, help="compile for this architecture (default: the GPU's, or sm_90 without one)"),
) -> None:
    """The ladder: rung, name, idea, parameters, and the compiler's resource report."""
    from ..cpu import BASELINES

    target = arch or (device.current_arch() if device.gpu_available() else "sm_90")
    try:
        target = compiler.normalise_arch(target)
    except ValueError as exc:
        fail(str(exc))
    can_compile = compiler.nvrtc_available()
    t = Table(title=f"GPU ladder (resources for {target})" if can_compile else "GPU ladder")
    for col in ("rung", "name", "idea", "default parameters"):
        t.add_column(col, no_wrap=col in ("rung", "name"))
    if can_compile:
        for col in ("regs", "smem B", "local B"):
            t.add_column(col, justify="right")
    for spec in registry.all_specs():
        row = [f"{spec.rung:02d}", spec.name, spec.idea, " ".join(f"{k}={v}" for k, v in spec.defaults.items())]
        if can_compile:
            try:
                r = registry.resources(spec, {}, target)
                row += [str(r.registers), str(r.smem_static), str(r.stack_frame + r.spill_stores)]
            except GemmlabError as exc:
                row += ["-", "-", f"compile failed: {str(exc).splitlines()[0]}"]
        t.add_row(*row)
    console.print(t)
    c = Table(title="CPU baselines")
    for col in ("rung", "name", "idea", "default parameters"):
        c.add_column(col)
    for b in BASELINES.values():
        c.add_row(f"{b.rung:02d}", b.name, b.idea, " ".join(f"{k}={v}" for k, v in b.params.items()))
    console.print(c)
    if not can_compile:
        console.print("[yellow]NVRTC unavailable: install gemmlab[nvrtc] to see registers and shared memory[/yellow]")


# ------------------------------------------------------------------------------------------- run


@app.command()
def run(
    kernel: str = typer.Argument("auto", help="a rung name, a CPU baseline (cpu_...) or auto"),
    size: int = typer.Option(1024, "--size", "-s", help="M = N = K unless --m/--n/--k are given"),
    m: Optional[int] = typer.Option(None, "--m"),
    n: Optional[int] = typer.Option(None, "--n"),
    k: Optional[int] = typer.Option(None, "--k"),
    alpha: float = typer.Option(1.0),
    beta: float = typer.Option(0.0),
    param: Optional[list[str]] = typer.Option(None, "--param", "-p", help="template parameter NAME=VALUE (repeatable)"),
    seed: int = typer.Option(0),
) -> None:
    """One GEMM: verify against a float64 reference, then time it."""
    from ..cpu import BASELINES

    M, N, K = m or size, n or size, k or size
    params = parse_params(param)
    rng = np.random.default_rng(seed)
    is_cpu = kernel in BASELINES
    if not is_cpu and kernel != "auto":
        try:
            registry.get(kernel).validate(params)
        except ValueError as exc:
            fail(str(exc))
    if is_cpu:
        a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
        b = rng.uniform(-1, 1, (K, N)).astype(np.float32)
        c = rng.uniform(-1, 1, (M, N)).astype(np.float32)
        ref = alpha * (a.astype(np.float64) @ b.astype(np.float64)) + beta * c.astype(np.float64)
        try:
            t0 = time.perf_counter()
            out = api.matmul(a, b, c.copy() if beta else None, alpha=alpha, beta=beta, kernel=kernel, **params)
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            out = api.matmul(a, b, c.copy() if beta else None, alpha=alpha, beta=beta, kernel=kernel, **params)
            ms = (time.perf_counter() - t0) * 1e3
        except (ValueError, TypeError) as exc:
            fail(str(exc))
        err = _rel(out, ref)
        console.print(f"{kernel}  {M}x{N}x{K}  {ms:.3f} ms  {2 * M * N * K / ms / 1e9:.2f} GFLOP/s  "
                      f"rel. error {err:.2e}  (first call, with JIT: {first:.2f} s)")
        if not err < 1e-4:
            fail(f"{kernel} failed verification: relative error {err:.2e}")
        return

    _gpu_or_fail()
    cp = device.require_cupy()
    from ..bench.ladder import rel_error
    from ..bench.timing import time_gpu, tflops

    spec = api.choose_kernel() if kernel == "auto" else registry.get(kernel)
    g = cp.random.default_rng(seed)
    a = g.uniform(-1, 1, (M, K), dtype=cp.float32)
    b = g.uniform(-1, 1, (K, N), dtype=cp.float32)
    c0 = g.uniform(-1, 1, (M, N), dtype=cp.float32)
    ref = alpha * (a.astype(cp.float64) @ b.astype(cp.float64)) + beta * c0.astype(cp.float64)
    c = c0.copy() if beta else cp.full((M, N), cp.nan, dtype=cp.float32)
    try:
        t0 = time.perf_counter()
        api.matmul(a, b, c, alpha=alpha, beta=beta, kernel=spec.name, **params)
        cp.cuda.get_current_stream().synchronize()
        first = time.perf_counter() - t0
    except (ValueError, TypeError) as exc:
        fail(str(exc))
    err = rel_error(c, ref)
    if not err < 1e-4:
        fail(f"{spec.name} failed verification: relative error {err:.2e} at {M}x{N}x{K}")
    timing = time_gpu(lambda: api.matmul(a, b, c, alpha=alpha, beta=beta, kernel=spec.name, **params),
                      reset=(lambda: c.__setitem__(Ellipsis, c0)) if beta else None)
    console.print(f"{spec.name} {spec.validate(params)}  {M}x{N}x{K}  {timing.median_ms:.4f} ms "
                  f"(IQR {timing.iqr_ms:.4f}, n={timing.samples}, L2 {timing.l2})  "
                  f"{tflops(M, N, K, timing.median_ms):.2f} TFLOP/s  rel. error {err:.2e}  "
                  f"(first call incl. compile/load: {first * 1e3:.0f} ms)")


def _rel(out: np.ndarray, ref: np.ndarray) -> float:
    if not np.isfinite(out).all():
        return float("inf")
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(out.astype(np.float64) - ref) / den) if den else float(np.linalg.norm(out))
