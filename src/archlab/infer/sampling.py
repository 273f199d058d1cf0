"""Picking the next token: greedy (temperature 0), temperature, top-k, top-p (nucleus, Holtzman et
al., arXiv 1904.09751), drawn with a seeded `torch.Generator` of the caller's, so the same seed
gives the same text.

Shapes: B batch, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# SamplingConfig.past_context: what generation does when a row outgrows the model's context
# (`ModelConfig.context_limit`: max_seq_len, or its RoPE scaling's limit)
PAST_CONTEXT = {
    "stop": "refuse before any compute (one line naming the lengths)",
    "extrapolate": "run on past it at positions never trained on (not with learned positions)",
    # nanoGPT's generate crops to the last block_size tokens (karpathy/nanoGPT model.py)
    "slide": "each token past it predicted from a fresh forward of the last context-limit tokens",
}


@dataclass(frozen=True)
class SamplingConfig:
    """How to pick tokens and when to stop."""

    max_new_tokens: int = 128  # tokens generated per prompt at most
    temperature: float = 1.0  # logits / temperature before softmax; 0 = greedy (argmax)
    top_k: int | None = None  # sample among the k most likely tokens only; None = all
    # nucleus: the smallest set of tokens with probability >= top_p; None = all
    top_p: float | None = None
    # seeds the sampler's own generator (same seed, same text); None = torch's RNG
    seed: int | None = None
    stop: tuple[str, ...] = ()  # stop strings: the text ends before the first one generated
    # what happens when prompt + new tokens pass the model's context: one of PAST_CONTEXT
    past_context: str = "stop"

    def __post_init__(self) -> None:
        # frozen: normalise a list given by a caller
        object.__setattr__(self, "stop", tuple(self.stop))
        checks = {
            "max_new_tokens": (
                _is_int(self.max_new_tokens) and self.max_new_tokens >= 1,
                "a positive integer",
            ),
            "temperature": (
                _is_finite(self.temperature) and self.temperature >= 0,
                "a finite number >= 0, 0 = greedy",
            ),
            "top_k": (
                self.top_k is None or _is_int(self.top_k) and self.top_k >= 1,
                "None or an integer >= 1",
            ),
            "top_p": (
                self.top_p is None or _is_finite(self.top_p) and 0 < self.top_p <= 1,
                "None or a probability in (0, 1]",
            ),
            "seed": (self.seed is None or _is_int(self.seed), "None or an integer"),
            "stop": (all(isinstance(s, str) and s for s in self.stop), "non-empty strings"),
            "past_context": (
                isinstance(self.past_context, str) and self.past_context in PAST_CONTEXT,
                f"one of {', '.join(PAST_CONTEXT)}",
            ),
        }
        for name, (ok, allowed) in checks.items():
            if not ok:
                raise ValueError(
                    f"SamplingConfig.{name}={getattr(self, name)!r} is not allowed: {allowed}"
                )


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_finite(x: object) -> bool:
    """A real number that is neither NaN nor infinite (bools are not numbers here)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def sampling_probs(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """logits (B, V) -> the distribution sampled from (B, V): softmax(logits / temperature),
    restricted to the top-k tokens and then to the top-p nucleus, renormalised. Needs
    temperature > 0."""
    logits = logits.float() / sampling.temperature
    if sampling.top_k is not None and sampling.top_k < logits.shape[-1]:
        kth = logits.topk(sampling.top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, -math.inf)
    if sampling.top_p is not None and sampling.top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        # the tokens before already reach top_p
        outside = probs.cumsum(dim=-1) - probs >= sampling.top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(outside, -math.inf))
    return logits.softmax(dim=-1)  # (B, V)


def sample_next(
    logits: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator | None
) -> torch.Tensor:
    """logits (B, V) -> next token ids (B,): argmax at temperature 0, else a
    draw from `sampling_probs`."""
    if sampling.temperature == 0:
        return logits.argmax(dim=-1)
    # (B,)
    return torch.multinomial(sampling_probs(logits, sampling), 1, generator=generator).squeeze(-1)
