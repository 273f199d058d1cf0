"""Tests for archlab.data.tokenizer: byte and BPE round trips, save/load, EOS and bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from archlab.data.tokenizer import DOC_SEPARATOR, EOS_TOKEN, Tokenizer, build_tokenizer

TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "Héllo wörld, ünïcode: 日本語 and emoji 🎉.\n\n  Two spaces, a tab\tand the end.",
    "The quick brown fox jumps over the lazy dog. " * 20,
]


@pytest.fixture(scope="module")
def bpe() -> Tokenizer:
    return build_tokenizer("bpe", 320, TEXTS * 5)


def test_byte_round_trip_and_ids_are_utf8_bytes() -> None:
    tok = build_tokenizer("byte", 8192, None)
    assert (tok.kind, tok.vocab_size, tok.eos_id) == ("byte", 256, None)
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == list(text.encode("utf-8"))
        assert tok.decode(ids) == text
    assert tok.encode_batch(TEXTS) == [tok.encode(t) for t in TEXTS]


def test_byte_fast_path_matches_the_saved_tokenizers_model() -> None:
    # The fast path must agree with the tokenizer.json it saves, which other tools will load.
    tok = build_tokenizer("byte", 256, None)
    for text in TEXTS:
        assert tok.inner.encode(text).ids == tok.encode(text)
    invalid = [0xFF, 0x41, 0xE2, 0x82, 0x20, 0xC3]  # stray byte, truncated sequences
    assert tok.decode(invalid) == "\ufffdA\ufffd \ufffd"
    assert tok.inner.decode(invalid) == tok.decode(invalid)


def test_decode_out_of_range_id_names_it() -> None:
    tok = build_tokenizer("byte", 256, None)
    with pytest.raises(ValueError, match="token id 300 is out of range.*0..255"):
        tok.decode([65, 300])


def test_encode_documents_joins_with_separator(bpe: Tokenizer) -> None:
    byte = build_tokenizer("byte", 256, None)
    expected = [i for t in TEXTS for i in byte.encode(t) + byte.encode(DOC_SEPARATOR)]
    assert byte.encode_documents(TEXTS).tolist() == expected
    expected = [i for t in TEXTS for i in bpe.encode(t) + [bpe.eos_id]]
    assert bpe.encode_documents(TEXTS).tolist() == expected
    assert bpe.encode_documents([]).dtype == np.int64


def test_bpe_round_trip_eos_and_compression(bpe: Tokenizer) -> None:
    assert bpe.kind == "bpe"
    assert 256 < bpe.vocab_size <= 320
    assert bpe.eos_id == bpe.inner.token_to_id(EOS_TOKEN)
    for text in TEXTS + ["unseen text: ∮ E⋅da = Q, zebra\x00\x7f"]:
        assert bpe.decode(bpe.encode(text)) == text
    assert len(bpe.encode(TEXTS[2])) < len(TEXTS[2].encode()) / 2  # merges were learned
    assert bpe.decode([bpe.eos_id]) == EOS_TOKEN  # specials stay visible in samples


@pytest.mark.parametrize("kind", ["byte", "bpe"])
def test_save_load_same_ids_and_description(tmp_path: Path, bpe: Tokenizer, kind: str) -> None:
    tok = bpe if kind == "bpe" else build_tokenizer("byte", 256, None)
    file = tok.save(tmp_path / "tok")
    assert file == tmp_path / "tok" / "tokenizer.json"
    for source in (file, file.parent, str(file)):
        loaded = Tokenizer.load(source)
        assert loaded.describe() == tok.describe()
        assert loaded.encode_batch(TEXTS) == tok.encode_batch(TEXTS)
    assert build_tokenizer(str(file), 0, None).describe() == tok.describe()


def test_describe_hash_tells_tokenizers_apart(bpe: Tokenizer) -> None:
    other = build_tokenizer("bpe", 300, TEXTS * 5)
    assert other.describe()["hash"] != bpe.describe()["hash"]
    assert set(bpe.describe()) == {"kind", "vocab_size", "eos_id", "hash"}


def test_load_hf_folder_reads_eos_from_tokenizer_config(tmp_path: Path, bpe: Tokenizer) -> None:
    # an HF folder: tokenizer.json + tokenizer_config.json
    bpe.inner.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": {"content": EOS_TOKEN}})
    )
    assert Tokenizer.load(tmp_path).eos_id == bpe.eos_id
    (tmp_path / "tokenizer_config.json").unlink()
    assert Tokenizer.load(tmp_path).eos_id == bpe.eos_id  # found by name


def test_bad_tokenizer_inputs_name_the_value(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tokenizer 'wordpiece' is not 'byte', 'bpe'"):
        build_tokenizer("wordpiece", 256, None)
    with pytest.raises(FileNotFoundError, match="missing/tokenizer.json does not exist"):
        build_tokenizer(str(tmp_path / "missing" / "tokenizer.json"), 256, None)
    with pytest.raises(FileNotFoundError, match="empty/tokenizer.json does not exist"):
        (tmp_path / "empty").mkdir()
        Tokenizer.load(tmp_path / "empty")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json is not a valid tokenizer.json"):
        Tokenizer.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="needs texts to train on"):
        build_tokenizer("bpe", 512, None)
    with pytest.raises(ValueError, match=r"bpe vocab_size 100 is out of range \(allowed: 257\.\."):
        build_tokenizer("bpe", 100, TEXTS)
