"""Held-out data of the evaluations (eval/held_out.py, eval/source.py): every `--data` `train`
takes, each giving the tokens data preparation would hold out (checked against data/encode.py's
own val split), a prepared folder of another tokenizer refused, and a Hugging Face folder without
`--data` refused before its weights are read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from archlab.cli import main
from archlab.data.prepare import prepare_data
from archlab.data.tokenizer import build_tokenizer
from archlab.data.tokens import TokenData
from archlab.eval.held_out import held_out_text, held_out_tokens
from archlab.eval.source import eval_source

BYTE = build_tokenizer("byte", 256, None)


def _val(folder: Path) -> list[int]:
    return np.asarray(TokenData(folder).splits["val"], dtype=np.int64).tolist()


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpora")
    (root / "files").mkdir()
    # 45 documents: val holds the 20th and the 40th (data/encode.py's rule at 0.05)
    for i in range(45):
        (root / "files" / f"{i:02d}.txt").write_text(
            f"document {i}: " + "words of text " * (i % 5 + 1)
        )
    (root / "docs.jsonl").write_text(
        "\n".join(json.dumps({"text": f"line {i} " * (i % 7 + 2)}) for i in range(60))
    )
    (root / "few").mkdir()
    for i in range(3):  # fewer than 1 / 0.05 documents: val is the stream's tail
        (root / "few" / f"{i}.txt").write_text(f"a short document number {i}\n" * 30)
    (root / "held.txt").write_text("the held-out text, scored as it is\n" * 3)
    return root


@pytest.mark.parametrize("spec", ["files", "docs.jsonl", "few", "passkey"])
def test_a_corpus_holds_out_what_data_preparation_holds_out(
    spec: str, corpora: Path, tmp_path: Path
) -> None:
    data = spec if spec == "passkey" else str(corpora / spec)
    assert held_out_tokens(data, BYTE).tolist() == _val(prepare_data(data, tmp_path / "prepared"))


def test_a_corpus_is_read_until_enough_tokens_are_in_hand(corpora: Path, tmp_path: Path) -> None:
    full = _val(prepare_data("passkey", tmp_path / "prepared"))
    some = held_out_tokens("passkey", BYTE, need=1000).tolist()
    assert 1000 <= len(some) < len(full) and some == full[: len(some)]


def test_a_text_file_is_scored_as_it_is_and_a_prepared_folder_by_its_val_split(
    corpora: Path, tmp_path: Path
) -> None:
    text = (corpora / "held.txt").read_text()
    assert held_out_tokens(str(corpora / "held.txt"), BYTE).tolist() == list(text.encode())
    # a file is cut as it is, whole
    assert held_out_text(str(corpora / "held.txt"), BYTE, 5) == text
    folder = prepare_data(str(corpora / "files"), tmp_path / "byte")
    assert held_out_tokens(str(folder), BYTE).tolist() == _val(folder)
    assert held_out_text(str(folder), BYTE, 7) == BYTE.decode(_val(folder)[:7])


def test_a_prepared_folder_of_another_tokenizer_is_refused(corpora: Path, tmp_path: Path) -> None:
    folder = prepare_data(str(corpora / "files"), tmp_path / "bpe", tokenizer="bpe", vocab_size=300)
    with pytest.raises(
        ValueError,
        match=rf"--data {folder} was prepared with another tokenizer \(bpe, \d+ ids\) "
        r"than the model's \(byte, 256 ids\): give the raw corpus instead",
    ):
        held_out_tokens(str(folder), BYTE)


def _hf_folder(root: Path) -> Path:
    from transformers import AutoModelForCausalLM, LlamaConfig

    from tests.interop.family_cases import llama_like

    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(
        LlamaConfig(**llama_like(vocab_size=256, max_position_embeddings=64))
    ).save_pretrained(root)
    BYTE.save(root)
    return root


def test_a_hugging_face_folder_without_data_is_refused_before_its_weights_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    hf = _hf_folder(tmp_path / "hf")
    capsys.readouterr()  # transformers' own progress bar while writing the folder
    monkeypatch.setattr(
        "archlab.interop.from_hf",
        lambda *a, **k: pytest.fail("the model was loaded"),
        raising=False,
    )
    for action in ("length", "continuation"):
        assert main(["eval", action, "--checkpoint", str(hf)]) == 2
        err = capsys.readouterr()
        assert err.out == "" and err.err.strip() == (
            "archlab eval: error: --data is needed with a Hugging Face folder, which has no "
            "prepared data of its own: give a held-out text file, a corpus (stdlib, a folder, "
            "JSONL, hf:NAME) or a prepared data folder"
        )
    source = eval_source(str(hf), "stdlib")
    assert (source.hf, source.checkpoint, source.data, source.config.max_seq_len) == (
        True,
        None,
        "stdlib",
        64,
    )


def test_eval_length_takes_stdlib_as_train_does(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`--data stdlib` (refused before: "neither a text file nor a prepared data folder"):
    its validation files."""
    hf = _hf_folder(tmp_path / "hf")
    assert (
        main(
            [
                "eval",
                "length",
                "--checkpoint",
                str(hf),
                "--data",
                "stdlib",
                "--lengths",
                "16,32",
                "--scalings",
                "none",
                "--windows",
                "2",
                "--out",
                str(tmp_path / "eval"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert f"{hf} (trained at 64) on stdlib" in capsys.readouterr().out
