"""Phi 1 / 1.5 / 2 (`PhiForCausalLM`): a parallel block with one LayerNorm, tanh-GELU
MLP (`fc1`, `fc2`), biases on every linear including lm_head, partial rotary
(`partial_rotary_factor`, default 0.5), and a final LayerNorm. Its optional `qk_layernorm` is
a LayerNorm WITH bias over each head, which archlab's QK-norm (no bias) cannot hold: refused.
Reference: transformers `models/phi/modeling_phi.py`."""

from __future__ import annotations

from archlab.interop.family import Family, Fixed, Key, RopeKeys, activation_key, copy, linear

BLOCK = "model.layers.{i}."

PHI = Family(
    model_type="phi",
    architecture="PhiForCausalLM",
    fixed=dict(
        norm="layernorm",
        norm_bias=True,
        norm_position="pre",
        block="parallel",
        parallel_norms=1,
        ffn="mlp",
        attn_bias=True,
        mlp_bias=True,
        lm_head_bias=True,
        position="rope",
        qk_norm="none",
        embed_scale="none",
        norm_unit_offset=False,
    ),
    keys={
        "vocab_size": Key("vocab_size", 51200),
        "hidden_size": Key("d_model", 2048),
        "intermediate_size": Key("d_ff", 8192),
        "num_hidden_layers": Key("n_layers", 24),
        "num_attention_heads": Key("n_heads", 32),
        "num_key_value_heads": Key("n_kv_heads", None),
        "head_dim": Key("head_dim", None),
        "max_position_embeddings": Key("max_seq_len", 2048),
        "layer_norm_eps": Key("norm_eps", 1e-5),
        **activation_key("hidden_act", "gelu_new", "gelu_new"),
        "tie_word_embeddings": Key("tie_embeddings", False),
        "qk_layernorm": Fixed(False),
        "resid_pdrop": Key("dropout", 0.0),
        "embd_pdrop": Key("dropout", 0.0),
        "attention_dropout": Key("attn_dropout", 0.0),
    },
    weights={
        "embed_tokens.weight": copy("model.embed_tokens.weight"),
        **linear("layers.{i}.attn_norm", BLOCK + "input_layernorm"),
        **linear(
            "layers.{i}.attn.qkv_proj",
            tuple(f"{BLOCK}self_attn.{p}_proj" for p in "qkv"),
            "fuse_qkv",
        ),
        **linear("layers.{i}.attn.o_proj", BLOCK + "self_attn.dense"),
        **linear("layers.{i}.mlp.up_proj", BLOCK + "mlp.fc1"),
        **linear("layers.{i}.mlp.down_proj", BLOCK + "mlp.fc2"),
        **linear("norm", "model.final_layernorm"),
        **linear("lm_head", "lm_head"),
    },
    rope=RopeKeys(fraction_key="partial_rotary_factor", fraction_default=0.5),
    ignore=(r"rotary_emb\.inv_freq$",),
)
