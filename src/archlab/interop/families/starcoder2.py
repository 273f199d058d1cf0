"""StarCoder2 (`Starcoder2ForCausalLM`): Llama's attention names with LayerNorm (with
bias), a plain tanh-GELU MLP (`c_fc`, `c_proj`), one `use_bias` switch for every
attention and MLP linear, a tied head by default, and one sliding window on every layer.
Reference: transformers `models/starcoder2/modeling_starcoder2.py`."""

from __future__ import annotations

from archlab.interop.family import Family, Key, activation_key, copy, linear

BLOCK = "model.layers.{i}."

STARCODER2 = Family(
    model_type="starcoder2",
    architecture="Starcoder2ForCausalLM",
    fixed=dict(
        norm="layernorm",
        norm_bias=True,
        norm_position="pre",
        block="serial",
        ffn="mlp",
        lm_head_bias=False,
        position="rope",
        qk_norm="none",
        embed_scale="none",
        norm_unit_offset=False,
        attn_bias=None,
        mlp_bias=None,
    ),
    keys={
        "vocab_size": Key("vocab_size", 49152),
        "hidden_size": Key("d_model", 3072),
        "intermediate_size": Key("d_ff", 12288),
        "num_hidden_layers": Key("n_layers", 30),
        "num_attention_heads": Key("n_heads", 24),
        "num_key_value_heads": Key("n_kv_heads", 2),
        "head_dim": Key("head_dim", None),
        "max_position_embeddings": Key("max_seq_len", 4096),
        "norm_epsilon": Key("norm_eps", 1e-5),
        **activation_key("hidden_act", "gelu_pytorch_tanh", "gelu_pytorch_tanh"),
        "tie_word_embeddings": Key("tie_embeddings", True),
        "use_bias": Key("bias", True, save=lambda bias, c: c.attn_bias),  # attention and MLP alike
        "embedding_dropout": Key("dropout", 0.0),
        "residual_dropout": Key("dropout", 0.0),
        "attention_dropout": Key("attn_dropout", 0.0),
    },
    weights={
        "embed_tokens.weight": copy("model.embed_tokens.weight"),
        **linear("layers.{i}.attn_norm", BLOCK + "input_layernorm"),
        **linear("layers.{i}.mlp_norm", BLOCK + "post_attention_layernorm"),
        **linear(
            "layers.{i}.attn.qkv_proj",
            tuple(f"{BLOCK}self_attn.{p}_proj" for p in "qkv"),
            "fuse_qkv",
        ),
        **linear("layers.{i}.attn.o_proj", BLOCK + "self_attn.o_proj"),
        **linear("layers.{i}.mlp.up_proj", BLOCK + "mlp.c_fc"),
        **linear("layers.{i}.mlp.down_proj", BLOCK + "mlp.c_proj"),
        **linear("norm", "model.norm"),
        "lm_head.weight": copy("lm_head.weight"),
    },
    window="all",
    ignore=(r"rotary_emb\.inv_freq$",),
)
