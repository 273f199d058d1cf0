"""GPT-J (`GPTJForCausalLM`): a parallel block with ONE LayerNorm (`ln_1`), interleaved rotary
(rotate_every_two) on the first `rotary_dim` dims of each head with a fixed base 10000, no attention
biases, MLP and lm_head biases. Reference: transformers `models/gptj/modeling_gptj.py`."""

from __future__ import annotations

from archlab.interop.families.gpt2 import four_times_width
from archlab.interop.family import Family, Key, RopeKeys, activation_key, copy, fuse_qkv, linear

BLOCK = "transformer.h.{i}."

GPTJ = Family(
    model_type="gptj",
    architecture="GPTJForCausalLM",
    fixed=dict(
        norm="layernorm",
        norm_bias=True,
        norm_position="pre",
        block="parallel",
        parallel_norms=1,
        ffn="mlp",
        attn_bias=False,
        mlp_bias=True,
        lm_head_bias=True,
        position="rope",
        qk_norm="none",
        embed_scale="none",
        norm_unit_offset=False,
    ),
    keys={
        "vocab_size": Key("vocab_size", 50400),
        "n_embd": Key("d_model", 4096),
        "n_layer": Key("n_layers", 28),
        "n_head": Key("n_heads", 16),
        "n_inner": Key("d_ff", None, load=four_times_width),
        "n_positions": Key("max_seq_len", 2048),
        "layer_norm_epsilon": Key("norm_eps", 1e-5),
        **activation_key("activation_function", "gelu_new", "gelu_new"),
        "tie_word_embeddings": Key("tie_embeddings", False),
        "resid_pdrop": Key("dropout", 0.0),
        "embd_pdrop": Key("dropout", 0.0),
        "attn_pdrop": Key("attn_dropout", 0.0),
    },
    weights={
        "embed_tokens.weight": copy("transformer.wte.weight"),
        **linear("layers.{i}.attn_norm", BLOCK + "ln_1"),
        "layers.{i}.attn.qkv_proj.weight": fuse_qkv(
            *(f"{BLOCK}attn.{p}_proj.weight" for p in "qkv")
        ),
        "layers.{i}.attn.o_proj.weight": copy(BLOCK + "attn.out_proj.weight"),
        **linear("layers.{i}.mlp.up_proj", BLOCK + "mlp.fc_in"),
        **linear("layers.{i}.mlp.down_proj", BLOCK + "mlp.fc_out"),
        **linear("norm", "transformer.ln_f"),
        **linear("lm_head", "lm_head"),
    },
    rope=RopeKeys(theta_key=None, rotary_dim_key="rotary_dim", layout="interleaved", scaling=False),
    ignore=(r"attn\.(masked_)?bias$", r"embed_positions$"),
)
