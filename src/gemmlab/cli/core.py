"""gemmlab info | kernels | run."""

from __future__ import annotations

import time
from typing import Optional

import numpy as np
import typer
from rich.table import Table

from .. import __version__, api, formats
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
    failed: list[str] = []
    for spec in registry.all_specs():
        row = [f"{spec.rung:02d}", spec.name, spec.idea, " ".join(f"{k}={v}" for k, v in spec.defaults.items())]
        if can_compile:
            try:
                r = registry.resources(spec, {}, target)
                row += [str(r.registers), str(r.smem_static), str(r.stack_frame + r.spill_stores)]
            except ValueError as exc:  # a rung built for other exact targets (e.g. sm_90a only)
                row += ["-", "-", str(exc).splitlines()[0]]
            except GemmlabError as exc:
                failed.append(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
                row += ["-", "-", f"compile failed: {failed[-1]}"]
        t.add_row(*row)
    console.print(t)
    if failed and len(failed) >= sum(1 for s in registry.all_specs() if s.target_arch(target)):
        fail(f"no rung compiles for {target} (is it an architecture this NVRTC knows?): {failed[0]}")
    c = Table(title="CPU baselines")
    for col in ("rung", "name", "idea", "default parameters"):
        c.add_column(col)
    for b in BASELINES.values():
        c.add_row(f"{b.rung:02d}", b.name, b.idea, " ".join(f"{k}={v}" for k, v in b.params.items()))
    console.print(c)
    if not can_compile:
        console.print("[yellow]NVRTC unavailable: install gemmlab[nvrtc] to see registers and shared memory[/yellow]")


# ------------------------------------------------------------------------------------------- run




def parse_cc(text: str) -> tuple[int, int]:
    """'9.0', '90', 'sm_90' or 'sm_90a' -> (9, 0); exits with one line otherwise."""
    t = text.strip().lower()
    if "." in t:
        major, _, minor = t.partition(".")
        if major.isdigit() and minor.isdigit():
            return int(major), int(minor)
    else:
        try:
            arch = compiler.normalise_arch(t)
            digits = arch[3:].rstrip("abcdefghijklmnopqrstuvwxyz")
            return int(digits[:-1]), int(digits[-1])
        except ValueError:
            pass
    fail(f"--cc takes a compute capability such as 9.0, 8.6 or sm_90, got {text!r}")


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
    dtype: str = typer.Option("float32", "--dtype", help="input dtype: float32, float16 or bfloat16 (bfloat16 needs torch)"),
    precision: Optional[str] = typer.Option(None, "--precision",
                                            help="fp32 (float32's default), tf32 (float32 on the tensor cores), fp16, bf16"),
    weight: bool = typer.Option(False, "--weight", help="B as a linear layer's weight: the transpose of an N x K "
                                                       "matrix (x @ W.t()), which some rungs read in place"),
    explain: bool = typer.Option(False, "--explain", help="print which kernel and parameters run, and why"),
    cc: Optional[str] = typer.Option(None, "--cc", help="decide for this compute capability (e.g. 9.0) instead of the "
                                                        "GPU's; prints the decision only (no GPU needed)"),
    sms: Optional[int] = typer.Option(None, "--sms", help="SM count for the parameter heuristic with --cc"),
    sustained: Optional[float] = typer.Option(None, "--sustained", metavar="SECONDS",
                                              help="also run it back to back beside cuBLAS, SECONDS per turn: time, "
                                                   "SM clock, power and energy per call at the board's power limit"),
    turns: int = typer.Option(2, "--turns", help="turns per call with --sustained (alternating order)"),
) -> None:
    """One GEMM: verify against a float64 reference, then time it. --explain (or --cc) shows the dispatch;
    --sustained adds the steady state of calls run back to back (docs/harness.md)."""
    from ..cpu import BASELINES

    M, N, K = (size if v is None else v for v in (m, n, k))
    for name, v in (("M", M), ("N", N), ("K", K)):
        if not 1 <= v <= 2**31 - 1:
            fail(f"{name} = {v}: --size, --m, --n and --k take positive sizes below 2^31")
    params = parse_params(param)
    rng = np.random.default_rng(seed)
    is_cpu = kernel in BASELINES
    if sustained is not None and not (sustained > 0 and turns >= 1):
        fail(f"--sustained takes a positive number of seconds and --turns at least 1, got {sustained} and {turns}")
    if sustained is not None and is_cpu:
        fail(f"{kernel} is a CPU baseline: --sustained times GPU kernels at the board's power limit")
    if not is_cpu and kernel != "auto":
        try:
            registry.get(kernel).validate(params)
        except ValueError as exc:
            fail(str(exc))
    if is_cpu:
        if explain or cc or dtype != "float32" or precision not in (None, "fp32"):
            fail(f"{kernel} is a CPU baseline: float32, no dispatch to explain (--explain, --cc, --dtype and "
                 "--precision are for the GPU kernels)")
        try:  # fp32 operands, their fp64 copies, the result and its reference
            device.check_host_memory(20 * (M * K + K * N + M * N),
                                     f"{kernel} at {M} x {N} x {K} (the operands and the float64 reference)")
        except ValueError as exc:
            fail(str(exc))
        try:
            a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
            b = rng.uniform(-1, 1, (K, N)).astype(np.float32)
            c = rng.uniform(-1, 1, (M, N)).astype(np.float32)
            ref = alpha * (a.astype(np.float64) @ b.astype(np.float64)) + beta * c.astype(np.float64)
        except MemoryError:
            fail(f"{kernel} at {M} x {N} x {K}: not enough host memory for the operands and the reference")
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
        console.print(f"{kernel}  {M}x{N}x{K}  {ms:.3f} ms  {2 * M * N * K / (ms * 1e-3) / 1e9:.2f} GFLOP/s  "
                      f"rel. error {err:.2e}  (first call, with JIT: {first:.2f} s)")
        if not err < 1e-4:
            fail(f"{kernel} failed verification: relative error {err:.2e}")
        return

    dt = formats.dtype_label(dtype)
    if dt not in ("float32", "float16", "bfloat16"):
        fail(f"--dtype takes float32, float16 or bfloat16, got {dtype!r}")
    info = device.device_info() if device.gpu_available() else None
    what_if = parse_cc(cc) if cc else None
    if (explain or what_if) and what_if is None and info is None:
        fail(f"GPU unavailable ({device.gpu_unavailable_reason()}): give --cc X.Y (e.g. --cc 9.0) to see the "
             "decision without one")
    try:
        choice = api.explain_choice(dt, precision, shape=(M, N, K), cc=what_if, info=info, sm_count=sms,
                                    kernel=kernel, params=params or None, b_kmajor=weight) if (info or what_if) else None
    except (ValueError, TypeError) as exc:
        fail(str(exc))
    if explain or what_if:
        console.print(choice.describe(), highlight=False, markup=False, soft_wrap=True)
        if choice.named and not choice.candidates[0].fits:
            fail(f"{choice.spec.name}: {choice.candidates[0].reason}")
    if what_if is not None:
        return  # a decision for another device: nothing runs

    _gpu_or_fail()
    cp = device.require_cupy()
    from ..bench.sweep import rel_error
    from ..bench.timing import time_gpu, tflops

    resolved = choice.precision
    g = cp.random.default_rng(seed)
    a, a64 = _operand(g.uniform(-1, 1, (M, K), dtype=cp.float32), dt)
    if weight:  # W (N x K) and B = W^T, a view
        w, w64 = _operand(g.uniform(-1, 1, (N, K), dtype=cp.float32), dt)
        b, b64 = w.T, w64.T
    else:
        b, b64 = _operand(g.uniform(-1, 1, (K, N), dtype=cp.float32), dt)
    c0, c64 = _operand(g.uniform(-1, 1, (M, N), dtype=cp.float32), dt)
    ref = alpha * (a64 @ b64) + beta * c64
    c = _copy(c0) if beta else _nan_like(c0)
    name = "auto" if kernel == "auto" else choice.spec.name
    call = lambda: api.matmul(a, b, c, alpha=alpha, beta=beta, kernel=name, precision=precision, **params)  # noqa: E731
    try:
        t0 = time.perf_counter()
        call()
        cp.cuda.runtime.deviceSynchronize()
        first = time.perf_counter() - t0
    except (ValueError, TypeError) as exc:
        fail(str(exc))
    err = rel_error(_as_cupy64(c), ref)
    tol = formats.FORMATS[resolved].verify_tol
    if not err < tol:
        fail(f"{choice.spec.name} failed verification: relative error {err:.2e} at {M}x{N}x{K} ({dt} at {resolved}, "
             f"tolerance {tol:.0e})")
    timing = time_gpu(call, reset=(lambda: _copy_into(c, c0)) if beta else None)
    shown = " ".join(f"{key}={v}" for key, v in choice.params.items())
    console.print(f"{choice.spec.name} {shown}  {dt} at {resolved}  {M}x{N}x{K}  {timing.median_ms:.4f} ms "
                  f"(IQR {timing.iqr_ms:.4f}, n={timing.samples}, L2 {timing.l2})  "
                  f"{tflops(M, N, K, timing.median_ms):.2f} TFLOP/s  rel. error {err:.2e}  "
                  f"(first call incl. compile/load: {first * 1e3:.0f} ms)")
    if sustained is not None:
        _sustained(choice.spec.name, call, a, b, dt, resolved, (M, N, K), sustained, turns)


def _cublas_call(a, b, dt: str, resolved: str):
    """cuBLAS on the same operands and precision, C = A B into a fresh output: (its label, the call), or
    (why not, None). Strict fp32 through CuPy's cublasSgemm binding; 16-bit types and TF32 through torch (TF32
    allowed only inside the call), fp16 through CuPy's matmul where torch is missing."""
    from ..bench import peers

    cp = device.require_cupy()
    if resolved == "fp32":
        out = cp.empty((a.shape[0], b.shape[1]), cp.float32)
        return "cuBLAS", lambda: peers.cublas_sgemm(a, b, out)
    if peers.torch_unavailable_reason() is None:
        import torch

        ta = a if type(a).__module__.startswith("torch") else torch.from_dlpack(a)
        tc = torch.empty((a.shape[0], b.shape[1]), device=ta.device, dtype=ta.dtype)
        matmul = peers.bind_torch(a, b, tc)  # torch.matmul on CuPy's current stream, into tc
        tf32 = resolved == "tf32"

        def call():
            saved = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = tf32
            try:
                matmul()
            finally:
                torch.backends.cuda.matmul.allow_tf32 = saved
        return "cuBLAS (torch)", call
    if dt == "float16":
        out = cp.empty((a.shape[0], b.shape[1]), cp.float16)
        return "cuBLAS (CuPy)", lambda: cp.matmul(a, b, out=out)
    return f"no cuBLAS reference for {dt} at {resolved} without torch", None


def _sustained(name: str, call, a, b, dt: str, resolved: str, mnk: tuple[int, int, int], seconds: float,
               turns: int) -> None:
    """The call and cuBLAS back to back at the power limit (bench.sustained.time_sustained), as a table."""
    from ..bench.sustained import time_sustained

    ref_name, ref = _cublas_call(a, b, dt, resolved)
    calls = {name: call}
    if ref is not None:
        calls[ref_name] = ref
    else:
        console.print(f"[yellow]{ref_name}[/yellow]")
    res = time_sustained(calls, seconds=seconds, turns=turns)
    M, N, K = mnk
    table = Table(title=f"back to back, {seconds:g} s x {turns} turns per call ({M}x{N}x{K} {dt} at {resolved})")
    for col in ("call", "ms", "TFLOP/s", "SM MHz", "kcycles", "W", "mJ per call", "x cuBLAS (time)"):
        table.add_column(col, justify="left" if col == "call" else "right")
    base = res[ref_name].ms if ref is not None else None

    def num(x, fmt):
        return "-" if x is None else format(x, fmt)

    for r in res.values():
        table.add_row(r.name, f"{r.ms:.4f}", f"{2 * M * N * K / r.ms / 1e9:.1f}", num(r.sm_mhz, ".0f"),
                      num(r.kcycles, ",.1f"), num(r.watts, ".0f"), num(None if r.joules is None else r.joules * 1e3, ".2f"),
                      num(None if base is None else base / r.ms, ".3f"))
    console.print(table)
    capped = [r.name for r in res.values() if r.power_limited]
    console.print(("at the power limit in every turn: " + ", ".join(capped)) if capped else
                  "not at the power limit (NVML's software power cap not seen in every turn): a short call, or "
                  "clocks set below the limit", highlight=False)


def _operand(x32, dtype: str):
    """(the device array of `dtype` the GEMM reads, its exact values as a CuPy float64 array)."""
    cp = device.require_cupy()
    if dtype == "float32":
        return x32, x32.astype(cp.float64)
    if dtype == "float16":
        x = x32.astype(cp.float16)
        return x, x.astype(cp.float64)
    try:
        import torch
    except ImportError:
        fail("--dtype bfloat16 needs torch (CuPy has no bfloat16 arrays)")
    x = torch.from_dlpack(x32).to(torch.bfloat16)
    return x, cp.from_dlpack(x.float()).astype(cp.float64)


def _as_cupy64(x):
    cp = device.require_cupy()
    if type(x).__module__.startswith("torch"):
        return cp.from_dlpack(x.float()).astype(cp.float64)
    return x.astype(cp.float64)


def _copy(x):
    return x.clone() if type(x).__module__.startswith("torch") else x.copy()


def _nan_like(x):
    y = _copy(x)
    y[...] = float("nan")
    return y


def _copy_into(dst, src):
    dst[...] = src


def _rel(out: np.ndarray, ref: np.ndarray) -> float:
    if not np.isfinite(out).all():
        return float("inf")
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(out.astype(np.float64) - ref) / den) if den else float(np.linalg.norm(out))

