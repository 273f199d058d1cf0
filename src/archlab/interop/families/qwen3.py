"""Qwen3 (`Qwen3ForCausalLM`): Qwen2's layout with per-head RMSNorm on q and k (weight [head_dim],
before RoPE), an `attention_bias` switch for q, k, v, o, and head_dim defaulting to 128 whatever the
width. Reference: transformers `models/qwen3/modeling_qwen3.py`."""

from __future__ import annotations

from archlab.interop.families.llama import LLAMA_FIXED, llama_keys, llama_weights
from archlab.interop.families.qwen2 import QWEN_SIZES
from archlab.interop.family import Family, Key

QWEN3 = Family(
    model_type="qwen3",
    architecture="Qwen3ForCausalLM",
    fixed=LLAMA_FIXED | dict(qk_norm="rmsnorm", qk_norm_scope="head", mlp_bias=False),
    keys=llama_keys(QWEN_SIZES, head_dim=128, kv_heads=32)
    | {"attention_bias": Key("attn_bias", False)},
    weights=llama_weights(qk_norm=True),
    window="qwen",
    ignore=(r"rotary_emb\.inv_freq$",),
)
