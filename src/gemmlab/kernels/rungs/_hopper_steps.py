"""Shared rules of the Hopper steps (rungs 12-14): the ladder from TMA + wgmma to the production rung 15.

Not a rung itself (no SPEC): the registry skips it. Each step adds one idea to the one before; what they
share is written once here: the tile and ring rules, the tensor maps, the traffic model. The element types
and B's layouts follow rung 15 (fp16 / bf16 in; B_LAYOUT 1 a row-major B read N-major, 2 B^T read K-major in
place); there is no tf32, no batch and no split in the steps (rung 15 adds them).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...formats import type_code_problems
from ..spec import KernelSpec, Launch, Param, Staging, TensorMapBox, Traffic, cdiv
from . import mma_sync, wgmma

BK = wgmma.BK                  # one 128-byte swizzle row of 16-bit elements per k step
EPI_PITCH = wgmma.EPI_PITCH    # fp32 per staged row of the epilogue from registers (wgmma_store.cuh)
SMEM_LIMIT = wgmma.SMEM_LIMIT
ALIGN_SLACK = wgmma.ALIGN_SLACK
B_ROW_MAJOR, B_KMAJOR = wgmma.B_ROW_MAJOR, wgmma.B_KMAJOR


@dataclass(frozen=True)
class Step:
    """What distinguishes one step: its warpgroups (1: one that copies and multiplies; 3: a producer and two
    consumers), whether the grid is persistent (and has clusters), and whether the epilogue's staging rows
    have a region of their own (consumers that may stage while the other still reads the ring) or reuse the
    ring (one warpgroup, done with it)."""

    consumers: int          # warpgroups that multiply: 1 (the same one copies) or 2 (a producer besides)
    persistent: bool

    @property
    def threads(self) -> int:
        return 128 if self.consumers == 1 else 384

    def consumer_rows(self, p: dict[str, int]) -> int:
        return p["BM"] // self.consumers

    def smem_bytes(self, p: dict[str, int]) -> int:
        """The ring (STAGES x (BM + BN) rows of 128 bytes), the staging rows of each consumer where they
        are a region of their own (its rows x EPI_PITCH fp32), and the alignment slack."""
        ring = p["STAGES"] * (p["BM"] + p["BN"]) * BK * 2
        staging = 0 if self.consumers == 1 else p["BM"] * EPI_PITCH * 4
        return ring + staging + ALIGN_SLACK

    def constraints(self, p: dict[str, int]) -> list[str]:
        bm, bn, rows = p["BM"], p["BN"], self.consumer_rows(p)
        errs = []
        if rows not in (64, 128):
            sizes = "64 or 128" if self.consumers == 1 else "128 or 256 (64 or 128 rows per consumer warpgroup)"
            errs.append(f"BM = {bm}: must be {sizes}")
        if bn not in (128, 256):
            errs.append(f"BN = {bn}: the wgmma tiles used are 128 or 256 columns wide")
        if not errs and (rows // 64) * (bn // 2) > 128:
            errs.append(f"BM x BN = {bm} x {bn} needs {(rows // 64) * bn // 2} accumulators per thread of a "
                        "warpgroup (at most 128)")
        if p["STAGES"] < 2:
            errs.append(f"STAGES = {p['STAGES']}: the TMA ring needs at least 2 slots")
        if p["B_LAYOUT"] not in (B_ROW_MAJOR, B_KMAJOR):
            errs.append(f"B_LAYOUT = {p['B_LAYOUT']}: 1 (B row-major) or 2 (B^T given, read K-major)")
        if p.get("CLUSTER", 1) not in (1, 2):
            errs.append(f"CLUSTER = {p['CLUSTER']}: blocks per cluster sharing B by multicast, 1 or 2")
        if self.smem_bytes(p) > SMEM_LIMIT:
            errs.append(f"STAGES = {p['STAGES']} x ({bm} + {bn}) x {BK} 16-bit elements need {self.smem_bytes(p)} "
                        f"bytes of shared memory, over the {SMEM_LIMIT // 1024} KiB a block may have")
        errs += type_code_problems(p, mma_sync.A_TYPES)
        return errs

    def geometry(self, m: int, n: int, k: int, p: dict[str, int]) -> Launch:
        """One block per tile: a 2-D grid for one warpgroup (the block order grouped from it), 1-D for the
        warp-specialised step; the persistent step's grid is one block per tile in clusters (the launcher caps
        it at the blocks that can be resident, and they walk the rest)."""
        tiles_m, tiles_n = cdiv(m, p["BM"]), cdiv(n, p["BN"])
        if self.consumers == 1:
            grid = (tiles_n, tiles_m, 1)
        elif self.persistent:
            cl = p["CLUSTER"]
            grid = (cl * cdiv(tiles_m, cl) * tiles_n, 1, 1)
        else:
            grid = (tiles_m * tiles_n, 1, 1)
        return Launch(grid, (self.threads, 1, 1), smem=self.smem_bytes(p))

    def traffic(self, m: int, n: int, k: int, p: dict[str, int]) -> Traffic:
        """Elements TMA reads (from L2) and the kernel stores: A's BM rows over K once per tile column, B's BN
        columns over K once per tile row, or once per cluster of CLUSTER tiles where they share it by
        multicast; C once. Boxes past the matrix are zero-filled by the copy engine, not read.
        smem_loads: what the tensor cores read from shared memory per k step of a tile: each m64 wgmma its
        64 rows of A and all BN columns of B."""
        bm, bn = p["BM"], p["BN"]
        tiles = cdiv(m, bm) * cdiv(n, bn)
        kp = cdiv(k, BK) * BK
        rows_of_b = cdiv(cdiv(m, bm), p.get("CLUSTER", 1))
        wgmmas = bm // 64  # m64 wgmmas per k step of a tile, over all its consumers
        return Traffic(a_loads=m * k * cdiv(n, bn), b_loads=k * n * rows_of_b, c_loads=0, c_stores=m * n,
                       smem_loads=tiles * kp * (bm + wgmmas * bn))

    def tensor_maps(self, m: int, n: int, k: int, p: dict[str, int]) -> tuple[TensorMapBox, ...]:
        """A in boxes of BM rows x one k step; B in boxes of a k step x 64 columns (row-major, read N-major),
        or B^T in boxes of BN / CLUSTER rows x a k step (each block of a cluster copies its share)."""
        a = TensorMapBox("A", m, k, p["BM"], BK, 2)
        if p["B_LAYOUT"] == B_KMAJOR:
            return (a, TensorMapBox("B", n, k, p["BN"] // p.get("CLUSTER", 1), BK, 2))
        return (a, TensorMapBox("B", k, n, BK, 64, 2))


def params(step: Step, bm: int, bn: int, stages: int, group: int) -> tuple[Param, ...]:
    rows = "rows of C per tile" + (" (two consumer warpgroups of BM / 2 rows)" if step.consumers == 2 else "")
    out = [
        Param("BM", bm, (64, 128) if step.consumers == 1 else (128, 256), rows),
        Param("BN", bn, (128, 256), "columns of C per tile (the wgmma N)"),
        Param("STAGES", stages, (2, 3, 4, 5, 6), f"slots in the TMA ring ({BK} k each)"),
        Param("GROUP_M", group, wgmma.GROUP_CHOICES, "tile rows per group of the tile order"),
        Param("A_TYPE", 2, tuple(mma_sync.A_TYPES.values()), "input type of A and B: 1 fp16, 2 bf16 (from the dtype)"),
        Param("C_TYPE", 1, tuple(mma_sync.C_TYPES.values()), "output type: 1 fp32, 2 fp16, 3 bf16 (from out_dtype)"),
        Param("B_LAYOUT", B_ROW_MAJOR, (B_ROW_MAJOR, B_KMAJOR),
              "1: B row-major (K x N); 2: B^T given (N x K, read K-major in place); set from the arrays"),
    ]
    if step.persistent:
        out.append(Param("CLUSTER", 2, (1, 2), "blocks per cluster: 2 vertically adjacent tiles share B, each "
                                              "block copying half of it and multicasting it to both"))
    return tuple(out)


def spec(step: Step, *, name: str, rung: int, template: str, idea: str, defaults: tuple[int, int, int, int],
         expected_gain: tuple[float, float]) -> KernelSpec:
    """The KernelSpec of one step (defaults: BM, BN, STAGES, GROUP_M; expected_gain: the prediction over the
    rung before, from the .cu header)."""
    return KernelSpec(
        name=name,
        rung=rung,
        source=f"{rung:02d}_{name}.cu",
        template=template,
        idea=idea,
        params=params(step, *defaults),
        constraints=step.constraints,
        geometry=step.geometry,
        outputs_per_thread=lambda p: (step.consumer_rows(p) // 64) * p["BN"] // 2,
        traffic_model=step.traffic,
        min_cc=(9, 0),
        targets=("sm_90a",),
        dtypes=("float16", "bfloat16"),
        arguments=("epilogue", "tensor_maps"),
        type_params=(*mma_sync.TYPE_PARAMS, "B_LAYOUT"),
        persistent=step.persistent,
        cluster=(lambda p: p["CLUSTER"]) if step.persistent else None,
        tensor_maps=step.tensor_maps,
        operand_rules=wgmma.operand_problems,
        staging=Staging("AB"),
        expected_gain=expected_gain,
    )
