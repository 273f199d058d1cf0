"""OLMo 2 (`Olmo2ForCausalLM`): no input norms; each sublayer's output is RMS-normed
before the residual add (archlab's `nonresidual_post`: HF's `post_attention_layernorm`
is that output norm here, not the MLP input norm it is in Llama), and q/k RMSNorm
over the whole projection (qk_norm_scope `proj`). Reference: transformers
`models/olmo2/modular_olmo2.py`, arXiv 2501.00656."""

from __future__ import annotations

from archlab.interop.families.llama import LLAMA_FIXED, llama_keys, llama_weights
from archlab.interop.family import Family, Key

OLMO2 = Family(
    model_type="olmo2",
    architecture="Olmo2ForCausalLM",
    fixed=LLAMA_FIXED
    | dict(
        norm_position="nonresidual_post", qk_norm="rmsnorm", qk_norm_scope="proj", mlp_bias=False
    ),
    keys=llama_keys(
        dict(
            vocab_size=50304,
            hidden_size=4096,
            intermediate_size=11008,
            num_hidden_layers=32,
            num_attention_heads=32,
            max_position_embeddings=2048,
        ),
        eps=1e-5,
    )
    | {"attention_bias": Key("attn_bias", False)},
    weights=llama_weights(
        {"attn_out_norm": "post_attention_layernorm", "mlp_out_norm": "post_feedforward_layernorm"},
        qk_norm=True,
    ),
    ignore=(r"rotary_emb\.inv_freq$",),
)
