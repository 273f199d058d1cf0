"""The import direction of docs/architecture.md, read from the source with `ast` (no module is imported):

    commands, cli  ->  lab, eval  ->  train, infer, interop, plots  ->  data, checkpoint, costs, overrides  ->  nn

A module may import its own layer and the layers below it, never above; nothing in `nn/` imports outside `nn/`; no
module imports the package root `archlab` (the public facade re-exports from below and would hide a cycle); and the
module graph, lazy imports inside functions included, has no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "archlab"

# top-level name under archlab/ -> layer (higher may import lower, never the reverse)
LAYERS = {
    "nn": 0,
    "data": 1, "checkpoint": 1, "costs": 1, "overrides": 1,
    "train": 2, "infer": 2, "interop": 2, "plots": 2,
    "eval": 3, "lab": 3,
    "commands": 4, "cli": 4, "__main__": 4,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def archlab_imports(path: Path) -> set[str]:
    """Every `archlab...` module this file imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "archlab"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "archlab":
                found.add(node.module)
                # `from archlab.train import distributed` imports the submodule archlab.train.distributed
                found |= {f"{node.module}.{a.name}" for a in node.names if _is_module(f"{node.module}.{a.name}")}
    return found


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (SRC / rel).with_suffix(".py").is_file() or (SRC / rel / "__init__.py").is_file()


def layer(module: str) -> int:
    top = module.split(".")[1]
    if top not in LAYERS:
        raise AssertionError(f"{module}: archlab/{top} has no layer in tests/test_layout.py LAYERS (and the docs)")
    return LAYERS[top]


GRAPH = {module_name(p): archlab_imports(p) for p in SRC.rglob("*.py")}
ROOT = "archlab"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if m != ROOT))
def test_imports_point_down(module: str) -> None:
    for target in GRAPH[module]:
        assert target != ROOT, f"{module} imports the package root `archlab`; import the defining module instead"
        below = layer(target) <= layer(module)
        assert below, f"{module} (layer {layer(module)}) imports {target} (layer {layer(target)})"
        if module.startswith("archlab.nn"):
            assert target.startswith("archlab.nn"), f"{module} in nn/ imports {target} outside nn/"


def test_no_import_cycles() -> None:
    """Depth-first search over the module graph; a back edge is a cycle, reported as the path that closes it."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(GRAPH.get(module, ())):
            if target not in GRAPH or target == module:
                continue
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [module, target] if target in path else [module, target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, path + [module])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state and module != ROOT:
            visit(module, [])


def test_the_layout_test_sees_a_violation(tmp_path: Path) -> None:
    """The walker finds lazy and `from package import module` imports (else the tests above could not fail)."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from archlab.train import trainer\n    import archlab.costs\n")
    assert archlab_imports(probe) >= {"archlab.train", "archlab.train.trainer", "archlab.costs"}
