"""Tests for archlab.data.prepare: corpora -> prepared folders (JSONL, non-UTF-8, the stdlib
corpus), the cache and its rebuilds, concurrent publishing, bad inputs, `archlab data prepare`."""

from __future__ import annotations

import json
import logging
import re
import shutil
import sys
from pathlib import Path

import pytest

from archlab.cli import main
from archlab.data.corpus import open_corpus, stdlib_files
from archlab.data.prepare import prepare_data
from archlab.data.tokenizer import Tokenizer
from archlab.data.tokens import TokenData
from tests.data.conftest import stream, tokens, write


def test_jsonl_documents_and_text_field(tmp_path: Path) -> None:
    rows = [{"body": f"story {i}: once upon a time", "id": i} for i in range(4)]
    file = write(tmp_path / "s.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    out = prepare_data(str(file), tmp_path / "out", text_field="body", val_fraction=0.25)
    tok = Tokenizer.load(out)
    assert tokens(out, "train") == stream(tok, [r["body"] for r in rows[:3]])
    assert tokens(out, "val") == stream(tok, [rows[3]["body"]])


def test_non_utf8_bytes_are_replaced_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = b"ok \xff\xfe bad, a real \xef\xbf\xbd stays. " * 4
    file = write(tmp_path / "latin.txt", raw)
    with caplog.at_level(logging.WARNING):
        out = prepare_data(str(file), tmp_path / "out", val_fraction=0.1)
    meta = json.loads((out / "meta.json").read_text())
    # two invalid bytes per copy; the real U+FFFD is valid
    assert meta["source"]["replaced_sequences"] == 8
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
    assert (
        "reusing prepared data" in caplog.text and (out / "train.bin").stat().st_mtime_ns == stamp
    )
    before = tokens(out, "train")
    write(root / "a" / "10.txt", "changed text " * 30)
    prepare_data(str(root), out)
    assert tokens(out, "train") != before
    prepare_data(str(root), out, val_fraction=0.5)  # another split is another cache key
    assert json.loads((out / "meta.json").read_text())["documents"] == {"train": 5, "val": 5}
    # no temp folders left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "out"]


def test_tokenizer_json_path_is_reused_as_is(
    folder: tuple[Path, list[str]], tmp_path: Path
) -> None:
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
    import archlab.data.prepare as data_module

    root, _ = folder
    winner = {"request": None}

    # another rank renamed its folder into place first
    def racing_publish(tmp: Path, out: Path) -> None:
        shutil.copytree(tmp, out)
        meta = json.loads((out / "meta.json").read_text())
        (out / "meta.json").write_text(
            json.dumps({**meta, "request": winner["request"] or meta["request"]})
        )
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
    with pytest.raises(
        ValueError, match=r"corpus .*tiny\.txt: val split has 11 tokens, need at least 129"
    ):
        prepare_data(str(tiny), tmp_path / "out", min_tokens=129)
    bad = write(tmp_path / "bad.jsonl", '{"text": "fine"}\n{"title": "no text"}\n')
    with pytest.raises(
        ValueError, match=r"bad\.jsonl:2 has no string field 'text' \(found: \['title'\]\)"
    ):
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
    with pytest.raises(
        ValueError, match="hf:roneneldan/TinyStories needs the optional package 'datasets'"
    ):
        prepare_data("hf:roneneldan/TinyStories", tmp_path / "out3")


def test_cli_prepare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = write(tmp_path / "c.txt", "hello world. " * 100)
    assert main(["data", "prepare", "--data", str(corpus), "--out", str(tmp_path / "out")]) == 0
    assert (
        "train 1,236 / val 66 tokens (uint16), tokenizer byte vocab 256" in capsys.readouterr().out
    )
    assert (
        main(
            [
                "data",
                "prepare",
                "--data",
                str(tmp_path / "missing.txt"),
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert f"corpus path {tmp_path / 'missing.txt'} does not exist" in capsys.readouterr().err


def test_cli_prepare_says_when_it_reused_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = write(tmp_path / "c.txt", "hello world. " * 100)
    argv = ["data", "prepare", "--data", str(corpus), "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert re.search(
        r", prepared in [\d.]+ s; train on it with `archlab train --data .*`$", first.strip()
    )
    assert "reused" not in first
    assert main(argv) == 0
    assert re.search(
        r", reused \(prepared earlier in [\d.]+ s\); train on it with",
        capsys.readouterr().out.strip(),
    )


def test_reuse_only_never_replaces_a_prepared_folder(tmp_path: Path) -> None:
    corpus = write(tmp_path / "a.txt", "first corpus. " * 100)
    out = prepare_data(str(corpus), tmp_path / "out")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    other = write(tmp_path / "b.txt", "another corpus. " * 100)
    with pytest.raises(
        ValueError,
        match=rf"{out} holds {corpus} with tokenizer byte, not {other} with tokenizer "
        "byte; a run's prepared data is never replaced",
    ):
        prepare_data(str(other), out, reuse_only=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # the same request is reused as before
    assert prepare_data(str(corpus), out, reuse_only=True) == out


def test_bpe_is_trained_on_the_train_documents_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Documents 3 and 7 of 8 are validation (val_fraction 0.25); a word only they hold, repeated,
    must never become a token: the BPE trainer sees the six train documents, and the tokenizer
    equals one trained on them."""
    import archlab.data.prepare as prepare
    from archlab.data.tokenizer import train_bpe

    docs = [
        ("quixotic zephyrs vex jumbo kwartz. " * 40)
        if i in (3, 7)
        else f"story {i}: the cat sat on the mat. " * 40
        for i in range(8)
    ]
    file = write(tmp_path / "docs.jsonl", "".join(json.dumps({"text": d}) + "\n" for d in docs))
    train_docs = [d for i, d in enumerate(docs) if i not in (3, 7)]
    seen: list[list[str]] = []
    real = prepare.build_tokenizer

    def spy(kind: str, vocab_size: int, texts):  # noqa: ANN001, ANN202
        texts = list(texts) if texts is not None else None
        seen.append(texts)
        return real(kind, vocab_size, texts)

    monkeypatch.setattr(prepare, "build_tokenizer", spy)
    out = prepare_data(
        str(file), tmp_path / "out", tokenizer="bpe", vocab_size=320, val_fraction=0.25
    )
    assert seen == [train_docs]
    tok = Tokenizer.load(out)
    assert tok.describe()["hash"] == train_bpe(train_docs, 320).describe()["hash"]
    learned = [t for t in tok.token_bytes() if t is not None and len(t) > 1]
    assert any(b"mat" in t for t in learned)  # the train text's words are merged ...
    # ... the validation's never
    assert not any(c in t for t in learned for c in (b"zeph", b"quix", b"kwar"))
    everything = [t for t in train_bpe(docs, 320).token_bytes() if t is not None]
    # trained on every document, the word would be a token
    assert any(b"zeph" in t for t in everything)
    assert tokens(out, "val") == stream(tok, [docs[3], docs[7]])
