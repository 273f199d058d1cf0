"""Tests for archlab.data.tokens: corpora -> memmaps (exact contents, split, cache), get_batch, bad inputs."""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from archlab.cli import main
from archlab.data.tokenizer import Tokenizer
from archlab.data.tokens import (
    TokenData,
    dtype_for_vocab,
    open_corpus,
    prepare_data,
    stdlib_files,
    to_token_array,
)


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
    """Ten documents, nested so that walk order and sorted order differ, plus files that must be skipped."""
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


@pytest.mark.parametrize("kind", ["byte", "bpe"])
def test_folder_memmaps_equal_tokenizer_ids_with_document_split(
    folder: tuple[Path, list[str]], tmp_path: Path, kind: str
) -> None:
    root, docs = folder
    out = prepare_data(str(root), tmp_path / "out", tokenizer=kind, vocab_size=300, val_fraction=0.2)
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


def test_split_is_deterministic_and_disjoint(folder: tuple[Path, list[str]], tmp_path: Path) -> None:
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


def test_jsonl_documents_and_text_field(tmp_path: Path) -> None:
    rows = [{"body": f"story {i}: once upon a time", "id": i} for i in range(4)]
    file = write(tmp_path / "s.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    out = prepare_data(str(file), tmp_path / "out", text_field="body", val_fraction=0.25)
    tok = Tokenizer.load(out)
    assert tokens(out, "train") == stream(tok, [r["body"] for r in rows[:3]])
    assert tokens(out, "val") == stream(tok, [rows[3]["body"]])


def test_non_utf8_bytes_are_replaced_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    raw = b"ok \xff\xfe bad, a real \xef\xbf\xbd stays. " * 4
    file = write(tmp_path / "latin.txt", raw)
    with caplog.at_level(logging.WARNING):
        out = prepare_data(str(file), tmp_path / "out", val_fraction=0.1)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["source"]["replaced_sequences"] == 8  # two invalid bytes per copy; the real U+FFFD is valid
    assert "8 invalid UTF-8 sequences replaced" in caplog.text
    assert tokens(out, "train") + tokens(out, "val") == stream(
        Tokenizer.load(out), [raw.decode("utf-8", "replace")]
    )


def test_prepared_folder_is_cached_and_rebuilt_on_change(
    folder: tuple[Path, list[str]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root, _ = folder
    out = prepare_data(str(root), tmp_path / "out")
    stamp = (out / "train.bin").stat().st_mtime_ns
    with caplog.at_level(logging.INFO):
        prepare_data(str(root), out)
    assert "reusing prepared data" in caplog.text and (out / "train.bin").stat().st_mtime_ns == stamp
    before = tokens(out, "train")
    write(root / "a" / "10.txt", "changed text " * 30)
    prepare_data(str(root), out)
    assert tokens(out, "train") != before
    prepare_data(str(root), out, val_fraction=0.5)  # another split is another cache key
    assert json.loads((out / "meta.json").read_text())["documents"] == {"train": 5, "val": 5}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "out"]  # no temp folders left behind


def test_tokenizer_json_path_is_reused_as_is(folder: tuple[Path, list[str]], tmp_path: Path) -> None:
    root, docs = folder
    first = prepare_data(str(root), tmp_path / "bpe", tokenizer="bpe", vocab_size=300)
    other = write(tmp_path / "other.txt", docs[0] + docs[1])
    out = prepare_data(str(other), tmp_path / "reuse", tokenizer=str(first / "tokenizer.json"))
    tok = Tokenizer.load(first)
    assert Tokenizer.load(out).describe() == tok.describe()
    assert tokens(out, "train") + tokens(out, "val") == stream(tok, [docs[0] + docs[1]])


def test_concurrent_publish_keeps_the_first_folder(
    folder: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import archlab.data.tokens as data_module

    root, _ = folder
    winner = {"request": None}

    def racing_publish(tmp: Path, out: Path) -> None:  # another rank renamed its folder into place first
        shutil.copytree(tmp, out)
        meta = json.loads((out / "meta.json").read_text())
        (out / "meta.json").write_text(json.dumps({**meta, "request": winner["request"] or meta["request"]}))
        raise OSError(f"Directory not empty: {out}")

    monkeypatch.setattr(data_module, "_publish", racing_publish)
    out = prepare_data(str(root), tmp_path / "same")  # same request: theirs is as good as ours
    assert TokenData(out).num_tokens("train") > 0
    winner["request"] = {"other": "settings"}
    with pytest.raises(OSError, match="Directory not empty"):
        prepare_data(str(root), tmp_path / "different")


def test_stdlib_corpus_subset(tmp_path: Path) -> None:
    root, files = stdlib_files()
    rel = [f.relative_to(root).as_posix() for f in files]
    assert rel == sorted(rel) and all(r.endswith(".py") for r in rel)
    assert not any(part in ("site-packages", "test", "tests") for r in rel for part in r.split("/"))
    out = prepare_data("stdlib", tmp_path / "out", val_fraction=0.25, max_files=8)
    docs = [f.read_text(encoding="utf-8") for f in files[:8]]
    tok = Tokenizer.load(out)
    assert tokens(out, "train") == stream(tok, [d for i, d in enumerate(docs) if i not in (3, 7)])
    assert tokens(out, "val") == stream(tok, [docs[3], docs[7]])


def test_dtype_choice_and_overflow() -> None:
    assert dtype_for_vocab(256) == np.uint16 and dtype_for_vocab(65536) == np.uint16
    assert dtype_for_vocab(65537) == np.uint32 and dtype_for_vocab(2**32) == np.uint32
    with pytest.raises(ValueError, match="vocab_size 4294967297 does not fit a uint32"):
        dtype_for_vocab(2**32 + 1)
    assert to_token_array(np.array([0, 65535]), np.dtype(np.uint16)).dtype == np.uint16
    with pytest.raises(
        ValueError, match=r"token id 70000 does not fit the memmap dtype uint16 \(ids must be in 0..65535\)"
    ):
        to_token_array(np.array([1, 70000]), np.dtype(np.uint16))
    with pytest.raises(ValueError, match="token id 4294967296 does not fit the memmap dtype uint32"):
        to_token_array(np.array([2**32]), np.dtype(np.uint32))
    with pytest.raises(ValueError, match="token id -1 does not fit"):
        to_token_array(np.array([-1, 3]), np.dtype(np.uint32))


def test_bad_corpora_name_the_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(FileNotFoundError, match=f"corpus path {missing} does not exist"):
        prepare_data(str(missing), tmp_path / "out")
    with pytest.raises(ValueError, match=r"corpus .*empty\.txt is empty"):
        prepare_data(str(write(tmp_path / "empty.txt", "")), tmp_path / "out")
    (tmp_path / "void").mkdir()
    with pytest.raises(ValueError, match="corpus .*void holds no readable text files"):
        prepare_data(str(tmp_path / "void"), tmp_path / "out")
    tiny = write(tmp_path / "tiny.txt", "x" * 200)
    with pytest.raises(ValueError, match=r"corpus .*tiny\.txt: val split has 11 tokens, need at least 129"):
        prepare_data(str(tiny), tmp_path / "out", min_tokens=129)
    bad = write(tmp_path / "bad.jsonl", '{"text": "fine"}\n{"title": "no text"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2 has no string field 'text' \(found: \['title'\]\)"):
        prepare_data(str(bad), tmp_path / "out2")
    with pytest.raises(ValueError, match=r"broken\.jsonl:1 is not valid JSON"):
        prepare_data(str(write(tmp_path / "broken.jsonl", "{oops\n")), tmp_path / "out2")
    with pytest.raises(ValueError, match=r"val_fraction must be in \(0, 1\) \(got 1.5\)"):
        prepare_data(str(tiny), tmp_path / "out2", val_fraction=1.5)
    with pytest.raises(ValueError, match=r"max_files must be >= 1 \(got 0\)"):
        open_corpus("stdlib", max_files=0)
    write(tmp_path / "mine" / "notes.txt", "precious")
    with pytest.raises(
        ValueError, match=f"out dir {tmp_path / 'mine'} exists and is not a prepared data folder"
    ):
        prepare_data(str(tiny), tmp_path / "mine")
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    with pytest.raises(ValueError, match="hf:roneneldan/TinyStories needs the optional package 'datasets'"):
        prepare_data("hf:roneneldan/TinyStories", tmp_path / "out3")


@pytest.fixture()
def prepared(tmp_path: Path) -> Path:
    text = "".join(chr(32 + i % 90) for i in range(3000))
    return prepare_data(str(write(tmp_path / "abc.txt", text)), tmp_path / "out", val_fraction=0.1)


def test_get_batch_windows_shift_and_determinism(prepared: Path) -> None:
    data, stored = TokenData(prepared), np.array(tokens(prepared, "train"))
    gen = torch.Generator().manual_seed(7)
    state = gen.get_state()
    x, y = data.get_batch("train", 4, 16, gen)
    assert x.shape == y.shape == (4, 16) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    starts = torch.randint(len(stored) - 16, (4,), generator=torch.Generator().manual_seed(7))
    for row, s in zip(x.tolist(), starts.tolist(), strict=True):
        assert row == stored[s : s + 16].tolist()
    gen.set_state(state)  # what the trainer does on resume
    x2, y2 = data.get_batch("train", 4, 16, gen)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(data.get_batch("train", 4, 16, gen)[0], x)
    x, y = data.get_batch("val", 1, data.num_tokens("val") - 1, torch.Generator())  # the one full window
    assert x[0].tolist() + y[0, -1:].tolist() == tokens(prepared, "val")


def test_rank_shards_concatenate_to_the_single_process_batch(prepared: Path) -> None:
    single = TokenData(prepared).get_batch("train", 6, 8, torch.Generator().manual_seed(3))
    shards = [
        TokenData(prepared, rank=r, world_size=2).get_batch("train", 3, 8, torch.Generator().manual_seed(3))
        for r in (0, 1)
    ]
    assert torch.equal(torch.cat([s[0] for s in shards]), single[0])
    assert torch.equal(torch.cat([s[1] for s in shards]), single[1])
    assert not torch.equal(shards[0][0], shards[1][0])


def test_get_batch_bad_inputs_name_the_value(prepared: Path, tmp_path: Path) -> None:
    data = TokenData(prepared)
    with pytest.raises(ValueError, match="split 'test' is not one of"):
        data.get_batch("test", 2, 8, torch.Generator())
    n = data.num_tokens("val")
    with pytest.raises(
        ValueError, match=f"block_size {n} from split 'val' .*\\({n} tokens; need block_size \\+ 1"
    ):
        data.get_batch("val", 2, n, torch.Generator())
    with pytest.raises(ValueError, match=r"rank 2 is not in 0..1 \(world_size 2\)"):
        TokenData(prepared, rank=2, world_size=2)
    with pytest.raises(FileNotFoundError, match="meta.json does not exist"):
        TokenData(tmp_path)


def test_cli_prepare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = write(tmp_path / "c.txt", "hello world. " * 100)
    assert main(["data", "prepare", "--data", str(corpus), "--out", str(tmp_path / "out")]) == 0
    assert "train 1,236 / val 66 tokens (uint16), tokenizer byte vocab 256" in capsys.readouterr().out
    assert (
        main(["data", "prepare", "--data", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "o")]) == 2
    )
    assert f"corpus path {tmp_path / 'missing.txt'} does not exist" in capsys.readouterr().err


def test_cli_prepare_says_when_it_reused_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = write(tmp_path / "c.txt", "hello world. " * 100)
    argv = ["data", "prepare", "--data", str(corpus), "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert re.search(r", prepared in [\d.]+ s$", first.strip()) and "reused" not in first
    assert main(argv) == 0
    assert re.search(r", reused \(prepared earlier in [\d.]+ s\)$", capsys.readouterr().out.strip())


def test_reuse_only_never_replaces_a_prepared_folder(tmp_path: Path) -> None:
    corpus = write(tmp_path / "a.txt", "first corpus. " * 100)
    out = prepare_data(str(corpus), tmp_path / "out")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    other = write(tmp_path / "b.txt", "another corpus. " * 100)
    with pytest.raises(ValueError, match=rf"{out} holds {corpus} with tokenizer byte, not {other} with tokenizer "
                                         "byte; a run's prepared data is never replaced"):
        prepare_data(str(other), out, reuse_only=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert prepare_data(str(corpus), out, reuse_only=True) == out  # the same request is reused as before


def test_strided_windows_span_the_split_evenly_without_a_generator(tmp_path: Path) -> None:
    out = prepare_data(str(write(tmp_path / "c.txt", "abcdefghij" * 30)), tmp_path / "p", "byte", val_fraction=0.5)
    data = TokenData(out)
    n_val = data.num_tokens("val")  # half of the 302 bytes
    starts = data.strided_windows("val", 7, 10)
    assert starts.tolist() == [round(i * (n_val - 11) / 6) for i in range(7)]  # first token .. last full window
    assert data.strided_windows("val", 1, 10).tolist() == [0]
    x, y = data.windows_at("val", starts, 10)
    val = np.asarray(data.splits["val"]).astype(np.int64)
    assert x.tolist() == [val[s:s + 10].tolist() for s in starts] and y.tolist() == [val[s + 1:s + 11].tolist()
                                                                                      for s in starts]
    with pytest.raises(ValueError, match=r"cannot lay 2 windows of block_size 200 over split 'val'"):
        data.strided_windows("val", 2, 200)


def test_each_rank_gets_its_slice_of_the_one_draw(tmp_path: Path) -> None:
    out = prepare_data(str(write(tmp_path / "c.txt", "abcdefghij" * 30)), tmp_path / "p", "byte", val_fraction=0.5)
    starts = TokenData(out, 0, 2).batch_starts("train", 3, 8, torch.Generator().manual_seed(5))  # 2 ranks x 3
    train = np.asarray(TokenData(out).splits["train"]).astype(np.int64)
    for rank in (0, 1):
        x, _ = TokenData(out, rank, 2).get_batch("train", 3, 8, torch.Generator().manual_seed(5))
        assert x.tolist() == [train[s:s + 8].tolist() for s in starts[rank * 3:(rank + 1) * 3]]
