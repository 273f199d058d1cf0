"""The lab's measures of the final checkpoint on validation text.

- on the fixed evaluation set (lab/measures/eval_set.py: >= 64k tokens in evenly strided validation
  windows, the same for every seed and arm): `val_loss`, `log_z_drift`, `max_attn_logit`;
  `bits_per_byte` on one byte span for every tokenizer. A value that is not finite reads inf (a
  diverged model ranks last, never as nan);
- `loss_at_1x` / `_2x` / `_4x` (`loss_at`): the loss on windows of 1, 2, 4 x the training context
  over the same stretch of validation text (n/a for learned positions past 1x).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from archlab.lab.measures import eval_set
from archlab.lab.measures.run_like import RunLike
from archlab.nn.functional import cross_entropy

LONGEST = 4  # the longest context measured, in training contexts (loss_at_4x)


def _val_windows(run: RunLike, length: int) -> np.ndarray:
    """Non-overlapping validation windows of length + 1 tokens over the same stretch of text for
    every length: the first `run.windows` x LONGEST x block_size tokens of val (or all of it), so
    1x, 2x and 4x compare the loss on the same targets and only the context differs."""
    val = np.asarray(run.data().splits["val"])
    span = min(run.windows * LONGEST * run.config["train"]["data"]["block_size"], len(val) - 1)
    n = span // length
    if n < 1:
        raise ValueError(
            f"{run.run_dir}: the validation split ({len(val)} tokens) is shorter than {length + 1}"
        )
    return np.stack([val[i * length : (i + 1) * length + 1] for i in range(n)]).astype(np.int64)


@torch.no_grad()
def loss_at(run: RunLike, factor: int) -> float | None:
    model = run.model.eval()
    if factor > 1 and model.config.position == "learned":
        return None  # a learned table has no rows past the training length
    windows = torch.from_numpy(
        _val_windows(run, factor * run.config["train"]["data"]["block_size"])
    )
    return float(cross_entropy(model(windows[:, :-1]), windows[:, 1:]))


def _scores(run: RunLike) -> eval_set.Scores:
    """One forward pass over the fixed evaluation set, shared by val_loss and log_z_drift."""
    return run.memo(
        "scores",
        lambda: eval_set.score_windows(
            run.model, run.data(), eval_set.eval_starts(run.data(), run.block_size), run.block_size
        ),
    )


def _worst_if_not_finite(value: float) -> float:
    return value if math.isfinite(value) else math.inf  # a diverged model ranks last, never as nan


def val_loss(run: RunLike) -> float:
    """Mean cross entropy of the final checkpoint on the fixed
    evaluation set (eval_set.eval_starts)."""
    return _worst_if_not_finite(_scores(run).loss)


def log_z_drift(run: RunLike) -> float:
    """Mean |log Z| of the head's logits on the fixed evaluation set (z-loss pins log Z to 0)."""
    return _worst_if_not_finite(_scores(run).abs_log_z)


def max_attn_logit(run: RunLike) -> float:
    """Largest |q . k| * scale of any layer and head on the fixed evaluation set
    (QK-norm, softcap claims)."""
    data = run.data()
    return _worst_if_not_finite(
        eval_set.max_attention_logit(
            run.model, data, eval_set.eval_starts(data, run.block_size), run.block_size
        )
    )


def bits_per_byte(run: RunLike) -> float:
    """Bits per byte on the validation byte span every tokenizer scores (eval_set.byte_span)."""
    return _worst_if_not_finite(eval_set.bits_per_byte(run.model, run.data(), run.block_size))
