"""The shape suite: kernel="auto" against cuBLAS (torch.matmul) on the shapes people run, in bfloat16 and in
strict float32 (torch's TF32 off on both sides), each call as a torch user makes it (a new output each call).

45 shapes in five groups (`GROUPS`, the one list):
- square: 512 ... 16384;
- odd: sizes that are not multiples of a tile;
- llm: projections of four models (hidden 2048-8192, intermediate 5504-28672) at 1 ... 16384 tokens, up / gate
  (T x inter x hidden) and down (T x hidden x inter), and one QKV (T x 3 hidden x hidden); B is a linear
  layer's weight given as `W.t()` (read K-major);
- long_k: K much larger than M x N;
- wide: M x N much larger than K.

Per dtype and shape: operands uniform in [-1, 1) from a seed of the shape, rounded once to the dtype; gemmlab's
result verified against the float64 product (relative Frobenius error under `TOLERANCE`, the formats
table's: 1e-4 for float32, 1e-2 for bfloat16; the float32 errors measured are 2e-7 to 3e-6); then `gemmlab.matmul(a, b)` and
`torch.matmul(a, b)` timed interleaved with the L2 flushed. A shape that fails the check (or raises) gets one
failed record and is not timed. `summarize` gives per dtype the geometric mean of torch time / gemmlab time
("x cuBLAS") and the worst shape. docs/performance.md's suite figures were measured this way
(`scripts/shape_suite.py`, which prints this measurement as Markdown rows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from ..formats import number_format, tolerance
from .records import COMPUTE, GPU, GPU_PEER, OK, Record, Results, derive

Shape = tuple[int, int, int]

SQUARE = [(s, s, s) for s in (512, 1024, 2048, 4096, 8192, 16384)]
ODD = [(1000, 1000, 1000), (3000, 3000, 3000), (4097, 4097, 4097), (6000, 6000, 6000), (1000, 3001, 2000),
       (2047, 2049, 1023), (5000, 3000, 1234)]
# (hidden, intermediate) and the token counts each runs at: up / gate (T x inter x hidden) and down
# (T x hidden x inter); QKV (T x 3 hidden x hidden) for one model.
MODELS = {(2048, 5504): (16, 2048), (4096, 11008): (1, 16, 128, 2048, 16384), (5120, 13824): (64, 8192),
          (8192, 28672): (1, 128, 4096)}
LONG_K = [(256, 256, 65536), (512, 512, 16384), (128, 4096, 16384), (64, 64, 131072)]
WIDE = [(16384, 16384, 256), (4096, 4096, 512), (8192, 8192, 1024)]


def _llm_shapes() -> list[Shape]:
    out = []
    for (hidden, inter), tokens in MODELS.items():
        for t in tokens:
            out += [(t, inter, hidden), (t, hidden, inter)]
    out.append((4096, 3 * 4096, 4096))
    return out


GROUPS: dict[str, list[Shape]] = {"square": SQUARE, "odd": ODD, "llm": _llm_shapes(), "long_k": LONG_K, "wide": WIDE}
WEIGHT_GROUPS = ("llm",)  # groups whose B is a linear layer's weight, W.t()
DTYPES = ("bfloat16", "float32")
TOLERANCE = {d: tolerance(d) for d in DTYPES}  # the formats table's, as every other check
DEFAULT_BUDGET_MS = 80.0  # sampling budget per call and shape (scripts/shape_suite.py's --budget-ms 40, doubled)
ROUNDS = 4  # least rounds of the interleaved timing
GEMMLAB, TORCH = "gemmlab", "torch_matmul"  # the records' kernel names
BELOW = 0.9  # a shape under this many times cuBLAS's speed is named in the summary


# ------------------------------------------------------------------------------------------ the cases


def parse_groups(text: str | None) -> list[str] | None:
    """Comma-separated group names (--only) as a list; None for none given. ValueError names an unknown one."""
    if not text or not text.strip():
        return None
    names = [g.strip() for g in text.split(",") if g.strip()]
    unknown = [g for g in names if g not in GROUPS]
    if unknown:
        raise ValueError(f"--only {', '.join(map(repr, unknown))}: not a group of the suite; the groups are "
                         f"{', '.join(GROUPS)}")
    return names


def parse_dtypes(text: str | None) -> list[str]:
    """"both" (or nothing) for bfloat16 then float32, else comma-separated dtypes; ValueError names a bad one."""
    if not text or text.strip() == "both":
        return list(DTYPES)
    names = [d.strip() for d in text.split(",") if d.strip()]
    wrong = [d for d in names if d not in DTYPES]
    if wrong or not names:
        raise ValueError(f"--dtype {text!r}: the suite runs {', '.join(DTYPES)} or both")
    return names


def cases(groups: Sequence[str] | None = None, quick: bool = False) -> list[tuple[str, Shape]]:
    """(group, (M, N, K)) in suite order, of `groups` (None: all); `quick`: every third of those."""
    names = list(GROUPS) if groups is None else list(groups)
    unknown = [g for g in names if g not in GROUPS]
    if unknown:
        raise ValueError(f"unknown group {unknown[0]!r}; the groups are {', '.join(GROUPS)}")
    out = [(g, s) for g in names for s in GROUPS[g]]
    return out[::3] if quick else out


def b_layout(group: str) -> str:
    """How B is given: "W.t()" (a linear layer's weight, N x K, transposed) or "K x N" (row-major)."""
    return "W.t()" if group in WEIGHT_GROUPS else "K x N"


def group_of(shape: Shape) -> str:
    """The group a suite shape belongs to (every shape of the suite is in one group only); "" for another."""
    return next((g for g, shapes in GROUPS.items() if tuple(shape) in shapes), "")


# ------------------------------------------------------------------------------------------ measuring


def measure(dtypes: Iterable[str] = DTYPES, groups: Sequence[str] | None = None, quick: bool = False,
            budget_ms: float = DEFAULT_BUDGET_MS, on_progress: Callable[[str], None] | None = None,
            command: str = "", on_shape: Callable[["Pair"], None] | None = None,
            share: Sequence[tuple[str, Shape]] | None = None) -> Results:
    """Run the suite: per dtype and shape, a gemmlab record and a torch record (or one failed gemmlab record),
    as `Results`. `budget_ms`: the sampling budget of each call on each shape. `on_progress(text)` says what
    runs; `on_shape(pair)` gets each shape's `Pair` once measured. TF32 is off in torch throughout (strict
    float32 on both sides), restored afterwards. `share`: these (group, shape) cases of the suite instead (a
    GPU's share of a spread run, `measure_share`)."""
    import torch

    dtypes = list(dtypes)
    if not dtypes or any(d not in DTYPES for d in dtypes):
        raise ValueError(f"dtypes {dtypes}: the suite runs {', '.join(DTYPES)}")
    pulled = share is not None and not isinstance(share, (list, tuple))  # (a spread's queue: taken as it goes)
    chosen = cases(groups, quick) if share is None else share if pulled else [(g, tuple(s)) for g, s in share]
    if not budget_ms > 0:
        raise ValueError(f"--budget-ms must be positive, got {budget_ms}")
    context = _context(budget_ms)
    run = {"run_id": context["run_id"], "started_at": context["now"](), "finished_at": None, "interrupted": False,
           "command": command, "notes": [], "environment": context["env"],
           "suite": {"dtypes": dtypes, "groups": list(groups) if groups else list(GROUPS), "quick": quick,
                     "budget_ms": budget_ms, "tolerance": {d: TOLERANCE[d] for d in dtypes}}}
    records: list[Record] = []
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        # dtype by dtype; a pulled share shape by shape (each shape's dtypes together, the queue read once)
        order = (((dt, i, g, tuple(s)) for i, (g, s) in enumerate(chosen) for dt in dtypes) if pulled else
                 ((dt, i, g, s) for dt in dtypes for i, (g, s) in enumerate(chosen)))
        for dt, i, group, shape in order:
            if on_progress:
                on_progress(f"{dt} {group} {'x'.join(map(str, shape))} ({i + 1}"
                            + (")" if pulled else f"/{len(chosen)})"))
            recs = _one_shape(torch, dt, group, shape, context)
            records += recs
            if on_shape:
                on_shape(Pair(recs[0], recs[1] if len(recs) > 1 else None))
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    run["finished_at"] = context["now"]()
    return Results(records, [run])


def measure_share(share: Sequence[tuple[str, Shape]], dtypes: Sequence[str], budget_ms: float, command: str,
                  groups: Sequence[str] | None, quick: bool) -> Results:
    """One process's share of a suite spread over GPUs (bench.spread): `measure` on those cases."""
    return measure(dtypes, groups, quick, budget_ms, command=command, share=share)


def measure_spread(gpus: int, dtypes: Sequence[str] = DTYPES, groups: Sequence[str] | None = None,
                   quick: bool = False, budget_ms: float = DEFAULT_BUDGET_MS, command: str = "") -> Results:
    """The suite over `gpus` GPUs of this host, one process each, merged into one Results in suite order. The
    shapes are taken from one queue as the processes ask (bench.spread), the larger products first: a shape
    costs two calls of `budget_ms` and a compile, more where a call is long (strict fp32 at 16384³ takes 0.18
    s a call), which the order's cost counts only roughly and the queue makes up for."""
    from . import spread

    chosen = cases(groups, quick)
    costs = [1.0 + 2.0 * m * n * k / 1e13 for _, (m, n, k) in chosen]
    timings: list = []
    parts = spread.run_spread(measure_share, chosen, costs, gpus, list(dtypes), budget_ms, command, groups, quick,
                              timings=timings)
    place = {(dt, tuple(s)): (di, i) for di, dt in enumerate(dtypes) for i, (_, s) in enumerate(chosen)}
    merged = spread.merge([r for _, r in parts],
                          order=lambda r: place.get((r.dtype, (r.m, r.n, r.k)), (len(dtypes), 0)) + (r.kernel != GEMMLAB,))
    for run in merged.runs:
        run.setdefault("notes", []).extend([f"one of {len(parts)} processes of a suite spread over {gpus} GPUs",
                                            spread.times_note(timings)])
    return merged


def _context(budget_ms: float) -> dict:
    """What every record of one run shares: run id, clock, machine facts, the device and the budget."""
    import secrets
    from datetime import datetime, timezone

    from ..runtime import device
    from . import environment

    device.require_cupy()  # the one-line reason where there is no GPU
    return {"run_id": datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2),
            "now": lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "env": environment.record_fields(), "info": device.device_info(), "budget_ms": budget_ms}


def _operands(torch, dt: str, group: str, shape: Shape):
    """A and B as the suite makes them: uniform in [-1, 1) from the shape's seed, rounded to `dt`;
    B drawn as an N x K weight and transposed in the weight groups."""
    m, n, k = shape
    dtype = getattr(torch, dt)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(m * 7 + n * 13 + k)
    a = (torch.rand(m, k, device="cuda", generator=gen) * 2 - 1).to(dtype)
    if group in WEIGHT_GROUPS:
        b = (torch.rand(n, k, device="cuda", generator=gen) * 2 - 1).to(dtype).t()
    else:
        b = (torch.rand(k, n, device="cuda", generator=gen) * 2 - 1).to(dtype)
    return a, b


def _one_shape(torch, dt: str, group: str, shape: Shape, context: dict) -> list:
    """Verify gemmlab's product and torch's, then time them interleaved (`verified.verify_then_time`); the
    shape's records, gemmlab's first (gemmlab's alone where it was not timed)."""
    from .. import api  # api.matmul: what gemmlab.matmul runs for 2-D tensors that need no grad
    from .timing import TimedCall, TimingOptions
    from .verified import Check, rel_error64, verify_then_time

    a, b = _operands(torch, dt, group, shape)
    refs = [a.double() @ b.double()]
    checks = [Check(GEMMLAB, lambda: rel_error64(torch, api.matmul(a, b), refs[0]),
                    lambda: TimedCall(lambda: api.matmul(a, b)), GEMMLAB),
              Check(TORCH, lambda: rel_error64(torch, torch.matmul(a, b), refs[0]),
                    lambda: TimedCall(lambda: torch.matmul(a, b)), TORCH)]

    def record(kernel, *, status=OK, err=None, note="", t=None):
        return _record(kernel, dt, group, shape, context, status=status, err=err if kernel == GEMMLAB else None,
                       note=note, t=t)

    opts = TimingOptions(budget_ms=context["budget_ms"], rounds=ROUNDS)
    recs = verify_then_time(checks, TOLERANCE[dt], record, opts, before_timing=refs.clear)
    recs.sort(key=lambda r: r.kernel != GEMMLAB)
    return recs if recs[0].ok else recs[:1]


def _auto_rung(dt: str, info, shape: Shape, group: str) -> tuple[str, int | None]:
    """The rung kernel="auto" picks for the shape (by shape, as `bench.batched` names it); ("auto", None)
    where none runs the dtype here (the call's own error is then in the record's note)."""
    from ..api import choose_kernel

    try:
        spec = choose_kernel(dt, info.compute_capability, None, shape=shape, b_kmajor=group in WEIGHT_GROUPS)
    except (TypeError, ValueError):
        return "auto", None
    return spec.name, spec.rung


def _record(kernel: str, dt: str, group: str, shape: Shape, context: dict, *, status: str = OK,
            err: float | None = None, note: str = "", t=None) -> Record:
    m, n, k = shape
    info, env = context["info"], context["env"]
    fields = set(Record.__dataclass_fields__)
    td = t.as_dict() if t is not None else {}
    layout = f"B {b_layout(group)}"
    if kernel == GEMMLAB:
        name, rung = _auto_rung(dt, info, shape, group)
        label, family = f"gemmlab auto ({name})", GPU
        idea = f'gemmlab.matmul(a, b), kernel="auto", a new output each call; {group}, {layout}'
    else:
        rung, label, family = None, "torch.matmul", GPU_PEER
        idea = f"cuBLAS through torch.matmul(a, b), a new output each call; {group}, {layout}"
    rec = Record(kernel=kernel, label=label, family=family, rung=rung, idea=idea, params={}, dtype=dt, m=m, n=n,
                 k=k, alpha=1.0, beta=0.0, mode=COMPUTE, l2=td.get("l2", "cold"), pinned=None,
                 precision=number_format(dt).name, status=status, rel_error=err,
                 verify_tol=TOLERANCE[dt] if kernel == GEMMLAB else None, note=note,
                 peak_tflops=info.peak_tensor_tflops(dt) if dt != "float32" else None, run_id=context["run_id"],
                 measured_at=context["now"](), **{key: v for key, v in td.items() if key in fields and key != "l2"},
                 **{key: v for key, v in env.items() if key in fields})
    return derive(rec)


# ------------------------------------------------------------------------------------------ summary


@dataclass(frozen=True)
class Pair:
    """One shape in one dtype: gemmlab's record and torch's (None where gemmlab failed and nothing was timed)."""

    gemmlab: Record
    torch: Record | None

    @property
    def shape(self) -> Shape:
        return self.gemmlab.shape

    @property
    def ratio(self) -> float | None:
        """torch time / gemmlab time ("x cuBLAS"), where both were timed."""
        if self.torch is None or not (self.gemmlab.ok and self.torch.ok):
            return None
        return self.torch.median_ms / self.gemmlab.median_ms


@dataclass(frozen=True)
class Summary:
    """One dtype's suite: shapes run, the geometric mean and the worst of the ratios over the shapes timed,
    and the shapes that failed (not verified, or not timed on both sides), left out of the ratios."""

    dtype: str
    count: int
    geomean: float | None
    worst: float | None
    worst_shape: Shape | None
    failures: tuple[Shape, ...] = ()
    below: tuple[tuple[float, Shape], ...] = ()  # (ratio, shape) of the timed shapes under BELOW, lowest first

    def line(self) -> str:
        """`<dtype>: N shapes, geometric mean x cuBLAS G, worst W at M x N x K`, then the shapes below BELOW and
        the failures, if any."""
        geo = f"{self.geomean:.3f}" if self.geomean is not None else "-"
        worst = f"{self.worst:.3f} at {' x '.join(map(str, self.worst_shape))}" if self.worst is not None else "-"
        text = f"{self.dtype}: {self.count} shapes, geometric mean x cuBLAS {geo}, worst {worst}"
        if self.below:
            text += f"; {len(self.below)} below {BELOW:g}: " + ", ".join(
                f"{' x '.join(map(str, sh))} ({r:.3f})" for r, sh in self.below)
        if self.failures:
            text += f"; {len(self.failures)} failed: " + ", ".join(" x ".join(map(str, s)) for s in self.failures)
        return text


def pairs(results: Results) -> dict[str, list[Pair]]:
    """The suite's records by dtype, one `Pair` per shape, in the order measured."""
    by_key: dict[tuple, dict] = {}
    for r in results.records:
        side = "gemmlab" if r.kernel == GEMMLAB and r.family == GPU else "torch" if r.kernel == TORCH else None
        if side:
            by_key.setdefault((r.dtype, r.shape), {})[side] = r
    out: dict[str, list[Pair]] = {}
    for (dt, _), sides in by_key.items():
        if "gemmlab" in sides:
            out.setdefault(dt, []).append(Pair(sides["gemmlab"], sides.get("torch")))
    return out


def summarize(results: Results) -> dict[str, Summary]:
    """Per dtype: the geometric mean of torch time / gemmlab time over the shapes timed, the worst of them and
    its shape, and the shapes that failed."""
    out = {}
    for dt, rows in pairs(results).items():
        timed = [(p.ratio, p.shape) for p in rows if p.ratio is not None]
        failures = tuple(p.shape for p in rows if p.ratio is None)
        geo = math.exp(sum(math.log(r) for r, _ in timed) / len(timed)) if timed else None
        worst = min(timed) if timed else (None, None)
        out[dt] = Summary(dt, len(rows), geo, worst[0], worst[1], failures,
                          tuple(sorted((r, sh) for r, sh in timed if r < BELOW)))
    return out


__all__ = ["BELOW", "DEFAULT_BUDGET_MS", "DTYPES", "GEMMLAB", "GROUPS", "LONG_K", "MODELS", "ODD", "Pair", "SQUARE",
           "Summary", "TOLERANCE", "TORCH", "WIDE", "b_layout", "cases", "group_of", "measure", "pairs",
           "parse_dtypes", "parse_groups", "summarize"]
