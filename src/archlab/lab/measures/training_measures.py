"""The lab's measures read from a run's metrics.jsonl: `train_loss`,
`spikes`, `diverged`, `max_grad_norm`.

- A spike is a logged finite train loss above the median of the SPIKE_WINDOW finite logged losses
  before it (the point itself excluded, so a spike cannot raise its own reference) by more than
  SPIKE_NATS, or a skipped (non-finite) step.
- A run diverged when training stopped on non-finite steps, or its final validation loss is not
  finite or above its first logged train loss.
"""

from __future__ import annotations

import math
import statistics

from archlab.lab.measures.run_like import RunLike
from archlab.train.metrics import read_metrics

SPIKE_WINDOW, SPIKE_NATS = 5, 0.5


def _losses(run: RunLike) -> list[float]:
    return [float(r["loss"]) for r in read_metrics(run.run_dir, "train")]


def diverged(run: RunLike) -> float:
    evals = read_metrics(run.run_dir, "eval")
    train = _losses(run)
    final = float(evals[-1]["loss"]) if evals else math.nan
    if run.status().get("returncode", 0) != 0 or not math.isfinite(final):
        return 1.0
    return float(bool(train) and final > train[0])


def train_loss(run: RunLike) -> float:
    tail = [v for v in _losses(run)[-3:] if math.isfinite(v)]
    return statistics.fmean(tail) if tail else math.nan


def spikes(run: RunLike) -> float:
    """Skipped steps plus logged losses above the median of the SPIKE_WINDOW finite losses before
    them by more than SPIKE_NATS (the trailing window excludes the point, so a spike never hides in
    its own median)."""
    # a skipped step's nan is counted as a skip
    losses = [v for v in _losses(run) if math.isfinite(v)]
    count = len(read_metrics(run.run_dir, "skip"))
    for i in range(SPIKE_WINDOW, len(losses)):
        if losses[i] > statistics.median(losses[i - SPIKE_WINDOW : i]) + SPIKE_NATS:
            count += 1
    return float(count)


def max_grad_norm(run: RunLike) -> float:
    norms = [float(r["grad_norm"]) for r in read_metrics(run.run_dir, "train")]
    return max((n for n in norms if math.isfinite(n)), default=math.inf)
