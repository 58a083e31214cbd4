"""The instruction mix of a rung's main loop, from its SASS: no GPU needed.

    python3 scripts/sass_mix.py KERNEL [PARAM=VALUE ...] [--arch sm_90] [--all-loops] [--dump] [--json]
    python3 scripts/sass_mix.py sgemm BK=8 STAGES=4 --arch sm_90

Compiles one instantiation of a rung through the project's NVRTC path and cache (parameters not named
take the rung's defaults), disassembles the cubin with nvdisasm and finds the main loop: of every
backward branch, the one whose loop body holds the most FFMAs (of equals, the shortest). A loop body may branch (edge tests, the
last step); the mix is counted along one path through it, the steady state of an interior block: the
path with the most FFMAs, then the most bytes loaded from global memory, then the most stored to shared
memory, then the fewest instructions.

Printed per iteration of that path: the instruction histogram (memory instructions by width; `@!PT`
marks instructions that are issued but never executed), the FFMA fraction, LDS per 128 FFMAs, the stall
cycles the compiler scheduled (the control codes: a lower bound on one warp's time per iteration), FFMA
operands served by the register reuse cache and a register-bank estimate; and for the function, the
compiler's registers, spills and stack frame. `--dump` lists the path instruction by instruction with
its scheduled stall cycles; `--json` gives everything as one object. The functions (analyse, report)
are what tests/test_compile.py uses.

Register-bank estimate: FP32 registers live in two banks (register number mod 2) that can each supply two
operands per cycle; an FFMA whose three sources are all read from the register file (none from the reuse
cache) and all in one bank needs an extra cycle. This is a model for comparing kernels, not a
measurement.

nvdisasm is taken from PATH, else from the nvidia-cuda-nvdisasm wheel (pip install 'gemmlab[test]').
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

_LINE_RE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\*\s*(0x[0-9a-f]{16})\s*\*/")
_HI_RE = re.compile(r"^\s*/\*\s*(0x[0-9a-f]{16})\s*\*/\s*$")
_LABEL_RE = re.compile(r"^(\.L\w+):\s*$")
_TARGET_RE = re.compile(r"`\(([^)]+)\)")
_FUNC_RE = re.compile(r"^\.text\.(\S+):\s*$")
_REG_RE = re.compile(r"^-?\|?R(\d+|Z)(\.reuse)?\|?$")
_WIDTHS = {"8", "16", "32", "64", "128", "U8", "S8", "U16", "S16"}
_BRANCHES = {"BRA", "BRX", "JMP", "JMX"}


@dataclass
class Instr:
    addr: int
    text: str
    opcode: str          # full opcode with modifiers, e.g. LDS.128, LDG.E.128.CONSTANT
    base: str            # FFMA, LDS, ...
    predicated: bool
    operands: list[str]
    stall: int
    target: str | None = None
    guard: str = ""      # the predicate guard as written (@P0, @!PT, ...), "" for none

    @property
    def width(self) -> int:
        """Bits moved per thread by a memory instruction (32 unless the opcode says otherwise)."""
        for part in self.opcode.split(".")[1:]:
            if part in _WIDTHS:
                return int(part.lstrip("US"))
        return 32

    @property
    def key(self) -> str:
        """Histogram key: the base opcode, with the width for memory instructions."""
        key = self.base
        if self.base in {"LDS", "STS", "LDG", "STG", "LDGSTS", "LDL", "STL", "LD", "ST", "LDSM"}:
            key = f"{self.base}.{self.width}"
        # Guarded by the never-true predicate: issued (it takes a slot) but never executed. ptxas places
        # such instructions next to LDGSTS.
        return f"{key}@!PT" if self.guard in ("@!PT", "@!UPT") else key

    @property
    def conditional(self) -> bool:
        # A branch with a predicate guard, or with a predicate operand (BRA P0, target), may fall through.
        return self.predicated or any(re.fullmatch(r"!?U?P\d", o) for o in self.operands[:-1])


@dataclass
class Block:
    start: int
    instrs: list[Instr] = field(default_factory=list)
    succ: list[int] = field(default_factory=list)   # start addresses


def find_nvdisasm() -> str:
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import nvidia  # noqa: F401  (namespace package of the CUDA wheels)
        for root in nvidia.__path__:
            for cand in sorted(Path(root).glob("*/bin/nvdisasm")):
                return str(cand)
    except ImportError:
        pass
    raise SystemExit("nvdisasm not found: put it on PATH or install nvidia-cuda-nvdisasm")


def disassemble(cubin: Path) -> dict[str, list[str]]:
    """{mangled function name: its disassembly lines}."""
    out = subprocess.run([find_nvdisasm(), "-c", "-hex", str(cubin)], capture_output=True, text=True, check=True).stdout
    funcs: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        m = _FUNC_RE.match(line.strip())
        if m:
            current = m.group(1)
            funcs[current] = []
            continue
        if current is not None:
            funcs[current].append(line)
    return funcs


def parse(lines: list[str]) -> tuple[list[Instr], dict[str, int]]:
    instrs: list[Instr] = []
    labels: dict[str, int] = {}
    pending: list[str] = []
    for i, line in enumerate(lines):
        m = _LINE_RE.match(line)
        if m:
            hi = 0
            if i + 1 < len(lines) and (h := _HI_RE.match(lines[i + 1])):
                hi = int(h.group(1), 16)
            addr, text = int(m.group(1), 16), m.group(2).strip()
            toks = text.split()
            guard = toks[0] if toks[0].startswith("@") else ""
            predicated = bool(guard) and guard not in ("@PT", "@UPT")
            if guard:
                toks = toks[1:]
            opcode = toks[0]
            operands = [o.strip() for o in " ".join(toks[1:]).split(",") if o.strip()]
            ins = Instr(addr, text, opcode, opcode.split(".")[0], predicated, operands, (hi >> 41) & 0xF, guard=guard)
            if ins.base in _BRANCHES and (t := _TARGET_RE.search(text)):
                ins.target = t.group(1)
            for name in pending:
                labels[name] = addr
            pending = []
            instrs.append(ins)
            continue
        lm = _LABEL_RE.match(line.strip())
        if lm:
            pending.append(lm.group(1))
    return instrs, labels


def blocks_of(instrs: list[Instr], labels: dict[str, int]) -> dict[int, Block]:
    leaders = {instrs[0].addr} if instrs else set()
    targets = set(labels.values())
    leaders |= targets
    for a, b in zip(instrs, instrs[1:]):
        if a.base in _BRANCHES or a.base in {"EXIT", "RET"}:
            leaders.add(b.addr)
    blocks: dict[int, Block] = {}
    cur = None
    for ins in instrs:
        if ins.addr in leaders:
            cur = Block(ins.addr)
            blocks[ins.addr] = cur
        cur.instrs.append(ins)
    starts = sorted(blocks)
    for i, s in enumerate(starts):
        last = blocks[s].instrs[-1]
        nxt = starts[i + 1] if i + 1 < len(starts) else None
        if last.base in _BRANCHES:
            if last.target in labels:
                blocks[s].succ.append(labels[last.target])
            if last.conditional and nxt is not None:
                blocks[s].succ.append(nxt)
        elif last.base in {"EXIT", "RET"}:
            if last.predicated and nxt is not None:
                blocks[s].succ.append(nxt)
        elif nxt is not None:
            blocks[s].succ.append(nxt)
    return blocks


def global_bytes(ins: Instr) -> int:
    return ins.width // 8 if ins.base in {"LDG", "LDGSTS", "LD"} else 0


@dataclass
class Loop:
    head: int          # address of the loop's first instruction (the back branch's target)
    tail: int          # address of the back branch
    path: list[Block]
    static_ffma: int   # FFMAs anywhere in [head, tail]
    static_instrs: int
    nested: int        # backward branches inside the body (inner loops, not followed)

    @property
    def instrs(self) -> list[Instr]:
        return [i for b in self.path for i in b.instrs]


def loops_of(instrs: list[Instr], labels: dict[str, int]) -> list[Loop]:
    blocks = blocks_of(instrs, labels)
    starts = sorted(blocks)
    found = []
    for b in blocks.values():
        last = b.instrs[-1]
        if last.base not in _BRANCHES or last.target not in labels or labels[last.target] > last.addr:
            continue
        head, tail = labels[last.target], last.addr
        inside = [s for s in starts if head <= s <= tail]
        body = [i for i in instrs if head <= i.addr <= tail]
        nested = sum(1 for i in body if i.base in _BRANCHES and i is not last and i.target in labels
                     and head <= labels[i.target] <= i.addr)
        # Best path from head to this block through forward edges inside the body: the most FFMAs, then
        # the most bytes loaded from global memory, then the most stored to shared memory, then the fewest
        # instructions (lexicographic, so a DP over the DAG).
        best: dict[int, tuple[tuple[int, ...], list[int]] | None] = {s: None for s in inside}
        h = blocks[head]
        best[head] = (score(h.instrs), [head])
        for s in inside:
            if best[s] is None:
                continue
            sc, path = best[s]
            for t in blocks[s].succ:
                if not (s < t <= tail) or t not in best:
                    continue  # leaves the body, or a backward edge (inner loop)
                tb = blocks[t]
                cand = (tuple(x + y for x, y in zip(sc, score(tb.instrs))), path + [t])
                if best[t] is None or cand[0] > best[t][0]:
                    best[t] = cand
        if best.get(b.start) is None:
            continue
        path = [blocks[s] for s in best[b.start][1]]
        found.append(Loop(head, tail, path, sum(1 for i in body if i.base == "FFMA"), len(body), nested))
    return found


def score(instrs: list[Instr]) -> tuple[int, int, int, int]:
    return (sum(1 for i in instrs if i.base == "FFMA"), sum(global_bytes(i) for i in instrs),
            sum(i.width // 8 for i in instrs if i.base == "STS"), -len(instrs))


def _srcs(ins: Instr) -> list[tuple[str, bool]]:
    """(register, marked .reuse) for the three sources of an FFMA (immediates and constants: skipped)."""
    out = []
    for o in ins.operands[1:4]:
        m = _REG_RE.match(o)
        out.append((("R" + m.group(1)), bool(m.group(2))) if m else ("", False))
    return out


def reuse_and_banks(instrs: list[Instr]) -> tuple[int, int, int]:
    """(FFMA source operands read from the reuse cache, of all FFMA register sources, FFMAs with a
    modelled two-bank conflict)."""
    cache: list[str | None] = [None, None, None]
    hits = total = conflicts = 0
    for ins in instrs:
        if ins.base != "FFMA":
            cache = [None, None, None]
            continue
        srcs = _srcs(ins)
        from_rf = []
        for slot, (reg, reuse) in enumerate(srcs):
            if not reg or reg == "RZ":
                continue
            total += 1
            if cache[slot] == reg:
                hits += 1
            else:
                from_rf.append(int(reg[1:]))
        if len(from_rf) == 3 and len({r % 2 for r in from_rf}) == 1:
            conflicts += 1
        cache = [reg if reuse else None for reg, reuse in srcs]
    return hits, total, conflicts


def report(loop: Loop) -> dict:
    ins = loop.instrs
    hist = collections.Counter(i.key for i in ins)
    ffma = hist.get("FFMA", 0)
    lds = sum(v for k, v in hist.items() if k.startswith("LDS.") and not k.endswith("@!PT"))
    hits, srcs, conflicts = reuse_and_banks(ins)
    return {
        "loop": f"{loop.head:#06x}-{loop.tail:#06x}",
        "blocks_on_path": len(loop.path),
        "instructions": len(ins),
        "ffma": ffma,
        "ffma_fraction": ffma / len(ins) if ins else 0.0,
        "lds_per_128_ffma": 128 * lds / ffma if ffma else 0.0,
        "stall_cycles": sum(i.stall for i in ins),
        "reuse_hits": hits,
        "ffma_register_sources": srcs,
        "bank_conflicts_model": conflicts,
        "static_body": {"instructions": loop.static_instrs, "ffma": loop.static_ffma, "inner_loops": loop.nested},
        "histogram": dict(hist.most_common()),
    }


def main_loop(instrs: list[Instr], labels: dict[str, int]) -> list[Loop]:
    """Every loop with FFMAs, the main one (most FFMAs in its body; of copies with as many, such as one loop
    for interior and one for edge blocks, the one with the fewest instructions) first."""
    return sorted((lp for lp in loops_of(instrs, labels) if lp.static_ffma),
                  key=lambda lp: (-lp.static_ffma, lp.static_instrs))


def analyse(kernel: str, params: dict[str, int] | None = None, arch: str = "sm_90") -> tuple[dict, list[Loop]]:
    """Compile one instantiation of a rung (the project's NVRTC path and cache) and read its SASS: the
    compiler's resource report and the loops, main loop first."""
    from gemmlab.kernels import get
    from gemmlab.runtime import compiler

    spec = get(kernel)
    p = spec.validate(params or {})
    expr = spec.name_expression(p)
    module = compiler.compile_file(spec.source_path, [expr], arch, need_report=True)
    res = module.resources[expr]
    lines = disassemble(module.cubin_path).get(module.lowered_names[expr])
    if lines is None:
        raise SystemExit(f"{module.lowered_names[expr]} not found in the disassembly of {module.cubin_path}")
    instrs, labels = parse(lines)
    loops = main_loop(instrs, labels)
    info = {
        "kernel": spec.name, "expression": expr, "arch": module.arch, "params": p,
        "registers": res.registers, "spill_stores": res.spill_stores, "spill_loads": res.spill_loads,
        "stack_frame": res.stack_frame, "smem_static": res.smem_static,
        "function_instructions": len(instrs), "function_ffma": sum(1 for i in instrs if i.base == "FFMA"),
    }
    return info, loops


def _print(info: dict, reports: list[dict]) -> None:
    print(f"{info['expression']}  [{info['arch']}]")
    print(f"registers {info['registers']}, spill stores {info['spill_stores']} B, spill loads {info['spill_loads']} B, "
          f"stack {info['stack_frame']} B, static smem {info['smem_static']} B; "
          f"function: {info['function_instructions']} instructions, {info['function_ffma']} FFMA")
    if not reports:
        print("no loop with FFMAs found")
    for i, r in enumerate(reports):
        title = "main loop" if i == 0 else f"loop {i + 1}"
        sb = r["static_body"]
        print(f"\n{title} {r['loop']}: per iteration (steady-state path, {r['blocks_on_path']} blocks; whole body "
              f"{sb['instructions']} instructions = {16 * sb['instructions'] / 1024:.1f} KiB of code, {sb['ffma']} FFMA, "
              f"{sb['inner_loops']} inner loops)")
        for k, v in r["histogram"].items():
            print(f"  {k:12s} {v:6d}  {100 * v / r['instructions']:5.1f}%")
        print(f"  {'total':12s} {r['instructions']:6d}")
        print(f"FFMA fraction {100 * r['ffma_fraction']:.1f}%  ({r['ffma']} FFMA, {r['instructions'] - r['ffma']} other); "
              f"LDS per 128 FFMA {r['lds_per_128_ffma']:.2f}; scheduled stall cycles {r['stall_cycles']} "
              f"({r['ffma'] / max(1, r['stall_cycles']):.2f} FFMA/cycle for one warp)")
        print(f"FFMA sources from the reuse cache {r['reuse_hits']}/{r['ffma_register_sources']}; "
              f"modelled register-bank conflicts {r['bank_conflicts_model']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel", help="rung name (gemmlab kernels lists them)")
    ap.add_argument("params", nargs="*", help="PARAM=VALUE template parameters (the rest take the defaults)")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--all-loops", action="store_true", help="report every loop with FFMAs, not only the main one")
    ap.add_argument("--dump", action="store_true", help="print the main loop's path, instruction by instruction")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = ap.parse_args(argv)
    given = {}
    for kv in args.params:
        k, sep, v = kv.partition("=")
        if not sep:
            ap.error(f"parameter {kv!r} is not of the form NAME=VALUE")
        given[k] = int(v)
    info, loops = analyse(args.kernel, given, args.arch)
    reports = [report(lp) for lp in (loops if args.all_loops else loops[:1])]
    if args.json:
        print(json.dumps(dict(info, loops=reports), indent=1))
        return 0 if loops else 1
    _print(info, reports)
    if args.dump and loops:
        print()
        for b in loops[0].path:
            print(f"-- block {b.start:#06x}")
            for ins in b.instrs:
                print(f"  {ins.addr:#06x} [{ins.stall:2d}] {ins.text}")
    return 0 if loops else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # piped into head
        sys.exit(0)
