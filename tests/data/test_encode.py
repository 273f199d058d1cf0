"""Tests for archlab.data.encode: the memmaps hold exactly the tokenizer's ids, the document split
and its tail fallback, the memmap dtype."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from archlab.data.encode import dtype_for_vocab, to_token_array
from archlab.data.prepare import prepare_data
from archlab.data.tokenizer import Tokenizer
from tests.data.conftest import stream, tokens, write


@pytest.mark.parametrize("kind", ["byte", "bpe"])
def test_folder_memmaps_equal_tokenizer_ids_with_document_split(
    folder: tuple[Path, list[str]], tmp_path: Path, kind: str
) -> None:
    root, docs = folder
    out = prepare_data(
        str(root), tmp_path / "out", tokenizer=kind, vocab_size=300, val_fraction=0.2
    )
    tok = Tokenizer.load(out)
    val_docs = [docs[4], docs[9]]  # every 5th document in sorted order
    train_docs = [d for i, d in enumerate(docs) if i not in (4, 9)]
    assert tokens(out, "train") == stream(tok, train_docs)
    assert tokens(out, "val") == stream(tok, val_docs)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["documents"] == {"train": 8, "val": 2} and meta["split_rule"] == "documents"
    assert meta["source"]["files"] == 10 and meta["tokenizer"] == tok.describe()
    assert meta["tokens"] == {"train": len(tokens(out, "train")), "val": len(tokens(out, "val"))}
    if kind == "bpe":
        assert tok.eos_id is not None and tokens(out, "train").count(tok.eos_id) == 8


def test_split_is_deterministic_and_disjoint(
    folder: tuple[Path, list[str]], tmp_path: Path
) -> None:
    root, docs = folder
    first = prepare_data(str(root), tmp_path / "one", val_fraction=0.2)
    second = prepare_data(str(root), tmp_path / "two", val_fraction=0.2)
    for split in ("train", "val"):
        assert (first / f"{split}.bin").read_bytes() == (second / f"{split}.bin").read_bytes()
    train, val = bytes(tokens(first, "train")).decode(), bytes(tokens(first, "val")).decode()
    for i, doc in enumerate(docs):
        assert (doc in val) == (i in (4, 9)) and (doc in train) == (i not in (4, 9))


def test_single_file_falls_back_to_tail_split(tmp_path: Path) -> None:
    text = "To be, or not to be, that is the question. " * 50
    out = prepare_data(str(write(tmp_path / "play.txt", text)), tmp_path / "out", val_fraction=0.1)
    full = stream(Tokenizer.load(out), [text])
    n_val = math.ceil(0.1 * len(full))
    assert tokens(out, "train") == full[:-n_val] and tokens(out, "val") == full[-n_val:]
    assert json.loads((out / "meta.json").read_text())["split_rule"] == "tail"


def test_dtype_choice_and_overflow() -> None:
    assert dtype_for_vocab(256) == np.uint16 and dtype_for_vocab(65536) == np.uint16
    assert dtype_for_vocab(65537) == np.uint32 and dtype_for_vocab(2**32) == np.uint32
    with pytest.raises(ValueError, match="vocab_size 4294967297 does not fit a uint32"):
        dtype_for_vocab(2**32 + 1)
    assert to_token_array(np.array([0, 65535]), np.dtype(np.uint16)).dtype == np.uint16
    with pytest.raises(
        ValueError,
        match=r"token id 70000 does not fit the memmap dtype uint16 \(ids must be in 0..65535\)",
    ):
        to_token_array(np.array([1, 70000]), np.dtype(np.uint16))
    with pytest.raises(
        ValueError, match="token id 4294967296 does not fit the memmap dtype uint32"
    ):
        to_token_array(np.array([2**32]), np.dtype(np.uint32))
    with pytest.raises(ValueError, match="token id -1 does not fit"):
        to_token_array(np.array([-1, 3]), np.dtype(np.uint32))
