"""Named architectures and sizes. An architecture is a small function of the shape that returns the
fields that make it what it is; `build_preset` merges them into a ModelConfig in the order

    ModelConfig defaults < size < architecture < the caller's overrides

so an override always wins. Architectures store explicit fields (`ffn="glu", activation="silu"`),
never a shorthand that rewrites another field. Two architecture fields are derived from the shape
(the size with the caller's overrides), and an override of the field itself beats the derivation:
- gemma2: sliding_window = max_seq_len // 2; hwfa: sliding_window = max_seq_len // 4 and the last
  layer full; hwfa2: sliding_window = max_seq_len // 8, its ReRoPE window max_seq_len // 2, and one
  full layer in the middle (`full_layers=1`) unless the caller sets a window_pattern;
- gemma2, qwen3: n_kv_heads = the shape's n_kv_heads if it sets one (size `1b`), else n_heads // 2.
A size or architecture field that only applies to a variant the caller switched off (`ONLY_WITH` in
nn/config/model.py: gpt2's norm_bias=True under `norm="rmsnorm"`, olmo2's `rope` group under
`position="alibi"`) is dropped; the caller's own such field is an error.

Every knob of an architecture is a ModelConfig field, so `archlab train --preset hwfa2
--model.full_layers 2 --model.rope.scaling.window 64` reaches it as `build_preset("hwfa2", size,
full_layers=2, rope={"scaling": {"window": 64}})` does: a group given as a dict edits the preset's,
and a scaling given without its kind edits the preset's scaling (`layer_over`, nn/config/layers.py).

Architectures follow the papers and the Hugging Face `transformers` implementations
(models/<family>/ modeling_<family>.py); the training-side choices of each paper (z-loss, optimizer,
dropout schedule) belong to the TrainConfig.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from archlab.nn.config import (
    ConfigError,
    ModelConfig,
    check_fields,
    expand_shorthands,
    inapplicable_fields,
    layer_over,
)

Fields = dict[str, Any]

SIZES: dict[str, Fields] = {
    # a CPU forward+backward in milliseconds: for tests and quick looks
    "tiny": dict(d_model=64, n_layers=2, n_heads=4, max_seq_len=128, vocab_size=256),
    # a few million parameters: trains on a laptop CPU in minutes (make demo)
    "small": dict(d_model=256, n_layers=6, n_heads=8, max_seq_len=256, vocab_size=256),
    # GPT-2 small shapes (~124M parameters with the gpt2 preset and its 50257-token vocabulary)
    "gpt2-small": dict(d_model=768, n_layers=12, n_heads=12, max_seq_len=1024, vocab_size=50257),
    "gpt2-medium": dict(d_model=1024, n_layers=24, n_heads=16, max_seq_len=1024, vocab_size=50257),
    # Llama-3.2-1B shapes
    "1b": dict(
        d_model=2048,
        n_layers=16,
        n_heads=32,
        n_kv_heads=8,
        d_ff=8192,
        max_seq_len=2048,
        vocab_size=128256,
    ),
}


def _half_kv(shape: Fields) -> int:
    """The shape's n_kv_heads if it sets one, else GQA with two query heads per K/V head
    where n_heads allows."""
    if shape.get("n_kv_heads") is not None:
        return shape["n_kv_heads"]
    h = shape["n_heads"]
    return h // 2 if h % 2 == 0 else h


def original(shape: Fields) -> Fields:
    """Vaswani et al. 2017 (decoder only): post-norm LayerNorm, ReLU MLP with
    biases, sinusoids, dropout."""
    return dict(
        norm="layernorm",
        norm_bias=True,
        norm_position="post",
        ffn="mlp",
        activation="relu",
        bias=True,
        position="sinusoidal",
        dropout=0.1,
        tie_embeddings=True,
        embed_scale="sqrt_d",
    )


def gpt2(shape: Fields) -> Fields:
    """Radford et al. 2019: pre-norm LayerNorm, GELU (tanh) MLP with biases,
    learned positions, tied."""
    return dict(
        norm="layernorm",
        norm_bias=True,
        ffn="mlp",
        activation="gelu_tanh",
        bias=True,
        position="learned",
        tie_embeddings=True,
        init="gpt2",
    )


def llama(shape: Fields) -> Fields:
    """Touvron et al. 2023: pre-norm RMSNorm, SwiGLU, no biases, RoPE, untied."""
    return dict(norm="rmsnorm", ffn="glu", activation="silu", bias=False, position="rope")


def neox(shape: Fields) -> Fields:
    """GPT-NeoX (Black et al. 2022): parallel block with two LayerNorms, GELU MLP, 25% rotary."""
    return dict(
        norm="layernorm",
        norm_bias=True,
        block="parallel",
        parallel_norms=2,
        ffn="mlp",
        activation="gelu",
        bias=True,
        position="rope",
        rope=dict(fraction=0.25),
    )


def gptj(shape: Fields) -> Fields:
    """GPT-J: parallel block with one LayerNorm, interleaved partial RoPE, MLP and
    head biases only."""
    return dict(
        norm="layernorm",
        norm_bias=True,
        block="parallel",
        parallel_norms=1,
        ffn="mlp",
        activation="gelu_tanh",
        bias=False,
        mlp_bias=True,
        lm_head_bias=True,
        position="rope",
        rope=dict(layout="interleaved", fraction=0.25),
    )


def palm(shape: Fields) -> Fields:
    """Chowdhery et al. 2022: parallel block, SwiGLU, multi-query attention, no biases, tied."""
    return dict(
        norm="layernorm",
        norm_bias=False,
        block="parallel",
        ffn="glu",
        activation="silu",
        bias=False,
        n_kv_heads=1,
        position="rope",
        tie_embeddings=True,
    )


def gemma2(shape: Fields) -> Fields:
    """Gemma 2 (arXiv 2408.00118): sandwich norms, GeGLU, softcaps 50/30, sqrt(d) embeddings, tied,
    alternating sliding-window (here half the context) and full layers."""
    return dict(
        norm="rmsnorm",
        norm_unit_offset=True,
        norm_eps=1e-6,
        norm_position="double",
        ffn="glu",
        activation="gelu_tanh",
        position="rope",
        attn_softcap=50.0,
        final_softcap=30.0,
        embed_scale="sqrt_d",
        tie_embeddings=True,
        sliding_window=max(1, shape["max_seq_len"] // 2),
        window_pattern="SF",
        n_kv_heads=_half_kv(shape),
    )


def olmo2(shape: Fields) -> Fields:
    """OLMo 2 (arXiv 2501.00656): norm on each sublayer's output inside the residual, QK-norm over
    the whole projection, SwiGLU, RoPE theta 500k."""
    return dict(
        norm="rmsnorm",
        norm_eps=1e-6,
        norm_position="nonresidual_post",
        ffn="glu",
        activation="silu",
        qk_norm="rmsnorm",
        qk_norm_scope="proj",
        position="rope",
        rope=dict(theta=500000.0),
    )


def qwen3(shape: Fields) -> Fields:
    """Qwen3: pre-norm RMSNorm, per-head QK RMSNorm, GQA, SwiGLU, RoPE theta 1M,
    tied (small models)."""
    return dict(
        norm="rmsnorm",
        norm_eps=1e-6,
        ffn="glu",
        activation="silu",
        qk_norm="rmsnorm",
        qk_norm_scope="head",
        n_kv_heads=_half_kv(shape),
        position="rope",
        rope=dict(theta=1e6),
        tie_embeddings=True,
    )


def hwfa(shape: Fields) -> Fields:
    """Su's hybrid window-full attention (HWFA; "Transformer upgrade 9: a new idea for
    global length extrapolation", kexue.fm/archives/9603; with ReRoPE, "Transformer upgrade
    14", kexue.fm/archives/9731): Llama blocks whose layers but the last attend within a
    window (here a quarter of the context) with RoPE; the last attends to everything with no
    positions (NoPE) and log-n scaling. HWFA + ReRoPE: add rope={"scaling": {"kind": "rerope",
    "window": ...}} (docs/long-context.md)."""
    n = shape["n_layers"]
    return dict(
        norm="rmsnorm",
        ffn="glu",
        activation="silu",
        position="rope",
        sliding_window=max(1, shape["max_seq_len"] // 4),
        window_pattern="S" * (n - 1) + "F",
        rope=dict(pattern="R" * (n - 1) + "N"),
        attn_logn=True,
    )


def hwfa2(shape: Fields) -> Fields:
    """Su's HWFA2 ("Transformer upgrade 14: when HWFA meets ReRoPE", kexue.fm/archives/9731): Llama
    blocks whose layers attend within a window (default max_seq_len / 8; Su's best w is 2-4 x N / L)
    with RoPE, but for `full_layers` (1 or 2, a ModelConfig field) full layers in the middle (L/2,
    or L/3 and 2L/3) that use RoPE in training and ReRoPE at inference (`rope.scaling.window`,
    default max_seq_len / 2: Su's w = 256 at N = 512), with log-n. The window layers never take the
    ReRoPE (rope.local_scaling=False); HWFA's window constraint is dropped. A caller's
    window_pattern places the full layers instead of full_layers."""
    length = shape["max_seq_len"]
    windowed = (
        shape.get("window_pattern", "S") == "S" and shape.get("sliding_window", 1) is not None
    )
    # the caller's pattern (or no window) places none
    placed = {"full_layers": 1} if windowed else {}
    return dict(
        norm="rmsnorm",
        ffn="glu",
        activation="silu",
        position="rope",
        sliding_window=max(1, length // 8),
        **placed,
        rope=dict(
            pattern="R",
            scaling={"kind": "rerope", "window": max(1, length // 2), "inference_only": True},
            local_scaling=False,
        ),
        attn_logn=True,
    )


PRESETS: dict[str, Callable[[Fields], Fields]] = {
    f.__name__: f
    for f in (original, gpt2, llama, neox, gptj, palm, gemma2, olmo2, qwen3, hwfa, hwfa2)
}
# preset -> the Hugging Face model_type (interop/families/) whose recipe it is;
# tests/nn/test_presets.py checks that the family's fixed fields hold in the preset and that the
# preset exports to it and reads back unchanged. The others have no Hugging Face family: original
# (the 2017 decoder), palm (not in transformers), hwfa and hwfa2 (Su's)
HF_FAMILIES = {
    "gpt2": "gpt2",
    "llama": "llama",
    "neox": "gpt_neox",
    "gptj": "gptj",
    "gemma2": "gemma2",
    "olmo2": "olmo2",
    "qwen3": "qwen3",
}


def build_preset(name: str, size: str = "tiny", **overrides: Any) -> ModelConfig:
    """ModelConfig for architecture `name` at `size`; `overrides` win over both (see
    the module docstring)."""
    if name not in PRESETS:
        raise ConfigError(f"preset={name!r} is not allowed: one of {', '.join(PRESETS)}")
    if size not in SIZES:
        raise ConfigError(f"size={size!r} is not allowed: one of {', '.join(SIZES)}")
    check_fields(overrides)
    user = expand_shorthands(overrides)  # ffn="swiglu" beats the architecture's activation too
    # architectures derive some fields (windows, GQA) from the shape
    shape = {**SIZES[size], **user}
    # rope={"scaling": {"window": 64}} edits hwfa2's
    merged = layer_over({**SIZES[size], **PRESETS[name](shape)}, user)
    for field in inapplicable_fields(merged):
        if field not in user:
            del merged[field]  # e.g. gpt2's norm_bias=True once the caller picks norm="rmsnorm"
    return ModelConfig(**merged)
