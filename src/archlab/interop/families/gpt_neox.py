"""GPT-NeoX / Pythia (`GPTNeoXForCausalLM`): LayerNorm with bias, a parallel block with two input
norms (`use_parallel_residual`, else serial pre-norm), GELU MLP with biases, 25% rotary
(`rotary_pct`, base `rotary_emb_base`), MHA only. Its fused `query_key_value` rows are per head [q_h
| k_h | v_h]: regrouped into our [q | k | v] (`neox_qkv`). Saved files name the head
`embed_out.weight`. Reference: transformers `models/gpt_neox/modeling_gpt_neox.py`; Black et al.
2022, arXiv 2204.06745."""

from __future__ import annotations

from archlab.interop.family import Family, Key, RopeKeys, activation_key, copy, linear

BLOCK = "gpt_neox.layers.{i}."

GPT_NEOX = Family(
    model_type="gpt_neox",
    architecture="GPTNeoXForCausalLM",
    fixed=dict(
        norm="layernorm",
        norm_bias=True,
        norm_position="pre",
        parallel_norms=2,
        ffn="mlp",
        mlp_bias=True,
        lm_head_bias=False,
        position="rope",
        qk_norm="none",
        embed_scale="none",
        norm_unit_offset=False,
    ),
    keys={
        "vocab_size": Key("vocab_size", 50432),
        "hidden_size": Key("d_model", 6144),
        "num_hidden_layers": Key("n_layers", 44),
        "num_attention_heads": Key("n_heads", 64),
        "intermediate_size": Key("d_ff", 24576),
        **activation_key("hidden_act", "gelu", "gelu_new"),
        "max_position_embeddings": Key("max_seq_len", 2048),
        "layer_norm_eps": Key("norm_eps", 1e-5),
        "tie_word_embeddings": Key("tie_embeddings", False),
        "use_parallel_residual": Key("block", True, values={True: "parallel", False: "serial"}),
        "attention_bias": Key("attn_bias", True),
        "hidden_dropout": Key("dropout", 0.0),
        "attention_dropout": Key("attn_dropout", 0.0),
    },
    weights={
        "embed_tokens.weight": copy("gpt_neox.embed_in.weight"),
        **linear("layers.{i}.attn_norm", BLOCK + "input_layernorm"),
        **linear("layers.{i}.mlp_norm", BLOCK + "post_attention_layernorm"),
        **linear("layers.{i}.attn.qkv_proj", BLOCK + "attention.query_key_value", "neox_qkv"),
        **linear("layers.{i}.attn.o_proj", BLOCK + "attention.dense"),
        **linear("layers.{i}.mlp.up_proj", BLOCK + "mlp.dense_h_to_4h"),
        **linear("layers.{i}.mlp.down_proj", BLOCK + "mlp.dense_4h_to_h"),
        **linear("norm", "gpt_neox.final_layer_norm"),
        "lm_head.weight": copy("lm_head.weight"),
    },
    rope=RopeKeys(theta_key="rotary_emb_base", fraction_key="rotary_pct", fraction_default=0.25),
    ignore=(r"attention\.(masked_)?bias$", r"rotary_emb\.inv_freq$"),
    head_aliases=("embed_out.weight",),
    export_head="embed_out.weight",
)
