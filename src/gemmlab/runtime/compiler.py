"""Compile CUDA C++ to a cubin with NVRTC, and cache it.

This module knows nothing about particular kernels. It takes a source file, the template
instantiations wanted (NVRTC "name expressions", e.g. ``naive_gemm<32, 32>``) and a target
architecture, and returns a `CompiledModule`: the cubin on disk, the lowered (mangled) name of each
instantiation and the ptxas resource report per kernel.

It works with no GPU and no driver: NVRTC is a library, reached through cuda-bindings (CuPy's own
compiler needs a driver, so it is not used here). CuPy only loads the cubin (see `launch`).

Cache: an in-process dict in front of an on-disk directory. The disk key hashes the source, every
header it includes with ``#include "..."`` (recursively), the name expressions, the options, the
architecture and NVRTC's version, so a change to any of them compiles afresh. Files are written to a
temporary name and renamed, so a reader never sees half a cubin and concurrent processes are safe.
The cache heals rather than fails: an entry whose meta file is unreadable or ill-typed, or whose cubin
does not match the size and sha256 recorded beside it (a truncated copy, a disk error), is compiled
again and overwritten, with one warning line naming the file. A folder that cannot be written (read-only,
or GEMMLAB_CACHE_DIR naming a file) costs one warning line: compiled modules then live for this process
only, their cubins in a private temporary folder (the loader takes a path).

Environment switches:
  GEMMLAB_CACHE_DIR   where the cache lives (default: $XDG_CACHE_HOME/gemmlab or ~/.cache/gemmlab)
  GEMMLAB_NO_CACHE=1  ignore the disk cache (always compile; still writes)
  GEMMLAB_DUMP_PTX=1  keep the PTX beside the cubin
  GEMMLAB_VERBOSE=1   print the compiler log of every compile to stderr
  GEMMLAB_FAIL_ON_LOCAL=1  raise if any kernel uses a stack frame or spills (local memory)
  GEMMLAB_NVRTC_OPTIONS  options added to every compile (shell-quoted), e.g. "-lineinfo" for ncu's
                      source view; `options_added` does the same for a block of code
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from ..files import atomic_write
from .errors import CompileError, CompilerUnavailableError

CACHE_FORMAT = 2  # 2: the meta file records the cubin's size and sha256
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


@dataclass(frozen=True)
class Resources:
    """The ptxas resource report of one kernel."""

    registers: int = 0
    smem_static: int = 0
    stack_frame: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int = 0
    # False when the compiler log carried no report for this kernel. NVRTC leaves the log empty when the
    # process already holds a CUDA context (seen with NVRTC 13.0 after CuPy initialised the device);
    # then the loaded function's attributes are the source (see kernels.registry.resources).
    known: bool = True

    @property
    def uses_local_memory(self) -> bool:
        return self.stack_frame > 0 or self.spill_stores > 0 or self.spill_loads > 0


@dataclass
class CompiledModule:
    cubin_path: Path
    arch: str
    lowered_names: dict[str, str]          # name expression -> mangled name
    resources: dict[str, Resources]        # name expression -> report
    log: str
    nvrtc_version: tuple[int, int]
    compile_seconds: float = 0.0           # 0 when it came from the disk cache
    from_disk_cache: bool = False
    extra: dict = field(default_factory=dict)
    # The cubin itself, kept where no file could take it (neither the cache folder nor a temporary one).
    held: bytes | None = field(default=None, repr=False)

    @property
    def report_complete(self) -> bool:
        return all(r.known for r in self.resources.values())

    @property
    def cubin(self) -> bytes:
        return self.held if self.held is not None else self.cubin_path.read_bytes()


# ----------------------------------------------------------------------------------------- NVRTC


@functools.lru_cache(maxsize=1)
def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc  # cuda-python < 12.6 layout
        except ImportError as exc:
            raise CompilerUnavailableError(
                "NVRTC unavailable: cuda-bindings is not installed (pip install 'gemmlab[nvrtc]')"
            ) from exc
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # the binding loads libnvrtc lazily; a missing library surfaces here
        raise CompilerUnavailableError(
            f"NVRTC unavailable: the NVRTC library could not be loaded ({exc}); "
            "install nvidia-cuda-nvrtc matching cuda-bindings' major version"
        ) from exc
    _check(nvrtc, err, "nvrtcVersion")
    return nvrtc


def nvrtc_version() -> tuple[int, int]:
    nvrtc = _nvrtc()
    _, major, minor = nvrtc.nvrtcVersion()
    return int(major), int(minor)


def nvrtc_available() -> bool:
    try:
        _nvrtc()
        return True
    except CompilerUnavailableError:
        return False


def supported_archs() -> list[str]:
    nvrtc = _nvrtc()
    err, n = nvrtc.nvrtcGetNumSupportedArchs()
    _check(nvrtc, err, "nvrtcGetNumSupportedArchs")
    err, archs = nvrtc.nvrtcGetSupportedArchs()
    _check(nvrtc, err, "nvrtcGetSupportedArchs")
    return [f"sm_{a}" for a in archs]


def _check(nvrtc, err, what: str, log: str = "") -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, msg = nvrtc.nvrtcGetErrorString(err)
        text = msg.decode() if isinstance(msg, bytes) else str(msg)
        raise CompileError(f"{what} failed: {text}" + (f"\n{log}" if log else ""))


# ----------------------------------------------------------------------------------------- keys


def _read_with_includes(source: Path) -> dict[str, str]:
    """Return {name relative to the source's folder: text} for the source and every quoted include."""
    root = source.parent
    found: dict[str, str] = {}
    pending = [source.name]
    while pending:
        name = pending.pop()
        if name in found:
            continue
        path = root / name
        if not path.exists():
            continue  # NVRTC will report the missing header with its own message
        found[name] = path.read_text()
        pending.extend(_INCLUDE_RE.findall(found[name]))
    return found


def normalise_arch(arch: str) -> str:
    """Accept 'sm_90', '90', 'sm_90a', 'compute_90' and return 'sm_90' / 'sm_90a'."""
    a = str(arch).strip().lower()
    m = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3})([a-z]?)", a)
    if not m:
        raise ValueError(f"architecture {arch!r} is not of the form sm_XY (e.g. sm_90, sm_90a)")
    return f"sm_{m.group(1)}{m.group(2)}"


def _cache_dir() -> Path:
    base = os.environ.get("GEMMLAB_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gemmlab"


def cache_root() -> Path:
    """The root of gemmlab's on-disk caches (compiled kernels, tuned parameters)."""
    return _cache_dir()


def cache_dir() -> Path:
    return _cache_dir() / "kernels"


# ----------------------------------------------------------------------------------------- parsing

_ENTRY_RE = re.compile(r"(?:Compiling entry function|Function properties for) '?([A-Za-z0-9_$.]+)'?")
_STACK_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_BAR_RE = re.compile(r"used (\d+) barriers")


def parse_ptxas_report(log: str) -> dict[str, Resources]:
    """Parse ptxas -v output into {mangled name: Resources}."""
    found: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in log.splitlines():
        m = _ENTRY_RE.search(line)
        if m:
            current = m.group(1)
            found.setdefault(current, {})
            continue
        if current is None:
            continue
        rec = found[current]
        if m := _STACK_RE.search(line):
            rec.update(stack_frame=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        if m := _USED_RE.search(line):
            rec["registers"] = int(m.group(1))
            if s := _SMEM_RE.search(line):
                rec["smem_static"] = int(s.group(1))
            if b := _BAR_RE.search(line):
                rec["barriers"] = int(b.group(1))
    return {name: Resources(**rec) for name, rec in found.items()}


# ----------------------------------------------------------------------------------------- compile

_memory: dict[tuple, CompiledModule] = {}
_lock = threading.Lock()
# options_added's stack top, one per thread: a traced build in one thread must not reach another's compiles.
_added = threading.local()


def added_options() -> tuple[str, ...]:
    """Options every compile in this thread gets besides its own: GEMMLAB_NVRTC_OPTIONS, then those of
    `options_added`. Part of both cache keys, so a build with them never stands in for one without. (Read
    on every launch that is not a remembered plan: the variable is split once per value.)"""
    return _split_options(os.environ.get("GEMMLAB_NVRTC_OPTIONS", "")) + getattr(_added, "options", ())


@functools.lru_cache(maxsize=8)
def _split_options(text: str) -> tuple[str, ...]:
    return tuple(shlex.split(text))


@contextlib.contextmanager
def options_added(*options: str):
    """Within the block, every compile in this thread also gets `options` (e.g. a -D switch of a
    diagnostic build); other threads compile as before. Loaded kernels are keyed by them too
    (api.prepare), so calls inside and outside do not mix builds."""
    before = getattr(_added, "options", ())
    _added.options = before + tuple(options)
    try:
        yield
    finally:
        _added.options = before


def compile_file(
    source: str | Path,
    name_expressions: Sequence[str],
    arch: str,
    options: Sequence[str] = (),
    need_report: bool = False,
) -> CompiledModule:
    """Compile `source` for `arch`, instantiating `name_expressions`; served from cache when possible.

    need_report: a cached module whose resource report is missing (it was compiled in a process that
    held a CUDA context, where NVRTC's log stays empty) is compiled again to get one."""
    source = Path(source)
    arch = normalise_arch(arch)
    exprs = tuple(name_expressions)
    opts = tuple(options) + added_options()
    mem_key = (str(source), source.stat().st_mtime_ns, exprs, arch, opts)
    hit = _memory.get(mem_key)
    if hit is not None and (not need_report or hit.report_complete):
        return hit
    with _lock:
        hit = _memory.get(mem_key)
        if hit is None or (need_report and not hit.report_complete):
            hit = _compile_uncached_in_memory(source, exprs, arch, opts, need_report)
            _memory[mem_key] = hit
    return hit


def _compile_uncached_in_memory(source: Path, exprs: tuple[str, ...], arch: str, opts: tuple[str, ...],
                                need_report: bool = False) -> CompiledModule:
    files = _read_with_includes(source)
    version = nvrtc_version()
    h = hashlib.sha256()
    h.update(json.dumps([CACHE_FORMAT, sorted(files.items()), exprs, arch, opts, version]).encode())
    key = h.hexdigest()[:32]
    stem = f"{source.stem}-{arch}-{key}"
    cubin_path = cache_dir() / f"{stem}.cubin"
    meta_path = cache_dir() / f"{stem}.json"

    if os.environ.get("GEMMLAB_NO_CACHE") != "1":
        cached = _load_cached(cubin_path, meta_path, exprs, arch, version)
        if cached is not None and (not need_report or cached.report_complete):
            return cached

    t0 = time.perf_counter()
    cubin, ptx, lowered, log = _nvrtc_compile(files, source, exprs, arch, opts)
    seconds = time.perf_counter() - t0
    by_mangled = parse_ptxas_report(log)
    resources = {e: by_mangled.get(lowered[e], Resources(known=False)) for e in exprs}
    if os.environ.get("GEMMLAB_VERBOSE") == "1":
        print(f"[gemmlab] compiled {source.name} for {arch} in {seconds * 1e3:.0f} ms\n{log}", file=sys.stderr)
    if os.environ.get("GEMMLAB_FAIL_ON_LOCAL") == "1":
        bad = {e: r for e, r in resources.items() if r.uses_local_memory}
        if bad:
            raise CompileError(f"{source.name}: kernels use local memory (stack or spills): {bad}")

    module = CompiledModule(cubin_path, arch, lowered, resources, log, version, compile_seconds=seconds)
    meta = {
        "format": CACHE_FORMAT,
        "source": source.name,
        "arch": arch,
        "nvrtc_version": list(version),
        "lowered_names": lowered,
        "resources": {e: asdict(r) for e, r in resources.items()},
        "log": log,
        "options": list(opts),
        "cubin_size": len(cubin),
        "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
    }
    try:
        # The cubin first: a meta file never names a cubin that is not there yet.
        atomic_write(cubin_path, cubin)
        if os.environ.get("GEMMLAB_DUMP_PTX") == "1" and ptx:
            atomic_write(cubin_path.with_suffix(".ptx"), ptx)
        atomic_write(meta_path, json.dumps(meta, indent=1).encode())
    except OSError as exc:
        _keep_in_process(module, cubin, exc)
    return module


# ----------------------------------------------------------------------------------------- disk entries

_RESOURCE_FIELDS = {name: (bool if name == "known" else int) for name in Resources.__dataclass_fields__}
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


def _load_cached(cubin_path: Path, meta_path: Path, exprs: tuple[str, ...], arch: str,
                 version: tuple[int, int]) -> CompiledModule | None:
    """The disk entry as a module, or None to compile afresh (and overwrite it). An absent entry is a
    quiet miss; one whose meta file does not parse or has the wrong shape, or whose cubin does not match
    the digest in it, is a miss with one warning line: a bad cubin trusted here would fail every launch."""
    try:
        raw = meta_path.read_bytes()
    except OSError:
        return None  # absent, or a folder that cannot be read: writing it afterwards says why, once
    try:
        meta = json.loads(raw)
    except RecursionError:
        return _bad_entry(meta_path, "its JSON is nested too deeply to read")
    except ValueError as exc:
        return _bad_entry(meta_path, f"it is not JSON ({_one_line(exc)})")
    problem = _meta_problem(meta, exprs)
    if problem:
        return _bad_entry(meta_path, problem)
    try:
        cubin = cubin_path.read_bytes()
    except OSError as exc:
        return _bad_entry(cubin_path, f"it cannot be read ({exc.strerror or exc})")
    if len(cubin) != meta["cubin_size"] or hashlib.sha256(cubin).hexdigest() != meta["cubin_sha256"]:
        return _bad_entry(cubin_path, f"its {len(cubin)} bytes do not match the size ({meta['cubin_size']}) and "
                                      f"sha256 recorded in {meta_path.name}")
    lowered = {e: meta["lowered_names"][e] for e in exprs}
    resources = {e: Resources(**meta["resources"][e]) for e in exprs}
    return CompiledModule(cubin_path, arch, lowered, resources, meta["log"], version, from_disk_cache=True)


def _meta_problem(meta: object, exprs: tuple[str, ...]) -> str | None:
    """Why `meta` cannot describe a module of `exprs`, or None: every field the loader reads, type-checked,
    so an ill-typed file is a miss, never a crash or a wrong resource number."""
    if not isinstance(meta, dict):
        return f"it holds {json_kind(meta)}, not a JSON object"
    if meta.get("format") != CACHE_FORMAT:
        return f"it is not a format-{CACHE_FORMAT} entry"
    size, digest = meta.get("cubin_size"), meta.get("cubin_sha256")
    if type(size) is not int or size <= 0 or not isinstance(digest, str) or not _SHA256_RE.fullmatch(digest):
        return "it records no valid cubin size and sha256"
    if not isinstance(meta.get("log"), str):
        return "its log is not a string"
    lowered, resources = meta.get("lowered_names"), meta.get("resources")
    if not isinstance(lowered, dict) or not isinstance(resources, dict):
        return "its lowered names or resources are not objects"
    for e in exprs:
        if not isinstance(lowered.get(e), str) or not lowered[e]:
            return f"it has no lowered name for {e}"
        report = resources.get(e)
        # Every field present: a missing one would read as 0 from a report marked known.
        if not isinstance(report, dict) or report.keys() != _RESOURCE_FIELDS.keys() or any(
                type(v) is not _RESOURCE_FIELDS[k] for k, v in report.items()):
            return f"its resource report for {e} is incomplete or not one of integers"
    return None


def _bad_entry(path: Path, why: str) -> None:
    warnings.warn(f"ignoring the cached kernel {path}: {why}; compiling it again", RuntimeWarning, stacklevel=5)
    return None


def json_kind(value: object) -> str:
    """What a parsed JSON value is, in JSON's words ("null", "an array"), for messages about files."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    kinds = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"}
    return kinds.get(type(value), type(value).__name__)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


_unwritable: set[str] = set()  # cache folders already warned about
_private: list[Path] = []      # this process's temporary cubin folder, once made


def _keep_in_process(module: CompiledModule, cubin: bytes, exc: OSError) -> None:
    """The cache folder took no entry (read-only, not a folder, full): warn once per folder, and keep the
    module for this process, its cubin in a private temporary folder (removed at exit) for the loader,
    or only in memory where even that fails."""
    folder = module.cubin_path.parent
    if str(folder) not in _unwritable:
        _unwritable.add(str(folder))
        warnings.warn(f"cannot write the kernel cache in {folder} ({exc.strerror or _one_line(exc)}); "
                      "compiled kernels are kept for this process only", RuntimeWarning, stacklevel=4)
    try:
        if not _private:
            _private.append(Path(tempfile.mkdtemp(prefix="gemmlab-kernels-")))
            atexit.register(shutil.rmtree, _private[0], ignore_errors=True)
        module.cubin_path = atomic_write(_private[0] / module.cubin_path.name, cubin)
    except OSError:
        module.held = cubin  # no file at all: `cubin` still answers (launching needs a file)


def _nvrtc_compile(files: dict[str, str], source: Path, exprs: tuple[str, ...], arch: str, opts: tuple[str, ...]):
    nvrtc = _nvrtc()
    text = files[source.name]
    # Headers are handed to NVRTC by content so the compile never depends on the working directory.
    headers = {k: v for k, v in files.items() if k != source.name}
    header_names = [k.encode() for k in headers]
    header_srcs = [v.encode() for v in headers.values()]
    err, prog = nvrtc.nvrtcCreateProgram(text.encode(), source.name.encode(), len(header_srcs), header_srcs, header_names)
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        for e in exprs:
            (err,) = nvrtc.nvrtcAddNameExpression(prog, e.encode())
            _check(nvrtc, err, f"nvrtcAddNameExpression({e})")
        full_opts = [f"--gpu-architecture={arch}", "-std=c++17", "--ptxas-options=-v", *opts]
        enc = [o.encode() for o in full_opts]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(enc), enc)
        log = _program_log(nvrtc, prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC could not compile {source.name} for {arch} ({', '.join(exprs)}):\n{log}")
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(nvrtc, err, "nvrtcGetCUBINSize")
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(nvrtc, err, "nvrtcGetCUBIN")
        ptx = b""
        if os.environ.get("GEMMLAB_DUMP_PTX") == "1":
            err, psize = nvrtc.nvrtcGetPTXSize(prog)
            ptx = b" " * psize
            nvrtc.nvrtcGetPTX(prog, ptx)
        lowered = {}
        for e in exprs:
            err, name = nvrtc.nvrtcGetLoweredName(prog, e.encode())
            _check(nvrtc, err, f"nvrtcGetLoweredName({e})")
            lowered[e] = name.decode() if isinstance(name, bytes) else str(name)
        return cubin, ptx, lowered, log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _program_log(nvrtc, prog) -> str:
    err, n = nvrtc.nvrtcGetProgramLogSize(prog)
    if n <= 1:
        return ""
    buf = b" " * n
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\x00").decode(errors="replace").strip()


def clear_memory_cache() -> None:
    _memory.clear()
