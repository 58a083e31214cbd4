"""Hardware counters from Nsight Compute (`ncu`), for checking the models against measurement.

`profile(runs)` starts one `ncu` process that profiles one launch of each requested kernel (a child
Python process launches them, once each, through `gemmlab.matmul`), with:
  --clock-control none   the clocks stay as they are (ncu would otherwise lock them to base)
  --cache-control all    (the default) caches flushed before each replay pass: a cold L2, like the
                         harness's timing and like the model
  a kernel-name filter built from the registry's template names, and --launch-count = len(runs)
then reads the report back as CSV. Where ncu is missing or may not read the counters (a driver that
restricts them to administrators) `NcuUnavailable` says why in one line; callers fall back to time.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..files import atomic_write
from ..kernels import registry
from ..runtime.errors import GemmlabError
from .facts import SECTOR
from .models import KernelModel

# Our names -> ncu metric names. Optional ones are dropped (with a note) where this ncu does not know them.
METRICS: dict[str, str] = {
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "l2_bytes": "lts__t_bytes.sum",
    "l2_from_l1_sectors": "lts__t_sectors_srcunit_tex.sum",
    "l1_global_load_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1_global_load_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1_global_load_hit_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum",
    "l1_lsu_wavefronts": "l1tex__data_pipe_lsu_wavefronts.sum",
    "smem_load_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "smem_store_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smem_load_bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "smem_store_bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm_clock_hz": "sm__cycles_elapsed.avg.per_second",
    "duration_s": "gpu__time_duration.sum",
    "ffma_thread_inst": "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    # What the crossbar carries to the SMs and back, every SM counted: a box two SMs share (TMA multicast, or
    # requests the hardware combines) is counted twice here and once in the L2's own sectors.
    "xbar_read_bytes": "l1tex__m_xbar2l1tex_read_bytes.sum",
    "xbar_write_bytes": "l1tex__m_l1tex2xbar_write_bytes.sum",
}
REQUIRED = ("dram_read_bytes", "dram_write_bytes", "l2_bytes")

_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "k": 1e3, "m": 1e-3, "u": 1e-6, "n": 1e-9}
# ncu writes time units long ("nsecond") or short ("ns") depending on its version and the metric.
_TIME = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0, "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


class NcuUnavailable(GemmlabError):
    """ncu is missing, may not read the counters, or failed; the message says which, in one line."""


@dataclass
class ProfileRun:
    """One launch to profile: the rung, the shape, parameters as a call takes them, and the operands' number
    format (formats.FORMATS: "fp32", "tf32", "fp16", "bf16"; C in the format's dtype)."""

    kernel: str
    m: int
    n: int
    k: int
    params: dict = field(default_factory=dict)
    fmt: str = "fp32"

    @property
    def label(self) -> str:
        return f"{self.kernel} {self.m}x{self.n}x{self.k}" + ("" if self.fmt == "fp32" else f" {self.fmt}")


@dataclass
class Counters:
    """One kernel launch's counters, in bytes / sectors / seconds / Hz (None where not collected)."""

    run: ProfileRun
    kernel_name: str
    values: dict[str, float]
    dropped: list[str] = field(default_factory=list)

    def get(self, key: str) -> float | None:
        v = self.values.get(key)
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else v

    @property
    def dram_bytes(self) -> float | None:
        r, w = self.get("dram_read_bytes"), self.get("dram_write_bytes")
        return None if r is None or w is None else r + w

    @property
    def l2_from_l1_bytes(self) -> float | None:
        s = self.get("l2_from_l1_sectors")
        return s * SECTOR if s is not None else None

    @property
    def l2_compared_bytes(self) -> tuple[float | None, str]:
        """L2 traffic to compare with the model: L1-originated sectors when ncu has them, else all of L2."""
        v = self.l2_from_l1_bytes
        if v is not None:
            return v, "lts__t_sectors_srcunit_tex x 32"
        return self.get("l2_bytes"), "lts__t_bytes"

    @property
    def delivered_bytes(self) -> float | None:
        """Bytes the crossbar delivered to the SMs plus those it took from them (None where not collected)."""
        r, w = self.get("xbar_read_bytes"), self.get("xbar_write_bytes")
        return None if r is None or w is None else r + w

    @property
    def sm_clock_mhz(self) -> float | None:
        hz = self.get("sm_clock_hz")
        return hz / 1e6 if hz else None

    def as_dict(self) -> dict:
        return {"run": asdict(self.run), "kernel_name": self.kernel_name, "values": self.values, "dropped": self.dropped}


# ----------------------------------------------------------------------------------------- finding ncu


def find_ncu() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu"):
        for p in sorted(Path("/").glob(pattern.lstrip("/")), reverse=True):
            if os.access(p, os.X_OK):
                return str(p)
    return None


# ----------------------------------------------------------------------------------------- parsing


def convert(value: str, unit: str) -> float:
    """A CSV cell and its unit to a float in base units (bytes, seconds, Hz, counts, percent)."""
    v = value.strip().replace(",", "") if re.fullmatch(r"[-+]?[\d,]*\.?\d+(e[-+]?\d+)?", value.strip(), re.I) else value.strip()
    try:
        x = float(v)
    except ValueError:
        return math.nan
    u = unit.strip()
    if not u or u in ("%", "byte", "sector", "request", "inst", "warp", "cycle", "wavefront"):
        return x
    if "/" in u:
        num, den = u.split("/", 1)
        if num.strip().lower().endswith("cycle") and den.strip() in _TIME:
            return x / _TIME[den.strip()]
        m = re.fullmatch(r"([KMGT]?)(byte)", num.strip())
        if m and den.strip() in _TIME:
            return x * _PREFIX[m.group(1)] / _TIME[den.strip()]
        return x
    if u in _TIME:
        return x * _TIME[u]
    m = re.fullmatch(r"([KMGTkmun]?)(byte|hz|Hz|sector|inst|request)", u)
    if m:
        return x * _PREFIX[m.group(1)]
    return x


def parse_raw_csv(text: str) -> list[dict[str, float | str]]:
    """ncu --csv --page raw: a header row, a units row, one row per profiled kernel."""
    rows = list(csv.reader(io.StringIO(text.strip())))
    rows = [r for r in rows if r and not r[0].startswith("==")]
    if len(rows) < 2:
        return []
    header = rows[0]
    units = rows[1] if rows[1] and rows[1][0] == "" else [""] * len(header)
    data = rows[2:] if units is rows[1] else rows[1:]
    out = []
    for r in data:
        rec: dict[str, float | str] = {}
        for name, unit, cell in zip(header, units, r):
            if "__" in name or "." in name and name[:1].islower():
                rec[name] = convert(cell, unit)
            else:
                rec[name] = cell
        out.append(rec)
    return out


def _unknown_metrics(log: str, asked: list[str]) -> list[str]:
    bad = []
    for line in log.splitlines():
        low = line.lower()
        if "metric" in low and ("not found" in low or "failed to find" in low or "invalid" in low or "unknown" in low):
            bad += [m for m in asked if m in line]
    return sorted(set(bad))


# ----------------------------------------------------------------------------------------- profiling


def _target_env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def profile(runs: list[ProfileRun], *, workdir: str | Path | None = None, timeout_s: float = 300.0,
            metrics: dict[str, str] | None = None) -> list[Counters]:
    """Profile one launch of each run; raise NcuUnavailable with the reason when that is impossible."""
    ncu = find_ncu()
    if ncu is None:
        raise NcuUnavailable("ncu (Nsight Compute) was not found on PATH or under /usr/local/cuda*/bin")
    if not runs:
        return []
    wanted = dict(metrics or METRICS)
    templates = sorted({registry.get(r.kernel).template for r in runs})
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="gemmlab-ncu-"))
    work.mkdir(parents=True, exist_ok=True)
    report = work / "gemmlab-profile"
    spec = json.dumps([asdict(r) for r in runs])
    dropped: list[str] = []
    for attempt in range(3):
        cmd = [ncu, "--clock-control", "none", "--target-processes", "all",
               "--kernel-name", "regex:" + "|".join(re.escape(t) for t in templates),
               "--launch-count", str(len(runs)), "--metrics", ",".join(wanted.values()),
               "--export", str(report), "--force-overwrite",
               sys.executable, "-m", "gemmlab.analysis._ncu_target", spec]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=_target_env())
        except subprocess.TimeoutExpired:
            raise NcuUnavailable(f"ncu did not finish within {timeout_s:.0f} s") from None
        log = proc.stdout + proc.stderr
        atomic_write(work / f"ncu-attempt{attempt}.log", " ".join(cmd) + "\n" + log)
        if "ERR_NVGPUCTRPERM" in log:
            raise NcuUnavailable("ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM: the driver "
                                 "restricts them to administrators)")
        bad = _unknown_metrics(log, list(wanted.values()))
        bad = [b for b in bad if b not in (METRICS[k] for k in REQUIRED)]
        if bad and attempt < 2:
            dropped += bad
            wanted = {k: v for k, v in wanted.items() if v not in bad}
            continue
        if proc.returncode != 0 or not report.with_suffix(".ncu-rep").exists():
            tail = [ln for ln in log.strip().splitlines() if "ERROR" in ln] or log.strip().splitlines()[-1:]
            raise NcuUnavailable(f"ncu failed (exit {proc.returncode}): {tail[0] if tail else 'no output'}")
        break
    imp = subprocess.run([ncu, "--import", str(report.with_suffix(".ncu-rep")), "--csv", "--page", "raw",
                          "--print-units", "base"], capture_output=True, text=True, timeout=120)
    if imp.returncode != 0:
        raise NcuUnavailable(f"ncu could not read back its report: {imp.stderr.strip().splitlines()[-1:] or imp.returncode}")
    atomic_write(work / "raw.csv", imp.stdout)
    rows = parse_raw_csv(imp.stdout)
    if len(rows) < len(runs):
        raise NcuUnavailable(f"ncu profiled {len(rows)} of {len(runs)} launches (see {work})")
    out = []
    for run, row in zip(runs, rows):
        values = {key: float(row.get(metric, math.nan)) for key, metric in METRICS.items()
                  if isinstance(row.get(metric, math.nan), float)}
        out.append(Counters(run, str(row.get("Kernel Name", "")), values, dropped))
    return out


# ----------------------------------------------------------------------------------------- model vs counters


@dataclass
class TrafficComparison:
    """Model against ncu for one launch: DRAM, L2 and their sum (the measure the model is held to), as ratios."""

    label: str
    model_dram: float
    model_l2: float
    measured_dram: float | None
    measured_l2: float | None
    l2_metric: str
    # Bytes between the SMs and the crossbar, every SM counted (a multicast box once per receiving block):
    # the model's, and ncu's xbar2l1tex + l1tex2xbar bytes.
    model_delivered: float | None = None
    measured_delivered: float | None = None

    @staticmethod
    def _ratio(a: float, b: float | None) -> float | None:
        return a / b if b else None

    @property
    def dram_ratio(self) -> float | None:
        return self._ratio(self.model_dram, self.measured_dram)

    @property
    def l2_ratio(self) -> float | None:
        return self._ratio(self.model_l2, self.measured_l2)

    @property
    def sum_ratio(self) -> float | None:
        if self.measured_dram is None or self.measured_l2 is None:
            return None
        return self._ratio(self.model_dram + self.model_l2, self.measured_dram + self.measured_l2)

    def within(self, tol: float = 0.25) -> bool | None:
        r = self.sum_ratio
        return None if r is None else abs(r - 1.0) <= tol

    @property
    def delivered_ratio(self) -> float | None:
        return self._ratio(self.model_delivered, self.measured_delivered) if self.model_delivered else None


def delivered_model(model: KernelModel) -> float:
    """The model's bytes between the SMs and L2 with every block counted: the two SMs of a TPC each receive
    what L2 looked up once for both, and a rung whose clusters share an operand by multicast (spec.cluster
    > 1) receives it once per block, as without clusters."""
    from .geometry import one_cluster
    from .models import model_kernel

    spec, p = model.spec, dict(model.params)
    single = one_cluster(spec, p)
    if single is p:
        return model.cache.delivered_bytes
    alone = model_kernel(spec, model.m, model.n, model.k, single, model.device, compile=False,
                         dtype=model.fmt.dtype, precision=model.fmt.precision, out_dtype=model.fmt.out_dtype)
    return alone.cache.delivered_bytes


def compare_traffic(model: KernelModel, counters: Counters) -> TrafficComparison:
    l2, metric = counters.l2_compared_bytes
    delivered = counters.delivered_bytes
    return TrafficComparison(f"{model.name} {model.shape}", model.cache.dram_bytes, model.cache.l2_bytes,
                             counters.dram_bytes, l2, metric, delivered_model(model) if delivered else None,
                             delivered)
