"""Llama (`LlamaForCausalLM`): pre-norm RMSNorm, SwiGLU, RoPE with every scaling, optional biases.

The helpers here also build the tables of the families that share Llama's
names (Mistral, Qwen, Gemma, OLMo 2): `llama_keys` for config.json and
`llama_weights` for the tensors, with the per-family norm names. Reference:
transformers `models/llama/modeling_llama.py`, `configuration_llama.py`.
"""

from __future__ import annotations

from typing import Any

from archlab.interop.family import (
    Family,
    Key,
    Rule,
    activation_key,
    copy,
    fuse_gate_up,
    fuse_qkv,
)

PRE_NORMS = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm"}


def llama_keys(
    sizes: dict[str, Any],
    eps: float = 1e-6,
    tie: bool = False,
    act_key: str = "hidden_act",
    act: str = "silu",
    tanh: str = "gelu_pytorch_tanh",
    head_dim: int | None = None,
    kv_heads: int | None = None,
) -> dict[str, Key]:
    """config.json keys of the Llama-named families; `sizes` holds the config class's size
    defaults, `head_dim` and `kv_heads` its defaults of those (None: derived from the width and
    the query heads)."""
    return {
        "vocab_size": Key("vocab_size", sizes["vocab_size"]),
        "hidden_size": Key("d_model", sizes["hidden_size"]),
        "intermediate_size": Key("d_ff", sizes["intermediate_size"]),
        "num_hidden_layers": Key("n_layers", sizes["num_hidden_layers"]),
        "num_attention_heads": Key("n_heads", sizes["num_attention_heads"]),
        "num_key_value_heads": Key("n_kv_heads", kv_heads),  # null: as many as query heads
        "head_dim": Key("head_dim", head_dim),  # null: hidden_size / num_attention_heads
        "max_position_embeddings": Key("max_seq_len", sizes["max_position_embeddings"]),
        "rms_norm_eps": Key("norm_eps", eps),
        "tie_word_embeddings": Key("tie_embeddings", tie),
        **activation_key(act_key, act, tanh),
        "attention_dropout": Key("attn_dropout", 0.0),
    }


def llama_weights(
    norms: dict[str, str] = PRE_NORMS, qk_norm: bool = False, prefix: str = "model."
) -> dict[str, Rule]:
    """Weight table of the Llama-named families: separate q/k/v and gate/up, norms
    named by `norms`."""
    layer = prefix + "layers.{i}."
    attn, mlp = layer + "self_attn.", layer + "mlp."
    table = {
        "embed_tokens.weight": copy(prefix + "embed_tokens.weight"),
        "norm.weight": copy(prefix + "norm.weight"),
        "lm_head.weight": copy("lm_head.weight"),
        "layers.{i}.mlp.gate_up_proj.weight": fuse_gate_up(
            mlp + "gate_proj.weight", mlp + "up_proj.weight"
        ),
        "layers.{i}.mlp.gate_up_proj.bias": fuse_gate_up(
            mlp + "gate_proj.bias", mlp + "up_proj.bias"
        ),
        "layers.{i}.mlp.down_proj.weight": copy(mlp + "down_proj.weight"),
        "layers.{i}.mlp.down_proj.bias": copy(mlp + "down_proj.bias"),
    }
    for kind in ("weight", "bias"):
        table[f"layers.{{i}}.attn.qkv_proj.{kind}"] = fuse_qkv(
            *(f"{attn}{p}_proj.{kind}" for p in "qkv")
        )
        table[f"layers.{{i}}.attn.o_proj.{kind}"] = copy(f"{attn}o_proj.{kind}")
    for ours, theirs in norms.items():
        table[f"layers.{{i}}.{ours}.weight"] = copy(f"{layer}{theirs}.weight")
    if qk_norm:
        table |= {
            f"layers.{{i}}.attn.{n}.weight": copy(f"{attn}{n}.weight") for n in ("q_norm", "k_norm")
        }
    return table


LLAMA_FIXED = dict(
    norm="rmsnorm",
    norm_position="pre",
    block="serial",
    ffn="glu",
    position="rope",
    qk_norm="none",
    embed_scale="none",
    lm_head_bias=False,
    norm_bias=False,
    norm_unit_offset=False,
)
LLAMA_SIZES = dict(
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    max_position_embeddings=2048,
)

LLAMA = Family(
    model_type="llama",
    architecture="LlamaForCausalLM",
    fixed=LLAMA_FIXED,
    keys={
        **llama_keys(LLAMA_SIZES),
        "attention_bias": Key("attn_bias", False),
        "mlp_bias": Key("mlp_bias", False),
    },
    weights=llama_weights(),
    ignore=(r"rotary_emb\.inv_freq$",),
)
