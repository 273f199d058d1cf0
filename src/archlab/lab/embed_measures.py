"""The lab's measures for the embedding and vocabulary suites (sign-optimizer-embeddings, tied-head, vocab):

- `embed_near_fixed_point`, `embed_max_abs`: the trainer's outlier signature at the last evaluation
  (train/metrics.py `embedding_signature`: the share of entries within 1% of 1/lambda, max |E|);
- `first_train_loss`: the loss of the first logged batch, which is the step-0 model's when `logging.log_every`
  is 1 (n/a otherwise): where a tied head starts (kexue.fm/archives/9698);
- `continuation_acc`, `continuation_healing_gain`: mid-token continuation accuracy on the run's validation text
  (eval/continuation.py), and what token healing (one token) adds on the same cuts (kexue.fm/archives/9762).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from archlab.data.tokens import TokenData
from archlab.eval.continuation import continuation_table
from archlab.nn.model import TransformerLM
from archlab.train.metrics import read_metrics

CONTINUATION_TEXT_TOKENS = 20_000  # validation tokens decoded into the held-out text the cuts are drawn from
CONTINUATION = {"cuts": 200, "context": 64, "k": 8}  # cuts, prompt bytes, bytes that must match


class RunLike(Protocol):
    """What these measures read of a run (lab/measure.py `RunView`)."""

    run_dir: Path

    @property
    def model(self) -> TransformerLM: ...

    def data(self) -> TokenData: ...


def last_eval(run: RunLike, key: str) -> float | None:
    """`key` of the run's last eval row in metrics.jsonl (None when it was not logged)."""
    rows = [r for r in read_metrics(run.run_dir, "eval") if key in r]
    return float(rows[-1][key]) if rows else None


def first_train_loss(run: RunLike) -> float | None:
    """The step-0 model's loss on its first batch: the train row of step 1 (logged before any update lands)."""
    rows = read_metrics(run.run_dir, "train")
    return float(rows[0]["loss"]) if rows and rows[0]["step"] == 1 else None


_continuations: dict[Path, dict] = {}


def _continuation(run: RunLike) -> dict:
    if run.run_dir not in _continuations:
        data = run.data()
        tokenizer = data.tokenizer()
        text = tokenizer.decode(data.splits["val"][:CONTINUATION_TEXT_TOKENS].tolist()).replace("\ufffd", "")
        _continuations[run.run_dir] = continuation_table(run.model, tokenizer, text, (0, 1), **CONTINUATION)
    return _continuations[run.run_dir]


def continuation_acc(run: RunLike) -> float:
    return _continuation(run)[0].accuracy


def continuation_healing_gain(run: RunLike) -> float:
    table = _continuation(run)
    return table[1].accuracy - table[0].accuracy
