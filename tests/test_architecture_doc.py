"""docs/architecture.md matches the tree: every module its tree block names exists, and every module
of the package is named there (a new module gets its line, a moved one its new place)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
SRC = ROOT / "src" / "archlab"
ENTRY = re.compile(r"^( *)([\w./-]+(?:\.py|/))(?:\s|$)")  # `  name.py   description` or `  folder/`


def tree_block(text: str) -> list[str]:
    """The lines of the code block under "## The tree"."""
    section = text.split("## The tree", 1)[1]
    return section.split("```", 2)[1].splitlines()


def named_paths(lines: list[str]) -> list[Path]:
    """Each entry as a path from the repository root: two spaces of indentation per folder level."""
    stack: list[tuple[int, str]] = []
    out = []
    for line in lines:
        m = ENTRY.match(line)
        if not m:
            continue  # a description's continuation
        indent, name = len(m.group(1)), m.group(2)
        stack = [(i, n) for i, n in stack if i < indent]
        path = Path(*[n for _, n in stack], name)
        out.append(path)
        if name.endswith("/"):
            stack.append((indent, name))
    return out


def test_every_named_module_and_folder_exists() -> None:
    paths = named_paths(tree_block(DOC.read_text(encoding="utf-8")))
    assert len(paths) > 100
    missing = [str(p) for p in paths if not (ROOT / p).exists()]
    assert not missing, f"docs/architecture.md names what does not exist: {missing}"


def test_every_module_is_named() -> None:
    """Every module of src/archlab but the package __init__ files and the one-table-per-family
    folder (whose entry lists them) has its line."""
    named = {str(p) for p in named_paths(tree_block(DOC.read_text(encoding="utf-8")))}
    modules = [p.relative_to(ROOT) for p in SRC.rglob("*.py") if p.name != "__init__.py"]
    # the folder's entry lists them
    grouped = ("src/archlab/interop/families/", "src/archlab/commands/")
    unnamed = sorted(
        str(m) for m in modules if str(m) not in named and not str(m).startswith(grouped)
    )
    assert not unnamed, f"docs/architecture.md has no line for {unnamed}"


def test_the_parser_nests_by_indentation() -> None:
    lines = [
        "src/archlab/",
        "  nn/",
        "    attention/",
        "      kernels.py   the kernels",
        "                   more",
        "    config.py        ModelConfig",
        "  cli.py   dispatch",
    ]
    assert [str(p) for p in named_paths(lines)] == [
        "src/archlab",
        "src/archlab/nn",
        "src/archlab/nn/attention",
        "src/archlab/nn/attention/kernels.py",
        "src/archlab/nn/config.py",
        "src/archlab/cli.py",
    ]
