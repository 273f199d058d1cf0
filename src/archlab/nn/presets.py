"""Named architectures and sizes. An architecture is a small function of the size that returns the
fields that make it what it is; `build_preset` merges size, architecture and overrides into a ModelConfig.

Architectures follow the papers and the Hugging Face reference (shared/reference/hf-families.md); the
training-side choices of each paper (z-loss, optimizer, dropout schedule) belong to the TrainConfig.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from archlab.nn.config import ConfigError, ModelConfig

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
    "1b": dict(d_model=2048, n_layers=16, n_heads=32, n_kv_heads=8, d_ff=8192, max_seq_len=2048,
               vocab_size=128256),
}


def _half_kv(size: Fields) -> int:
    """GQA with two query heads per K/V head where the head count allows it."""
    h = size["n_heads"]
    return h // 2 if h % 2 == 0 else h


def original(size: Fields) -> Fields:
    """Vaswani et al. 2017 (decoder only): post-norm LayerNorm, ReLU MLP with biases, sinusoids, dropout."""
    return dict(norm="layernorm", norm_bias=True, norm_position="post", ffn="mlp", activation="relu",
                bias=True, position="sinusoidal", dropout=0.1, tie_embeddings=True, embed_scale="sqrt_d")


def gpt2(size: Fields) -> Fields:
    """Radford et al. 2019: pre-norm LayerNorm, GELU (tanh) MLP with biases, learned positions, tied."""
    return dict(norm="layernorm", norm_bias=True, ffn="mlp", activation="gelu_tanh", bias=True,
                position="learned", tie_embeddings=True, init="gpt2")


def llama(size: Fields) -> Fields:
    """Touvron et al. 2023: pre-norm RMSNorm, SwiGLU, no biases, RoPE, untied."""
    return dict(norm="rmsnorm", ffn="swiglu", bias=False, position="rope")


def neox(size: Fields) -> Fields:
    """GPT-NeoX (Black et al. 2022): parallel block with two LayerNorms, GELU MLP, 25% rotary."""
    return dict(norm="layernorm", norm_bias=True, block="parallel", parallel_norms=2, ffn="mlp",
                activation="gelu", bias=True, position="rope", rope_fraction=0.25)


def gptj(size: Fields) -> Fields:
    """GPT-J: parallel block with one LayerNorm, interleaved partial RoPE, MLP and head biases only."""
    return dict(norm="layernorm", norm_bias=True, block="parallel", parallel_norms=1, ffn="mlp",
                activation="gelu_tanh", bias=False, mlp_bias=True, lm_head_bias=True, position="rope",
                rope_layout="interleaved", rope_fraction=0.25)


def palm(size: Fields) -> Fields:
    """Chowdhery et al. 2022: parallel block, SwiGLU, multi-query attention, no biases, tied."""
    return dict(norm="layernorm", norm_bias=False, block="parallel", ffn="swiglu", bias=False,
                n_kv_heads=1, position="rope", tie_embeddings=True)


def gemma2(size: Fields) -> Fields:
    """Gemma 2 (arXiv 2408.00118): sandwich norms, GeGLU, softcaps 50/30, sqrt(d) embeddings, tied,
    alternating sliding-window (here half the context) and full layers."""
    return dict(norm="rmsnorm", norm_unit_offset=True, norm_eps=1e-6, norm_position="double",
                ffn="glu", activation="gelu_tanh", position="rope", attn_softcap=50.0, final_softcap=30.0,
                embed_scale="sqrt_d", tie_embeddings=True, sliding_window=max(1, size["max_seq_len"] // 2),
                window_pattern="SF", n_kv_heads=_half_kv(size))


def olmo2(size: Fields) -> Fields:
    """OLMo 2 (arXiv 2501.00656): norm on each sublayer's output inside the residual, QK-norm over the
    whole projection, SwiGLU, RoPE theta 500k."""
    return dict(norm="rmsnorm", norm_eps=1e-6, norm_position="nonresidual_post", ffn="swiglu",
                qk_norm="rmsnorm", qk_norm_scope="proj", position="rope", rope_theta=500000.0)


def qwen3(size: Fields) -> Fields:
    """Qwen3: pre-norm RMSNorm, per-head QK RMSNorm, GQA, SwiGLU, RoPE theta 1M, tied (small models)."""
    return dict(norm="rmsnorm", norm_eps=1e-6, ffn="swiglu", qk_norm="rmsnorm", qk_norm_scope="head",
                n_kv_heads=_half_kv(size), position="rope", rope_theta=1e6, tie_embeddings=True)


PRESETS: dict[str, Callable[[Fields], Fields]] = {
    f.__name__: f for f in (original, gpt2, llama, neox, gptj, palm, gemma2, olmo2, qwen3)
}


def build_preset(name: str, size: str = "tiny", **overrides: Any) -> ModelConfig:
    """ModelConfig for architecture `name` at `size`; `overrides` win over both."""
    if name not in PRESETS:
        raise ConfigError(f"preset={name!r} is not allowed: one of {', '.join(PRESETS)}")
    if size not in SIZES:
        raise ConfigError(f"size={size!r} is not allowed: one of {', '.join(SIZES)}")
    shape = {**SIZES[size], **overrides}  # architectures derive some fields (windows, GQA) from the shape
    return ModelConfig(**{**SIZES[size], **PRESETS[name](shape), **overrides})
