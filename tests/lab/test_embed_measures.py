"""The embedding / vocabulary suites' measures: read from metrics.jsonl as the trainer wrote it, and the
continuation pair on a run's validation text (healing gains nothing with bytes, by construction)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from archlab.data.prepare import prepare_data
from archlab.data.tokens import TokenData
from archlab.lab import embed_measures
from archlab.lab.measure import MEASURES
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM


def write_rows(run: Path, rows: list[dict]) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@dataclass
class FakeRun:
    run_dir: Path
    model: TransformerLM | None = None
    folder: Path | None = None

    def data(self) -> TokenData:
        return TokenData(self.folder)


def test_signature_and_first_loss_come_from_the_logged_rows(tmp_path: Path) -> None:
    write_rows(tmp_path / "a", [
        {"step": 1, "kind": "train", "loss": 8.1}, {"step": 2, "kind": "train", "loss": 7.0},
        {"step": 2, "kind": "eval", "loss": 7.5, "embed_near_fixed_point": 0.1, "embed_max_abs": 3.0},
        {"step": 4, "kind": "eval", "loss": 7.2, "embed_near_fixed_point": 0.25, "embed_max_abs": 4.0}])
    run = FakeRun(tmp_path / "a")
    assert MEASURES["embed_near_fixed_point"].fn(run) == 0.25 and MEASURES["embed_max_abs"].fn(run) == 4.0
    assert MEASURES["first_train_loss"].fn(run) == 8.1
    write_rows(tmp_path / "b", [{"step": 10, "kind": "train", "loss": 5.0}, {"step": 10, "kind": "eval", "loss": 5}])
    late = FakeRun(tmp_path / "b")
    assert embed_measures.first_train_loss(late) is None  # step 10: not the step-0 model's loss
    assert embed_measures.last_eval(late, "embed_max_abs") is None


def test_continuation_pair_on_the_validation_text(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"  # a folder of documents: the validation documents are the same for every tokenizer
    corpus.mkdir()
    for d in range(40):
        (corpus / f"doc{d:02d}.txt").write_text("\n".join(f"line {i} of document {d}, abcdefghij" for i in range(12)),
                                                encoding="utf-8")
    folder = prepare_data(str(corpus), tmp_path / "data", "byte", 256, 0.2)
    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(vocab_size=256, d_model=32, n_layers=1, n_heads=2, max_seq_len=128)).eval()
    run = FakeRun(tmp_path / "run", model, folder)
    hits = MEASURES["continuation_acc"].fn(run)
    assert MEASURES["continuation_acc"].items and len(hits) == embed_measures.CONTINUATION["cuts"]
    assert set(hits) <= {0.0, 1.0}
    gains = MEASURES["continuation_healing_gain"].fn(run)
    assert gains == [0.0] * len(hits)  # bytes: every cut is on a token boundary, healing changes nothing
    # a BPE run on the same corpus is scored on the same cuts of the same bytes: the items pair across tokenizers
    bpe = prepare_data(str(corpus), tmp_path / "bpe", "bpe", 300, 0.2)
    vocab = TokenData(bpe).tokenizer().vocab_size
    other = TransformerLM(ModelConfig(vocab_size=vocab, d_model=32, n_layers=1, n_heads=2, max_seq_len=128)).eval()
    bpe_run = FakeRun(tmp_path / "bpe-run", other, bpe)
    assert len(MEASURES["continuation_acc"].fn(bpe_run)) == len(hits)
    offsets = [embed_measures._continuation(r)[0].offsets for r in (run, bpe_run)]
    assert offsets[0] == offsets[1]
