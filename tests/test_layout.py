"""The import direction of docs/architecture.md, read from the source with `ast` (no
module is imported):

    commands, cli  ->  lab, eval  ->  train, infer, interop, plots
                   ->  data, checkpoint, costs, overrides  ->  nn

A module may import its own layer and the layers below it, never above; nothing in `nn/` imports
outside `nn/`; no module imports the package root `archlab` (the public facade re-exports from below
and would hide a cycle); and the module graph, lazy imports inside functions included, has no cycle.
Two more rules of docs/architecture.md: the leaf modules of `nn/` never see the config (no import of
nn/config/ but its choices, no `ModelConfig` anywhere in them), and library code never prints (no
`print`, no `sys.stdout` / `sys.stderr` writes outside commands/ and cli.py). And the lab has one
front door: outside lab/ (the package's other modules, scripts/) only `archlab.lab` is imported,
never a module inside it; inside, its subpackages import leftwards (measures <- spec <- analysis <-
runs <- publishing).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "archlab"

# top-level name under archlab/ -> layer (higher may import lower, never the reverse)
LAYERS = {
    "nn": 0,
    "data": 1,
    "checkpoint": 1,
    "run_folder": 1,
    "storage": 1,
    "yaml_file": 1,
    "costs": 1,
    "overrides": 1,
    "train": 2,
    "infer": 2,
    "interop": 2,
    "plots": 2,
    "eval": 3,
    "lab": 3,
    "commands": 4,
    "cli": 4,
    "__main__": 4,
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
                # `from archlab.train import distributed` imports the submodule
                # archlab.train.distributed, as `import archlab.train.distributed` does; the package
                # itself counts when a name comes from it
                modules = {
                    f"{node.module}.{a.name}"
                    for a in node.names
                    if _is_module(f"{node.module}.{a.name}")
                }
                found |= modules
                if len(modules) < len(node.names):
                    found.add(node.module)
    return found


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (SRC / rel).with_suffix(".py").is_file() or (SRC / rel / "__init__.py").is_file()


def layer(module: str) -> int:
    top = module.split(".")[1]
    if top not in LAYERS:
        raise AssertionError(
            f"{module}: archlab/{top} has no layer in tests/test_layout.py LAYERS (and the docs)"
        )
    return LAYERS[top]


GRAPH = {module_name(p): archlab_imports(p) for p in SRC.rglob("*.py")}
ROOT = "archlab"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if m != ROOT))
def test_imports_point_down(module: str) -> None:
    for target in GRAPH[module]:
        assert target != ROOT, (
            f"{module} imports the package root `archlab`; import the defining module instead"
        )
        below = layer(target) <= layer(module)
        assert below, f"{module} (layer {layer(module)}) imports {target} (layer {layer(target)})"
        if module.startswith("archlab.nn"):
            assert target.startswith("archlab.nn"), f"{module} in nn/ imports {target} outside nn/"


def test_no_import_cycles() -> None:
    """Depth-first search over the module graph; a back edge is a cycle, reported as the path
    that closes it."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(GRAPH.get(module, ())):
            if target not in GRAPH or target == module:
                continue
            if state.get(target) == 1:
                cycle = (
                    path[path.index(target) :] + [module, target]
                    if target in path
                    else [module, target]
                )
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, path + [module])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state and module != ROOT:
            visit(module, [])


# the lab's subpackages, lowest first: a part imports its own and those before it
# (docs/architecture.md "The lab")
LAB_PARTS = ("measures", "spec", "analysis", "runs", "publishing")
LAB = "archlab.lab"
REPO = SRC.parents[1]


def lab_part(module: str) -> int:
    """The rank of a module of the lab: its subpackage's, or above them all for lab/experiment.py
    and the package."""
    parts = module.split(".")
    return LAB_PARTS.index(parts[2]) if len(parts) > 2 and parts[2] in LAB_PARTS else len(LAB_PARTS)


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if m.startswith(LAB + ".")))
def test_the_lab_parts_import_down(module: str) -> None:
    for target in GRAPH[module]:
        if target.startswith(LAB + "."):
            assert lab_part(target) <= lab_part(module), (
                f"{module} imports {target}: {LAB_PARTS} import leftwards"
            )


def lab_internals(path: Path) -> list[str]:
    """The lab's modules a file imports past its front door (`archlab.lab` itself is the door)."""
    return sorted(m for m in archlab_imports(path) if m.startswith(LAB + "."))


OUTSIDE_LAB = sorted(
    [p for p in SRC.rglob("*.py") if not module_name(p).startswith(LAB)]
    + list((REPO / "scripts").glob("*.py"))
)


@pytest.mark.parametrize("path", OUTSIDE_LAB, ids=lambda p: str(p.relative_to(REPO)))
def test_commands_and_scripts_use_only_the_lab_front_door(path: Path) -> None:
    """Outside lab/ (commands/, the rest of the package, scripts/) only `archlab.lab`'s names are
    imported (Experiment and the few its __all__ lists); benchmarks/ and tests/ may reach inside
    (they measure and test it)."""
    assert not lab_internals(path), (
        f"{path.relative_to(REPO)} imports {lab_internals(path)}: use `archlab.lab`"
    )


def test_the_front_door_rule_sees_a_violation(tmp_path: Path) -> None:
    """An import of a lab module, at the top, inside a function or as `from archlab.lab import
    module`, is seen; the front door's names are not."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from archlab.lab import BUDGETS, Experiment\nfrom "
        "archlab.lab.runs.runner import LabError\n"
        "def f():\n    from archlab.lab import experiment\n    import archlab.lab.spec.budgets\n"
    )
    assert lab_internals(probe) == [
        "archlab.lab.experiment",
        "archlab.lab.runs.runner",
        "archlab.lab.spec.budgets",
    ]
    probe.write_text("from archlab.lab import BUDGETS, Experiment, LabError\n")
    assert lab_internals(probe) == []
    assert {SRC / "commands" / "ablate.py", REPO / "scripts" / "publish_results.py"} <= set(
        OUTSIDE_LAB
    )
    assert (
        lab_part("archlab.lab.analysis.stats") < lab_part("archlab.lab.runs.plan") < lab_part(LAB)
    )


# nn/ modules that take plain typed arguments (docs/architecture.md "Layers"); attention, block,
# model and the per-forward attention inputs take the ModelConfig
LEAVES = (
    "norms",
    "activations",
    "ffn",
    "kv_cache",
    "functional",
    "registry",
    "positions/absolute",
    "positions/biases",
    "positions/rope",
    "positions/frequencies",
    "positions/scaling",
    "positions/rerope",
    "attention/kernels",
    "attention/linear/prefix_sums",
    "attention/linear/favor",
    "attention/linear/codebook",
    "attention/linear/vq",
    "fast/ops",
    "fast/losses",
    "fast/attention",
)
# installed from outside (fast.install); the formulas never call them
FAST_PATHS = "archlab.nn.fast"
# the only modules that write to the terminal
PRINTING = ("archlab.commands", "archlab.cli", "archlab.__main__")


# what a leaf may take from the config package: the names of the choices, not the config
CONFIG_NAMES = "archlab.nn.config.choices"


def mentions_config(path: Path) -> list[str]:
    """Where a file imports archlab.nn.config (any of its modules but the choices) or names
    ModelConfig (an annotation, a call, an attribute)."""
    found = [
        f"imports {m}"
        for m in archlab_imports(path)
        if m.startswith("archlab.nn.config") and m != CONFIG_NAMES
    ]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Name) and node.id == "ModelConfig":
            found.append(f"line {node.lineno} names ModelConfig")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "ModelConfig" in node.value.split()
        ):
            found.append(f"line {node.lineno} annotates with ModelConfig")
    return found


def terminal_writes(path: Path) -> list[str]:
    """Lines that call print() or write / print to sys.stdout or sys.stderr."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "print":
            found.append(f"line {node.lineno}: print()")
        elif (
            isinstance(f, ast.Attribute)
            and isinstance(f.value, ast.Attribute)
            and f.value.attr in ("stdout", "stderr")
            and isinstance(f.value.value, ast.Name)
            # flush writes nothing new
            and f.value.value.id == "sys"
            and f.attr not in ("isatty", "flush")
        ):
            found.append(f"line {node.lineno}: sys.{f.value.attr}.{f.attr}()")
    return found


@pytest.mark.parametrize("leaf", LEAVES)
def test_leaf_modules_of_nn_never_see_the_config(leaf: str) -> None:
    path = SRC / "nn" / f"{leaf}.py"
    assert path.is_file(), f"nn/{leaf}.py is listed as a leaf but does not exist"
    assert not mentions_config(path), f"nn/{leaf}.py is a leaf module but {mentions_config(path)}"


# nn/'s packages whose __init__.py re-exports: the config (its own torch-free
# modules, and RopeScaling)
EXPORTING = {SRC / "nn" / "config": ("archlab.nn.config.", "archlab.nn.positions.scaling")}


@pytest.mark.parametrize(
    "package",
    sorted(p.parent for p in (SRC / "nn").rglob("__init__.py")),
    ids=lambda p: str(p.relative_to(SRC)),
)
def test_the_packages_of_nn_import_nothing_the_config_does_not(package: Path) -> None:
    """nn/'s packages are folders only, but the config package, which re-exports its own modules:
    the config imports positions/scaling.py without torch, which an import in positions/__init__.py
    would bring in; and a package that imported its submodules would hide which one
    a caller needs."""
    imports = archlab_imports(package / "__init__.py")
    if package in EXPORTING:
        assert imports and all(m.startswith(EXPORTING[package]) for m in imports), imports
        return
    assert not imports, f"{package}/__init__.py imports archlab modules"
    tree = ast.parse((package / "__init__.py").read_text(encoding="utf-8"))
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))], package


def test_the_config_and_the_modules_are_no_loop() -> None:
    """nn/config/ sits under every nn/ folder that takes a config: nothing in it imports attention/,
    the modules or the model (the linear kernels' builders are lazy "module:attr" references), so no
    folder of nn/ imports the config and is imported by it."""
    config = [m for m in GRAPH if m.startswith("archlab.nn.config")]
    assert config
    for module in config:
        below = ("archlab.nn.config", "archlab.nn.registry", "archlab.nn.positions.scaling")
        above = sorted(
            t for t in GRAPH[module] if t.startswith("archlab.nn.") and not t.startswith(below)
        )
        assert not above, f"{module} imports {above}"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if not m.startswith(PRINTING)))
def test_library_code_never_prints(module: str) -> None:
    path = next(p for p in SRC.rglob("*.py") if module_name(p) == module)
    assert not terminal_writes(path), (
        f"{module} writes to the terminal (log instead): {terminal_writes(path)}"
    )


@pytest.mark.parametrize(
    "module",
    sorted(m for m in GRAPH if m.startswith("archlab.nn.") and not m.startswith(FAST_PATHS)),
)
def test_the_readable_nn_modules_run_only_the_formulas(module: str) -> None:
    """No module of nn/ outside nn/fast/ reaches the hand-written kernels: `fast.install` puts them
    in from outside (issue 23), so `TransformerLM(config)` is the plain math."""
    path = next(p for p in SRC.rglob("*.py") if module_name(p) == module)
    fast = sorted(t for t in GRAPH[module] if t.startswith(FAST_PATHS))
    assert not fast, f"{module} imports {fast}"
    assert "use_fused" not in path.read_text(encoding="utf-8"), f"{module} calls use_fused"


# a function this long does several things: split it by what they are (docs/architecture.md); the
# lab has its own issue (the lab engine) and is not held to it here
LONGEST_FUNCTION = 60


def long_functions(path: Path) -> list[str]:
    """The functions and methods of a file longer than LONGEST_FUNCTION lines,
    with their lengths."""
    return [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > LONGEST_FUNCTION
    ]


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if not m.startswith("archlab.lab")))
def test_no_function_runs_past_60_lines(module: str) -> None:
    path = next(p for p in SRC.rglob("*.py") if module_name(p) == module)
    assert not long_functions(path), f"{module}: {long_functions(path)}"


def test_the_length_check_sees_a_long_function(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def short():\n    return 1\n\n\ndef long():\n" + "    x = 1\n" * 60)
    assert long_functions(probe) == ["long (61 lines, line 5)"]


def test_the_rule_checks_see_violations(tmp_path: Path) -> None:
    """Each checker finds what it looks for (else the two rules above could not fail)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import sys\nfrom archlab.nn.config import ModelConfig\n"
        "def f(c: ModelConfig, d: 'ModelConfig') -> "
        "None:\n    print(c)\n    sys.stderr.write('x')\n"
        "    sys.stdout.isatty()\n"
    )
    assert len(mentions_config(probe)) == 3  # the import, the annotation, the string annotation
    assert terminal_writes(probe) == ["line 4: print()", "line 5: sys.stderr.write()"]
    clean = tmp_path / "clean.py"
    clean.write_text("import logging\nlogging.getLogger(__name__).info('x')\n")
    assert mentions_config(clean) == [] and terminal_writes(clean) == []


def test_the_layout_test_sees_a_violation(tmp_path: Path) -> None:
    """The walker finds lazy and `from package import module` imports (else the tests above could
    not fail): a module imported from its package counts as the module, a name from a package's
    __init__ as the package."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def f():\n    from archlab.train import trainer\n    import archlab.costs\n"
        "    from archlab.lab import Experiment, analysis\n"
    )
    assert archlab_imports(probe) == {
        "archlab.train.trainer",
        "archlab.costs",
        "archlab.lab",
        "archlab.lab.analysis",
    }
