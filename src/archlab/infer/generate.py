"""Incremental decoding: prefill + one-token steps through `TransformerLM.forward` with a `KVCache`, and sampling.

- Prompts of different lengths run as one batch, left-padded: the cache records which slots are padding,
  masks them for every later query, and positions count only each row's real tokens, so a row decodes
  exactly as it would alone.
- Sampling: greedy (temperature 0), temperature, top-k, top-p (nucleus, Holtzman et al., arXiv 1904.09751),
  with a seeded `torch.Generator` of its own, so the same seed gives the same text.
- Stops: EOS id, stop strings (matched on the decoded text, in O(1) Python work per token), max new tokens.
- Streaming: `generate_text` hands each piece of confirmed text to a callback as soon as it is known; it
  never emits half a UTF-8 character or text that may still turn out to start a stop string.
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
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

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
from archlab.nn.rope import ROPE_SCALINGS

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


def context_limit(config: ModelConfig) -> int | None:
    """Tokens a model handles: max_seq_len, or with a RoPE scaling its kind's limit (`RopeKind.context_limit`:
    the stretched length factor * L0; ReRoPE None, no relative position past the window is ever seen; Leaky
    ReRoPE the longest length whose largest relative position stays within the trained max_seq_len - 1)."""
    s = config.rope_scaling
    if config.position != "rope" or s is None:
        return config.max_seq_len
    return ROPE_SCALINGS[s.kind].context_limit(s, config.max_seq_len)


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
) -> Generation:
    """Generate up to `sampling.max_new_tokens` tokens after each prompt (token ids), as one batch.

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
    was_training = model.training
    model.eval()
    try:
        reduce_linears = compile_decode and reduction_gemvs_win(model)
        with nullcontext() if reduce_linears else decode_layout(model):
            return _generate(model, prompts, sampling, eos_id, on_step, compile_decode, reduce_linears)
    finally:
        model.train(was_training)


@torch.inference_mode()
def _generate(
    model: TransformerLM,
    prompts: list[list[int]],
    sampling: SamplingConfig,
    eos_id: int | None,
    on_step: Callable[[list[int | None]], list[bool]] | None,
    compile_decode: bool,
    reduce_linears: bool = False,
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
    out, ends, steps = _decode(step, cache, logits, sampling, generator, eos_id, on_step)
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
) -> tuple[torch.Tensor, list[int], int]:
    """The decode loop: sample, record, feed back. Returns tokens (B, N), each row's length, steps taken."""
    n_new, batch = sampling.max_new_tokens, logits.shape[0]
    out = torch.empty(batch, n_new, dtype=torch.long, device=logits.device)
    ends = [n_new] * batch  # a row's tokens end before its EOS / after the token that completed a stop string
    watch = eos_id is not None or on_step is not None  # otherwise no per-step host sync at all
    for step in range(n_new):
        token = sample_next(logits, sampling, generator)  # (B,)
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
) -> Generation:
    """`generate` on text: encode, decode incrementally, apply stop strings, stream `on_text(row, piece)`.

    Rows stop at the tokenizer's EOS id (if it has one), at a stop string, or after max_new_tokens.
    """
    streams = [TextStream(tokenizer.decode, sampling.stop) for _ in prompts]

    def on_step(tokens: list[int | None]) -> list[bool]:
        for row, tok in enumerate(tokens):
            if tok is not None and (piece := streams[row].push(tok)) and on_text is not None:
                on_text(row, piece)
        return [s.stopped for s in streams]

    ids = [tokenizer.encode(p) for p in prompts]
    result = generate(model, ids, sampling, tokenizer.eos_id, on_step, compile_decode)
    for row, stream in enumerate(streams):
        if (rest := stream.finish()) and on_text is not None:
            on_text(row, rest)
    result.texts = [s.text for s in streams]
    return result
