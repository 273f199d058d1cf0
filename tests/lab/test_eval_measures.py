"""The measures on validation text, on the shared tiny run (tests/lab/conftest.py), each against
an independent computation: the fixed evaluation set's loss and |log Z| by hand, the trainer's
own evaluation windows, and the long-context loss on the same targets at every length (n/a
for learned positions)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from archlab.checkpoint import latest_checkpoint, load_model
from archlab.data.tokens import TokenData
from archlab.lab.measures import eval_measures, measure
from archlab.nn.model import TransformerLM
from archlab.nn.presets import build_preset
from tests.lab.conftest import BLOCK


def _strided(data: TokenData, n: int) -> torch.Tensor:
    """n windows of BLOCK + 1 tokens, evenly spread from the first token to the last full
    window (by hand)."""
    val = np.asarray(data.splits["val"]).astype(np.int64)
    last = len(val) - BLOCK - 1
    return torch.from_numpy(
        np.stack([val[round(i * last / (n - 1)) :][: BLOCK + 1] for i in range(n)])
    )


def _mean_ce(model: TransformerLM, windows: torch.Tensor) -> float:
    with torch.no_grad():
        logits = model.eval()(windows[:, :-1]).double()
    return float(F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten()))


def test_val_loss_scores_the_final_checkpoint_on_the_fixed_set(run_dir: Path) -> None:
    run = measure.RunView(run_dir, windows=4)
    data = run.data()
    # here: the whole split, tiled
    n = min(math.ceil(65_536 / BLOCK), (data.num_tokens("val") - 1) // BLOCK)
    assert n * BLOCK > data.num_tokens("val") - 2 * BLOCK
    assert eval_measures.val_loss(run) == pytest.approx(
        _mean_ce(load_model(run_dir)[0], _strided(data, n)), rel=1e-9
    )


def test_the_trainers_evaluation_is_on_strided_windows_without_the_seed(run_dir: Path) -> None:
    """The logged evaluation at step 4: eval_batches x micro-batch (2 x 4 / 2 accumulation
    steps) = 4 windows evenly strided, whatever the seed (this run's is 3), scored by
    the step-4 checkpoint."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in rows if r["kind"] == "eval"][-1]
    model = load_model(latest_checkpoint(run_dir))[0]
    assert logged["step"] == 4
    expected = _mean_ce(model, _strided(measure.RunView(run_dir, 1).data(), 4))
    assert logged["loss"] == pytest.approx(expected, rel=1e-5)


def test_log_z_and_attention_logit_measures_read_the_fixed_set(run_dir: Path) -> None:
    run = measure.RunView(run_dir, windows=4)
    data = run.data()
    windows = _strided(data, (data.num_tokens("val") - 1) // BLOCK)
    with torch.no_grad():
        log_z = torch.logsumexp(load_model(run_dir)[0].eval()(windows[:, :-1]).double(), dim=-1)
    assert eval_measures.log_z_drift(run) == pytest.approx(float(log_z.abs().mean()), rel=1e-9)
    assert 0 < eval_measures.max_attn_logit(run) < math.inf  # its value: tests/lab/test_eval_set.py


def test_long_context_loss_is_na_for_learned_positions(run_dir: Path) -> None:
    run = measure.RunView(run_dir, windows=2)
    assert eval_measures.loss_at(run, 4) is not None  # RoPE runs past the training length
    short, long = eval_measures._val_windows(run, BLOCK), eval_measures._val_windows(run, 4 * BLOCK)
    assert short.shape == (8, BLOCK + 1) and long.shape == (2, 4 * BLOCK + 1)
    # the same targets, only the context differs
    assert (short[:, 1:].ravel() == long[:, 1:].ravel()).all()
    learned = build_preset("gpt2", "tiny")
    run = measure.RunView(run_dir, windows=2, _model=TransformerLM(learned))
    assert eval_measures.loss_at(run, 2) is None and eval_measures.loss_at(run, 1) is not None
