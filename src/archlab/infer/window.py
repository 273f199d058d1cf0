"""Decoding past the model's context by a sliding window (`SamplingConfig.past_context="slide"`).

Up to the model's context limit L (`ModelConfig.context_limit`: max_seq_len, or its RoPE scaling's
limit) tokens decode with the KV cache as usual. Past it, the logits of a row's next token come from
a fresh forward of its last L tokens, which take positions 0..L-1 again: what nanoGPT's `generate`
does (`idx[:, -block_size:]`, karpathy/nanoGPT model.py), and the way a model with learned
positions, or any model kept inside the lengths it trained at, goes on. A prompt longer than L keeps
its last L tokens. No cache carries over from one window to the next (each kept token's keys and
values depend on the tokens before it, and the first of those has just left the window), so every
token past L costs a forward of L tokens: O(L^2) attention per token where a cached step costs
O(L). A model without a limit (ReRoPE: `context_limit` None) never slides.

Shapes: B batch, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from archlab.infer.prompts import prefill
from archlab.infer.sampling import SamplingConfig
from archlab.nn.config import ModelConfig
from archlab.nn.kv_cache import KVCache


def slide_window(config: ModelConfig, sampling: SamplingConfig, longest: int) -> int | None:
    """The window L when `sampling` slides and a row of `longest` prompt tokens will outgrow the
    context; None when decoding never leaves the cache."""
    limit = config.context_limit
    if sampling.past_context != "slide" or limit is None:
        return None
    return limit if longest + sampling.max_new_tokens > limit else None


class SlidingWindow:
    """token (B,) -> each row's next-token logits (B, V): a cached `step` while the longest row
    fits `window` tokens, then a fresh forward of each row's last `window` tokens (module doc).
    `rows` are the prompts as prefilled into `cache` (already cut to the window); `slid` counts the
    steps predicted from a fresh window."""

    def __init__(
        self,
        model: torch.nn.Module,
        step: Callable[..., torch.Tensor],
        cache: KVCache,
        rows: list[list[int]],
        window: int,
    ) -> None:
        self.model, self.step, self.cache, self.window = model, step, cache, window
        self.rows = [list(r) for r in rows]
        self.longest = max(len(r) for r in rows)
        self.device = next(model.parameters()).device
        self.slid = 0

    def __call__(self, token: torch.Tensor) -> torch.Tensor:
        for row, t in zip(self.rows, token.tolist()):
            row.append(t)
            del row[: -self.window]  # only the window is ever read again
        self.longest += 1
        if self.longest <= self.window:  # the cache still holds every token: one cached step
            return self.step(token[:, None], cache=self.cache)[:, -1]  # (B, V)
        self.slid += 1
        logits, _ = prefill(self.model, self.rows, self.window, self.device)
        return logits  # (B, V)
