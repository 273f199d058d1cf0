"""What a decode starts from: the context a model handles, the prompts' checks, the padded batch.

`ModelConfig.context_limit` is the longest sequence a model handles (max_seq_len, or its RoPE
scaling kind's limit); `check_context` and `check_prompts` refuse, in one line and before any
compute, prompts that do not fit it (unless `SamplingConfig.past_context` says what to do past it)
or are not token ids of the vocabulary; `left_pad` makes one batch of prompts of different lengths
(the cache masks the padding and positions count real tokens only, so a row decodes exactly as it
would alone), and `prefill` runs it into a fresh cache.

Shapes: B batch, T prompt length (padded).
"""

from __future__ import annotations

import numbers

import torch

from archlab.infer.sampling import SamplingConfig
from archlab.nn.config import ModelConfig
from archlab.nn.kv_cache import KVCache

PAD_ID = 0  # any valid id: padded slots are masked out and never attended to


def check_context(
    config: ModelConfig, prompt_len: int, max_new_tokens: int, past_context: str = "stop"
) -> None:
    """Fail before any compute if prompt + new tokens do not fit the model's context and
    `past_context` (`SamplingConfig.past_context`) does not say what to do past it."""
    total, limit = prompt_len + max_new_tokens, config.context_limit
    if limit is None or total <= limit or past_context == "slide":
        return
    if past_context == "extrapolate" and config.position != "learned":
        return
    how = (
        "learned positions cannot extrapolate; past_context='slide' (--past-context slide) keeps "
        f"the last {limit} tokens"
        if config.position == "learned"
        else "pass past_context='extrapolate' (--past-context extrapolate) to run past it anyway, "
        f"or 'slide' to predict from the last {limit} tokens"
    )
    raise ValueError(
        f"prompt ({prompt_len} tokens) + max_new_tokens ({max_new_tokens}) = {total} exceeds the "
        f"model's context of {limit} tokens: shorten the prompt or generate fewer tokens; {how}"
    )


def check_prompts(config: ModelConfig, prompts: list[list[int]], sampling: SamplingConfig) -> None:
    """Non-empty prompts of integer ids inside the vocabulary, fitting the context:
    one line otherwise."""
    if not prompts or not all(prompts):
        raise ValueError("generate needs at least one prompt, and every prompt at least one token")
    check_context(
        config, max(len(p) for p in prompts), sampling.max_new_tokens, sampling.past_context
    )
    wrong = next(
        (
            t
            for p in prompts
            for t in p
            if isinstance(t, bool) or not isinstance(t, numbers.Integral)
        ),
        None,
    )
    # a float id would be truncated by torch.tensor(..., dtype=long) without a word
    if wrong is not None:
        raise ValueError(
            f"token id {wrong!r} is not an integer: prompts are lists of int token ids"
        )
    bad = next((t for p in prompts for t in p if not 0 <= t < config.vocab_size), None)
    # e.g. a tokenizer larger than the vocabulary; torch would only say "index out of range"
    if bad is not None:
        raise ValueError(
            f"token id {bad} is outside the model's vocabulary (0..{config.vocab_size - 1})"
        )


def left_pad(
    prompts: list[list[int]], device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Token lists -> ids (B, T) padded on the left, and the attention mask (B, T) (None if
    none is padded)."""
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), PAD_ID, dtype=torch.long)
    mask = torch.zeros(len(prompts), longest, dtype=torch.bool)
    for row, p in enumerate(prompts):
        ids[row, longest - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[row, longest - len(p) :] = True
    return ids.to(device), (None if bool(mask.all()) else mask.to(device))


def prefill(
    model: torch.nn.Module, prompts: list[list[int]], capacity: int, device: torch.device
) -> tuple[torch.Tensor, KVCache]:
    """The prompts, left-padded, through `model` into a new cache of `capacity` token slots: the
    logits of each row's next token (B, V) (the last position's only) and the cache."""
    ids, mask = left_pad(prompts, device)
    cache = KVCache.for_model(model, len(prompts), capacity)
    if mask is not None:
        cache.set_padding(mask)
    return model(ids, cache=cache, logits_to_keep=1)[:, -1], cache  # (B, V)
