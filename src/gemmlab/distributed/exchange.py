"""A push exchange between the GPUs of a group, with no SM in it: each rank's copy engine writes a block into
another rank's buffer and then raises a flag there. What ops.py's products run on NCCL groups of CUDA tensors
(transport "copy").

The buffers and flags are torch symmetric memory (each rank's allocation mapped into every other GPU's address
space; NVLink multicast is not used: TORCH_SYMM_MEM_DISABLE_MULTICAST=1 stays set). Per rank r of W, and per
exchange (a group, a kind, a block shape and dtype):
- `buffer`: W x rows x cols; slot j is written by rank j (an all-gather's block j; a reduce-scatter's partial
  sum of r's rows from rank j). r's own slot is its own to write (its shard, or its own rows' partial);
- `flags`: (P + 1) W int32, P the pieces a slot arrives in (`pieces`; 1 for the reduce-scatter).
  flags[j P + q] = e once piece q of slot j of call e has landed here (`arrived`); flags[W P + j] = e once
  rank j has read its own `buffer` for call e to the end, so that call e + 1 may write into it (`done`).
Every write of a flag is a stream memory operation (cuStreamWriteValue32, with a memory barrier before it) and
every wait on one is cuStreamWaitValue32: neither runs on an SM, so a GEMM that holds every SM while it waits
can never keep the copies it waits for from running. Calls are counted per exchange, the same on every rank
(the products are called in the same order everywhere).

All-gather + GEMM, call e:
1. on the caller's stream: an event (the shard is written), the shard into its own buffer[r], its pieces'
   flags raised, the GEMM over all of `buffer` walking from block r on (r, r + 1, ...: the order blocks arrive
   in), then every peer's done flag of r (r has read its rows of call e);
2. the exchange stream waits for the event only (never for the GEMM, which waits for the other ranks' pushes),
   then for p = r - 1, r - 2, ... (each rank's first push goes to the rank before it, so every rank receives
   the block after its own first): wait until p is done with call e - 1, then copy the shard into p's
   buffer[r] (one driver copy; with P pieces, one a piece), raising p's flag of each piece as it lands. The
   GEMM waits per piece and walks groups of tiles no taller than one, so that with pieces it starts on a
   block's first rows while the rest is on its way (whole blocks are the default: `pieces`);
3. the caller's stream waits for the exchange stream (the shard is not read after the call returns).
The GEMM is queued before the pushes: it starts on the own block while the host still queues them.

GEMM + reduce-scatter, call e (each rank holds a K-slice; the output is r's rows of the sum):
1. on the caller's stream, for j = r + 1, r + 2, ... (the order in which rank j's partials come): the partial
   product of j's rows into a local staging slot, and an event after it; the exchange stream waits for that
   event and until j is done with call e - 1, copies the slot into j's buffer[r] and raises j's flag of slot r;
2. on the caller's stream, the partial of r's own rows into its own slot (under the pushes still travelling);
   then it waits for the flag of every peer's slot, sums the W slots into a new tensor (two slots: one
   elementwise add; the epilogue, bias and activation, applied to that sum by torch), and raises every peer's
   done flag of r;
3. the caller's stream waits for the exchange stream (the staging slots are not rewritten before they left).
No GEMM of it waits inside its launch: each is an ordinary one of M / W rows, whole products of all N columns.
(A first form summed the peers' partials and made the own rows' product last, with that sum as its C and the
epilogue fused: the own product then waited for the last push, 0.76-0.85 x sequential on 2 GPUs, 0.61-1.06
on 4.)
"""

from __future__ import annotations

import threading
import warnings

_exchanges: dict[tuple, "Exchange"] = {}
_lock = threading.Lock()


_groups: dict[int, tuple] = {}  # id(group) -> (group, why the exchange cannot run in it, or None)


def available(torch, dist, tensor, group) -> str | None:
    """None where the push exchange can run for `tensor` in `group`, else why not (one line); the group's part
    is asked once per group."""
    if not tensor.is_cuda:
        return "the tensors are not on a GPU"
    pg = group if group is not None else dist.group.WORLD  # (a new default group after a re-initialisation)
    hit = _groups.get(id(pg))
    if hit is not None and hit[0] is pg:
        return hit[1]
    why = _group_problem(dist, group)
    _groups[id(pg)] = (pg, why)
    return why


def _group_problem(dist, group) -> str | None:
    try:
        backend = dist.get_backend(group)
    except Exception as exc:  # noqa: BLE001 (no process group: the caller's error says so)
        return f"no process group ({type(exc).__name__})"
    if str(backend).lower() != "nccl":
        return f"the group's backend is {backend}, not nccl"
    try:
        import torch.distributed._symmetric_memory  # noqa: F401
    except ImportError:
        return "this torch has no symmetric memory"
    return None


def pieces(rows: int) -> int:
    """The most pieces (4, 2 or 1) a block of `rows` rows can be pushed in with each piece a whole multiple of
    256 rows (whole cluster tiles of the GEMM's walk: 128-row tiles in pairs); what the harness times beside
    whole blocks (`all_gather_matmul(pieces=)`)."""
    for p in (4, 2):
        if rows % (p * 256) == 0:
            return p
    return 1


class Exchange:
    """The buffer, flags, stream and call count of one (group, kind, rows x cols, dtype, device, pieces)."""

    def __init__(self, torch, dist, group, rank: int, world: int, rows: int, cols: int, dtype, device,
                 kind: str = "all_gather", pieces: int = 1):
        import torch.distributed._symmetric_memory as symm

        pg = group if group is not None else dist.group.WORLD
        name = pg.group_name
        enable = getattr(symm, "enable_symm_mem_for_group", None)
        if enable is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                enable(name)
        self.torch, self.rank, self.world, self.rows, self.cols, self.group = torch, rank, world, rows, cols, group
        self.pg = pg  # the process group itself (the default one where `group` is None)
        self.kind, self.pieces = kind, pieces
        if pieces < 1 or rows % pieces:
            raise ValueError(f"a block of {rows} rows cannot go in {pieces} pieces")
        n = world * rows * cols
        self._buf = symm.empty(n, dtype=dtype, device=device)
        self._buf_handle = symm.rendezvous(self._buf, group=name)
        self.buffer = self._buf.view(world, rows, cols)
        self.peers = [None if p == rank else self._buf_handle.get_buffer(p, (world, rows, cols), dtype)
                      for p in range(world)]
        nflags = (pieces + 1) * world
        self._flags = symm.empty(nflags, dtype=torch.int32, device=device)
        self._flags.zero_()
        self._flag_handle = symm.rendezvous(self._flags, group=name)
        self._peer_flags = [self._flag_handle.get_buffer(p, (nflags,), torch.int32).data_ptr()
                            for p in range(world)]
        self.stream = torch.cuda.Stream(device=device)
        self.ready = torch.cuda.Event()
        self.epoch = 0
        # the views a call uses, made once: its own slot, all rows as one matrix, its slot in each peer's buffer
        self.own = self.buffer[rank]
        self.rows_view = self.buffer.view(world * rows, cols)
        self.push_order = [(rank - i) % world for i in range(1, world)]
        self.others = [p for p in range(world) if p != rank]
        self.peer_slots = {p: self.peers[p][rank] for p in self.others}
        # the pushes' addresses and size (each push is one copy by the driver: no framework dispatch per call)
        self.peer_slot_ptr = {p: slot.data_ptr() for p, slot in self.peer_slots.items()}
        self.block_bytes = rows * cols * self.own.element_size()
        self.piece_bytes = self.block_bytes // pieces
        if kind == "reduce_scatter":  # local partials before they leave, an event after each one's product
            self.own.zero_()
            self.staging = torch.empty((world, rows, cols), dtype=dtype, device=device)
            self.staging_ptr = [self.staging[j].data_ptr() for j in range(world)]
            self.made = [torch.cuda.Event() for _ in range(world)]
            self.send_order = [(rank + i) % world for i in range(1, world)]
        torch.cuda.synchronize(device)
        dist.barrier(group=group)  # every rank's flags are zero before any rank writes one

    def flag(self, rank: int, index: int) -> int:
        """The device address of flags[index] of `rank` (this rank's own, or a peer's as mapped here)."""
        return self._peer_flags[rank] + 4 * index

    def arrived(self, owner: int, slot: int, piece: int = 0) -> int:
        """The address of `owner`'s flag that piece `piece` of slot `slot` has landed (the flags of a slot's
        pieces, and of the slots one after another, are consecutive)."""
        return self.flag(owner, slot * self.pieces + piece)

    def done(self, owner: int, j: int) -> int:
        """The address of `owner`'s flag that rank j has read its own buffer of a call to the end."""
        return self.flag(owner, self.world * self.pieces + j)


def exchange_for(torch, dist, group, rank: int, world: int, rows: int, cols: int, dtype, device,
                 kind: str = "all_gather", pieces: int = 1) -> Exchange:
    """The exchange of this group, kind, block shape and pieces, made (collectively: every rank must ask for it
    in the same call) the first time."""
    pg = group if group is not None else dist.group.WORLD
    key = (id(pg), kind, rows, cols, dtype, device, pieces)
    ex = _exchanges.get(key)
    if ex is not None and ex.pg is pg:
        return ex
    with _lock:
        ex = _exchanges.get(key)
        if ex is None or ex.pg is not pg:
            ex = _exchanges[key] = Exchange(torch, dist, group, rank, world, rows, cols, dtype, device, kind,
                                            pieces)
        return ex


def forget(torch=None, dist=None) -> None:
    """Drop every exchange and what is known of the groups. An exchange holds its buffer for the next call of its
    shape (one per group, kind and block shape), so a program whose shapes keep changing calls this now and then
    to free them: on every rank of every group, at the same point of the program (collective where torch and
    dist are given: the GPU's queued work is waited for and the ranks meet first, so no push is still on its
    way into a buffer that is freed)."""
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    if dist is not None and dist.is_initialized():
        dist.barrier()
    with _lock:
        _exchanges.clear()
        _groups.clear()
