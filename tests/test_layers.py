"""The package's parts import only downwards: every import between two parts of gemmlab (anywhere in a file,
function bodies included) goes from a higher layer to a strictly lower one, so there are no circles and no
sideways imports between parts of one layer. README.md ("How it is built") lists the layers."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "src" / "gemmlab"

# Bottom (0) to top. A part imports only parts of lower layers.
LAYERS = [
    {"_version", "files", "formats"},
    {"runtime", "cpu"},
    {"kernels", "arrays"},
    {"tuned", "viz"},
    {"api"},
    {"torch", "distributed"},
    {"bench"},
    {"micro", "tune", "report", "__init__"},
    {"analysis"},
    {"cli"},
    {"__main__"},
]
RANK = {part: i for i, layer in enumerate(LAYERS) for part in layer}


def _part(parts: list[str]) -> str:
    """The part of gemmlab a module path (relative to the package, as parts) belongs to."""
    if not parts or parts == ["__init__"]:
        return "__init__"
    return parts[0]


def _imports() -> list[tuple[str, str, str]]:
    """(importing part, imported part, file) for every import of gemmlab inside gemmlab."""
    out = []
    for f in sorted(ROOT.rglob("*.py")):
        rel = list(f.relative_to(ROOT).with_suffix("").parts)
        package = rel[:-1]  # the package the module sits in (an __init__ is its own package)
        here = _part(rel)
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    if not (node.module or "").startswith("gemmlab"):
                        continue
                    base = node.module.split(".")[1:]
                else:
                    base = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
                if base:
                    targets.append(base)
                else:  # `from .. import x`: x is a part (module or package) or a name of gemmlab/__init__
                    for alias in node.names:
                        is_part = (ROOT / alias.name).is_dir() or (ROOT / f"{alias.name}.py").exists()
                        targets.append([alias.name] if is_part else [])
            elif isinstance(node, ast.Import):
                targets += [a.name.split(".")[1:] for a in node.names if a.name.split(".")[0] == "gemmlab"]
            for t in targets:
                there = _part(t)
                if there != here:
                    out.append((here, there, str(f.relative_to(ROOT))))
    return out


def test_every_part_has_a_layer():
    parts = {_part(list(f.relative_to(ROOT).with_suffix("").parts)) for f in ROOT.rglob("*.py")}
    assert parts <= set(RANK), f"parts without a layer: {sorted(parts - set(RANK))}"


def test_imports_run_only_downwards():
    edges = _imports()
    assert edges, "no imports found: the scan is broken"
    wrong = sorted({f"{f}: {a} (layer {RANK[a]}) imports {b} (layer {RANK[b]})" for a, b, f in edges
                    if RANK[b] >= RANK[a]})
    assert not wrong, "imports that run up or sideways:\n" + "\n".join(wrong)


def test_the_scan_sees_a_known_import():
    """A check that the scan reads relative imports: api imports kernels (`from ..kernels import ...`)."""
    assert ("api", "kernels") in {(a, b) for a, b, _ in _imports()}
