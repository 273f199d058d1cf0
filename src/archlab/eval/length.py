"""Loss and next-token accuracy against context length per RoPE method (`archlab eval length`).

The same trained weights are loaded under each method's `rope.scaling` (eval/rope_methods.py) and
scored on held-out text at each length. A window of L tokens is scored on its last `score_last`
tokens only, so every length is measured on the same number of predictions, each with at least
L - score_last tokens of context: a longer window can only help a model that uses (or at least
tolerates) the extra context. The plain windows are paired by target (eval/samples.py), so each
length scores the same targets. `score_last=None` scores every prediction of the window, as Su's
tables do (per-token accuracy over whole samples); the windows still end at the same tokens, but a
longer one scores more text.

Both metrics come from the same forward over the scored targets y_t with logits z_t:
    loss      = mean_t ( logsumexp(z_t) - z_t[y_t] )            nats/token
    accuracy  = mean_t [ argmax_v z_t[v] == y_t ]               next-token accuracy (Su's metric)
averaged over the windows' scored tokens (every window scores as many). Each figure comes with a
95% t interval over its windows (`LengthResult.loss_interval`): a window's mean is one observation,
since the tokens of one window are not independent of each other; with one window there is none.
"""

from __future__ import annotations

import csv
import logging
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from archlab.checkpoint import build_model, module_training_state
from archlab.eval.rope_methods import method_configs
from archlab.eval.samples import paired_windows, sample_windows
from archlab.eval.variants import METRICS, SAMPLES
from archlab.nn.functional import cross_entropy
from archlab.nn.model import TransformerLM

logger = logging.getLogger(__name__)

CONFIDENCE = 0.95  # the level of the interval printed beside every figure


def t_interval(values: tuple[float, ...] | list[float]) -> tuple[float, float]:
    """The CONFIDENCE t interval of the mean of `values` (scipy.stats.t, n - 1 degrees of freedom);
    (nan, nan) below two values; the mean twice when they do not vary."""
    if len(values) < 2:
        return math.nan, math.nan
    mean, sem = float(np.mean(values)), float(stats.sem(values))
    if sem == 0:
        return mean, mean
    low, high = stats.t.interval(CONFIDENCE, len(values) - 1, loc=mean, scale=sem)
    return float(low), float(high)


@dataclass(frozen=True)
class LengthResult:
    method: str
    length: int
    loss: float  # mean cross entropy (nats/token) over the scored tokens of every window
    accuracy: float = math.nan  # share of scored tokens whose argmax logit is the target
    samples: str = "plain"  # SAMPLES: plain windows or repeated texts
    window_losses: tuple[float, ...] = ()  # each window's mean loss: the interval's observations
    window_accuracies: tuple[float, ...] = ()  # each window's accuracy

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss)

    @property
    def loss_interval(self) -> tuple[float, float]:
        return t_interval(self.window_losses)

    @property
    def accuracy_interval(self) -> tuple[float, float]:
        return t_interval(self.window_accuracies)


@torch.no_grad()
def per_window_scores(
    model: TransformerLM, batch: torch.Tensor, score_last: int | None
) -> tuple[list[float], list[float]]:
    """Each window's (mean loss, next-token accuracy) over its last `score_last` predictions (batch:
    count, L + 1), or over every prediction with None; one window at a time."""
    losses, hits = [], []
    for row in batch:
        keep = row.numel() - 1 if score_last is None else score_last
        x, y = row[None, :-1], row[None, -keep:]
        logits = model(x, logits_to_keep=keep)
        losses.append(float(cross_entropy(logits, y)))
        hits.append(float((logits.argmax(-1) == y).double().mean()))
    return losses, hits


def window_scores(
    model: TransformerLM, batch: torch.Tensor, score_last: int | None
) -> tuple[float, float]:
    """(mean loss, next-token accuracy) over the windows of `per_window_scores`."""
    losses, hits = per_window_scores(model, batch, score_last)
    return sum(losses) / len(losses), sum(hits) / len(hits)


def window_loss(model: TransformerLM, batch: torch.Tensor, score_last: int | None) -> float:
    """Mean loss of the last `score_last` predictions of each window (window_scores)."""
    return window_scores(model, batch, score_last)[0]


def check_choices(samples: list[str], metric: str = "loss") -> None:
    """A one-line error for a sample kind or metric that does not exist, before any compute."""
    for kind in samples:
        if kind not in SAMPLES:
            raise ValueError(
                f"--samples {kind!r} is not allowed: one of {', '.join(SAMPLES)} (comma-separated)"
            )
    if not samples:
        raise ValueError(
            f"--samples is empty: one or more of {', '.join(SAMPLES)} (comma-separated)"
        )
    if metric not in METRICS:
        raise ValueError(f"--metric {metric!r} is not allowed: one of {', '.join(METRICS)}")


def evaluate_lengths(
    model: TransformerLM,
    tokens: np.ndarray,
    lengths: list[int],
    methods: list[str],
    score_last: int | None,
    n_windows: int = 4,
    window: int | None = None,
    allow_extrapolation: bool = False,
    progress: bool = True,
    leaky_k: float | str = "half",
    logn: bool = False,
    samples: tuple[str, ...] | list[str] = ("plain",),
) -> list[LengthResult]:
    """Loss and accuracy per (samples, method, length) of `model`'s weights under each method
    (module doc); `score_last=None` scores every prediction, `leaky_k` is Leaky ReRoPE's slope rule,
    `logn` the log-n scale at inference."""
    from tqdm import tqdm

    check_choices(list(samples))
    if score_last is not None and not 1 <= score_last <= min(lengths):
        raise ValueError(
            f"score_last={score_last} is not allowed: between 1 and the "
            f"shortest length {min(lengths)}"
        )
    configs = method_configs(
        model.config, methods, lengths, window, allow_extrapolation, leaky_k, logn
    )
    state, trained = model.state_dict(), module_training_state(model)
    batches = _windows(tokens, lengths, n_windows, samples)
    cells = [(kind, method, n) for kind in samples for method, n in configs]
    results = []
    # a log file gets one plain line per cell, not bar redraws
    lines = progress and not sys.stderr.isatty()
    for i, (kind, method, length) in enumerate(
        tqdm(cells, desc="eval length", disable=not progress or lines)
    ):
        # no random init of weights about to be replaced; a FAVOR+ layer keeps the projection its
        # training reached
        scaled = build_model(configs[method, length], state, training_state=trained).eval()
        losses, hits = per_window_scores(scaled, batches[kind, length], score_last)
        loss, accuracy = sum(losses) / len(losses), sum(hits) / len(hits)
        results.append(
            LengthResult(method, length, loss, accuracy, kind, tuple(losses), tuple(hits))
        )
        if lines:
            logger.info(
                "eval length %d/%d: %s at %d tokens, loss %.3f, accuracy %.4f (%s samples)",
                i + 1,
                len(cells),
                method,
                length,
                loss,
                accuracy,
                kind,
            )
    return results


def _windows(
    tokens: np.ndarray, lengths: list[int], n_windows: int, samples: tuple[str, ...] | list[str]
) -> dict[tuple[str, int], torch.Tensor]:
    """(samples kind, length) -> its windows: the plain ones paired across lengths (every length
    scores the same text), the others drawn per length."""
    paired = paired_windows(tokens, lengths, n_windows) if "plain" in samples else {}
    return {
        (kind, n): paired[n] if kind == "plain" else sample_windows(tokens, n, n_windows, kind)
        for kind in samples
        for n in lengths
    }


def cell(r: LengthResult, metric: str = "loss") -> str:
    """One figure with its interval: `loss [low, high] (perplexity)` or `accuracy% [low, high]`
    (no interval from a single window)."""
    if metric == "loss":
        low, high = r.loss_interval
        ci = "" if math.isnan(low) else f" [{low:.3f}, {high:.3f}]"
        return f"{r.loss:.3f}{ci} ({r.perplexity:.1f})"
    low, high = r.accuracy_interval
    ci = "" if math.isnan(low) else f" [{100 * low:.2f}, {100 * high:.2f}]"
    return f"{100 * r.accuracy:.2f}%{ci}"


def markdown_table(results: list[LengthResult], metric: str = "loss") -> str:
    """Rows = methods (and sample kinds, when more than one), columns = lengths; cells = loss
    [interval] (perplexity), or accuracy in percent [interval] (`cell`)."""
    lengths = sorted({r.length for r in results})
    kinds = list(dict.fromkeys(r.samples for r in results))
    cells = {(r.samples, r.method, r.length): cell(r, metric) for r in results}
    head = "| method | samples | " if len(kinds) > 1 else "| method | "
    lines = [
        head + " | ".join(str(n) for n in lengths) + " |",
        "|---" * (len(lengths) + head.count("|") - 1) + "|",
    ]
    for kind in kinds:
        for method in dict.fromkeys(r.method for r in results if r.samples == kind):
            label = f"| {method} | {kind} | " if len(kinds) > 1 else f"| {method} | "
            lines.append(label + " | ".join(cells[kind, method, n] for n in lengths) + " |")
    return "\n".join(lines)


def write_csv(results: list[LengthResult], path: Path) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["method", "length", "loss", "perplexity", "accuracy", "samples", "windows"]
            + ["loss_low", "loss_high", "accuracy_low", "accuracy_high"]
        )
        for r in results:
            writer.writerow(
                [
                    r.method,
                    r.length,
                    f"{r.loss:.6f}",
                    f"{r.perplexity:.4f}",
                    f"{r.accuracy:.6f}",
                    r.samples,
                    len(r.window_losses),
                    *(f"{v:.6f}" for v in (*r.loss_interval, *r.accuracy_interval)),
                ]
            )
    return path
