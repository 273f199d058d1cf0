"""BPE-dropout (Provilkov et al., arXiv 1910.13267) on the train split only: p = 0 is the plain
tokenizer, p > 0 gives several segmentations that all decode back, the validation split and the
saved tokenizer stay plain, and the dropout is part of the prepared folder's cache key (resume and a
prepared source refuse another p)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from archlab.cli import main
from archlab.data.prepare import prepare_data
from archlab.data.tokenizer import Tokenizer, build_tokenizer, train_bpe
from archlab.data.tokens import TokenData
from archlab.train.config import resolve_config
from archlab.train.resume import check_resume

SENTENCE = "the quick brown fox jumps over the lazy dog, naïve café"
TEXTS = [f"{SENTENCE} {i} and the lazy dog again\n" for i in range(60)]


@pytest.fixture(scope="module")
def bpe() -> Tokenizer:
    # trained first: the trainer would have dropped a dropout set before
    return train_bpe(TEXTS, 400)


def test_p_zero_is_the_plain_tokenizer(bpe: Tokenizer) -> None:
    plain = bpe.with_dropout(0.0)
    for text in (SENTENCE, *TEXTS[:5]):
        assert all(plain.encode(text) == bpe.encode(text) for _ in range(20))


def test_dropout_gives_several_segmentations_that_all_decode_back(bpe: Tokenizer) -> None:
    noisy = bpe.with_dropout(0.3)
    segmentations = {tuple(noisy.encode(SENTENCE)) for _ in range(50)}
    assert len(segmentations) >= 2
    assert all(bpe.decode(list(ids)) == SENTENCE for ids in segmentations)
    # dropped merges: more tokens
    assert all(len(ids) >= len(bpe.encode(SENTENCE)) for ids in segmentations)


def test_dropout_needs_merges_and_a_probability(bpe: Tokenizer) -> None:
    with pytest.raises(ValueError, match="needs a BPE tokenizer with merges"):
        build_tokenizer("byte", 256, None).with_dropout(0.1)
    with pytest.raises(
        ValueError, match=r"bpe_dropout=1.0 is not allowed: a probability in \[0, 1\)"
    ):
        bpe.with_dropout(1.0)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    for i in range(40):
        (folder / f"doc{i:02d}.txt").write_text(TEXTS[i] * 3, encoding="utf-8")
    return folder


def test_train_split_only_and_recorded(corpus: Path, tmp_path: Path) -> None:
    plain = prepare_data(str(corpus), tmp_path / "plain", "bpe", 400, 0.1)
    noisy = prepare_data(str(corpus), tmp_path / "noisy", "bpe", 400, 0.1, bpe_dropout=0.2)
    a, b = TokenData(plain), TokenData(noisy)
    # saved plain
    assert (plain / "tokenizer.json").read_bytes() == (noisy / "tokenizer.json").read_bytes()
    assert np.array_equal(a.splits["val"], b.splits["val"])
    assert len(b.splits["train"]) > len(a.splits["train"])
    tok = a.tokenizer()
    # same text
    assert tok.decode(b.splits["train"].tolist()) == tok.decode(a.splits["train"].tolist())
    assert b.meta["request"]["bpe_dropout"] == 0.2 and "bpe_dropout" not in a.meta["request"]
    # reused: same key
    assert prepare_data(str(corpus), noisy, "bpe", 400, 0.1, bpe_dropout=0.2) == noisy
    assert np.array_equal(TokenData(noisy).splits["train"], b.splits["train"])
    with pytest.raises(ValueError, match="a run's prepared data is never replaced"):
        prepare_data(str(corpus), noisy, "bpe", 400, 0.1, bpe_dropout=0.1, reuse_only=True)
    with pytest.raises(
        ValueError, match=r"data.bpe_dropout=0.1 is not the 0.2 .* was prepared with"
    ):
        resolve_config([{"data.source": str(noisy), "data.bpe_dropout": "0.1"}])
    with pytest.raises(ValueError, match="0 for the byte tokenizer"):
        prepare_data(str(corpus), tmp_path / "bytes", "byte", 256, 0.1, bpe_dropout=0.1)
    with pytest.raises(
        ValueError, match=r"^data.bpe_dropout=0.1 is not allowed: 0 with data.tokenizer byte"
    ):
        # before any data is prepared
        resolve_config([{"data.source": str(corpus), "data.bpe_dropout": "0.1"}])


def test_cli_flag_and_resume_key(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "cli"
    args = [
        "data",
        "prepare",
        "--data",
        str(corpus),
        "--tokenizer",
        "bpe",
        "--vocab-size",
        "400",
        "--val-fraction",
        "0.1",
        "--out",
        str(out),
    ]
    assert main([*args, "--data.bpe_dropout", "0.1"]) == 0
    assert TokenData(out).meta["request"]["bpe_dropout"] == 0.1
    train, _ = resolve_config(
        [{"data.source": str(corpus), "data.tokenizer": "bpe", "data.bpe_dropout": "0.2"}]
    )
    saved = train.to_dict()
    saved["data"]["bpe_dropout"] = 0.1
    with pytest.raises(
        ValueError, match=r"--resume: data.bpe_dropout 0.2 differs from the run's 0.1"
    ):
        check_resume(train, saved, 1)


@pytest.mark.parametrize("shape", ["one file (tail split)", "a folder of documents"])
def test_val_is_plain_at_any_dropout_under_every_split_rule(
    corpus: Path, tmp_path: Path, shape: str
) -> None:
    source = corpus
    # one document: the split is the stream's tail, not whole documents
    if shape.startswith("one file"):
        source = tmp_path / "one.txt"
        source.write_text("".join(TEXTS[i % len(TEXTS)] * 3 for i in range(40)), encoding="utf-8")
    plain = prepare_data(str(source), tmp_path / "plain", "bpe", 400, 0.1)
    rule = TokenData(plain).meta["split_rule"]
    assert rule == ("tail" if shape.startswith("one file") else "documents")
    for p in (0.1, 0.5):
        noisy = prepare_data(str(source), tmp_path / f"noisy{p}", "bpe", 400, 0.1, bpe_dropout=p)
        assert (noisy / "val.bin").read_bytes() == (plain / "val.bin").read_bytes(), (shape, p)
        assert (
            TokenData(noisy).meta["split_rule"] == rule and not (noisy / "train.plain.bin").exists()
        )
        a, b = TokenData(plain), TokenData(noisy)
        tok = a.tokenizer()
        # same text
        assert tok.decode(b.splits["train"].tolist()) == tok.decode(a.splits["train"].tolist())
        assert len(b.splits["train"]) > len(a.splits["train"])  # segmented with dropout


def test_a_folder_with_the_old_leak_is_rebuilt_or_refused(tmp_path: Path) -> None:
    source = tmp_path / "one.txt"
    source.write_text("".join(TEXTS[i % len(TEXTS)] * 3 for i in range(40)), encoding="utf-8")
    plain = prepare_data(str(source), tmp_path / "plain", "bpe", 400, 0.1)
    noisy = prepare_data(str(source), tmp_path / "noisy", "bpe", 400, 0.1, bpe_dropout=0.3)
    meta = json.loads((noisy / "meta.json").read_text())
    assert meta["val_plain"] is True
    # as a folder prepared before the fix: its val.bin cut from the dropout stream,
    # no val_plain mark
    (noisy / "val.bin").write_bytes(b"\x00\x00" * meta["tokens"]["val"])
    (noisy / "meta.json").write_text(
        json.dumps({k: v for k, v in meta.items() if k != "val_plain"})
    )
    with pytest.raises(ValueError, match="a run's prepared data is never replaced"):
        prepare_data(str(source), noisy, "bpe", 400, 0.1, bpe_dropout=0.3, reuse_only=True)
    # a new preparation rebuilds it
    prepare_data(str(source), noisy, "bpe", 400, 0.1, bpe_dropout=0.3)
    assert (noisy / "val.bin").read_bytes() == (plain / "val.bin").read_bytes()
