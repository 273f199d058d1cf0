"""Mistral (`MistralForCausalLM`): Llama without bias switches, plus
one sliding window on every layer (`sliding_window`, null = off).
Reference: transformers `models/mistral/modeling_mistral.py`."""

from __future__ import annotations

from archlab.interop.families.llama import LLAMA_FIXED, llama_keys, llama_weights
from archlab.interop.family import Family

MISTRAL = Family(
    model_type="mistral",
    architecture="MistralForCausalLM",
    fixed=LLAMA_FIXED | dict(attn_bias=False, mlp_bias=False),
    keys=llama_keys(
        dict(
            vocab_size=32000,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            max_position_embeddings=131072,
        ),
        kv_heads=8,
    ),
    weights=llama_weights(),
    window="all",
    window_default=4096,
    ignore=(r"rotary_emb\.inv_freq$",),
)
