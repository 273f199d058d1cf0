"""Gemma 2 (`Gemma2ForCausalLM`): Gemma with sandwich norms (input, post-attention,
pre- and post-feedforward: archlab's `double`), tanh softcaps on attention scores
(50) and final logits (30), scores scaled by `query_pre_attn_scalar`^-1/2 (archlab's
attn_scale), and sliding windows on the even layers (`layer_types`). Reference:
transformers `models/gemma2/modeling_gemma2.py`, `configuration_gemma2.py`."""

from __future__ import annotations

from typing import Any

from archlab.interop.families.gemma import GEMMA_FIXED, GEMMA_SIZES
from archlab.interop.families.llama import llama_keys, llama_weights
from archlab.interop.family import Family, Key
from archlab.nn.config import ModelConfig

DOUBLE_NORMS = {
    "attn_norm": "input_layernorm",
    "attn_out_norm": "post_attention_layernorm",
    "mlp_norm": "pre_feedforward_layernorm",
    "mlp_out_norm": "post_feedforward_layernorm",
}


def scale_from_scalar(scalar: float, fields: dict[str, Any]) -> float | None:
    """query_pre_attn_scalar -> attn_scale; None (1/sqrt(head_dim)) when the scalar is head_dim."""
    head_dim = fields.get("head_dim") or fields["d_model"] // fields["n_heads"]
    return None if scalar == head_dim else scalar**-0.5


def scalar_from_scale(scale: float | None, c: ModelConfig) -> float:
    """attn_scale -> query_pre_attn_scalar (an int where it is one, as Gemma 2 configs write it)."""
    if scale is None:
        return c.head_dim
    scalar = scale**-2
    return round(scalar) if abs(scalar - round(scalar)) < 1e-9 * scalar else scalar


GEMMA2 = Family(
    model_type="gemma2",
    architecture="Gemma2ForCausalLM",
    fixed=GEMMA_FIXED | dict(norm_position="double"),
    keys=llama_keys(
        GEMMA_SIZES
        | dict(
            hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8
        ),
        tie=True,
        head_dim=256,
        act_key="hidden_activation",
        act="gelu_pytorch_tanh",
        kv_heads=4,
    )
    | {
        "attention_bias": Key("attn_bias", False),
        "attn_logit_softcapping": Key("attn_softcap", 50.0),
        "final_logit_softcapping": Key("final_softcap", 30.0),
        "query_pre_attn_scalar": Key(
            "attn_scale", 256, load=scale_from_scalar, save=scalar_from_scale
        ),
    },
    weights=llama_weights(DOUBLE_NORMS),
    window="layer_types",
    window_default=4096,
    default_layer_types=lambda hf, n: [
        "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)
    ],
    ignore=(r"rotary_emb\.inv_freq$",),
)
