"""Incremental decoding in one call: `generate` (token ids) and `generate_text` (text, streamed),
over a `Decoder` (infer/engine.py) opened and closed around the call, so the caller's weights come
back as they were.

- Prompts of different lengths run as one batch, left-padded: the cache records which slots are
  padding, masks them for every later query, and positions count only each row's real tokens, so a
  row decodes exactly as it would alone.
- Sampling: greedy (temperature 0), temperature, top-k, top-p (nucleus, Holtzman et al., arXiv
  1904.09751), with a seeded `torch.Generator` of its own, so the same seed gives the same text.
- Stops: the tokenizer's stop ids (EOS and end-of-turn tokens, one policy for a Hugging Face
  folder and its converted checkpoint: data/tokenizer.py), stop strings (matched on the decoded
  text, in O(1) Python work per token), max new tokens; special tokens are left out of the text
  unless asked for.
- Streaming: `generate_text` hands each piece of confirmed text to a callback as soon as it
  is known; it never emits half a UTF-8 character or text that may still turn out to start
  a stop string.
- Token healing (`token_healing=N`): the prompt is backed off by up to N tokens and the first new
  tokens re-spell the removed bytes under a byte-trie constraint (infer/healing.py), so a prompt cut
  mid-token continues as the training text did (Su, kexue.fm/archives/9762).
- Context limit: prompt + max_new_tokens past the model's context fails before any compute
  (`ModelConfig.context_limit`), unless `SamplingConfig.past_context` asks to extrapolate or to
  slide a window of the last context-limit tokens (infer/window.py).
- Speed: the decoder reads float32 Linear weights column-major on the CPU, and
  `compile_decode=True` runs the one-token steps through torch.compile where that measures faster
  (docs/inference.md, "Decode speed").
Every decode step costs the same Python work at any length: the cache is preallocated
(sliding-window layers keep a ring of their window) and masks, positions and RoPE tables are built
for the new token only. Callers that decode many times with one model (`archlab generate`) keep
one `Decoder` instead.

Shapes: B batch, T prompt length (padded), V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

from archlab.infer.engine import Decoder, Generation, OnStep, StopIds
from archlab.infer.healing import ByteTrie, Healing, back_off
from archlab.infer.prompts import PAD_ID, check_context, left_pad
from archlab.infer.sampling import SamplingConfig
from archlab.infer.stream import TextStream, TokenizerLike
from archlab.nn.model import TransformerLM

__all__ = [
    "PAD_ID",
    "Generation",
    "check_context",
    "generate",
    "generate_text",
    "left_pad",
    "text_generation",
    "with_inference_logn",
]


def with_inference_logn(model: TransformerLM) -> TransformerLM:
    """`model`'s weights with the log-n query scale at inference only
    (`ModelConfig.with_inference_logn`: each query's scores times max(1, log n / log max_seq_len);
    Su, kexue.fm/archives/9708), in the same mode."""
    from archlab.checkpoint import build_model, module_training_state

    device = next(model.parameters()).device
    return build_model(
        model.config.with_inference_logn(),
        model.state_dict(),
        device,
        training_state=module_training_state(model),
    ).train(model.training)


def generate(
    model: TransformerLM,
    prompts: list[list[int]],
    sampling: SamplingConfig = SamplingConfig(),
    eos_id: StopIds = None,
    on_step: OnStep | None = None,
    compile_decode: bool | str = False,
    token_healing: int = 0,
    token_bytes: Sequence[bytes | None] | None = None,
) -> Generation:
    """Generate up to `sampling.max_new_tokens` tokens after each prompt (token ids), as one batch.

    `on_step(tokens)` sees each step's new token per row (None for rows already finished) and
    returns, per row, whether it must stop (e.g. a stop string appeared). The model runs in eval
    mode, then gets its mode back, and every parameter its own tensor (same data pointer and
    strides). `compile_decode=True` runs the one-token steps through `torch.compile` where the
    decoder measures that faster than eager (`"always"`: without measuring); the first call compiles
    (seconds, see docs/inference.md). `token_healing=N` backs each prompt off by up to N tokens
    (`healing.back_off`) and constrains the first new tokens to re-spell the removed bytes; it needs
    `token_bytes` (each id's raw bytes, `Tokenizer.token_bytes()`).
    """
    with Decoder(model, compile_decode) as decoder:
        return _healed_generate(
            decoder, prompts, sampling, eos_id, on_step, token_healing, token_bytes
        )


def _healed_generate(
    decoder: Decoder,
    prompts: list[list[int]],
    sampling: SamplingConfig,
    eos_id: StopIds,
    on_step: OnStep | None,
    token_healing: int,
    token_bytes: Sequence[bytes | None] | None,
) -> Generation:
    """`decoder.generate` on the backed-off prompts, with the healing constraint on
    the first steps."""
    prompts, heal, backed = _heal_prompts(
        prompts, token_healing, token_bytes, decoder.model.config.vocab_size
    )
    result = decoder.generate(prompts, sampling, eos_id, on_step, heal=heal)
    result.backed_off = backed
    return result


@lru_cache(maxsize=4)
def _trie(token_bytes: tuple[bytes | None, ...]) -> ByteTrie:
    return ByteTrie(token_bytes)


def _heal_prompts(
    prompts: list[list[int]], n: int, token_bytes: Sequence[bytes | None] | None, vocab_size: int
) -> tuple[list[list[int]], Healing | None, list[int]]:
    """The prompts backed off for token healing, its state, and the tokens removed per row (n
    = 0: unchanged)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(
            f"token_healing={n!r} is not allowed: an integer >= 0 (tokens to back off; 0 = off)"
        )
    if not n:
        return prompts, None, []
    if not prompts or not all(prompts):
        raise ValueError("generate needs at least one prompt, and every prompt at least one token")
    if token_bytes is None or len(token_bytes) > vocab_size:
        raise ValueError(
            "token_healing needs token_bytes: each id's raw bytes (Tokenizer.token_bytes()), at "
            f"most the model's {vocab_size} ids"
        )
    plans = [back_off(p, n, token_bytes) for p in prompts]
    # ids past the tokenizer: never
    table = tuple(token_bytes) + (None,) * (vocab_size - len(token_bytes))
    heal = Healing(_trie(table), [r for _, r, _ in plans], [c for _, _, c in plans])
    return [p[: len(p) - k] for p, (k, _, _) in zip(prompts, plans)], heal, [k for k, _, _ in plans]


def text_generation(
    decoder: Decoder,
    tokenizer: TokenizerLike,
    prompts: list[str],
    sampling: SamplingConfig = SamplingConfig(),
    on_text: Callable[[int, str], None] | None = None,
    token_healing: int = 0,
    special_tokens: bool = False,
) -> Generation:
    """`decoder.generate` on text: encode, decode incrementally, apply stop strings,
    stream `on_text(row, piece)`.

    Rows stop at the tokenizer's stop ids (`stop_ids`: its EOS and end-of-turn tokens,
    data/tokenizer.py; else its `eos_id`), at a stop string, or after max_new_tokens. The text
    leaves the tokenizer's special tokens out (`special_ids`) unless `special_tokens`; `tokens`
    keeps every id. With `token_healing=N` the texts are still what follows each prompt (the
    re-spelled bytes are not repeated), so prompt + text starts with the prompt byte for byte.
    """
    ids = [tokenizer.encode(p) for p in prompts]
    skips = [0] * len(prompts)
    token_bytes = None
    if token_healing:
        if not hasattr(tokenizer, "token_bytes"):
            raise ValueError(
                "token_healing needs a tokenizer with token_bytes() "
                "(archlab.data.tokenizer.Tokenizer)"
            )
        token_bytes = tokenizer.token_bytes()
        skips = [len(back_off(p, token_healing, token_bytes)[1].decode("utf-8")) for p in ids]
    hidden = frozenset() if special_tokens else getattr(tokenizer, "special_ids", frozenset())
    decode = (
        (lambda t: tokenizer.decode([i for i in t if i not in hidden]))
        if hidden
        else tokenizer.decode
    )
    streams = [TextStream(decode, sampling.stop, skip) for skip in skips]

    def on_step(tokens: list[int | None]) -> list[bool]:
        for row, tok in enumerate(tokens):
            if tok is not None and (piece := streams[row].push(tok)) and on_text is not None:
                on_text(row, piece)
        return [s.stopped for s in streams]

    stops = getattr(tokenizer, "stop_ids", None) or tokenizer.eos_id
    result = _healed_generate(decoder, ids, sampling, stops, on_step, token_healing, token_bytes)
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
    token_healing: int = 0,
    special_tokens: bool = False,
) -> Generation:
    """`generate` on text (see `text_generation`), with a decoder of its own."""
    with Decoder(model, compile_decode) as decoder:
        return text_generation(
            decoder, tokenizer, prompts, sampling, on_text, token_healing, special_tokens
        )
