"""Qwen2 (`Qwen2ForCausalLM`): Llama with unconditional q/k/v biases and no o_proj bias, and
optional sliding windows on the layers from `max_window_layers` on (`use_sliding_window`,
stored as `layer_types`).

archlab's `attn_bias` covers q, k, v and o together, so a Qwen2 model loads with attn_bias=True
and a zero o_proj bias (the same function); export refuses a non-zero one. Reference:
transformers `models/qwen2/modeling_qwen2.py`, `configuration_qwen2.py`.
"""

from __future__ import annotations

from archlab.interop.families.llama import LLAMA_FIXED, llama_keys, llama_weights
from archlab.interop.family import ZERO, Family

QWEN_SIZES = dict(
    vocab_size=151936,
    hidden_size=4096,
    intermediate_size=22016,
    num_hidden_layers=32,
    num_attention_heads=32,
    max_position_embeddings=32768,
)

QWEN2 = Family(
    model_type="qwen2",
    architecture="Qwen2ForCausalLM",
    fixed=LLAMA_FIXED | dict(attn_bias=True, mlp_bias=False),
    keys=llama_keys(QWEN_SIZES, kv_heads=32),
    weights=llama_weights() | {"layers.{i}.attn.o_proj.bias": ZERO},
    window="qwen",
    ignore=(r"rotary_emb\.inv_freq$",),
)
