"""Does the warp scheduler's yield hint on the block-scale promotion change its speed? An experiment on rung 15
with block scales (PROMOTE 1): its cubin is copied and, in every run of 16 or more register-form FFMAs, each FFMA
that the compiler marked to keep its first operand in the reuse cache (and so not to yield: the next instruction
must come from the same warp) loses both marks, so that the scheduler may switch warps after every FFMA. The
two kernels, the compiler's and the edited one, then run the same call in turn, L2 flushed, interleaved, beside
gemmlab's per-tensor product; the results must be bitwise equal (the marks are hints).

    PYTHONPATH=src python3 scripts/ffma_yield_probe.py [--shapes 4096x7168x16384,8192x8192x8192] [--budget-ms 60]
    PYTHONPATH=src python3 scripts/ffma_yield_probe.py --offline   # compile and edit only (no GPU): the counts

The instruction words are read from the cubin's ELF section of the kernel: 16 bytes an instruction, the opcode
in the low 12 bits of the first word (0x223: FFMA with three register sources on sm_90), the scheduling
controls in the second word (bit 45 yield, bits 58-61 the reuse marks of the source slots).
"""

from __future__ import annotations

import argparse
import struct
import tempfile
from pathlib import Path

FFMA_RRR = 0x223
YIELD = 1 << 45
REUSE_A = 1 << 58
MIN_RUN = 16


def text_section(cubin: bytes, function: str) -> tuple[int, int]:
    """(offset, size) of the ELF section `.text.<function>` of a cubin (ELF64, little-endian)."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not an ELF64 cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)

    def header(i):
        name, _type, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize)
        return name, off, size
    _, str_off, _ = header(shstrndx)
    want = f".text.{function}".encode()
    for i in range(shnum):
        name, off, size = header(i)
        end = cubin.index(b"\0", str_off + name)
        if cubin[str_off + name:end] == want:
            return off, size
    raise ValueError(f"no section .text.{function}")


def edit(cubin: bytes, function: str) -> tuple[bytes, int, int]:
    """(the edited cubin, FFMAs in runs of MIN_RUN or more, FFMAs whose reuse and no-yield marks were cleared)."""
    off, size = text_section(cubin, function)
    out = bytearray(cubin)
    words = [struct.unpack_from("<QQ", cubin, off + i) for i in range(0, size, 16)]
    runs, run = [], []
    for i, (lo, _hi) in enumerate(words):
        if lo & 0xFFF == FFMA_RRR:
            run.append(i)
            continue
        if len(run) >= MIN_RUN:
            runs.append(run)
        run = []
    if len(run) >= MIN_RUN:
        runs.append(run)
    changed = 0
    for run in runs:
        for i in run:
            lo, hi = words[i]
            if hi & REUSE_A and hi & YIELD:
                struct.pack_into("<Q", out, off + 16 * i + 8, hi & ~(REUSE_A | YIELD))
                changed += 1
    return bytes(out), sum(len(r) for r in runs), changed


def block_plan(qa, qw, sa, sb):
    """The call's plan (rung 15 with PROMOTE 1), made by one call."""
    import gemmlab
    from gemmlab.api import call

    gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb)
    m, n = qa.shape[0], qw.shape[0]
    plans = [p for p in call._plans.values() if p.params.get("PROMOTE") == 1 and p.spec.name == "wgmma"
             and (p.request.m, p.request.n) == (m, n)]
    if len(plans) != 1:
        raise SystemExit(f"expected one block-scale plan, found {len(plans)}")
    return plans[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="4096x7168x16384,8192x8192x8192")
    ap.add_argument("--budget-ms", type=float, default=60.0)
    ap.add_argument("--offline", action="store_true")
    args = ap.parse_args()
    from gemmlab.kernels import get
    from gemmlab.runtime import compiler

    if args.offline:
        spec = get("wgmma")
        p = spec.validate(dict(A_TYPE=5, B_LAYOUT=2, C_TYPE=3, PROMOTE=1, DEFER=0))
        expr = spec.name_expression(p)
        module = compiler.compile_file(spec.source_path, [expr], "sm_90a")
        _, total, changed = edit(module.cubin, module.lowered_names[expr])
        print(f"{expr}: {total} FFMAs in runs of {MIN_RUN} or more, {changed} marks cleared")
        return

    import cupy
    import torch

    import gemmlab
    from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved
    from gemmlab.runtime import launch

    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        x = torch.randn(m, k, device="cuda")
        w = torch.randn(n, k, device="cuda") / k**0.5
        qa, sa = gemmlab.quantize(x, "e4m3", "1x128")
        qw, sw = gemmlab.quantize(w, "e4m3", "128x128")
        ta, tsa = gemmlab.quantize(x, "e4m3", "tensor")
        tw, tsw = gemmlab.quantize(w, "e4m3", "tensor")
        sb = sw.t()
        plan = block_plan(qa, qw, sa, sb)
        spec = plan.spec
        expr = spec.name_expression(plan.params)
        module = compiler.compile_file(spec.source_path, [expr], compiler.normalise_arch("sm_90a"))
        name = module.lowered_names[expr]
        edited, total, changed = edit(module.cubin, name)
        folder = Path(tempfile.mkdtemp(prefix="gemmlab-yield-"))
        path = folder / "edited.cubin"
        path.write_bytes(edited)
        raw = cupy.RawModule(path=str(path))
        fn = raw.get_function(name)
        kernel = launch.LoadedKernel(expr, fn, module.resources.get(expr))
        kernel.ensure_dynamic_smem(plan.smem)
        handles = {"compiler's": plan.function, "edited": launch.function_handle(kernel)}

        def run(which):
            plan.function = handles[which]
            return gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sb)
        first, second = run("compiler's"), run("edited")
        torch.cuda.synchronize()
        same = bool(torch.equal(first, second))
        calls = {w_: TimedCall(lambda w_=w_: run(w_)) for w_ in handles}
        calls["per tensor"] = TimedCall(lambda: gemmlab.matmul(ta, tw.t(), scale_a=tsa, scale_b=tsw))
        res = time_interleaved(calls, TimingOptions(budget_ms=len(calls) * args.budget_ms, rounds=6))
        plan.function = handles["compiler's"]
        t = {k_: v.median_ms for k_, v in res.items()}
        base, ed, pt = t["compiler's"], t["edited"], t["per tensor"]
        flops = 2.0 * m * n * k
        print(f"{shape}: {total} FFMAs in runs, {changed} marks cleared; bitwise equal {same}; compiler's {base:.3f} ms "
              f"({flops / base / 1e9:.0f} TFLOP/s), edited {ed:.3f} ms ({flops / ed / 1e9:.0f}), per tensor {pt:.3f} ms;"
              f" edited x compiler's {base / ed:.3f}; block x own per tensor: compiler's {pt / base:.3f}, edited "
              f"{pt / ed:.3f}", flush=True)


if __name__ == "__main__":
    main()
