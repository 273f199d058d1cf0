"""Loss and next-token accuracy against context length per RoPE method (`archlab eval length`).

The same trained weights are loaded under each method's `rope_scaling` and scored on held-out text
at each length. A window of L tokens is scored on its last `score_last` tokens only, so every length
is measured on the same number of predictions, each with at least L - score_last tokens of context:
a longer window can only help a model that uses (or at least tolerates) the extra context. The plain
windows are paired by target: every length's windows end at the same held-out tokens
(`target_ends`), so with score_last at most the shortest length each length scores the same targets
and only the context before them grows, and a difference between lengths is the context's effect.
(Windows spaced per length score other text at each length: a real SmolLM2-135M, 8k context, read
3.39 nats at 256 and 3.62 at 512 on one Shakespeare file that way.) `score_last=None` scores every
prediction of the window, as Su's tables do (per-token accuracy over whole samples); the windows
still end at the same tokens, but a longer one scores more text.

Both metrics come from the same forward over the scored targets y_t with logits z_t:
    loss      = mean_t ( logsumexp(z_t) - z_t[y_t] )            nats/token
    accuracy  = mean_t [ argmax_v z_t[v] == y_t ]               next-token accuracy (Su's metric)
averaged over the windows' scored tokens (every window scores as many).

Samples (Su, "Transformer upgrade 9", kexue.fm/archives/9603, and the tables of 9708 / 9728 / 9731 /
9859):
    plain      evenly spaced windows of held-out text (Su's "non-repeated" column; read it first)
    repeated   a text of p = L // 2 tokens concatenated with itself up to L + 1 tokens: token i
               is base[i mod p]. Every target past p was already given p tokens earlier, so this
               measures whether the model still uses the whole context at length L. Su's "repeated"
               set mixes such samples with natural ones; here every sample is repeated, so the
               numbers run higher than his column. With score_last <= L // 2 every scored target
               lies in the second copy.

A method is a RoPE kind with an inference-time form; its scaling at target length L is `RopeKind.at`
(the kind's entry in nn/positions/scaling.py; L_train = the model's max_seq_len, s = max(1, L /
L_train)):
    none           the model as trained (past L_train this is plain extrapolation)
    linear, ntk    factor s (and ntk_mixed); ntk_by_parts, dynamic, yarn: factor s and
                   original_max_seq_len L_train; llama3: those and Llama 3.1's ramp (1, 4)
    rerope         window W (default: the model's own ReRoPE window if it has one, as hwfa2 does,
                   else L_train / 2)
    leaky_rerope   window W (default: the model's own Leaky ReRoPE window, else L_train / 4) and
                   slope 1/k by Su's rule (kexue.fm/archives/9708, `leaky_slope`): the largest
                   relative position any query sees, W + (L - 1 - W) / k, stays within half the
                   training length, k >= 16; `leaky_k="train"` maps the longest distance onto the
                   longest one trained; a number is k itself
(inv_leaky_rerope changes training only: in eval mode it is plain RoPE, which `none` measures.)
`logn=True` adds the log-n query scale at inference only ("log n" with a dagger in Su's tables) to a
model trained without it: ModelConfig.with_inference_logn, max(1, log n / log L_train) per query.
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

from archlab.checkpoint import build_model, module_training_state
from archlab.eval.variants import METRICS, SAMPLES
from archlab.infer.generate import context_limit
from archlab.nn.config import ConfigError, ModelConfig
from archlab.nn.functional import cross_entropy
from archlab.nn.model import TransformerLM
from archlab.nn.positions.scaling import (
    LEAKY_K_MIN,
    ROPE_KINDS,
    RopeScaling,
    inference_kinds,
    leaky_slope,
)

logger = logging.getLogger(__name__)

# the methods are the RoPE kinds with an inference-time form (`inference_kinds`); METRICS and
# SAMPLES (the names the CLI lists) live in eval/variants.py, torch-free
__all__ = ["LEAKY_K_MIN", "leaky_slope", "method_scaling"]


@dataclass(frozen=True)
class LengthResult:
    method: str
    length: int
    loss: float  # mean cross entropy (nats/token) over the scored tokens of every window
    accuracy: float = math.nan  # share of scored tokens whose argmax logit is the target
    samples: str = "plain"  # SAMPLES: plain windows or repeated texts

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss)


def method_scaling(
    method: str,
    length: int,
    train_len: int,
    window: int | None = None,
    leaky_k: float | str = "half",
    own: RopeScaling | None = None,
) -> RopeScaling | None:
    """The `rope_scaling` method `method` (a kind of ROPE_KINDS) uses at `length` for a model
    trained at `train_len`: `RopeKind.at` (module doc). `own` is the model's own scaling: a kind it
    was built with lends its window when `window` is not given (an `hwfa2` model trained with
    `--model.rope_scaling.window 128` is evaluated at W = 128, as it decodes)."""
    if method not in inference_kinds():
        raise ValueError(
            f"scaling {method!r} is not allowed: one of {', '.join(inference_kinds())}"
        )
    if window is None and own is not None and own.kind == method and own.window is not None:
        window = own.window
    return ROPE_KINDS[method].at(length, train_len, window, leaky_k)


# without --lengths, those of these the model covers (CPU-sized)
DEFAULT_LENGTHS = (256, 512, 1024, 2048, 4096)


def default_lengths(
    config: ModelConfig,
    methods: list[str],
    window: int | None = None,
    allow_extrapolation: bool = False,
    leaky_k: float | str = "half",
    logn: bool = False,
) -> list[int]:
    """The lengths evaluated when none are given: DEFAULT_LENGTHS that every method covers (without
    `allow_extrapolation` plain RoPE stops at max_seq_len), else max_seq_len / 4, / 2 and itself. A
    refusal that is not about the length (a window that does not fit) is raised as it is."""
    n = config.max_seq_len
    # the user's settings first
    method_configs(config, methods, [n], window, allow_extrapolation, leaky_k, logn)

    def covered(length: int) -> bool:
        try:
            method_configs(config, methods, [length], window, allow_extrapolation, leaky_k, logn)
        except ValueError:
            return False
        return True

    fitting = [length for length in DEFAULT_LENGTHS if covered(length)]
    return fitting or sorted({max(2, n // 4), max(2, n // 2), n})


def trained_only(config: ModelConfig) -> bool:
    """Whether the model's own scaling holds in training mode only (inverse Leaky ReRoPE): `none`,
    the model as trained, keeps it, so its context limit (the distances training reached)
    applies."""
    s = config.rope_scaling
    return s is not None and ROPE_KINDS[s.kind].training_only


def applicable_methods(config: ModelConfig) -> list[str]:
    """The methods (`inference_kinds`, in their order) `config`'s weights can be evaluated under:
    `none` alone without RoPE; with a linear attention kernel the static schedules, since its state
    folds the keys in rotated once (Dynamic NTK and the ReRoPE family are refused by the config);
    every one otherwise."""
    if config.position != "rope":
        return ["none"]
    return [m for m in inference_kinds() if _refusal(config, m) is None]


def _refusal(config: ModelConfig, method: str) -> str | None:
    """Why `config` cannot take `method`'s scaling (the config's own one-line reason), or None when
    it can."""
    try:
        scaling = method_scaling(
            method, 2 * config.max_seq_len, config.max_seq_len, own=config.rope_scaling
        )
    except ValueError:
        # a default window that does not fit: method_configs names it with the caller's window
        return None
    try:
        config.replace(rope_scaling=scaling if scaling is not None else config.rope_scaling)
    except ConfigError as err:
        return str(err).removeprefix("ModelConfig.")
    return None


def method_configs(
    config: ModelConfig,
    methods: list[str],
    lengths: list[int],
    window: int | None,
    allow_extrapolation: bool,
    leaky_k: float | str = "half",
    logn: bool = False,
) -> dict[tuple[str, int], ModelConfig]:
    """Each (method, length)'s config, all checked before any compute: a RoPE scaling needs a RoPE
    model, and a length past what the method covers needs `allow_extrapolation` (never with learned
    positions). `logn`: each with the log-n scale at inference
    (`ModelConfig.with_inference_logn`)."""
    config = config.with_inference_logn() if logn else config
    out = {}
    for method in methods:
        if method != "none" and config.position != "rope":
            raise ValueError(
                f"scaling {method!r} needs a RoPE model (this one has "
                f"position={config.position!r}); "
                "use --scalings none"
            )
        if method in inference_kinds() and (why := _refusal(config, method)) is not None:
            raise ValueError(
                f"scaling {method!r} is not allowed for this model: one of "
                f"{', '.join(applicable_methods(config))} ({why})"
            )
        for length in lengths:
            scaling = method_scaling(
                method, length, config.max_seq_len, window, leaky_k, config.rope_scaling
            )
            if scaling is None and trained_only(config):
                # inverse Leaky ReRoPE: eval mode is plain RoPE, to its own limit
                scaling = config.rope_scaling
            c = config.replace(rope_scaling=scaling) if config.position == "rope" else config
            limit = context_limit(c)
            if (
                limit is not None
                and length > limit
                and not (allow_extrapolation and c.position != "learned")
            ):
                how = (
                    "learned positions cannot extrapolate"
                    if c.position == "learned"
                    else "pass --allow-extrapolation (allow_extrapolation=True) to evaluate past it"
                )
                raise ValueError(
                    f"length {length} is past the {limit} tokens that scaling {method!r} covers "
                    "for "
                    f"this model (trained at {config.max_seq_len}): {how}"
                )
            out[method, length] = c
    return out


def windows(tokens: np.ndarray, length: int, count: int) -> torch.Tensor:
    """`count` windows of length + 1 tokens at evenly spaced starts of `tokens` -> (count, length +
    1)."""
    if len(tokens) < length + 1:
        raise ValueError(
            f"held-out text has {len(tokens)} tokens: too few for length {length} (need "
            f"{length + 1})"
        )
    starts = np.linspace(0, len(tokens) - length - 1, count).astype(np.int64)
    return torch.from_numpy(np.stack([tokens[s : s + length + 1] for s in starts]).astype(np.int64))


def repeated_windows(
    tokens: np.ndarray, length: int, count: int, period: int | None = None
) -> torch.Tensor:
    """`count` repeated samples (count, length + 1): a text of `period` tokens (default length // 2)
    from evenly spaced starts, concatenated with itself: sample[i] = base[i mod period] (module
    doc)."""
    p = max(1, length // 2) if period is None else period
    if not 1 <= p <= length:
        raise ValueError(f"period={p} is not allowed: between 1 and the length {length}")
    # (count, p): the same evenly spaced starts a plain window would use
    base = windows(tokens, p - 1, count)
    return base[:, torch.arange(length + 1) % p]


def sample_windows(
    tokens: np.ndarray, length: int, count: int, samples: str = "plain"
) -> torch.Tensor:
    """The windows `samples` names (SAMPLES) -> (count, length + 1), spaced for this length alone
    (the lab's per-length measures); `paired_windows` holds the targets fixed across lengths."""
    if samples not in SAMPLES:
        raise ValueError(f"samples {samples!r} is not allowed: one of {', '.join(SAMPLES)}")
    return (
        windows(tokens, length, count)
        if samples == "plain"
        else repeated_windows(tokens, length, count)
    )


def target_ends(n_tokens: int, longest: int, count: int) -> np.ndarray:
    """Where every length's windows end: `count` positions of the held-out stream evenly spaced from
    `longest` (the first with `longest` tokens before it) to its last token -> (count,)."""
    if n_tokens < longest + 1:
        raise ValueError(
            f"held-out text has {n_tokens} tokens: too few for length {longest} (need "
            f"{longest + 1})"
        )
    return np.linspace(longest, n_tokens - 1, count).astype(np.int64)


def paired_windows(tokens: np.ndarray, lengths: list[int], count: int) -> dict[int, torch.Tensor]:
    """Plain windows paired by target: per length L, the L + 1 tokens ending at each of the same
    `target_ends` -> {L: (count, L + 1)}. The last k tokens of every window, the targets scored with
    score_last = k <= min length, are the same tokens at every length; only the context before them
    grows."""
    ends = target_ends(len(tokens), max(lengths), count)
    return {
        n: torch.from_numpy(np.stack([tokens[e - n : e + 1] for e in ends]).astype(np.int64))
        for n in lengths
    }


def describe_targets(
    tokens: np.ndarray, lengths: list[int], count: int, score_last: int | None, samples: list[str]
) -> str:
    """One sentence for the table: which targets each length scores."""
    parts = []
    if "plain" in samples:
        at = ", ".join(str(int(e)) for e in target_ends(len(tokens), max(lengths), count))
        parts.append(
            f"plain: every prediction of {count} windows ending at held-out tokens {at} (the same "
            "last tokens at every length; a longer window also scores the text before them)"
            if score_last is None
            else f"plain: the same {count} x {score_last} target tokens at every length (the "
            f"{score_last} held-out tokens up to each of positions {at}), after L - {score_last} "
            "tokens of context or more"
        )
    if "repeated" in samples:
        parts.append("repeated: a text of L/2 tokens twice per length (not paired across lengths)")
    what = "; ".join(parts)
    return f"Scored: {what}."


@torch.no_grad()
def window_scores(
    model: TransformerLM, batch: torch.Tensor, score_last: int | None
) -> tuple[float, float]:
    """(mean loss, next-token accuracy) of the last `score_last` predictions of each window (count,
    L + 1), or of every prediction with None; one window at a time."""
    losses, hits = [], []
    for row in batch:
        keep = row.numel() - 1 if score_last is None else score_last
        x, y = row[None, :-1], row[None, -keep:]
        logits = model(x, logits_to_keep=keep)
        losses.append(float(cross_entropy(logits, y)))
        hits.append(float((logits.argmax(-1) == y).double().mean()))
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
            f"score_last={score_last} is not allowed: between 1 and the shortest length "
            f"{min(lengths)}"
        )
    configs = method_configs(
        model.config, methods, lengths, window, allow_extrapolation, leaky_k, logn
    )
    state, trained = model.state_dict(), module_training_state(model)
    paired = paired_windows(tokens, lengths, n_windows) if "plain" in samples else {}
    batches = {
        (kind, n): paired[n] if kind == "plain" else sample_windows(tokens, n, n_windows, kind)
        for kind in samples
        for n in lengths
    }
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
        loss, accuracy = window_scores(scaled, batches[kind, length], score_last)
        results.append(LengthResult(method, length, loss, accuracy, kind))
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


def markdown_table(results: list[LengthResult], metric: str = "loss") -> str:
    """Rows = methods (and sample kinds, when more than one), columns = lengths; cells = loss
    (perplexity), or accuracy in percent."""
    lengths = sorted({r.length for r in results})
    kinds = list(dict.fromkeys(r.samples for r in results))
    cells = {
        (r.samples, r.method, r.length): f"{r.loss:.3f} ({r.perplexity:.1f})"
        if metric == "loss"
        else f"{100 * r.accuracy:.2f}%"
        for r in results
    }
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
        writer.writerow(["method", "length", "loss", "perplexity", "accuracy", "samples"])
        for r in results:
            writer.writerow(
                [
                    r.method,
                    r.length,
                    f"{r.loss:.6f}",
                    f"{r.perplexity:.4f}",
                    f"{r.accuracy:.6f}",
                    r.samples,
                ]
            )
    return path
