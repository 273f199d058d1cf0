"""Incremental decoding: prefill + one-token steps through `TransformerLM.forward` with a `KVCache`, and sampling.

- Prompts of different lengths run as one batch, left-padded: the cache records which slots are padding,
  masks them for every later query, and positions count only each row's real tokens, so a row decodes
  exactly as it would alone.
- Sampling: greedy (temperature 0), temperature, top-k, top-p (nucleus, Holtzman et al., arXiv 1904.09751),
  with a seeded `torch.Generator` of its own, so the same seed gives the same text.
- Stops: EOS id, stop strings (matched on the decoded text, in O(1) Python work per token), max new tokens.
- Streaming: `generate_text` hands each piece of confirmed text to a callback as soon as it is known; it
  never emits half a UTF-8 character or text that may still turn out to start a stop string.
- Token healing (`token_healing=N`): the prompt is backed off by up to N tokens and the first new tokens re-spell
  the removed bytes under a byte-trie constraint (infer/healing.py), so a prompt cut mid-token continues as the
  training text did; each row of a batch backs off its own amount.
- Context limit: prompt + max_new_tokens past the model's context fails before any compute
  (`context_limit`), unless extrapolation is asked for explicitly.
- Speed: float32 Linear weights are read column-major on the CPU while generating (`decode_layout`), and
  `compile_decode=True` runs the one-token steps through torch.compile (docs/inference.md, "Decode speed").
Every decode step costs the same Python work at any length: the cache is preallocated (sliding-window layers
keep a ring of their window) and masks, positions and RoPE tables are built for the new token only.

Shapes: B batch, T prompt length (padded), V vocabulary.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from archlab.infer.healing import ByteTrie, Healing, back_off
from archlab.infer.sampling import SamplingConfig, sample_next
from archlab.infer.speed import (
    check_compile_decode,
    compiled_forward,
    decode_layout,
    reduction_gemvs_win,
)
from archlab.infer.stream import TextStream, TokenizerLike
from archlab.nn.config import ModelConfig
from archlab.nn.kv_cache import KVCache
from archlab.nn.model import TransformerLM

PAD_ID = 0  # any valid id: padded slots are masked out and never attended to


@dataclass
class Generation:
    """What `generate` produced, and what it cost."""

    tokens: list[list[int]]  # new tokens per prompt, without the EOS; up to the token completing a stop string
    texts: list[str] = field(default_factory=list)  # decoded new text per prompt (generate_text only)
    cache_bytes: int = 0  # bytes the KV cache allocated (window layers: their window), = costs.kv_cache_bytes
    context_len: int = 0  # tokens per row the cache holds: longest prompt + max_new_tokens
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    decode_steps: int = 0  # forwards after the prefill (one token per row each)
    backed_off: list[int] = field(default_factory=list)  # token healing: prompt tokens removed per row, whose
    # bytes the first new tokens re-spell (empty without healing)


def context_limit(config: ModelConfig) -> int | None:
    """Tokens a model handles: max_seq_len, or with a RoPE scaling the stretched length factor * L0; with
    ReRoPE None (no limit: no relative position past the window is ever seen), with Leaky ReRoPE the longest
    length whose largest relative position W + (L - 1 - W) / k stays within the trained max_seq_len - 1."""
    s = config.rope_scaling
    if config.position != "rope" or s is None or s.kind == "none":
        return config.max_seq_len
    if s.kind == "rerope":
        return None
    if s.kind == "leaky_rerope":
        return max(config.max_seq_len, s.window + 1 + int(s.factor * (config.max_seq_len - 1 - s.window)))
    return max(config.max_seq_len, int((s.original_max_seq_len or config.max_seq_len) * s.factor))


def check_context(config: ModelConfig, prompt_len: int, max_new_tokens: int, allow_extrapolation: bool) -> None:
    """Fail before any compute if prompt + new tokens do not fit the model's context."""
    total, limit = prompt_len + max_new_tokens, context_limit(config)
    if limit is None or total <= limit or (allow_extrapolation and config.position != "learned"):
        return
    how = ("learned positions cannot extrapolate" if config.position == "learned"
           else "pass allow_extrapolation (--allow-extrapolation) to run past it anyway")
    raise ValueError(f"prompt ({prompt_len} tokens) + max_new_tokens ({max_new_tokens}) = {total} exceeds the "
                     f"model's context of {limit} tokens: shorten the prompt or generate fewer tokens; {how}")


def left_pad(prompts: list[list[int]], device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor | None]:
    """Token lists -> ids (B, T) padded on the left, and the attention mask (B, T) (None if none is padded)."""
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), PAD_ID, dtype=torch.long)
    mask = torch.zeros(len(prompts), longest, dtype=torch.bool)
    for row, p in enumerate(prompts):
        ids[row, longest - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[row, longest - len(p) :] = True
    return ids.to(device), (None if bool(mask.all()) else mask.to(device))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def generate(
    model: TransformerLM,
    prompts: list[list[int]],
    sampling: SamplingConfig = SamplingConfig(),
    eos_id: int | None = None,
    on_step: Callable[[list[int | None]], list[bool]] | None = None,
    compile_decode: bool = False,
    token_healing: int = 0,
    token_bytes: Sequence[bytes | None] | None = None,
) -> Generation:
    """Generate up to `sampling.max_new_tokens` tokens after each prompt (token ids), as one batch.

    `token_healing=N` backs each prompt off by up to N tokens (`healing.back_off`) and constrains the first new
    tokens to re-spell the removed bytes; `token_bytes` (each id's raw bytes, `Tokenizer.token_bytes()`) is
    then required. The returned tokens follow the shortened prompt (`Generation.backed_off` says by how much).

    `on_step(tokens)` sees each step's new token per row (None for rows already finished) and returns, per
    row, whether it must stop (e.g. a stop string appeared). The model runs in eval mode, then gets its mode back.
    Its Linear weights are read column-major while it runs (`decode_layout`), and given back as they were.
    `compile_decode=True` runs the one-token steps through `torch.compile` (dynamic shapes, so one graph
    serves every cache length); the first call compiles (seconds, see docs/inference.md) and later calls on
    the same model reuse it. Where this machine streams weights faster through Inductor's own reductions than
    through MKL (`reduction_gemvs_win`, measured once per model shape), the compiled step uses those and the
    weights keep their row-major layout. The prefill stays eager: every prompt length would be a new graph.
    """
    if not prompts or not all(prompts):
        raise ValueError("generate needs at least one prompt, and every prompt at least one token")
    n_new, longest = sampling.max_new_tokens, max(len(p) for p in prompts)
    check_context(model.config, longest, n_new, sampling.allow_extrapolation)
    wrong = next((t for p in prompts for t in p if isinstance(t, bool) or not isinstance(t, numbers.Integral)), None)
    if wrong is not None:  # a float id would be truncated by torch.tensor(..., dtype=long) without a word
        raise ValueError(f"token id {wrong!r} is not an integer: prompts are lists of int token ids")
    bad = next((t for p in prompts for t in p if not 0 <= t < model.config.vocab_size), None)
    if bad is not None:  # e.g. a tokenizer larger than the vocabulary; torch would only say "index out of range"
        raise ValueError(f"token id {bad} is outside the model's vocabulary (0..{model.config.vocab_size - 1})")
    if compile_decode:
        check_compile_decode(next(model.parameters()).device)
    prompts, heal, backed = _heal_prompts(prompts, token_healing, token_bytes, model.config.vocab_size)
    was_training = model.training
    model.eval()
    try:
        reduce_linears = compile_decode and reduction_gemvs_win(model)
        with nullcontext() if reduce_linears else decode_layout(model):
            result = _generate(model, prompts, sampling, eos_id, on_step, compile_decode, reduce_linears, heal)
    finally:
        model.train(was_training)
    result.backed_off = backed
    return result


@lru_cache(maxsize=4)
def _trie(token_bytes: tuple[bytes | None, ...]) -> ByteTrie:
    return ByteTrie(token_bytes)


def _heal_prompts(
    prompts: list[list[int]], n: int, token_bytes: Sequence[bytes | None] | None, vocab_size: int
) -> tuple[list[list[int]], Healing | None, list[int]]:
    """The prompts backed off for token healing, its state, and the tokens removed per row (n = 0: unchanged)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"token_healing={n!r} is not allowed: an integer >= 0 (tokens to back off; 0 = off)")
    if not n:
        return prompts, None, []
    if token_bytes is None or len(token_bytes) > vocab_size:
        raise ValueError("token_healing needs token_bytes: each id's raw bytes (Tokenizer.token_bytes()), at most "
                         f"the model's {vocab_size} ids")
    plans = [back_off(p, n, token_bytes) for p in prompts]
    table = tuple(token_bytes) + (None,) * (vocab_size - len(token_bytes))  # ids past the tokenizer: never
    heal = Healing(_trie(table), [r for _, r, _ in plans], [c for _, _, c in plans])
    return [p[: len(p) - k] for p, (k, _, _) in zip(prompts, plans)], heal, [k for k, _, _ in plans]

@torch.inference_mode()
def _generate(
    model: TransformerLM,
    prompts: list[list[int]],
    sampling: SamplingConfig,
    eos_id: int | None,
    on_step: Callable[[list[int | None]], list[bool]] | None,
    compile_decode: bool,
    reduce_linears: bool = False,
    heal: Healing | None = None,
) -> Generation:
    """Prefill, then the decode loop, timed apart (inputs already checked)."""
    n_new, longest = sampling.max_new_tokens, max(len(p) for p in prompts)
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(sampling.seed) if sampling.seed is not None else None
    ids, mask = left_pad(prompts, device)
    cache = KVCache.for_model(model, len(prompts), longest + n_new)
    if mask is not None:
        cache.set_padding(mask)
    start = time.perf_counter()
    logits = model(ids, cache=cache, logits_to_keep=1)[:, -1]  # (B, V)
    _sync(device)
    prefill = time.perf_counter() - start
    step = compiled_forward(model, reduce_linears) if compile_decode else model
    out, ends, steps = _decode(step, cache, logits, sampling, generator, eos_id, on_step, heal)
    _sync(device)
    decode = time.perf_counter() - start - prefill
    tokens = [row[:end] for row, end in zip(out[:, :steps].tolist(), ends)]
    return Generation(tokens, [], cache.nbytes(), cache.max_len, prefill, decode, steps - 1)


def _decode(
    model: Callable[..., torch.Tensor],
    cache: KVCache,
    logits: torch.Tensor,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    eos_id: int | None,
    on_step: Callable[[list[int | None]], list[bool]] | None,
    heal: Healing | None = None,
) -> tuple[torch.Tensor, list[int], int]:
    """The decode loop: sample (the first steps constrained while healing), record, feed back. Returns tokens
    (B, N), each row's length, steps taken."""
    n_new, batch = sampling.max_new_tokens, logits.shape[0]
    out = torch.empty(batch, n_new, dtype=torch.long, device=logits.device)
    ends = [n_new] * batch  # a row's tokens end before its EOS / after the token that completed a stop string
    watch = eos_id is not None or on_step is not None  # otherwise no per-step host sync at all
    for step in range(n_new):
        healing = heal is not None and heal.active
        token = sample_next(heal.constrain(logits) if healing else logits, sampling, generator)  # (B,)
        if healing:
            heal.advance(token.tolist())
        out[:, step] = token
        if watch:
            _update_ends(token.tolist(), step, ends, eos_id, on_step)
            if all(end <= step + 1 for end in ends):
                return out, ends, step + 1
        if step + 1 < n_new:
            logits = model(token[:, None], cache=cache)[:, -1]  # (B, V)
    return out, ends, n_new


def _update_ends(
    tokens: list[int], step: int, ends: list[int], eos_id: int | None,
    on_step: Callable[[list[int | None]], list[bool]] | None,
) -> None:
    """Close rows that produced EOS at `step`, then those the callback stops (O(B) Python per step)."""
    active = [end > step for end in ends]
    for row, tok in enumerate(tokens):
        if active[row] and tok == eos_id:
            ends[row], active[row] = step, False
    if on_step is not None:
        stops = on_step([tok if live else None for tok, live in zip(tokens, active)])
        for row, stop in enumerate(stops):
            if active[row] and stop:
                ends[row] = step + 1


def generate_text(
    model: TransformerLM,
    tokenizer: TokenizerLike,
    prompts: list[str],
    sampling: SamplingConfig = SamplingConfig(),
    on_text: Callable[[int, str], None] | None = None,
    compile_decode: bool = False,
    token_healing: int = 0,
) -> Generation:
    """`generate` on text: encode, decode incrementally, apply stop strings, stream `on_text(row, piece)`.

    Rows stop at the tokenizer's EOS id (if it has one), at a stop string, or after max_new_tokens. With
    `token_healing=N` the texts are still what follows each prompt (the re-spelled bytes are not repeated), so
    prompt + text starts with the prompt byte for byte.
    """
    ids = [tokenizer.encode(p) for p in prompts]
    skips = [0] * len(prompts)
    token_bytes = None
    if token_healing:
        if not hasattr(tokenizer, "token_bytes"):
            raise ValueError("token_healing needs a tokenizer with token_bytes() (archlab.data.tokenizer.Tokenizer)")
        token_bytes = tokenizer.token_bytes()
        skips = [len(back_off(p, token_healing, token_bytes)[1].decode("utf-8")) for p in ids]
    streams = [TextStream(tokenizer.decode, sampling.stop, skip) for skip in skips]

    def on_step(tokens: list[int | None]) -> list[bool]:
        for row, tok in enumerate(tokens):
            if tok is not None and (piece := streams[row].push(tok)) and on_text is not None:
                on_text(row, piece)
        return [s.stopped for s in streams]

    result = generate(model, ids, sampling, tokenizer.eos_id, on_step, compile_decode, token_healing, token_bytes)
    for row, stream in enumerate(streams):
        if (rest := stream.finish()) and on_text is not None:
            on_text(row, rest)
    result.texts = [s.text for s in streams]
    return result
