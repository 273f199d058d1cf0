"""Helpers of the data tests: files written, a prepared folder's tokens, a tokenizer's
stream, a corpus."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from archlab.data.tokenizer import Tokenizer


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def tokens(folder: Path, split: str) -> list[int]:
    meta = json.loads((folder / "meta.json").read_text())
    return np.fromfile(folder / f"{split}.bin", dtype=meta["dtype"]).tolist()


def stream(tok: Tokenizer, docs: list[str]) -> list[int]:
    return tok.encode_documents(docs).tolist()


@pytest.fixture()
def folder(tmp_path: Path) -> tuple[Path, list[str]]:
    """Ten documents, nested so that walk order and sorted order differ, plus files that
    must be skipped."""
    names = [
        "z.txt",
        "a/9.txt",
        "a/b/1.txt",
        "a/10.txt",
        "b.md",
        "c/d/e.txt",
        "c/x.txt",
        "m.txt",
        "n.py",
        "y.txt",
    ]
    root = tmp_path / "corpus"
    for i, name in enumerate(names):
        write(root / name, f"document {i} ({name}): " + "the cat sat on the mat. " * (10 + i))
    write(root / ".hidden.txt", "hidden")
    write(root / "__pycache__" / "n.cpython-311.pyc", b"\x00\x01compiled")
    write(root / "blob.bin", b"abc\x00def")
    order = sorted(names)  # "a/10.txt" < "a/9.txt" < "a/b/1.txt" < "b.md" < ...
    return root, [(root / n).read_text() for n in order]
