"""Every relative link and image in README.md and docs/ points to a file of the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def relative_links(text: str) -> list[str]:
    """Targets of markdown links and images that are not URLs or in-page anchors,
    without their anchor."""
    return [t.split("#", 1)[0] for t in LINK.findall(text) if not re.match(r"[a-z]+:|#", t)]


def test_link_pattern_finds_files_and_skips_urls() -> None:
    text = "[a](docs/a.md#x) ![p](img/p.png) [u](https://x.org/a.md) [s](#section) [m](mailto:a@b)"
    assert relative_links(text) == ["docs/a.md", "img/p.png"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    missing = [
        t
        for t in relative_links(page.read_text(encoding="utf-8"))
        if not (page.parent / t).exists()
    ]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"
