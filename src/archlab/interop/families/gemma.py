"""Gemma (`GemmaForCausalLM`): Llama's names with (1 + w) RMSNorm (w stored zero-centred), GeGLU
with the tanh GELU (a legacy `hidden_act="gelu"` means the tanh one too: transformers rewrites
it), embeddings times sqrt(hidden_size), head_dim 256 and a tied head by default. Reference:
transformers `models/gemma/modeling_gemma.py`, `configuration_gemma.py`."""

from __future__ import annotations

from archlab.interop.families.llama import LLAMA_FIXED, llama_keys, llama_weights
from archlab.interop.family import Family, Key

GEMMA_FIXED = LLAMA_FIXED | dict(norm_unit_offset=True, embed_scale="sqrt_d", mlp_bias=False)
GEMMA_SIZES = dict(
    vocab_size=256000,
    hidden_size=3072,
    intermediate_size=24576,
    num_hidden_layers=28,
    num_attention_heads=16,
    max_position_embeddings=8192,
)
GEMMA_KEYS = llama_keys(GEMMA_SIZES, tie=True, head_dim=256, act="gelu_pytorch_tanh", kv_heads=16)
GEMMA_KEYS["hidden_act"] = Key(
    "activation",
    "gelu_pytorch_tanh",
    GEMMA_KEYS["hidden_act"].values | {"gelu": "gelu_tanh"},
    export_value={"gelu_tanh": "gelu_pytorch_tanh"},
)

GEMMA = Family(
    model_type="gemma",
    architecture="GemmaForCausalLM",
    fixed=GEMMA_FIXED,
    keys=GEMMA_KEYS | {"attention_bias": Key("attn_bias", False)},
    weights=llama_weights(),
    ignore=(r"rotary_emb\.inv_freq$",),
)
