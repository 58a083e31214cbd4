"""What every section builder is handed: the records, grouped and selected, and the size to report at.

Selection rules, in one place:
- Only records that were timed (status ok) are drawn; failures are listed by the overview.
- When merged results hold the same measurement from several runs (same GPU, kernel, parameters,
  shape, mode, L2 state), the latest one is drawn.
- "% of cuBLAS" divides by the cuBLAS record of the *same run*, shape and mode where there is one
  (measured interleaved, so the ratio is fair), else by the latest cuBLAS record for that GPU.
- Timed means status ok and a median that is a time (finite, above zero: `Record.ok`); any other record
  is listed as not measured and never divided by.
- The size the tables report at: the one asked for (it must be one of `sizes()`: `build_report` refuses
  another), else the largest square size where cuBLAS was timed, else the largest square size with any
  GPU result. A group (a GPU, or the CPU) without results at the size asked for uses its nearest size.
- Captions and titles state the L2 state the records were measured in (`l2_state`), not an assumed one.
- GPU sections are per *group*: one GPU in one number format (fp32, tf32, fp16, bf16), named by the GPU
  alone for fp32 and "GPU, format" otherwise. A ratio never crosses formats: a bf16 rung is compared
  with cuBLAS in bf16.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ..bench.formats import FORMATS, NumberFormat
from ..bench.records import COMPUTE, CPU, GPU, GPU_PEER, Record, Results

REFERENCE = "cublas"
_PEER_ORDER = {"cublas": 0, "torch": 1, "triton": 2}


def ladder_key(rec: Record) -> tuple:
    """Rungs in ladder order, then peers (cuBLAS first), then the CPU ladder."""
    if rec.family == GPU:
        return (0, rec.rung or 0, rec.label)
    if rec.family == GPU_PEER:
        return (1, _PEER_ORDER.get(rec.kernel, 9), rec.label)
    return (2, rec.rung or 0, rec.label)


_FORMAT_ORDER = {name: i for i, name in enumerate(FORMATS)}


def group_of(r: Record) -> str:
    """The GPU sections' unit: the GPU's name for fp32, "GPU, format" for the other number formats."""
    return r.gpu if r.fmt == "fp32" else f"{r.gpu}, {r.fmt}"


def l2_state(recs: list[Record]) -> str:
    """The L2 state these records were measured in, as they record it: "cold L2", "warm L2", "cold and warm
    L2", or one phrase per device when the GPU's and the CPU's differ."""
    def state(rs: list[Record]) -> str:
        found = sorted({r.l2 for r in rs if r.l2})
        return " and ".join(found) + " L2" if found else "L2 state not recorded"

    gpu = [r for r in recs if r.is_gpu]
    cpu = [r for r in recs if not r.is_gpu]
    if not gpu or not cpu or state(gpu) == state(cpu):
        return state(recs)
    return f"{state(gpu)} on the GPU, {state(cpu)} on the CPU"


def _identity(r: Record) -> tuple:
    key = r.key()
    return key[1:]  # without the run id


@dataclass
class ReportContext:
    results: Results
    at: int | None = None
    title: str = "gemmlab benchmark report"
    _latest: list[Record] = field(init=False, repr=False)

    def __post_init__(self):
        # Runs that measured fused layers: their bare products are yardsticks of the layer section, not
        # points of the ladder's.
        self._layer_runs = {r.run_id for r in self.results.records if r.epilogue}
        # Runs of 8-bit products (`bench.fp8`): their own section, with torch._scaled_mm as the yardstick.
        self._fp8_runs = {r.run_id for r in self.results.records if FORMATS.get(r.fmt) is not None
                          and FORMATS[r.fmt].is_fp8}
        # Runs of grouped products (`bench.grouped`, 8-bit ones included): their own section too.
        self._grouped = {run.get("run_id"): run["grouped"] for run in self.results.runs if run.get("grouped")}
        self._fp8_runs -= set(self._grouped)
        # Runs of tensor-parallel products (`bench.distributed`): whole products over several GPUs, their own section.
        self._distributed = [run for run in self.results.runs if isinstance(run.get("distributed"), dict)]
        self._own_runs = self._layer_runs | self._fp8_runs | set(self._grouped) | {
            run.get("run_id") for run in self._distributed}
        latest: dict[tuple, Record] = {}
        for r in self.results.ok():
            k = _identity(r)
            if k not in latest or r.measured_at >= latest[k].measured_at:
                latest[k] = r
        self._latest = sorted(latest.values(), key=lambda r: (ladder_key(r), r.m, r.n, r.k))

    # ---------------------------------------------------------------- selection

    @property
    def records(self) -> list[Record]:
        return self._latest

    def failures(self) -> list[Record]:
        return [r for r in self.results.records if not r.ok]

    def devices(self) -> list[str]:
        """The GPUs, in the order their results appear."""
        seen: list[str] = []
        for r in self._latest:
            if r.is_gpu and r.gpu and r.gpu not in seen:  # (tensor-parallel calls on gloo ran on no GPU)
                seen.append(r.gpu)
        return seen

    def gpus(self) -> list[str]:
        """The groups of GPU results (`group_of`): each GPU's fp32 results, then its other formats."""
        devices = self.devices()
        found: dict[str, tuple] = {}
        for r in self._latest:
            if r.is_gpu and not r.epilogue and r.run_id not in self._own_runs:
                found.setdefault(group_of(r), (devices.index(r.gpu), _FORMAT_ORDER.get(r.fmt, 9)))
        return sorted(found, key=found.__getitem__)

    def format_of(self, group: str) -> NumberFormat:
        """The number format of a group's results."""
        r = next((x for x in self._latest if x.is_gpu and group_of(x) == group and not x.epilogue), None)
        return FORMATS.get(r.fmt, FORMATS["fp32"]) if r is not None else FORMATS["fp32"]

    def gpu_records(self, gpu: str, mode: str = COMPUTE, square: bool | None = None) -> list[Record]:
        """The records of one group (a GPU and a number format; see `gpus`)."""
        return [r for r in self._latest if r.is_gpu and group_of(r) == gpu and r.mode == mode and not r.epilogue
                and (square is None or r.square == square) and r.run_id not in self._own_runs]

    def fp8_products(self) -> dict[tuple, list[Record]]:
        """8-bit measurements (`bench.fp8`), {(GPU, format, shape, run id): the calls of that run}."""
        out: dict[tuple, list[Record]] = {}
        for r in self._latest:
            if r.run_id in self._fp8_runs:
                out.setdefault((r.gpu, r.fmt, r.shape, r.run_id), []).append(r)
        return out

    def grouped_products(self) -> dict[tuple, tuple[dict, list[Record]]]:
        """Grouped measurements (`bench.grouped`), {(GPU, format, run id): (the run's problem, its calls)}."""
        out: dict[tuple, tuple[dict, list[Record]]] = {}
        for r in self._latest:
            if r.run_id in self._grouped:
                out.setdefault((r.gpu, r.fmt, r.run_id), (self._grouped[r.run_id], []))[1].append(r)
        return out

    @property
    def tensor_parallel_runs(self) -> set:
        """The run ids of tensor-parallel measurements: their calls are lone calls between barriers over several
        GPUs, timed as the section on them says, not by the events and flushes of the other GPU records."""
        return {run.get("run_id") for run in self._distributed}

    def tensor_parallel(self) -> dict[tuple, list[dict]]:
        """Tensor-parallel measurements (`bench.distributed`), {(GPU, world size, backend, dtype): the rows as
        saved}, each problem (kind and full shape) once: from the run that started last."""
        latest: dict[tuple, tuple[str, str, dict]] = {}
        for run in self._distributed:
            row = run["distributed"]
            gpu = (run.get("environment") or {}).get("gpu", "")
            key = (gpu, row.get("world"), row.get("backend"), row.get("dtype"), row.get("kind"), row.get("m"),
                   row.get("n"), row.get("k"))
            when = str(run.get("started_at") or "")
            if key not in latest or when >= latest[key][0]:
                latest[key] = (when, gpu, row)
        out: dict[tuple, list[dict]] = {}
        for key, (_, gpu, row) in latest.items():
            out.setdefault(key[:4], []).append(row)
        return out

    def layers(self) -> dict[tuple, list[Record]]:
        """Fused-layer measurements (`bench.fused`), {(GPU, format, epilogue, shape, run id): records}: the
        fused calls and, from the same run, the product alone they are compared with."""
        out: dict[tuple, list[Record]] = {}
        for r in self._latest:
            if r.epilogue:
                out.setdefault((r.gpu, r.fmt, r.epilogue, r.shape, r.run_id), [])
        for key, recs in out.items():
            gpu, fmt, _, shape, run = key
            recs.extend(r for r in self._latest if r.run_id == run and r.gpu == gpu and r.fmt == fmt
                        and r.shape == shape and r.epilogue in ("", key[2]))
        return out

    def cpu_records(self, square: bool | None = None) -> list[Record]:
        return [r for r in self._latest if r.family == CPU and (square is None or r.square == square)]

    def labels(self, recs: list[Record]) -> list[str]:
        out: list[str] = []
        for r in sorted(recs, key=ladder_key):
            if r.label not in out:
                out.append(r.label)
        return out

    @staticmethod
    def series(recs: list[Record], value=lambda r: r.tflops) -> dict[str, list[tuple[int, float]]]:
        """{label: [(N, value), ...]} over square shapes, sorted by N, in ladder order."""
        out: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for r in sorted(recs, key=lambda r: (ladder_key(r), r.m)):
            if r.square:
                out[r.label].append((r.m, value(r)))
        return dict(out)

    # ---------------------------------------------------------------- sizes and ratios

    def sizes(self) -> list[int]:
        """The square sizes N with timed results in some group (GPU or CPU): the sizes `at` may name."""
        recs = [r for g in self.gpus() for r in self.gpu_records(g, square=True)] + self.cpu_records(square=True)
        return sorted({r.m for r in recs})

    def size_at(self, gpu: str | None) -> int | None:
        recs = self.gpu_records(gpu, square=True) if gpu is not None else self.cpu_records(square=True)
        sizes = {r.m for r in recs}
        if not sizes:
            return None
        if self.at is not None:
            return self.at if self.at in sizes else min(sizes, key=lambda s: (abs(s - self.at), -s))
        ref = {r.m for r in recs if r.kernel == REFERENCE}
        if ref:
            return max(ref)
        if gpu is None:  # the CPU: the largest size most baselines reached
            count = defaultdict(int)
            for r in recs:
                count[r.m] += 1
            best = max(count.values())
            return max(s for s, c in count.items() if c == best)
        return max(sizes)

    def at_size(self, recs: list[Record], n: int) -> list[Record]:
        return sorted((r for r in recs if r.square and r.m == n), key=ladder_key)

    def reference_for(self, rec: Record) -> Record | None:
        same = [r for r in self.results.ok() if r.kernel == REFERENCE and r.gpu == rec.gpu and r.fmt == rec.fmt
                and r.shape == rec.shape and r.mode == rec.mode and r.l2 == rec.l2 and r.beta == rec.beta]
        in_run = [r for r in same if r.run_id == rec.run_id]
        pool = in_run or same
        return max(pool, key=lambda r: r.measured_at) if pool else None

    def pct_of_reference(self, rec: Record) -> float | None:
        ref = self.reference_for(rec)
        if ref is None or not rec.ok:
            return None
        return 100.0 * ref.median_ms / rec.median_ms

    def runs(self) -> list[dict]:
        return list(self.results.runs)
