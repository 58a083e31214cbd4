"""Result records: the one data shape the measuring parts hand to analysis and reports.

A `Record` is one measurement, flat and self-describing (tidy data: one row per kernel x shape x mode),
carrying the problem, the kernel and its parameters, the timing with its spread, derived rates, the
verification error and the facts of the machine and software it was measured on. A `Results` holds
records and the metadata of the runs that made them (clocks at start and end, notes such as "GPU part
skipped"); it saves as JSON (records and runs) and CSV (records), reloads from either, and merges
results of several runs and devices.

Definitions, so every number can be checked by hand:
- flops = 2*M*N*K (the epilogue is not counted); tflops = flops / median time.
- bytes, compute-only: the compulsory DRAM traffic of the GEMM, s*(M*K + K*N + M*N), plus s*M*N
  when beta != 0 (C is read), s the bytes per element (4 for fp32 and tf32, 2 for fp16 and bf16);
  gbps = bytes / median time: seed 004's "effective bandwidth".
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

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
    def fmt(self) -> str:
        """The number format's name: fp32, tf32, fp16 or bf16."""
        return self.precision or NATIVE_PRECISION.get(self.dtype, "fp32")

    @property
    def itemsize(self) -> int:
        return FORMATS[self.fmt].itemsize if self.fmt in FORMATS else 4

    @property
    def ok(self) -> bool:
        return self.status == OK and self.median_ms is not None

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
    """Fill flops, bytes and the rates from the median time and the recorded peaks."""
    rec.flops = 2 * rec.m * rec.n * rec.k * max(rec.batch, 1)
    rec.bytes = problem_bytes(rec.m, rec.n, rec.k, rec.beta, rec.mode, rec.itemsize) * max(rec.batch, 1)
    if rec.fmt == "fp32" and rec.peak_tflops is None:
        rec.peak_tflops = rec.peak_fp32_tflops
    if rec.median_ms and rec.median_ms > 0:
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


def _coerce(name: str, v: Any) -> Any:
    """A value read from JSON or CSV, as the field's type."""
    typ, optional = _base_type(_HINTS[name])
    if v is None or (v == "" and typ is not str):
        return None if optional else (typ() if typ is not dict else {})
    if typ is dict:
        return json.loads(v) if isinstance(v, str) else dict(v)
    if typ is bool:
        return v if isinstance(v, bool) else str(v).strip().lower() in ("true", "1", "yes")
    if typ is int:
        return int(float(v))
    if typ is float:
        return float(v)  # accepts 'inf' / 'nan'
    return str(v)


def record_from_dict(d: dict[str, Any]) -> Record:
    """A record from a saved row; unknown fields (from a newer gemmlab) are dropped, missing ones default."""
    known = {k: _coerce(k, v) for k, v in d.items() if k in _HINTS}
    missing = [f.name for f in dataclasses.fields(Record)
               if f.name not in known and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"a result record lacks {', '.join(missing)}")
    return Record(**known)


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
        return [n for run in self.runs for n in run.get("notes", [])]

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
    def from_json(text: str) -> "Results":
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError("not a gemmlab results file (format field missing or different)")
        if int(doc.get("schema", 0)) > SCHEMA:
            raise ValueError(f"results schema {doc['schema']} is newer than this gemmlab reads ({SCHEMA}); upgrade gemmlab")
        return Results([record_from_dict(r) for r in doc.get("records", [])], list(doc.get("runs", [])))

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
    def from_csv(text: str) -> "Results":
        return Results([record_from_dict(row) for row in csv.DictReader(io.StringIO(text))])

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


def load(paths: Iterable[str | Path]) -> Results:
    """Read and merge results files: .json or .csv files, or directories (searched for results files).

    A directory holding both results.json and results.csv of one run yields each record once.
    """
    parts: list[Results] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files = sorted(p.rglob("*.json")) + sorted(p.rglob("*.csv"))
            found = [_read(f, quiet=True) for f in files]
            found = [r for r in found if r is not None]
            if not found:
                raise ValueError(f"{p} holds no gemmlab results (.json or .csv)")
            parts.extend(found)
        elif p.exists():
            parts.append(_read(p))
        else:
            raise FileNotFoundError(f"no such results file or directory: {p}")
    return Results.merge(*parts)


def _read(path: Path, quiet: bool = False) -> Results | None:
    try:
        text = path.read_text()
        if path.suffix.lower() == ".csv":
            if not text.startswith(FIELDS[0] + ","):
                raise ValueError("not a gemmlab results CSV (header differs)")
            return Results.from_csv(text)
        return Results.from_json(text)
    except (ValueError, KeyError, TypeError) as exc:
        if quiet:
            return None
        raise ValueError(f"{path}: {exc}") from None
