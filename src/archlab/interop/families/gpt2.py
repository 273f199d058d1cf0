"""GPT-2 (`GPT2LMHeadModel`): pre-norm LayerNorm, tanh-GELU MLP, biases everywhere, learned absolute
positions, a tied head, and Conv1D weights stored [in, out] (transposed into nn.Linear's [out, in];
`c_attn` columns are [q | k | v], so after the transpose it is our fused qkv_proj).
`scale_attn_weights=False` is an attention scale of 1; the per-layer
`scale_attn_by_inverse_layer_idx` has no archlab equivalent and is refused.
`reorder_and_upcast_attn` only changes the precision of the eager softmax, so it is read as is.
Reference: transformers `models/gpt2/modeling_gpt2.py`; Radford et al. 2019."""

from __future__ import annotations

from archlab.interop.family import Family, Fixed, Key, activation_key, copy, linear
from archlab.nn.config import ModelConfig

BLOCK = "transformer.h.{i}."


def four_times_width(value: int | None, fields: dict) -> int:
    """`n_inner` null means 4 * n_embd (GPT-2, GPT-J)."""
    return 4 * fields["d_model"] if value is None else value


def scale_flag(scale: float | None, c: ModelConfig) -> bool:
    """attn_scale -> scale_attn_weights: None (1/sqrt(head_dim)) is True, 1 is False (others
    do not re-read)."""
    return scale != 1.0


GPT2 = Family(
    model_type="gpt2",
    architecture="GPT2LMHeadModel",
    fixed=dict(
        norm="layernorm",
        norm_bias=True,
        norm_position="pre",
        block="serial",
        ffn="mlp",
        position="learned",
        attn_bias=True,
        mlp_bias=True,
        lm_head_bias=False,
        qk_norm="none",
        embed_scale="none",
        norm_unit_offset=False,
    ),
    keys={
        "vocab_size": Key("vocab_size", 50257),
        "n_embd": Key("d_model", 768),
        "n_layer": Key("n_layers", 12),
        "n_head": Key("n_heads", 12),
        "n_inner": Key("d_ff", None, load=four_times_width),
        "n_positions": Key("max_seq_len", 1024),
        "layer_norm_epsilon": Key("norm_eps", 1e-5),
        **activation_key("activation_function", "gelu_new", "gelu_new"),
        "tie_word_embeddings": Key("tie_embeddings", True),
        "scale_attn_weights": Key(
            "attn_scale", True, load=lambda v, f: None if v else 1.0, save=scale_flag
        ),
        "scale_attn_by_inverse_layer_idx": Fixed(False),
        "add_cross_attention": Fixed(False),
        "resid_pdrop": Key("dropout", 0.1),
        "embd_pdrop": Key("dropout", 0.1),
        "attn_pdrop": Key("attn_dropout", 0.1),
    },
    weights={
        "embed_tokens.weight": copy("transformer.wte.weight"),
        "pos_embed.weight": copy("transformer.wpe.weight"),
        **linear("layers.{i}.attn_norm", BLOCK + "ln_1"),
        **linear("layers.{i}.attn.qkv_proj", BLOCK + "attn.c_attn", "conv1d"),
        **linear("layers.{i}.attn.o_proj", BLOCK + "attn.c_proj", "conv1d"),
        **linear("layers.{i}.mlp_norm", BLOCK + "ln_2"),
        **linear("layers.{i}.mlp.up_proj", BLOCK + "mlp.c_fc", "conv1d"),
        **linear("layers.{i}.mlp.down_proj", BLOCK + "mlp.c_proj", "conv1d"),
        **linear("norm", "transformer.ln_f"),
        "lm_head.weight": copy("lm_head.weight"),
    },
    rope=None,
    ignore=(r"attn\.(masked_)?bias$",),
    base_prefix="transformer.",
)
