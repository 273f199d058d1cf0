"""The held-out windows a length evaluation scores (eval/length.py), per sample kind (SAMPLES).

The plain windows are paired by target: every length's windows end at the same held-out tokens
(`target_ends`), so with score_last at most the shortest length each length scores the same targets
and only the context before them grows, and a difference between lengths is the context's effect.
(Windows spaced per length score other text at each length: a real SmolLM2-135M, 8k context, read
3.39 nats at 256 and 3.62 at 512 on one Shakespeare file that way.)

Samples (Su, "Transformer upgrade 9", kexue.fm/archives/9603, and the tables of 9708 / 9728 /
9731 / 9859):
    plain      evenly spaced windows of held-out text (Su's "non-repeated" column; read it first)
    repeated   a text of p = L // 2 tokens concatenated with itself up to L + 1 tokens: token i
               is base[i mod p]. Every target past p was already given p tokens earlier, so this
               measures whether the model still uses the whole context at length L. Su's "repeated"
               set mixes such samples with natural ones; here every sample is repeated, so the
               numbers run higher than his column. With score_last <= L // 2 every scored target
               lies in the second copy.
"""

from __future__ import annotations

import numpy as np
import torch

from archlab.eval.variants import SAMPLES


def windows(tokens: np.ndarray, length: int, count: int) -> torch.Tensor:
    """`count` windows of length + 1 tokens at evenly spaced starts of `tokens` -> (count,
    length + 1)."""
    if len(tokens) < length + 1:
        raise ValueError(
            f"held-out text has {len(tokens)} tokens: too few for length "
            f"{length} (need {length + 1})"
        )
    starts = np.linspace(0, len(tokens) - length - 1, count).astype(np.int64)
    return torch.from_numpy(np.stack([tokens[s : s + length + 1] for s in starts]).astype(np.int64))


def repeated_windows(
    tokens: np.ndarray, length: int, count: int, period: int | None = None
) -> torch.Tensor:
    """`count` repeated samples (count, length + 1): a text of `period` tokens (default
    length // 2) from evenly spaced starts, concatenated with itself: sample[i] = base[i mod
    period] (module doc)."""
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
            f"held-out text has {n_tokens} tokens: too few for length "
            f"{longest} (need {longest + 1})"
        )
    return np.linspace(longest, n_tokens - 1, count).astype(np.int64)


def paired_windows(tokens: np.ndarray, lengths: list[int], count: int) -> dict[int, torch.Tensor]:
    """Plain windows paired by target: per length L, the L + 1 tokens ending at each of the same
    `target_ends` -> {L: (count, L + 1)}. The last k tokens of every window, the targets scored
    with score_last = k <= min length, are the same tokens at every length; only the context
    before them grows."""
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
