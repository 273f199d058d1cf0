"""Incremental decoding in one call: `generate` (token ids) and `generate_text` (text, streamed), over a
`Decoder` (infer/engine.py) opened and closed around the call, so the caller's weights come back as they were.

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
- Speed: the decoder reads float32 Linear weights column-major on the CPU, and `compile_decode=True` runs the
  one-token steps through torch.compile where that measures faster (docs/inference.md, "Decode speed").
Every decode step costs the same Python work at any length: the cache is preallocated (sliding-window layers
keep a ring of their window) and masks, positions and RoPE tables are built for the new token only.
Callers that decode many times with one model (`archlab generate`) keep one `Decoder` instead.

Shapes: B batch, T prompt length (padded), V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

from archlab.infer.engine import (
    PAD_ID,
    Decoder,
    Generation,
    OnStep,
    check_context,
    context_limit,
    left_pad,
)
from archlab.infer.sampling import SamplingConfig
from archlab.infer.stream import TextStream, TokenizerLike
from archlab.nn.model import TransformerLM

__all__ = ["PAD_ID", "Generation", "check_context", "context_limit", "generate", "generate_text", "left_pad",
           "text_generation"]


def generate(
    model: TransformerLM,
    prompts: list[list[int]],
    sampling: SamplingConfig = SamplingConfig(),
    eos_id: int | None = None,
    on_step: OnStep | None = None,
    compile_decode: bool | str = False,
) -> Generation:
    """Generate up to `sampling.max_new_tokens` tokens after each prompt (token ids), as one batch.

    `on_step(tokens)` sees each step's new token per row (None for rows already finished) and returns, per
    row, whether it must stop (e.g. a stop string appeared). The model runs in eval mode, then gets its mode
    back, and every parameter its own tensor (same data pointer and strides). `compile_decode=True` runs the
    one-token steps through `torch.compile` where the decoder measures that faster than eager (`"always"`:
    without measuring); the first call compiles (seconds, see docs/inference.md).
    """
    with Decoder(model, compile_decode) as decoder:
        return decoder.generate(prompts, sampling, eos_id, on_step)


def text_generation(
    decoder: Decoder,
    tokenizer: TokenizerLike,
    prompts: list[str],
    sampling: SamplingConfig = SamplingConfig(),
    on_text: Callable[[int, str], None] | None = None,
) -> Generation:
    """`decoder.generate` on text: encode, decode incrementally, apply stop strings, stream `on_text(row, piece)`.

    Rows stop at the tokenizer's EOS id (if it has one), at a stop string, or after max_new_tokens.
    """
    streams = [TextStream(tokenizer.decode, sampling.stop) for _ in prompts]

    def on_step(tokens: list[int | None]) -> list[bool]:
        for row, tok in enumerate(tokens):
            if tok is not None and (piece := streams[row].push(tok)) and on_text is not None:
                on_text(row, piece)
        return [s.stopped for s in streams]

    ids = [tokenizer.encode(p) for p in prompts]
    result = decoder.generate(ids, sampling, tokenizer.eos_id, on_step)
    for row, stream in enumerate(streams):
        if (rest := stream.finish()) and on_text is not None:
            on_text(row, rest)
    result.texts = [s.text for s in streams]
    return result


def generate_text(
    model: TransformerLM,
    tokenizer: TokenizerLike,
    prompts: list[str],
    sampling: SamplingConfig = SamplingConfig(),
    on_text: Callable[[int, str], None] | None = None,
    compile_decode: bool | str = False,
) -> Generation:
    """`generate` on text (see `text_generation`), with a decoder of its own."""
    with Decoder(model, compile_decode) as decoder:
        return text_generation(decoder, tokenizer, prompts, sampling, on_text)
