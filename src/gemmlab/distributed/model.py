"""How long a tensor-parallel product takes, sequential or overlapped, from the link's and the GEMM's measured
rates: the model `gemmlab.distributed`'s products are held to.

Communication, in NCCL's terms: a collective moving S bytes (the gathered matrix of an all-gather, the input of a
reduce-scatter) among W ranks takes S (W - 1) / W / busbw, busbw being the bus bandwidth NCCL's tests report,
plus a latency per ring step. In a ring each of the W - 1 steps moves one block of S / W bytes over every link.

Overlap, ring by ring (schedule.py): the product is cut into W blocks of GEMM time g = t_gemm / W each, the
communication into W - 1 steps of c = t_comm / (W - 1). All-gather + GEMM: block s can start once it has
arrived (s steps in) and the block before it is done, so the last ends at max over s of (s c + (W - s) g) =
max(W g, (W - 1) c + g). GEMM + reduce-scatter is the mirror image (a block's sum leaves as soon as it is made,
the next block's partial is computed meanwhile): the same max(W g, g + (W - 1) c). Against the ideal bound
max(t_comm, t_gemm) the pipeline loses one block of whichever is shorter: at W = 4 and t_comm = t_gemm, 80 % of
the bound. With each block cut into `chunks` pieces (the products' `chunks`) the same holds piece by piece,
g = t_gemm / (W chunks) and c = t_comm / ((W - 1) chunks): one piece is lost (4 pieces at W = 4: 94 %), as long
as pieces stay large enough for the GEMM's rate, which the model does not see. `gemm_slowdown` stretches the GEMM
while communication runs beside it (the copies take SMs and memory bandwidth); 1 until measured.

The all-gather by the copy engines (exchange.py) has the same shape with one GEMM: its blocks arrive one push
apart (in pieces where asked: the model's chunks), and its walk takes them in that order. So has the
reduce-scatter by the copy engines, up to its last block: the other ranks' partials are made one after another
and pushed as each is done, the own rows' partial last; the last partial to arrive (from rank r + 1) lands at
max((W - 1) g + c, g + (W - 1) c), which the formula's max already covers. Then the W slots are summed
(`tail_s`, measured: the sum reads W blocks of the output and writes one). What the ring lost beyond the model
(each step's GEMM too small to fill the GPU, NCCL's kernels taking SMs) it does not have; what it adds is the
host's time to queue a call (docs/journal.md, "the first run on NCCL").

Whether the overlap pays (`choose`): the copy engines' form queues a GEMM, a push and their flags per peer,
where the sequential form queues one collective and one GEMM. Where the time the overlap saves (sequential -
overlapped) is less than what those per-peer steps cost beyond the model (PER_PEER_COST_S, fitted to both forms
measured), the GPU waits for the host or for the last push and the call is slower than doing the two one after
the other (2048 x 8192 x 8192 on 4 GPUs: 0.52-0.66 x sequential); `choose` then names the sequential form. The
copy form's blocks move by the copy engines' push (`step_bps`), faster than a step of NCCL's collective, which
the sequential form keeps. It predicts from the reference host's rates (REFERENCE_BUSBW, REFERENCE_PUSH_BPS,
REFERENCE_RATE, PER_PEER_COST_S), not from a measurement of the caller's machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..formats import ITEMSIZE, number_format

KINDS = ("all_gather", "reduce_scatter")

# NCCL all-gather bus bandwidth on the reference host (H100 SXM, NVLink 4; NVLS off), from the gathered
# operand of the largest tensor-parallel reference product: 268 MB (16384 x 8192 bf16) over 4 GPUs in 0.745 ms,
# over 2 in 0.629 ms. Smaller messages reach less (67 MB: 225 and 176 GB/s).
REFERENCE_BUSBW = {2: 213e9, 4: 270e9}
# Each rank's GEMM on the reference H100, by input dtype: the rates gemmlab's kernels sustain on products of
# the tensor-parallel shapes (docs/performance.md: BF16 700-750 TFLOP/s, e4m3 1,300-1,500, strict fp32 50).
REFERENCE_RATE = {"float16": 700e12, "bfloat16": 700e12, "float8_e4m3fn": 1300e12, "float8_e5m2": 1300e12,
                  "float32": 50e12}
# What the copy engines' form costs per peer beyond its model (the host's queueing of a GEMM or copy, an event
# and two stream memory operations per peer; on the all-gather also its pushes landing one after another, which
# the model does not see), fitted to both forms timed side by side (4 H200s, NVLink, 2 and 4 GPUs, five shapes
# of 2048-16384 rows, three runs on three machines: docs/journal.md, "a lone call's lead"): each value the middle
# of the range that orders every measured pair of forms as measured (all-gather 0.061-0.075 ms).
PER_PEER_COST_S = {"all_gather": 0.068e-3, "reduce_scatter": 0.03e-3}
# The collective and the GEMM within this factor of each other, either way: where overlap can nearly halve a call
# (at most from their sum to the longer), so where a product's share of the ideal bound is judged.
BALANCED = 2.0


def balanced(comm_s: float, gemm_s: float) -> bool:
    """Whether the collective and the GEMM alone are within BALANCED of each other."""
    return comm_s > 0 and gemm_s > 0 and 1 / BALANCED <= comm_s / gemm_s <= BALANCED


# The reduce-scatter's sum of the W slots reads W blocks and writes one (torch's sum: 2.3 TB/s measured on 4).
SUM_BPS = 2.3e12
# The copy engines' push of one block to one peer over NVLink 4 (`gemmlab micro --link`'s peer copy: 383 GB/s on
# two H200s, whose NVLink is the H100 SXM's). The copy forms move each block by such a push, one peer at a time
# (each rank sends one block and receives one per step), not at NCCL's bus bandwidth: 16384 x 8192 x 2048 reduce-
# scattered on 2 GPUs took 0.76 ms by copy where NCCL's collective alone took 0.64 (docs/journal.md).
REFERENCE_PUSH_BPS = 383e9


@dataclass(frozen=True)
class Link:
    """A link's measured rates: NCCL bus bandwidth (bytes/s) of each collective and the latency of a ring step."""

    all_gather_busbw: float
    reduce_scatter_busbw: float
    step_latency_s: float = 0.0

    def busbw(self, kind: str) -> float:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        return self.all_gather_busbw if kind == "all_gather" else self.reduce_scatter_busbw


def collective_seconds(kind: str, nbytes: float, world: int, link: Link) -> float:
    """The time of one collective over S = `nbytes` among `world` ranks (0 for one rank)."""
    if world < 1:
        raise ValueError(f"world size must be >= 1, got {world}")
    if world == 1 or nbytes <= 0:
        return 0.0
    bw = link.busbw(kind)
    if bw <= 0:
        raise ValueError(f"{kind} bus bandwidth must be > 0, got {bw}")
    return nbytes * (world - 1) / world / bw + (world - 1) * link.step_latency_s


@dataclass(frozen=True)
class Prediction:
    kind: str
    world: int
    comm_s: float          # the collective alone
    gemm_s: float          # this rank's product alone
    sequential_s: float    # one after the other
    ideal_s: float         # the longer of the two: perfect overlap
    overlapped_s: float    # the ring pipeline of W blocks

    @property
    def efficiency(self) -> float:
        """ideal / overlapped: 1 for perfect overlap."""
        return self.ideal_s / self.overlapped_s if self.overlapped_s else 1.0

    @property
    def speedup(self) -> float:
        """sequential / overlapped."""
        return self.sequential_s / self.overlapped_s if self.overlapped_s else 1.0

    @property
    def limiter(self) -> str:
        """What bounds the overlapped product: "link" or "math"."""
        return "link" if self.comm_s > self.gemm_s else "math"


def predict(kind: str, m: int, n: int, k: int, world: int, gemm_seconds: float, link: Link, elem: int = 2,
            gemm_slowdown: float = 1.0, chunks: int = 1, tail_s: float = 0.0,
            block_s: float | None = None, step_bps: float | None = None) -> Prediction:
    """The times of a tensor-parallel product of global shape M x N x K over `world` ranks.

    kind "all_gather": column-parallel, A (M x K) gathered from row blocks, each rank multiplying by its
    K x N / W slice of B; `gemm_seconds` is that rank's M x N/W x K product alone. kind "reduce_scatter":
    row-parallel, each rank multiplying its M x K / W slice of A by its K / W x N slice of B and the sums
    scattered by rows; `gemm_seconds` is that M x N x K/W product. `elem`: bytes per element moved (A's for
    the all-gather, C's for the reduce-scatter). `chunks`: pieces per block of the ring. `tail_s`: work after
    the last block that nothing overlaps (the copy reduce-scatter's sum of the slots), added to the overlapped
    time. `block_s`: the time of one block's GEMM where each block is a launch of its own (the copy
    reduce-scatter's M / W rows: a smaller product, whose last wave of tiles fills the GPU less than 1 / W of
    the whole does), in place of gemm_seconds / W. `step_bps`: the rate of one block's transfer in the pipeline
    (the copy forms' push), in place of the collective's time over its W - 1 steps; the sequential time keeps
    the collective's."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if chunks < 1:
        raise ValueError(f"chunks must be >= 1, got {chunks}")
    if tail_s < 0:
        raise ValueError(f"tail_s must be >= 0, got {tail_s}")
    if block_s is not None and block_s < 0:
        raise ValueError(f"block_s must be >= 0, got {block_s}")
    if step_bps is not None and not step_bps > 0:
        raise ValueError(f"step_bps must be > 0, got {step_bps}")
    if min(m, n, k) < 0 or world < 1:
        raise ValueError(f"need M, N, K >= 0 and a world size >= 1, got {m} x {n} x {k} over {world}")
    nbytes = float(m) * (k if kind == "all_gather" else n) * elem
    comm = collective_seconds(kind, nbytes, world, link)
    gemm = float(gemm_seconds)
    seq = comm + gemm
    if world == 1:
        return Prediction(kind, world, comm, gemm, seq, seq, seq)
    g = (gemm / world if block_s is None else block_s) * gemm_slowdown / chunks
    c = comm / ((world - 1) * chunks) if step_bps is None else nbytes / world / step_bps / chunks
    overlapped = max(world * chunks * g, (world - 1) * chunks * c + g) + tail_s
    return Prediction(kind, world, comm, gemm, seq, max(comm, gemm), overlapped)


def reference_busbw(world: int) -> float:
    """The reference host's all-gather bus bandwidth for `world` GPUs (the nearest measured count)."""
    if world < 2:
        return REFERENCE_BUSBW[2]
    known = sorted(REFERENCE_BUSBW)
    return REFERENCE_BUSBW[min(known, key=lambda w: (abs(w - world), -w))]


def slots_sum_seconds(m: int, n: int, world: int, elem: int, bps: float = SUM_BPS) -> float:
    """The copy reduce-scatter's tail: the W slots of a rank's M / W rows read, their sum written."""
    if world < 2:
        return 0.0
    return (world + 1) * (m // world) * n * elem / bps


def choose(kind: str, m: int, n: int, k: int, world: int, dtype: str = "bfloat16", *, busbw: float | None = None,
           rate: float | None = None, per_peer_s: float | None = None,
           push_bps: float | None = None) -> tuple[str, Prediction, float]:
    """("copy" or "sequential", the copy form's prediction, its per-peer cost over all peers): the copy engines'
    overlap where the time it saves exceeds that cost (PER_PEER_COST_S a peer unless `per_peer_s` is given),
    else the collective and the GEMM one after the other. The copy form's blocks move at the push rate
    (REFERENCE_PUSH_BPS unless `push_bps`), the sequential form's collective at NCCL's bus bandwidth; the
    rates default to the reference host's."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if dtype not in REFERENCE_RATE:
        raise ValueError(f"no reference GEMM rate for {dtype!r} (known: {', '.join(REFERENCE_RATE)})")
    fmt = number_format(dtype)
    elem = ITEMSIZE[dtype] if kind == "all_gather" else ITEMSIZE[fmt.out_dtype]
    bw = busbw if busbw is not None else reference_busbw(world)
    cols, depth = (n // max(world, 1), k) if kind == "all_gather" else (n, k // max(world, 1))
    gemm = 2.0 * m * cols * depth / (rate if rate is not None else REFERENCE_RATE[dtype])
    tail = slots_sum_seconds(m, n, world, elem) if kind == "reduce_scatter" else 0.0
    p = predict(kind, m, n, k, world, gemm, Link(bw, bw), elem, tail_s=tail,
                step_bps=push_bps if push_bps is not None else REFERENCE_PUSH_BPS)
    cost = (world - 1) * (per_peer_s if per_peer_s is not None else PER_PEER_COST_S[kind])
    pays = world > 1 and p.sequential_s - p.overlapped_s > cost
    return ("copy" if pays else "sequential"), p, cost
