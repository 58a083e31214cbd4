"""Result records: the one data shape the measuring parts hand to analysis and reports.

A `Record` is one measurement, flat and self-describing (tidy data: one row per kernel x shape x mode),
carrying the problem, the kernel and its parameters, the timing with its spread, derived rates, the
verification error and the facts of the machine and software it was measured on. A `Results` holds
records and the metadata of the runs that made them (clocks at start and end, notes such as "GPU part
skipped"); it saves as JSON (records and runs) and CSV (records), reloads from either, and merges
results of several runs and devices.

Loading is validated, one loader per stored format (`Results.from_json`, `Results.from_csv`): a record or
run that is not what gemmlab writes (not an object, a field of the wrong type, a number that is not finite
where only a finite one means anything, a size below 1) is skipped with one warning naming the file and
how many were skipped; the rest load. The rates are derived again from the recorded time on loading, so
a stored rate never disagrees with the time beside it.

Definitions, so every number can be checked by hand:
- flops = 2*M*N*K (the epilogue is not counted); tflops = flops / median time.
- bytes, compute-only: the compulsory DRAM traffic of the GEMM, s*(M*K + K*N + M*N), plus s*M*N
  when beta != 0 (C is read), s the bytes per element (4 for fp32 and tf32, 2 for fp16 and bf16);
  gbps = bytes / median time: the "effective bandwidth".
- bytes, end to end: what crosses the host link, s*(M*K + K*N + M*N) in and s*M*N out.
- pct_peak_compute / pct_peak_bandwidth: against the peak of the record's number format (`precision`:
  the fp32 peak, SMs x lanes x 2 x boost clock, for fp32; the dense tensor-core peak for tf32, fp16 and
  bf16) and the datasheet DRAM bandwidth, all recorded in the record.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..files import atomic_write
from ..kernels.spec import NATIVE_PRECISION
from .formats import FORMATS

FORMAT = "gemmlab-results"
SCHEMA = 1

COMPUTE, END_TO_END = "compute", "end_to_end"
OK, FAILED, ERROR = "ok", "failed", "error"
GPU, GPU_PEER, CPU = "gpu", "gpu_peer", "cpu"


@dataclass
class Record:
    # ---- what ran
    kernel: str                         # registry name, peer name (cublas, torch, triton) or CPU baseline
    label: str                          # kernel, plus parameters that differ from its defaults
    family: str                         # "gpu" (a rung), "gpu_peer", "cpu"
    rung: int | None
    idea: str
    params: dict
    dtype: str
    m: int
    n: int
    k: int
    alpha: float
    beta: float
    mode: str                           # "compute" (kernel only) or "end_to_end" (copies included)
    l2: str                             # "cold" or "warm"
    pinned: bool | None                 # host memory of an end-to-end run (None: not applicable)
    precision: str = ""                 # number format: fp32, tf32, fp16, bf16 ("" in older files: fp32)
    epilogue: str = ""                  # a fused layer's epilogue (bench.fused): "bias_col+gelu_tanh"; "": a product
    batch: int = 1                      # products of M x N x K in one call (bench.batched); flops count them all
    # ---- outcome
    status: str = OK                    # "ok", "failed" (verification; never timed), "error"
    rel_error: float | None = None      # ||C - ref|| / ||ref||, reference in float64
    verify_tol: float | None = None     # the largest rel_error the format accepts
    note: str = ""
    # ---- timing (None when not timed)
    method: str = ""
    samples: int = 0
    calls_per_sample: int = 1
    discarded: int = 0
    median_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    q1_ms: float | None = None
    q3_ms: float | None = None
    # ---- derived
    flops: int = 0
    bytes: int = 0
    tflops: float | None = None
    gbps: float | None = None
    pct_peak_compute: float | None = None
    pct_peak_bandwidth: float | None = None
    sm_mhz_min: float | None = None     # SM clock read during this measurement
    sm_mhz_max: float | None = None
    # ---- machine and software
    gpu: str = ""                       # the run's GPU ("" on a machine without one)
    gpu_index: int | None = None
    cc: str = ""
    sm_count: int | None = None
    l2_bytes: int | None = None
    sm_clock_max_mhz: float | None = None
    mem_clock_mhz: float | None = None
    peak_fp32_tflops: float | None = None
    peak_tflops: float | None = None    # the peak of this record's number format (fp32: the fp32 peak)
    peak_dram_gbps: float | None = None
    driver: str = ""
    cuda_runtime: str = ""
    nvrtc: str = ""
    cupy: str = ""
    torch: str = ""
    triton: str = ""
    numpy: str = ""
    numba: str = ""
    python: str = ""
    processor: str = ""
    cpu_count: int | None = None
    gemmlab_version: str = ""
    git_revision: str = ""
    # ---- when
    run_id: str = ""
    measured_at: str = ""

    @property
    def seconds(self) -> float:
        """The median time in seconds (0.0 where not timed)."""
        return (self.median_ms or 0.0) * 1e-3

    @property
    def iqr_ms(self) -> float | None:
        return self.q3_ms - self.q1_ms if self.q1_ms is not None and self.q3_ms is not None else None

    @property
    def sm_clock_mhz(self) -> float | None:
        """The SM clock the timing ran at: the middle of the readings during its kept batches."""
        seen = [v for v in (self.sm_mhz_min, self.sm_mhz_max) if v]
        return sum(seen) / len(seen) if seen else None

    @property
    def fmt(self) -> str:
        """The number format's name: fp32, tf32, fp16 or bf16."""
        return self.precision or NATIVE_PRECISION.get(self.dtype, "fp32")

    @property
    def itemsize(self) -> int:
        return FORMATS[self.fmt].itemsize if self.fmt in FORMATS else 4

    @property
    def measured(self) -> bool:
        """The median is a time: finite and above zero (0, a negative or a non-finite value measures nothing)."""
        t = self.median_ms
        return isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t > 0

    @property
    def ok(self) -> bool:
        """Timed successfully: status ok and a median that is a time, so rates and ratios may divide by it."""
        return self.status == OK and self.measured

    @property
    def is_gpu(self) -> bool:
        return self.family in (GPU, GPU_PEER)

    @property
    def device(self) -> str:
        """What executed it: the GPU for GPU work, the processor for CPU work."""
        return self.gpu if self.is_gpu else (self.processor or "CPU")

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)

    @property
    def square(self) -> bool:
        return self.m == self.n == self.k

    @property
    def gflops(self) -> float | None:
        return None if self.tflops is None else self.tflops * 1e3

    def key(self) -> tuple:
        """Identity for merging: the same run measuring the same thing twice is one record."""
        return (self.run_id, self.gpu, self.processor, self.kernel, json.dumps(self.params, sort_keys=True),
                self.dtype, self.fmt, self.epilogue, self.m, self.n, self.k, self.alpha, self.beta, self.mode, self.l2, self.pinned)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FIELDS = [f.name for f in dataclasses.fields(Record)]
_HINTS = typing.get_type_hints(Record)


def problem_bytes(m: int, n: int, k: int, beta: float, mode: str, itemsize: int = 4) -> int:
    """Bytes the effective bandwidth counts (see the module docstring)."""
    if mode == END_TO_END:
        return itemsize * (m * k + k * n + 2 * m * n)
    return itemsize * (m * k + k * n + m * n + (m * n if beta != 0 else 0))


def derive(rec: Record) -> Record:
    """Fill flops, bytes and the rates from the median time and the recorded peaks (no time: no rates)."""
    rec.flops = 2 * rec.m * rec.n * rec.k * max(rec.batch, 1)
    rec.bytes = problem_bytes(rec.m, rec.n, rec.k, rec.beta, rec.mode, rec.itemsize) * max(rec.batch, 1)
    if rec.fmt == "fp32" and rec.peak_tflops is None:
        rec.peak_tflops = rec.peak_fp32_tflops
    rec.tflops = rec.gbps = rec.pct_peak_compute = rec.pct_peak_bandwidth = None
    if rec.measured:
        rec.tflops = rec.flops / (rec.median_ms * 1e-3) / 1e12
        rec.gbps = rec.bytes / (rec.median_ms * 1e-3) / 1e9
        if rec.is_gpu and rec.peak_tflops:
            rec.pct_peak_compute = 100 * rec.tflops / rec.peak_tflops
        if rec.is_gpu and rec.peak_dram_gbps and rec.mode == COMPUTE:
            rec.pct_peak_bandwidth = 100 * rec.gbps / rec.peak_dram_gbps
    return rec


# ------------------------------------------------------------------------------------------ values


def _encode(v: Any) -> Any:
    """JSON-safe value: non-finite floats become the strings 'inf', '-inf', 'nan' (strict JSON)."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: _encode(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_encode(x) for x in v]
    return v


def _base_type(hint) -> tuple[type, bool]:
    args = typing.get_args(hint)
    if args:
        non_none = [a for a in args if a is not type(None)]
        return non_none[0], type(None) in args
    return hint, False


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Record) if f.default is not dataclasses.MISSING}
_REQUIRED = [f.name for f in dataclasses.fields(Record)
             if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
# A failed verification records an infinite error (or NaN, when the output held NaN); every other number
# means something only when finite.
_NON_FINITE_OK = {"rel_error"}
_AT_LEAST_ONE = ("m", "n", "k", "batch")
_MAX_DEPTH = 32  # params and run metadata are shallow; deeper data is not gemmlab's (and would recurse)
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _number(name: str, v: Any) -> float:
    """A finite number (or 'inf'/'nan' text where `_NON_FINITE_OK`) from JSON or CSV; ValueError otherwise."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"{name} is {type(v).__name__}, not a number")
    try:
        x = float(v)
    except (ValueError, OverflowError):
        raise ValueError(f"{name} is {str(v)[:20]!r}, not a number") from None
    if not math.isfinite(x) and name not in _NON_FINITE_OK:
        raise ValueError(f"{name} is {x}, not a finite number")
    return x


def _coerce(name: str, v: Any) -> Any:
    """A value read from JSON or CSV, as the field's type; ValueError naming the field when it is not one."""
    typ, optional = _base_type(_HINTS[name])
    if v is None or (v == "" and typ is not str):
        if optional:
            return None
        if name in _REQUIRED:
            raise ValueError(f"a result record lacks {name}")
        return _DEFAULTS[name]
    if typ is dict:
        try:
            d = json.loads(v) if isinstance(v, str) else v
        except (ValueError, RecursionError):
            raise ValueError(f"{name} is not valid JSON") from None
        if not isinstance(d, dict):
            raise ValueError(f"{name} is {type(d).__name__}, not an object")
        if _depth(d) > _MAX_DEPTH:
            raise ValueError(f"{name} nests more than {_MAX_DEPTH} deep")
        return dict(d)
    if typ is bool:
        if isinstance(v, bool):
            return v
        text = str(v).strip().lower() if isinstance(v, (str, int)) else None
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        shown = repr(text[:20]) if text is not None else type(v).__name__
        raise ValueError(f"{name} is {shown}, not true or false")
    if typ is int:
        if isinstance(v, int) and not isinstance(v, bool):
            return v  # exact, however large
        x = _number(name, v)
        if x != int(x):
            raise ValueError(f"{name} is {x}, not a whole number")
        return int(x)
    if typ is float:
        return _number(name, v)
    if not isinstance(v, str):
        raise ValueError(f"{name} is {type(v).__name__}, not text")
    return v


def _depth(v: Any) -> int:
    """How deeply lists and dicts nest in `v`, counted without recursion (so no depth can overflow it)."""
    deepest, stack = 0, [(v, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, (dict, list)):
            deepest = max(deepest, d)
            if d <= _MAX_DEPTH:
                stack.extend((y, d + 1) for y in (x.values() if isinstance(x, dict) else x))
    return deepest


def record_from_dict(d: dict[str, Any]) -> Record:
    """A record from a saved row; unknown fields (from a newer gemmlab) are dropped, missing ones default.

    ValueError, naming the field, for a row that is not a valid record."""
    if not isinstance(d, dict):
        raise ValueError(f"a result record is {type(d).__name__}, not an object")
    missing = [name for name in _REQUIRED if name not in d]
    if missing:
        raise ValueError(f"a result record lacks {', '.join(missing)}")
    known = {k: _coerce(k, v) for k, v in d.items() if k in _HINTS}
    small = [name for name in _AT_LEAST_ONE if name in known and known[name] < 1]
    if small:
        raise ValueError(f"{small[0]} is {known[small[0]]}, below 1")
    return derive(Record(**known))


_CLOCK_NUMBERS = ("sm_clock_mhz", "mem_clock_mhz", "sm_clock_max_mhz", "temperature_c", "power_w")


def run_from_dict(d: Any) -> dict[str, Any]:
    """A run's metadata as saved, checked where the report reads it; ValueError when it is not usable."""
    if not isinstance(d, dict):
        raise ValueError(f"a run is {type(d).__name__}, not an object")
    if _depth(d) > _MAX_DEPTH:
        raise ValueError("a run nests too deeply")
    if not isinstance(d.get("run_id", ""), str):
        raise ValueError("a run's run_id is not text")
    notes = d.get("notes")
    if notes is not None and not (isinstance(notes, list) and all(isinstance(n, str) for n in notes)):
        raise ValueError("a run's notes are not a list of text")
    for name in ("clocks_start", "clocks_end"):
        clocks = d.get(name)
        if clocks is None:
            continue
        if not isinstance(clocks, dict):
            raise ValueError(f"a run's {name} is not an object")
        for key in _CLOCK_NUMBERS:
            value = clocks.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value)):
                raise ValueError(f"a run's {name}.{key} is not a finite number")
        mask = clocks.get("throttle_reasons")
        if mask is not None and (isinstance(mask, bool) or not isinstance(mask, int) or mask < 0):
            raise ValueError(f"a run's {name}.throttle_reasons is not a bit mask")
    return d


Warn = Callable[[str], None]


class ResultsWarning(UserWarning):
    """A results file, or some of its records or runs, skipped while loading."""


def _warn(message: str) -> None:
    warnings.warn(message, ResultsWarning, stacklevel=2)


def _valid(rows: Iterable[Any], parse: Callable[[Any], Any]) -> tuple[list, int, str]:
    """The rows `parse` accepts, how many it refused, and why it refused the first."""
    good, bad, why = [], 0, ""
    for row in rows:
        try:
            good.append(parse(row))
        except (ValueError, TypeError, KeyError, OverflowError, RecursionError) as exc:
            bad, why = bad + 1, why or str(exc)
    return good, bad, why


def _skipped(source: str, counts: list[tuple[int, int, str]], why: str, warn: Warn | None) -> None:
    """One warning line for the invalid rows of one file: how many of which, and the first reason."""
    parts = [f"{bad} of {bad + good} {kind}" for good, bad, kind in counts if bad]
    if parts:
        (warn or _warn)(f"{source}: skipped {' and '.join(parts)} that are not valid gemmlab results ({why})")


# ------------------------------------------------------------------------------------------ collections


@dataclass
class Results:
    """Records and the runs that made them."""

    records: list[Record] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.records)

    def ok(self) -> list[Record]:
        return [r for r in self.records if r.ok]

    def notes(self) -> list[str]:
        return [n for run in self.runs for n in run.get("notes") or []]

    # ---------------------------------------------------------------- merge

    @staticmethod
    def merge(*many: "Results") -> "Results":
        """One collection from many: records deduplicated by `Record.key` (the later one wins), runs by id."""
        recs: dict[tuple, Record] = {}
        runs: dict[str, dict] = {}
        for res in many:
            for r in res.records:
                recs[r.key()] = r
            for run in res.runs:
                runs[run.get("run_id", str(len(runs)))] = run
        return Results(list(recs.values()), list(runs.values()))

    # ---------------------------------------------------------------- JSON

    def to_json(self) -> str:
        doc = {"format": FORMAT, "schema": SCHEMA, "runs": _encode(self.runs),
               "records": [_encode(r.as_dict()) for r in self.records]}
        return json.dumps(doc, indent=1, allow_nan=False)

    @staticmethod
    def from_json(text: str, source: str = "results", warn: Warn | None = None) -> "Results":
        """The JSON loader. ValueError when the text is not a gemmlab results file at all; invalid records and
        runs are skipped with one warning (`warn`, default `warnings.warn`) naming `source` and their count."""
        try:
            doc = json.loads(text)
        except RecursionError:
            raise ValueError("not a gemmlab results file (JSON nested too deeply)") from None
        except ValueError as exc:
            raise ValueError(f"not valid JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError("not a gemmlab results file (format field missing or different)")
        schema = doc.get("schema", 0)
        if isinstance(schema, bool) or not isinstance(schema, int):
            raise ValueError(f"not a gemmlab results file (its schema is {type(schema).__name__}, not a number)")
        if schema > SCHEMA:
            raise ValueError(f"results schema {schema} is newer than this gemmlab reads ({SCHEMA}); upgrade gemmlab")
        rows, runs = doc.get("records", []), doc.get("runs", [])
        rows, runs = [] if rows is None else rows, [] if runs is None else runs
        if not isinstance(rows, list) or not isinstance(runs, list):
            raise ValueError("not a gemmlab results file (records or runs are not lists)")
        recs, bad_recs, why = _valid(rows, record_from_dict)
        good_runs, bad_runs, why_runs = _valid(runs, run_from_dict)
        _skipped(source, [(len(recs), bad_recs, "records"), (len(good_runs), bad_runs, "runs")], why or why_runs, warn)
        return Results(recs, good_runs)

    # ---------------------------------------------------------------- CSV

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
        w.writeheader()
        for r in self.records:
            row = {}
            for k, v in _encode(r.as_dict()).items():
                if isinstance(v, dict):
                    v = json.dumps(v, sort_keys=True)
                elif v is None:
                    v = ""
                elif isinstance(v, bool):
                    v = "true" if v else "false"
                row[k] = v
            w.writerow(row)
        return buf.getvalue()

    @staticmethod
    def from_csv(text: str, source: str = "results", warn: Warn | None = None) -> "Results":
        """The CSV loader. ValueError when the header is not gemmlab's; rows that are not valid records (too
        few or too many cells, a wrong value) are skipped with one warning, as `from_json` does."""
        if not text.startswith(FIELDS[0] + ","):
            raise ValueError("not a gemmlab results CSV (header differs)")
        reader = csv.DictReader(io.StringIO(text))
        good: list[Record] = []
        bad, why = 0, ""
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:  # its line number is not known reliably here: the reason alone
                bad, why = bad + 1, why or str(exc)
                continue
            if None in row or None in row.values():
                bad, why = bad + 1, why or f"line {reader.line_num}: not one cell per column"
                continue
            recs, n_bad, reason = _valid([row], record_from_dict)
            good += recs
            bad, why = bad + n_bad, why or (f"line {reader.line_num}: {reason}" if reason else "")
        _skipped(source, [(len(good), bad, "records")], why, warn)
        return Results(good)

    # ---------------------------------------------------------------- files

    def save(self, path: str | Path) -> list[Path]:
        """Write `path` as .json or .csv; a directory (or a path without suffix) gets results.json and .csv."""
        path = Path(path)
        if path.suffix.lower() in (".json", ".csv"):
            path.parent.mkdir(parents=True, exist_ok=True)
            _write(path, self.to_json() if path.suffix.lower() == ".json" else self.to_csv())
            return [path]
        path.mkdir(parents=True, exist_ok=True)
        out = [path / "results.json", path / "results.csv"]
        _write(out[0], self.to_json())
        _write(out[1], self.to_csv())
        return out


def _write(path: Path, text: str) -> None:
    atomic_write(path, text)


def load(paths: Iterable[str | Path], warn: Warn | None = None) -> Results:
    """Read and merge results files: .json or .csv files, or directories (searched for results files).

    A directory holding both results.json and results.csv of one run yields each record once. A file named
    here must be gemmlab results (ValueError naming it otherwise); in a directory, a file that cannot be read
    is skipped with one warning naming it, and the rest merge. Invalid records and runs inside a file are
    skipped with one warning per file (`warn`, default `warnings.warn` with `ResultsWarning`).
    """
    parts: list[Results] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files = sorted(p.rglob("*.json")) + sorted(p.rglob("*.csv"))
            found = []
            for f in files:
                try:
                    found.append(_read(f, warn))
                except ValueError as exc:
                    (warn or _warn)(f"{exc}; the file is skipped")
            if not found:
                raise ValueError(f"{p} holds no gemmlab results (.json or .csv)")
            parts.extend(found)
        elif p.exists():
            parts.append(_read(p, warn))
        else:
            raise FileNotFoundError(f"no such results file or directory: {p}")
    return Results.merge(*parts)


def _read(path: Path, warn: Warn | None = None) -> Results:
    """One file through its format's loader; ValueError naming the file when it cannot be read at all."""
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".csv":
            return Results.from_csv(text, str(path), warn)
        return Results.from_json(text, str(path), warn)
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"{path}: {exc}") from None
