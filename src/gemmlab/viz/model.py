"""The instrumented execution model: every thread of every block, step by step, with what it touches.

A rung's program (in `viz/rungs.py`) is a Python generator written line for line after its CUDA source.
It runs once per simulated thread with a `Thread` handle through which it does everything that matters
for traffic: read A or B from global memory, write or read shared memory, multiply-add into an
accumulator, store C. Each of these is recorded as an event, one per element. A 16-byte access (a float4
load or store, LDS.128, STS.128) is one instruction that moves four elements: it records four events of
width 4, so element counts stay the spec's and instruction counts stay honest. The program yields a
`Mark` at the end of each frame (one step of the picture); a Mark with `sync=True` stands for
`__syncthreads()`.

The engine runs all blocks and all their threads in lockstep, frame by frame (on a GPU, blocks are
scheduled independently and in no fixed order; showing them side by side is a teaching simplification
that changes no count). It also checks what a barrier is for: between two barriers of a block, no
thread may read a shared cell another thread wrote, or write one another thread read or wrote; no thread
may read a shared cell nobody wrote; every thread of a block must reach each barrier. A program that
breaks these rules raises `ModelError` instead of producing a picture.

Values are real: A and B hold small integers, so every sum is exact and the model's C must equal A @ B.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from ..kernels.spec import KernelSpec, Launch, Traffic

# Event kinds. Counting them is how the model's traffic is compared with the spec's analytic model.
OWN, A_LOAD, B_LOAD, AS_WRITE, BS_WRITE, AS_READ, BS_READ, FMA, C_STORE = range(9)
KIND_NAMES = ("owns", "A load", "B load", "As write", "Bs write", "As read", "Bs read", "fma", "C store")
GLOBAL_LOADS = (A_LOAD, B_LOAD)
SMEM_WRITES = (AS_WRITE, BS_WRITE)
SMEM_READS = (AS_READ, BS_READ)

# The events of one simulation, beyond which the model refuses (about 1 s and 60 MB of Python tuples).
MAX_EVENTS = 1_500_000

# width: the elements the access instruction moves that the event is part of (4 for a 16-byte access, else 1).
EVENT_FIELDS = ("frame", "block", "thread", "kind", "r", "c", "aux", "value", "width")
VEC = 4   # elements of a 16-byte access


class ModelError(RuntimeError):
    """The modelled program broke a rule of the GPU (a race, a divergent barrier) or is too large."""


class NoModelError(LookupError):
    """The registry has a rung that the visualiser has no execution model for (yet)."""


@dataclass(frozen=True)
class Mark:
    """What a thread yields at the end of a frame. All live threads of the grid must yield equal Marks."""

    phase: str          # "launch", "load", "compute" or "store"
    label: str          # one line for a person: what every thread does in this frame
    step: int = -1      # the K step (tile) this frame belongs to, -1 outside the main loop
    k_done: int = 0     # how many of the K terms every result holds at the end of this frame
    sync: bool = False  # the frame ends with __syncthreads()
    k: int = -1         # in a compute frame, the term of the inner product it adds (K or more: a padded term)


class Thread:
    """One simulated CUDA thread: its indices, and the operations the engine records."""

    __slots__ = ("block_idx", "thread_idx", "tid", "block", "gtid", "_sim")

    def __init__(self, sim: "_Simulation", block: int, block_idx: tuple[int, int], tid: int, thread_idx: tuple[int, int]):
        self._sim = sim
        self.block = block                # linear block number: blockIdx.x + blockIdx.y * gridDim.x
        self.block_idx = block_idx        # (blockIdx.x, blockIdx.y)
        self.tid = tid                    # linear thread number in the block: threadIdx.x + threadIdx.y * blockDim.x
        self.thread_idx = thread_idx      # (threadIdx.x, threadIdx.y)
        self.gtid = block * sim.threads_per_block + tid

    # ------------------------------------------------------------------ what a thread does
    def owns(self, r: int, c: int) -> None:
        """Declare an element of C this thread computes (it may lie outside C, in the padding)."""
        self._sim.record(self, OWN, r, c, 0, 0.0)

    def load_a(self, r: int, c: int) -> float:
        return self._load(A_LOAD, self._sim.a, r, c)

    def load_b(self, r: int, c: int) -> float:
        return self._load(B_LOAD, self._sim.b, r, c)

    def load_a4(self, r: int, c: int) -> list[float]:
        """One 16-byte load: A[r, c .. c+3]."""
        self._sim.check_aligned(self, "A", r * self._sim.k + c, f"A[{r}, {c}..{c + VEC - 1}]")
        return [self._load(A_LOAD, self._sim.a, r, c + j, VEC) for j in range(VEC)]

    def load_b4(self, r: int, c: int) -> list[float]:
        """One 16-byte load: B[r, c .. c+3]."""
        self._sim.check_aligned(self, "B", r * self._sim.n + c, f"B[{r}, {c}..{c + VEC - 1}]")
        return [self._load(B_LOAD, self._sim.b, r, c + j, VEC) for j in range(VEC)]

    def smem_write(self, name: str, r: int, c: int, value: float, padded: bool = False) -> None:
        self._sim.smem_write(self, name, r, c, value, padded)

    def smem_read(self, name: str, r: int, c: int) -> float:
        return self._sim.smem_read(self, name, r, c)

    def smem_write4(self, name: str, r: int, c: int, values: list[float], padded: list[bool]) -> None:
        """One 16-byte store: name[r][c .. c+3] = values (padded[j]: values[j] is a zero for padding)."""
        self._sim.check_aligned(self, name, self._smem_offset(name, r, c), f"{name}[{r}][{c}..{c + VEC - 1}]")
        for j in range(VEC):
            self._sim.smem_write(self, name, r, c + j, values[j], padded[j], VEC)

    def smem_read4(self, name: str, r: int, c: int) -> list[float]:
        """One 16-byte load (LDS.128): name[r][c .. c+3]."""
        self._sim.check_aligned(self, name, self._smem_offset(name, r, c), f"{name}[{r}][{c}..{c + VEC - 1}]")
        return [self._sim.smem_read(self, name, r, c + j, VEC) for j in range(VEC)]

    def _smem_offset(self, name: str, r: int, c: int) -> int:
        """The word of name[r][c] from the array's start: the declared columns are its row stride."""
        shape = self._sim.smem_shapes.get(name)
        if shape is None:
            raise ModelError(f"no shared array {name!r} is declared")
        return r * shape[1] + c

    def fma(self, r: int, c: int, k: int, acc: float, a: float, b: float) -> float:
        """acc + a*b for the result C[r, c], term k (k past K is a padded term: a or b is 0)."""
        acc = acc + a * b
        self._sim.record(self, FMA, r, c, k, acc)
        return acc

    def store_c(self, r: int, c: int, acc: float) -> None:
        """C[r, c] = alpha*acc + beta*C[r, c] with alpha = 1, beta = 0: the old C is never read."""
        self._store(r, c, acc, 1)

    def store_c4(self, r: int, c: int, accs: list[float]) -> None:
        """One 16-byte store: C[r, c .. c+3]."""
        self._sim.check_aligned(self, "C", r * self._sim.n + c, f"C[{r}, {c}..{c + VEC - 1}]")
        for j in range(VEC):
            self._store(r, c + j, accs[j], VEC)

    def _store(self, r: int, c: int, acc: float, width: int) -> None:
        sim = self._sim
        if not (0 <= r < sim.m and 0 <= c < sim.n):
            raise ModelError(f"thread {self.gtid} stores C[{r}, {c}] outside the {sim.m} x {sim.n} matrix")
        if not np.isnan(sim.c[r, c]):
            raise ModelError(f"C[{r}, {c}] is stored twice (again by thread {self.gtid})")
        sim.c[r, c] = acc
        sim.record(self, C_STORE, r, c, 0, acc, width)

    def _load(self, kind: int, mat: np.ndarray, r: int, c: int, width: int = 1) -> float:
        if not (0 <= r < mat.shape[0] and 0 <= c < mat.shape[1]):
            name = "A" if kind == A_LOAD else "B"
            raise ModelError(f"thread {self.gtid} reads {name}[{r}, {c}] outside the "
                             f"{mat.shape[0]} x {mat.shape[1]} matrix (a missing bounds check)")
        v = float(mat[r, c])
        self._sim.record(self, kind, r, c, 0, v, width)
        return v


Program = Callable[[Thread, int, int, int, dict], Iterator[Mark]]


class _Shared:
    """One block's shared array: values, and who wrote and read each cell since the last barrier."""

    __slots__ = ("name", "values", "writer", "reader")

    def __init__(self, name: str, shape: tuple[int, int]):
        self.name = name
        self.values = np.full(shape, np.nan)
        self.writer = np.full(shape, -1, dtype=np.int64)   # thread that wrote the cell since the barrier
        self.reader = np.full(shape, -1, dtype=np.int64)   # thread that read it, -2 if several did

    def barrier(self) -> None:
        self.writer.fill(-1)
        self.reader.fill(-1)


class _Simulation:
    def __init__(self, spec: KernelSpec, params: dict[str, int], a: np.ndarray, b: np.ndarray,
                 smem: dict[str, tuple[int, int]], max_events: int):
        self.m, self.k = a.shape
        self.n = b.shape[1]
        self.a, self.b = a, b
        self.c = np.full((self.m, self.n), np.nan)
        self.launch: Launch = spec.launch(self.m, self.n, self.k, params)
        if self.launch.grid[2] != 1 or self.launch.block[2] != 1:
            raise ModelError("the model handles 2-D grids and blocks only")
        self.threads_per_block = self.launch.threads_per_block
        self.smem_shapes = smem
        self.max_events = max_events
        self.events: list[tuple] = []
        self.frame = 0
        self.shared: list[dict[str, _Shared]] = []

    def record(self, t: Thread, kind: int, r: int, c: int, aux: int, value: float, width: int = 1) -> None:
        self.events.append((self.frame, t.block, t.gtid, kind, r, c, aux, value, width))

    def check_aligned(self, t: Thread, name: str, offset: int, what: str) -> None:
        """A 16-byte access needs a 16-byte aligned address (arrays start aligned; row-major, ld = columns)."""
        if offset % VEC:
            raise ModelError(f"thread {t.gtid} accesses {what} as one 16-byte access, but its address is not a "
                             f"multiple of 16 bytes ({name}'s rows are not a multiple of 4 floats apart, or the "
                             f"column is not a multiple of 4): a misaligned vector access faults on the GPU")

    def smem_write(self, t: Thread, name: str, r: int, c: int, value: float, padded: bool, width: int = 1) -> None:
        s = self._cell(t, name, r, c)
        w, rd = int(s.writer[r, c]), int(s.reader[r, c])
        if w not in (-1, t.tid):
            raise ModelError(f"race in block {t.block}: threads {w} and {t.tid} both write {name}[{r}][{c}] "
                             f"between two barriers")
        if rd not in (-1, t.tid):
            raise ModelError(f"race in block {t.block}: thread {t.tid} overwrites {name}[{r}][{c}] that "
                             f"another thread read since the last barrier (a missing __syncthreads)")
        s.values[r, c] = value
        s.writer[r, c] = t.tid
        kind = AS_WRITE if name == "As" else BS_WRITE
        self.record(t, kind, r, c, int(padded), value, width)

    def smem_read(self, t: Thread, name: str, r: int, c: int, width: int = 1) -> float:
        s = self._cell(t, name, r, c)
        v = float(s.values[r, c])
        if np.isnan(v):
            raise ModelError(f"race or missing load in block {t.block}: thread {t.tid} reads {name}[{r}][{c}] "
                             f"before any thread wrote it (threads of a frame run one after another here, so a "
                             f"missing __syncthreads shows as a read of nothing)")
        w = int(s.writer[r, c])
        if w not in (-1, t.tid):
            raise ModelError(f"race in block {t.block}: thread {t.tid} reads {name}[{r}][{c}] that thread {w} "
                             f"wrote since the last barrier (a missing __syncthreads)")
        rd = int(s.reader[r, c])
        s.reader[r, c] = t.tid if rd in (-1, t.tid) else -2
        kind = AS_READ if name == "As" else BS_READ
        self.record(t, kind, r, c, 0, v, width)
        return v

    def _cell(self, t: Thread, name: str, r: int, c: int) -> _Shared:
        try:
            s = self.shared[t.block][name]
        except KeyError:
            raise ModelError(f"no shared array {name!r} is declared") from None
        if not (0 <= r < s.values.shape[0] and 0 <= c < s.values.shape[1]):
            raise ModelError(f"thread {t.tid} of block {t.block} indexes {name}[{r}][{c}] outside "
                             f"its {s.values.shape[0]} x {s.values.shape[1]} extent")
        return s

    def run(self, program: Program, params: dict[str, int]) -> list[Mark]:
        gx, gy, _ = self.launch.grid
        bx_dim, by_dim, _ = self.launch.block
        running: list[list[tuple[Thread, Iterator[Mark]]]] = []
        for by in range(gy):
            for bx in range(gx):
                block = bx + by * gx
                self.shared.append({nm: _Shared(nm, shape) for nm, shape in self.smem_shapes.items()})
                threads = []
                for ty in range(by_dim):
                    for tx in range(bx_dim):
                        t = Thread(self, block, (bx, by), tx + ty * bx_dim, (tx, ty))
                        threads.append((t, program(t, self.m, self.n, self.k, params)))
                running.append(threads)
        frames: list[Mark] = []
        while any(running):
            mark: Mark | None = None
            events_before = len(self.events)
            for block, threads in enumerate(running):
                alive, marks = [], []
                for t, gen in threads:
                    try:
                        marks.append(next(gen))
                    except StopIteration:
                        continue
                    alive.append((t, gen))
                if not marks:
                    running[block] = []
                    continue
                first = marks[0]
                if any(mk != first for mk in marks):
                    odd = next(mk for mk in marks if mk != first)
                    raise ModelError(f"threads of block {block} disagree at frame {self.frame}: "
                                     f"{first.label!r} against {odd.label!r}")
                if first.sync:
                    if len(alive) != self.threads_per_block:   # counting threads that returned in earlier frames
                        raise ModelError(f"barrier divergence in block {block}: {self.threads_per_block - len(alive)} "
                                         f"threads returned before __syncthreads() at frame {self.frame} (every "
                                         f"thread of a block must reach each barrier)")
                    for s in self.shared[block].values():
                        s.barrier()
                if mark is None:
                    mark = first
                elif first != mark:
                    raise ModelError(f"blocks disagree at frame {self.frame}: {mark.label!r} against {first.label!r}")
                running[block] = alive
            if mark is None:   # every thread returned; what they did after their last Mark ends one more frame
                if len(self.events) == events_before:
                    break
                mark = Mark("store", "the threads finish", k_done=self.k)
            frames.append(mark)
            self.frame += 1
            if len(self.events) > self.max_events:
                raise ModelError(f"more than {self.max_events:,} events: too large to visualise; "
                                 f"take a smaller size or smaller tiles")
        return frames


@dataclass
class Trace:
    """Everything the model recorded for one rung, problem size and parameter set."""

    spec: KernelSpec
    params: dict[str, int]
    m: int
    n: int
    k: int
    launch: Launch
    frames: list[Mark]
    events: dict[str, np.ndarray]       # columns named by EVENT_FIELDS, in order of execution
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray                       # what the threads stored; NaN where nothing was stored
    smem_shapes: dict[str, tuple[int, int]]

    # ------------------------------------------------------------------ geometry
    @property
    def blocks(self) -> int:
        return self.launch.blocks

    @property
    def threads_per_block(self) -> int:
        return self.launch.threads_per_block

    @property
    def threads(self) -> int:
        return self.blocks * self.threads_per_block

    def block_of(self, gtid: int) -> int:
        return gtid // self.threads_per_block

    def thread_name(self, gtid: int) -> str:
        blk, tid = divmod(gtid, self.threads_per_block)
        gx = self.launch.grid[0]
        bdx = self.launch.block[0]
        bidx = f"({blk % gx}, {blk // gx})"
        tidx = f"({tid % bdx}, {tid // bdx})" if self.launch.block[1] > 1 else f"{tid}"
        return f"thread {gtid} = block {bidx} thread {tidx}"

    def padded_shape(self) -> tuple[int, int, int]:
        """(M, N, K) extended to what the launch covers: tiles that overhang the matrices are drawn too."""
        e = self.events
        own, fma = e["kind"] == OWN, e["kind"] == FMA
        mp = max(self.m, int(e["r"][own].max(initial=-1)) + 1)
        np_ = max(self.n, int(e["c"][own].max(initial=-1)) + 1)
        kp = max(self.k, int(e["aux"][fma].max(initial=-1)) + 1)  # padded terms of the last K step
        return mp, np_, kp

    def block_tile(self) -> tuple[int, int]:
        """The rows x columns of C that block 0 owns (the block tile drawn as thick lines)."""
        e = self.events
        sel = (e["kind"] == OWN) & (e["block"] == 0)
        if not sel.any():
            return (1, 1)
        return int(e["r"][sel].max()) + 1, int(e["c"][sel].max()) + 1

    def k_tile(self) -> int:
        """The depth of one K step: the terms the frames of K step 0 add (1 for rungs that stream from
        global memory, whose every term is a step)."""
        return max(1, len({mk.k for mk in self.frames if mk.phase == "compute" and mk.step == 0}))

    # ------------------------------------------------------------------ counts
    def select(self, kinds=None, frame: int | None = None, block: int | None = None,
               thread: int | None = None, upto: int | None = None) -> np.ndarray:
        """Boolean mask over events: any of `kinds`, in `frame` (or frames <= `upto`), of a block or thread."""
        e = self.events
        mask = np.ones(len(e["kind"]), dtype=bool)
        if kinds is not None:
            mask &= np.isin(e["kind"], np.atleast_1d(kinds))
        if frame is not None:
            mask &= e["frame"] == frame
        if upto is not None:
            mask &= e["frame"] <= upto
        if block is not None:
            mask &= e["block"] == block
        if thread is not None:
            mask &= e["thread"] == thread
        return mask

    def count(self, kinds, **where) -> int:
        """Events, that is elements, of `kinds`."""
        return int(self.select(kinds, **where).sum())

    def instructions(self, kinds, **where) -> int:
        """Access instructions of `kinds`: a 16-byte access moves 4 elements in one instruction."""
        sel = self.select(kinds, **where)
        return int((VEC // self.events["width"][sel]).sum()) // VEC

    def per_frame(self, kinds, block: int | None = None, thread: int | None = None) -> np.ndarray:
        """Events of `kinds` in each frame (for one block or thread, or all)."""
        sel = self.select(kinds, block=block, thread=thread)
        return np.bincount(self.events["frame"][sel], minlength=len(self.frames))

    def traffic(self) -> Traffic:
        """The model's counts in the spec's terms (element counts; beta = 0, so C is never loaded)."""
        return Traffic(
            a_loads=self.count(A_LOAD),
            b_loads=self.count(B_LOAD),
            c_loads=0,
            c_stores=self.count(C_STORE),
            smem_loads=self.count(SMEM_READS),
        )

    def loads_per_thread(self) -> float:
        """Global loads of A and B per launched thread, as `KernelSpec.loads_per_thread` defines it."""
        return self.count(GLOBAL_LOADS) / self.threads if self.threads else 0.0

    def cells(self, kinds, frame: int | None = None, thread: int | None = None, block: int | None = None,
              upto: int | None = None) -> set[tuple[int, int]]:
        sel = self.select(kinds, frame=frame, block=block, thread=thread, upto=upto)
        return set(zip(self.events["r"][sel].tolist(), self.events["c"][sel].tolist()))

    def owned(self, gtid: int) -> list[tuple[int, int]]:
        """The elements of C thread `gtid` computes, in the order it declares them."""
        sel = self.select(OWN, thread=gtid)
        return list(zip(self.events["r"][sel].tolist(), self.events["c"][sel].tolist()))

    def agreement(self) -> list[tuple[str, float, float]]:
        """(quantity, model, spec) for every count the spec's analytic model predicts."""
        t, s = self.traffic(), self.spec.traffic(self.m, self.n, self.k, self.params)
        return [
            ("A loads", t.a_loads, s.a_loads),
            ("B loads", t.b_loads, s.b_loads),
            ("C stores", t.c_stores, s.c_stores),
            ("shared loads", t.smem_loads, s.smem_loads),
            ("loads per thread", self.loads_per_thread(), self.spec.loads_per_thread(self.m, self.n, self.k, self.params)),
        ]

    def disagreements(self) -> list[str]:
        return [f"{q}: model {a:g}, spec {b:g}" for q, a, b in self.agreement() if abs(a - b) > 1e-9 * max(1.0, abs(b))]

    def warp_requests(self, frame: int, gtid: int) -> dict[str, tuple[int, int]]:
        """Per operand, (load instructions, distinct 32-byte sectors) of the warp holding `gtid` in `frame`.

        A warp's i-th load of A in a frame is one instruction (a 16-byte load counts once, with its four
        elements); its sectors are the distinct 32-byte pieces of memory its threads' addresses fall in
        (row-major, lda = K, ldb = N, matrices 32-byte aligned).
        """
        blk, tid = divmod(gtid, self.threads_per_block)
        first = blk * self.threads_per_block + (tid // 32) * 32
        e = self.events
        out = {}
        for name, kind, ld in (("A", A_LOAD, self.k), ("B", B_LOAD, self.n)):
            sel = (e["frame"] == frame) & (e["kind"] == kind) & (e["thread"] >= first) & (e["thread"] < first + 32)
            th, r, c = e["thread"][sel], e["r"][sel], e["c"][sel]
            if not len(th):
                out[name] = (0, 0)
                continue
            order = instruction_order(th, e["width"][sel])
            sector = (r * ld + c) // 8
            sectors = len(set(zip(order.tolist(), sector.tolist())))
            out[name] = (int(order.max()) + 1, sectors)
        return out


def instruction_order(threads: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """For events of one kind in execution order: the i-th access instruction of its thread each belongs to
    (the four events of a 16-byte access are consecutive and share one number)."""
    order = np.zeros(len(threads), dtype=np.int64)
    seen: dict[int, int] = {}     # per thread: elements so far, in quarters of a 16-byte access
    for idx, (t, w) in enumerate(zip(threads.tolist(), widths.tolist())):
        q = seen.get(t, 0)
        order[idx] = q // VEC
        seen[t] = q + VEC // w
    return order


def simulate(spec: KernelSpec, program: Program, smem: dict[str, tuple[int, int]], m: int, n: int, k: int,
             params: dict[str, int], seed: int = 0, max_events: int = MAX_EVENTS) -> Trace:
    """Run `program` for every thread of `spec`'s launch on random small-integer A (m x k) and B (k x n)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 5, size=(m, k)).astype(np.float64)
    b = rng.integers(1, 5, size=(k, n)).astype(np.float64)
    sim = _Simulation(spec, params, a, b, smem, max_events)
    frames = sim.run(program, params)
    if sim.events:
        cols = list(zip(*sim.events))
    else:
        cols = [()] * len(EVENT_FIELDS)
    events = {}
    for name, col in zip(EVENT_FIELDS, cols):
        events[name] = np.asarray(col, dtype=np.float64 if name == "value" else np.int64)
    return Trace(spec, dict(params), m, n, k, sim.launch, frames, events, a, b, sim.c, dict(smem))
