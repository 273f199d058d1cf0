"""The embedding / vocabulary suites' measures: read from metrics.jsonl as the trainer wrote it, the
continuation pair on a run's validation text (healing gains nothing with bytes, by construction),
and on the shared tiny run (tests/lab/conftest.py) the drift measures against the batches the run
was seen to draw and the row norms over its checkpoints."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from archlab.checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    load_initial_weights,
    load_model,
    load_weights,
)
from archlab.data.prepare import prepare_data
from archlab.data.tokens import TokenData
from archlab.lab.measures import drift, embed_measures
from archlab.lab.measures.measure import MEASURES, RunView
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM
from tests.lab.conftest import BLOCK, SEEN


def write_rows(run: Path, rows: list[dict]) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )


@dataclass
class FakeRun:
    run_dir: Path
    model: TransformerLM | None = None
    folder: Path | None = None

    def data(self) -> TokenData:
        return TokenData(self.folder)


def test_signature_and_first_loss_come_from_the_logged_rows(tmp_path: Path) -> None:
    write_rows(
        tmp_path / "a",
        [
            {"step": 1, "kind": "train", "loss": 8.1},
            {"step": 2, "kind": "train", "loss": 7.0},
            {
                "step": 2,
                "kind": "eval",
                "loss": 7.5,
                "embed_near_fixed_point": 0.1,
                "embed_max_abs": 3.0,
            },
            {
                "step": 4,
                "kind": "eval",
                "loss": 7.2,
                "embed_near_fixed_point": 0.25,
                "embed_max_abs": 4.0,
            },
        ],
    )
    run = FakeRun(tmp_path / "a")
    assert (
        MEASURES["embed_near_fixed_point"].fn(run) == 0.25
        and MEASURES["embed_max_abs"].fn(run) == 4.0
    )
    assert MEASURES["first_train_loss"].fn(run) == 8.1
    write_rows(
        tmp_path / "b",
        [{"step": 10, "kind": "train", "loss": 5.0}, {"step": 10, "kind": "eval", "loss": 5}],
    )
    late = FakeRun(tmp_path / "b")
    assert embed_measures.first_train_loss(late) is None  # step 10: not the step-0 model's loss
    assert embed_measures.last_eval(late, "embed_max_abs") is None


def test_continuation_pair_on_the_validation_text(tmp_path: Path) -> None:
    # a folder of documents: the validation documents are the same for every tokenizer
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for d in range(40):
        (corpus / f"doc{d:02d}.txt").write_text(
            "\n".join(f"line {i} of document {d}, abcdefghij" for i in range(12)), encoding="utf-8"
        )
    folder = prepare_data(str(corpus), tmp_path / "data", "byte", 256, 0.2)
    torch.manual_seed(0)
    model = TransformerLM(
        ModelConfig(vocab_size=256, d_model=32, n_layers=1, n_heads=2, max_seq_len=128)
    ).eval()
    run = FakeRun(tmp_path / "run", model, folder)
    hits = MEASURES["continuation_acc"].fn(run)
    assert MEASURES["continuation_acc"].items and len(hits) == embed_measures.CONTINUATION["cuts"]
    assert set(hits) <= {0.0, 1.0}
    gains = MEASURES["continuation_healing_gain"].fn(run)
    # bytes: every cut is on a token boundary, healing changes nothing
    assert gains == [0.0] * len(hits)
    # a BPE run on the same corpus is scored on the same cuts of the same bytes: the items
    # pair across tokenizers
    bpe = prepare_data(str(corpus), tmp_path / "bpe", "bpe", 300, 0.2)
    vocab = TokenData(bpe).tokenizer().vocab_size
    other = TransformerLM(
        ModelConfig(vocab_size=vocab, d_model=32, n_layers=1, n_heads=2, max_seq_len=128)
    ).eval()
    bpe_run = FakeRun(tmp_path / "bpe-run", other, bpe)
    assert len(MEASURES["continuation_acc"].fn(bpe_run)) == len(hits)
    offsets = [embed_measures._continuation(r)[0].offsets for r in (run, bpe_run)]
    assert offsets[0] == offsets[1]


def test_initial_weights_are_the_seeded_init_and_drift_bins_the_replayed_counts(
    run_dir: Path,
) -> None:
    """RUN/initial holds init_weights(seed=3) of the run's config; the replay of the batch
    stream equals the counts recorded while it trained; the drift measures are the binned row
    displacements, by hand."""
    initial = load_initial_weights(run_dir)
    model, _ = load_model(run_dir)
    fresh = TransformerLM(model.config)
    fresh.init_weights(seed=3)
    assert initial.keys() >= fresh.state_dict().keys()
    assert all(torch.equal(initial[k], v) for k, v in fresh.state_dict().items())
    run = RunView(run_dir, windows=1)
    replay = drift.seen_counts(run.data(), 3, 4, 4, BLOCK, 2, 256)
    assert (replay == SEEN["counts"]).all() and replay.sum() == 4 * 4 * BLOCK
    # the seed's stream
    assert not (drift.seen_counts(run.data(), 4, 4, 4, BLOCK, 2, 256) == SEEN["counts"]).all()
    moved = (
        (
            load_weights(latest_checkpoint(run_dir))["embed_tokens.weight"].double()
            - initial["embed_tokens.weight"].double()
        )
        .norm(dim=1)
        .numpy()
    )
    counts = SEEN["counts"]
    rare = (counts >= 1) & (counts <= 10)
    seen = np.flatnonzero(counts)
    top = seen[np.argsort(-counts[seen], kind="stable")][: math.ceil(0.1 * len(seen))]
    assert rare.sum() >= 3 and len(top) >= 3 and counts[top].min() > 10
    assert MEASURES["embed_drift_rare"].fn(run) == pytest.approx(moved[rare].mean(), rel=1e-12)
    assert embed_measures.embed_drift_ratio(run) == pytest.approx(
        moved[rare].mean() / moved[top].mean(), rel=1e-12
    )


def test_drift_needs_the_step0_weights(run_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(run_dir, tmp_path / "run", ignore=shutil.ignore_patterns("initial"))
    with pytest.raises(ValueError, match="no step-0 weights .* --checkpoint.keep_initial true"):
        embed_measures.embed_drift_ratio(RunView(tmp_path / "run", windows=1))


def test_embedding_row_norm_over_checkpoints(run_dir: Path) -> None:
    series = embed_measures.max_embed_row_norm_series(run_dir)
    assert [s for s, _ in series] == [2, 4]
    for (step, value), path in zip(series, list_checkpoints(run_dir)):
        weight = load_model(path)[0].embed_tokens.weight.detach()
        assert value == pytest.approx(
            float(torch.linalg.vector_norm(weight, dim=1).max()), rel=1e-6
        )
    first, last = (
        torch.linalg.vector_norm(load_model(p)[0].embed_tokens.weight.detach(), dim=1)
        for p in list_checkpoints(run_dir)
    )
    growth = embed_measures.max_embed_row_growth(RunView(run_dir, windows=1))
    assert growth == pytest.approx(float((last - first).max()), rel=1e-6)
