"""Grouped products of a mixture-of-experts layer (gemmlab.grouped_matmul) in one gemmlab launch against torch.

The problem: G groups (experts) of `tokens` rows on average, each times its own N x K weight (given as
W.transpose(1, 2), as a linear layer holds it), in bfloat16, float16 or e4m3 (8-bit, one scale per row of A and
per group and column of B). The groups' sizes (`spread`): "uniform" (every group `tokens` rows) or "skewed"
(seeded: sizes drawn around `tokens` with a heavy tail, the smallest quarter of the groups emptied and their rows
given to the largest, so empty groups are always among them). The calls, on the same operands:
- gemmlab: `gemmlab.grouped_matmul(x, w.transpose(1, 2), ends)`, one launch;
- torch._grouped_mm (16-bit) or torch._scaled_grouped_mm (8-bit), where this torch has them;
- torch.bmm where the groups are equal (the batched product the grouped one generalises);
- a loop of torch.mm (torch._scaled_mm for 8-bit) over the groups, one launch each (the cost of not grouping),
  up to LOOP_MAX groups.
Every call is checked against float64 products of (the dequantized) inputs on a sample of each group's rows,
then all are timed interleaved with the L2 flushed (`verified.verify_then_time_torch`). A record's M is the rows
of all groups (its flops 2 M N K).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .formats import number_format
from .verified import TorchCall

SPREADS = ("uniform", "skewed")
DTYPES = ("bfloat16", "float16", "float8_e4m3fn")
GEMMLAB, GROUPED_MM, BMM, LOOP = "gemmlab", "torch_grouped_mm", "torch_bmm", "torch_mm_loop"
LOOP_MAX = 256
SAMPLE_ROWS = 48  # rows of each group checked against float64 (first, last and spread between)
# Mixture-of-experts shapes (G, tokens per group, N, K): an 8-expert layer's up projection at prefill and at
# decode-sized batches, and fine-grained experts (64 and 128 of them, small N).
SHAPES = ((8, 2048, 14336, 4096), (64, 512, 1408, 2048), (128, 512, 768, 2048), (8, 128, 14336, 4096))


@dataclass(frozen=True)
class Problem:
    groups: int
    tokens: int
    n: int
    k: int
    dtype: str = "bfloat16"
    spread: str = "uniform"
    seed: int = 0

    def check(self) -> None:
        """ValueError naming the parameter at fault."""
        if self.groups < 1:
            raise ValueError(f"--grouped {self.groups}: at least one group")
        if min(self.tokens, self.n, self.k) < 1:
            raise ValueError(f"tokens per group, N and K must be positive, got {self.tokens} x {self.n} x {self.k}")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype {self.dtype!r}: grouped products are measured in {', '.join(DTYPES)}")
        if self.spread not in SPREADS:
            raise ValueError(f"--spread {self.spread!r} is not one of {', '.join(SPREADS)}")

    def sizes(self) -> list[int]:
        """The groups' rows (sum: groups x tokens)."""
        total = self.groups * self.tokens
        if self.spread == "uniform" or self.groups == 1:
            return [self.tokens] * self.groups
        rng = np.random.default_rng(self.seed + 7)
        w = rng.pareto(1.5, self.groups) + 0.05
        empty = np.argsort(w)[: max(1, self.groups // 4)]
        w[empty] = 0.0
        sizes = np.floor(w / w.sum() * total).astype(np.int64)
        sizes[int(np.argmax(w))] += total - int(sizes.sum())
        return [int(s) for s in sizes]

    def describe(self) -> str:
        return (f"{self.groups} groups x {self.tokens} rows ({self.spread}) x {self.n} x {self.k} {self.dtype}, "
                f"{sum(1 for s in self.sizes() if s == 0)} empty")


def sample_rows(sizes: list[int], per_group: int = SAMPLE_ROWS) -> np.ndarray:
    """Row indices checked: up to `per_group` rows of each non-empty group, its first and last among them."""
    rows, start = [], 0
    for s in sizes:
        if s:
            rows.extend(np.unique(np.linspace(start, start + s - 1, min(s, per_group)).astype(np.int64)).tolist())
        start += s
    return np.asarray(rows, dtype=np.int64)


def build(problem: Problem, torch, gemmlab, *, seed: int = 0) -> tuple[list[TorchCall], Any]:
    """The calls (each output: its sampled rows) and the float64 products of those rows."""
    problem.check()
    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator(device=dev).manual_seed(seed)
    sizes = problem.sizes()
    t, n, k, groups = sum(sizes), problem.n, problem.k, problem.groups
    fp8 = problem.dtype == "float8_e4m3fn"
    wide = torch.bfloat16 if fp8 else getattr(torch, problem.dtype)

    def uniform(*shape):
        return (torch.rand(*shape, generator=g, device=dev) * 2 - 1).to(wide)

    x, w = uniform(t, k), uniform(groups, n, k)
    ends = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device=dev)
    rows = torch.as_tensor(sample_rows(sizes), device=dev)
    group_of = torch.as_tensor(np.repeat(np.arange(groups), sizes)[sample_rows(sizes)], device=dev)
    calls: list[TorchCall] = []
    from ..api.plan import grouped_rung

    spec = grouped_rung("auto")
    if fp8:
        xq, sx = gemmlab.quantize(x, problem.dtype, "row")                         # per row of A (t x 1)
        wq, sw = gemmlab.quantize(w.reshape(groups * n, k), problem.dtype, "row")  # per row of W: B's columns
        wq, sw = wq.reshape(groups, n, k), sw.reshape(groups, n)
        ref_x = xq[rows].double() * sx[rows].double()
        ref_w = wq.double() * sw.double()[:, :, None]
        b = wq.transpose(1, 2)
        with_params = lambda **p: lambda: gemmlab.grouped_matmul(xq, b, ends, scale_a=sx, scale_b=sw, **p)  # noqa: E731
    else:
        ref_x, ref_w = x[rows].double(), w.double()
        b = w.transpose(1, 2)
        with_params = lambda **p: lambda: gemmlab.grouped_matmul(x, b, ends, **p)  # noqa: E731
    fn = with_params()
    ref64 = torch.empty(len(rows), n, dtype=torch.float64, device=dev)
    for i in range(groups):  # the sampled rows of group i times its weight
        pick = (group_of == i).nonzero().reshape(-1)
        if len(pick):
            ref64[pick] = ref_x[pick] @ ref_w[i].t()
    held: dict[str, Any] = {}

    def keep(name, f):
        def call():
            held[name] = f()
        return call

    calls.append(TorchCall(spec.name, f"gemmlab {spec.name}", "gpu", "one launch over every group's tiles",
                             keep(GEMMLAB, fn), lambda: held[GEMMLAB][rows], rung=spec.rung, with_params=with_params))
    if fp8 and hasattr(torch, "_scaled_grouped_mm"):
        calls.append(TorchCall(GROUPED_MM, "torch._scaled_grouped_mm", "gpu_peer", "torch's grouped 8-bit product",
                                 keep(GROUPED_MM, lambda: torch._scaled_grouped_mm(xq, b, sx.reshape(-1), sw, offs=ends,
                                                                                   out_dtype=torch.bfloat16)),
                                 lambda: held[GROUPED_MM][rows]))
    elif not fp8 and hasattr(torch, "_grouped_mm"):
        calls.append(TorchCall(GROUPED_MM, "torch._grouped_mm", "gpu_peer", "torch's grouped product",
                                 keep(GROUPED_MM, lambda: torch._grouped_mm(x, b, offs=ends)),
                                 lambda: held[GROUPED_MM][rows]))
    if not fp8 and len(set(sizes)) == 1:
        x3 = x.view(groups, sizes[0], k)
        calls.append(TorchCall(BMM, "torch.bmm", "gpu_peer", "cuBLAS's batched product (equal groups)",
                                 keep(BMM, lambda: torch.bmm(x3, b).view(t, n)), lambda: held[BMM][rows]))
    # (torch._scaled_mm refuses row counts that are not multiples of 16 on this path: no 8-bit loop then)
    if groups <= LOOP_MAX and not (fp8 and any(s % 16 for s in sizes)):
        bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()

        def loop():
            out = torch.empty(t, n, device=dev, dtype=torch.bfloat16 if fp8 else wide)
            for i in range(groups):
                lo, hi = bounds[i], bounds[i + 1]
                if hi == lo:
                    continue
                if fp8:
                    out[lo:hi] = torch._scaled_mm(xq[lo:hi], b[i], scale_a=sx[lo:hi], scale_b=sw[i].reshape(1, n),
                                                  out_dtype=torch.bfloat16)
                else:
                    torch.mm(x[lo:hi], b[i], out=out[lo:hi])
            return out

        calls.append(TorchCall(LOOP, "loop of torch._scaled_mm" if fp8 else "loop of torch.mm", "gpu_peer",
                                 "one launch per group", keep(LOOP, loop), lambda: held[LOOP][rows]))
    return calls, ref64


def model(problem: Problem, info) -> dict:
    """What the models say of the problem on this device, as the report gives it: the tiles gemmlab's grouped
    call runs (its parameters, as kernel="auto" chooses them) and what they leave of the dense rate
    (wgmma.grouped_work), and the least bytes a product of these operands moves (A, every group's B, C once)
    over the datasheet's DRAM bandwidth: the time under which no call can run where the weights dominate."""
    from .. import formats
    from ..api import dispatch
    from ..api.plan import grouped_rung
    from ..kernels.rungs import wgmma

    sizes, n, k, dt = problem.sizes(), problem.n, problem.k, problem.dtype
    t = sum(sizes)
    element = formats.element_type(dt, formats.resolve_precision(dt, dt, None))
    out = "bfloat16" if formats.is_fp8(dt) else dt
    item = formats.element_bytes(element)
    moved = (t * k + problem.groups * k * n) * item + t * n * formats.ITEMSIZE[out]
    found = {"least_bytes": moved, "dram_ms": moved / (info.peak_dram_gbps * 1e9) * 1e3}
    spec = grouped_rung("auto")
    if spec is wgmma.SPEC:
        p, _, _ = dispatch.full_params(spec, t, n, k, info, element, out, None, None, True, batch=problem.groups,
                                       grouped=True)
        w = wgmma.grouped_work(sizes, n, p, info.sm_count)
        found.update(tile=f"{p['BM']} x {p['BN']}", cluster=p["CLUSTER"], cluster_tiles=w.cluster_tiles,
                     clusters=w.clusters, rounds=w.rounds, last_round=w.last_round, output_share=w.output_share,
                     tiling=w.efficiency)
    return found


def measure(problem: Problem, *, budget_ms: float = 300.0, seed: int = 0, command: str = "",
            on_progress: Callable[[str], None] | None = None):
    """Verify, then time every call of `build` interleaved; the records (one per call) as `Results`. A call
    that raises or fails the check gets an "error" or "failed" record and is not timed."""
    import torch

    from .. import api as gemmlab
    from ..runtime import device
    from .records import Results
    from .verified import torch_call_run, verify_then_time_torch

    problem.check()
    device.require_cupy()
    fmt = number_format(problem.dtype)
    info = device.device_info()
    peak = info.peak_tensor_tflops(problem.dtype)
    t = sum(problem.sizes())
    run, record, finish = torch_call_run(
        command, ("grouped", {"groups": problem.groups, "tokens": problem.tokens, "n": problem.n, "k": problem.k,
                              "dtype": problem.dtype, "spread": problem.spread, "sizes": problem.sizes(),
                              "model": model(problem, info)}),
        dtype=problem.dtype, m=t, n=problem.n, k=problem.k, fmt=fmt, peak=peak)
    if on_progress:
        on_progress("building the calls")
    calls, ref64 = build(problem, torch, gemmlab, seed=seed)
    refs = [ref64]
    del ref64
    records = verify_then_time_torch(calls, lambda c: refs[0], fmt.verify_tol, record, budget_ms, on_progress,
                                     before_timing=refs.clear)
    finish()
    return Results(records, [run])
