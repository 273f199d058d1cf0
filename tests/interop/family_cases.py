"""Tiny random transformers models, one list of option draws per family, for the
interop parity tests.

Each case is a transformers config (2 layers, small widths, GQA where the family has it) and the
length of its test batch: the longest position the config allows, past the sliding window where
there is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import transformers

VOCAB, WIDTH, LENGTH, WINDOW = 96, 64, 48, 8
ROPE = {"rope_type": "default", "rope_theta": 10000.0}


@dataclass(frozen=True)
class Case:
    family: str
    name: str
    config_class: str
    kwargs: dict[str, Any]
    length: int = LENGTH  # tokens in the logits batch
    # greedy decoding parity (off where transformers' RoPE state depends on history)
    generate: bool = True

    @property
    def id(self) -> str:
        return f"{self.family}-{self.name}"

    def config(self) -> transformers.PretrainedConfig:
        return getattr(transformers, self.config_class)(**self.kwargs)


def llama_like(**kw: Any) -> dict[str, Any]:
    base = dict(
        vocab_size=VOCAB,
        hidden_size=WIDTH,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=LENGTH,
        rms_norm_eps=1e-6,
        rope_parameters=dict(ROPE),
        tie_word_embeddings=False,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=None,
    )
    return base | kw


def gpt_like(**kw: Any) -> dict[str, Any]:
    return (
        dict(
            vocab_size=VOCAB,
            n_embd=WIDTH,
            n_layer=2,
            n_head=4,
            n_positions=LENGTH,
            bos_token_id=None,
            eos_token_id=None,
        )
        | kw
    )


def neox_like(**kw: Any) -> dict[str, Any]:
    return (
        dict(
            vocab_size=VOCAB,
            hidden_size=WIDTH,
            intermediate_size=96,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=LENGTH,
            bos_token_id=None,
            eos_token_id=None,
            pad_token_id=0,
        )
        | kw
    )


def gemma3_like(full: dict[str, Any], sliding: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """Gemma 3 text: RoPE keyed by layer type (small bases, so that both rotate visibly
    within the batch)."""
    base = llama_like(
        num_hidden_layers=4,
        head_dim=32,
        query_pre_attn_scalar=24,
        sliding_window=WINDOW,
        rope_parameters={"full_attention": full, "sliding_attention": sliding},
    )
    return base | kw


L0 = 16  # original length of the scaled-RoPE cases
CASES = [
    Case("llama", "gqa", "LlamaConfig", llama_like()),
    Case(
        "llama",
        "bias-mqa-tied",
        "LlamaConfig",
        llama_like(
            attention_bias=True,
            mlp_bias=True,
            num_key_value_heads=1,
            tie_word_embeddings=True,
            head_dim=24,
        ),
    ),
    Case(
        "llama",
        "linear",
        "LlamaConfig",
        llama_like(rope_parameters=dict(ROPE, rope_type="linear", factor=2.0)),
    ),
    Case(
        "llama",
        "dynamic",
        "LlamaConfig",
        llama_like(
            max_position_embeddings=L0, rope_parameters=dict(ROPE, rope_type="dynamic", factor=2.0)
        ),
        length=3 * L0,
        generate=False,
    ),
    Case(
        "llama",
        "yarn",
        "LlamaConfig",
        llama_like(
            max_position_embeddings=4 * L0,
            rope_parameters=dict(
                ROPE,
                rope_type="yarn",
                factor=4.0,
                original_max_position_embeddings=L0,
                beta_fast=16.0,
            ),
        ),
        length=4 * L0,
    ),
    Case(
        "llama",
        "llama3",
        "LlamaConfig",
        llama_like(
            max_position_embeddings=4 * L0,
            rope_parameters=dict(
                ROPE,
                rope_type="llama3",
                factor=4.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=L0,
                rope_theta=500000.0,
            ),
        ),
        length=4 * L0,
    ),
    Case("mistral", "window", "MistralConfig", llama_like(sliding_window=WINDOW)),
    Case(
        "mistral",
        "no-window-mha",
        "MistralConfig",
        llama_like(sliding_window=None, num_key_value_heads=4),
    ),
    Case("qwen2", "plain", "Qwen2Config", llama_like()),
    Case(
        "qwen2",
        "window-top-layer",
        "Qwen2Config",
        llama_like(
            use_sliding_window=True,
            sliding_window=WINDOW,
            max_window_layers=1,
            tie_word_embeddings=True,
        ),
    ),
    Case("qwen3", "head-dim", "Qwen3Config", llama_like(head_dim=32)),
    Case(
        "gemma",
        "mqa-head-dim",
        "GemmaConfig",
        llama_like(num_key_value_heads=1, head_dim=32, tie_word_embeddings=True),
    ),
    Case(
        "gemma",
        "legacy-gelu-untied",
        "GemmaConfig",
        llama_like(hidden_act="gelu", attention_bias=True),
    ),
    Case(
        "gemma2",
        "window-softcaps",
        "Gemma2Config",
        llama_like(
            sliding_window=WINDOW,
            attn_logit_softcapping=5.0,
            final_logit_softcapping=3.0,
            query_pre_attn_scalar=24,
            head_dim=32,
            tie_word_embeddings=True,
        ),
    ),
    Case(
        "gemma2",
        "no-caps-full",
        "Gemma2Config",
        llama_like(
            sliding_window=WINDOW,
            attn_logit_softcapping=None,
            final_logit_softcapping=None,
            query_pre_attn_scalar=16,
            layer_types=["full_attention", "sliding_attention"],
            hidden_activation="gelu",
        ),
    ),
    Case("olmo2", "gqa", "Olmo2Config", llama_like(rms_norm_eps=1e-5)),
    Case(
        "olmo2", "bias-mha", "Olmo2Config", llama_like(attention_bias=True, num_key_value_heads=4)
    ),
    Case("gpt_neox", "parallel-quarter", "GPTNeoXConfig", neox_like()),
    Case(
        "gpt_neox",
        "serial-half-nobias",
        "GPTNeoXConfig",
        neox_like(
            use_parallel_residual=False,
            attention_bias=False,
            hidden_act="gelu_new",
            rope_parameters=dict(ROPE, rope_theta=500.0, partial_rotary_factor=0.5),
        ),
    ),
    Case("gptj", "rotary-8", "GPTJConfig", gpt_like(rotary_dim=8)),
    Case(
        "gptj",
        "full-rotary-inner",
        "GPTJConfig",
        gpt_like(rotary_dim=16, n_inner=96, activation_function="gelu"),
    ),
    Case("gpt2", "tied", "GPT2Config", gpt_like()),
    Case(
        "gpt2",
        "unscaled-untied-relu",
        "GPT2Config",
        gpt_like(
            scale_attn_weights=False,
            tie_word_embeddings=False,
            n_inner=80,
            activation_function="relu",
        ),
    ),
    Case("phi", "gqa-half", "PhiConfig", neox_like(num_key_value_heads=2)),
    Case(
        "phi",
        "quarter-tied",
        "PhiConfig",
        neox_like(tie_word_embeddings=True, rope_parameters=dict(ROPE, partial_rotary_factor=0.25)),
    ),
    Case(
        "starcoder2",
        "window-bias",
        "Starcoder2Config",
        neox_like(num_key_value_heads=2, sliding_window=WINDOW),
    ),
    Case(
        "starcoder2",
        "nobias-untied",
        "Starcoder2Config",
        neox_like(num_key_value_heads=1, use_bias=False, tie_word_embeddings=False),
    ),
    Case(
        "gemma3",
        "local-global-linear-tied",
        "Gemma3TextConfig",
        gemma3_like(
            dict(ROPE, rope_type="linear", factor=2.0, rope_theta=1000.0),
            dict(ROPE, rope_theta=50.0),
            layer_types=[
                "sliding_attention",
                "sliding_attention",
                "full_attention",
                "sliding_attention",
            ],
        ),
    ),
    Case(
        "gemma3",
        "softcaps-mqa-untied-yarn",
        "Gemma3TextConfig",
        gemma3_like(
            dict(
                ROPE,
                rope_type="yarn",
                factor=4.0,
                original_max_position_embeddings=LENGTH // 4,
                rope_theta=500.0,
            ),
            dict(ROPE, rope_theta=20.0),
            sliding_window_pattern=2,
            num_key_value_heads=1,
            tie_word_embeddings=False,
            attn_logit_softcapping=5.0,
            final_logit_softcapping=3.0,
            query_pre_attn_scalar=32,
        ),
    ),
    Case(
        "smollm3",
        "nope-every-4th",
        "SmolLM3Config",
        llama_like(num_hidden_layers=4, tie_word_embeddings=True),
    ),
    Case(
        "smollm3",
        "nope-list-windows-bias",
        "SmolLM3Config",
        llama_like(
            num_hidden_layers=4,
            no_rope_layers=[1, 0, 1, 0],
            use_sliding_window=True,
            sliding_window=WINDOW,
            attention_bias=True,
            mlp_bias=True,
            rope_parameters=dict(ROPE, rope_theta=100.0),
        ),
    ),
    Case(
        "qwen3",
        "bias-window",
        "Qwen3Config",
        llama_like(
            head_dim=16,
            attention_bias=True,
            use_sliding_window=True,
            sliding_window=WINDOW,
            max_window_layers=0,
        ),
    ),
]
