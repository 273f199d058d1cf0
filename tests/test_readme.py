"""The README's Python quick start runs as written (a moved module would break it silently otherwise)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_blocks_of_the_readme_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "the README has a Python quick start"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})
