"""Gemma 3, text (`Gemma3ForCausalLM`, model_type `gemma3_text`): Gemma 2's sandwich norms, (1 + w)
gains and sqrt(d) embedding scale, plus per-head (1 + w) RMSNorm on q and k instead of the attention
softcap (a final softcap stays, off by default), and five window layers to one full layer
(`layer_types`, else `sliding_window_pattern` = 6). Window layers rotate with their own base
(`rope_local_base_freq`, 10k: archlab's rope.local_theta) and full layers with 1M; a RoPE scaling
applies to the full layers only (rope.local_scaling=False), as the 4B-27B checkpoints' linear x8
does. The multimodal `Gemma3ForConditionalGeneration` (model_type `gemma3`) is read for its text
model (`GEMMA3`: its `text_config`, tensors under `language_model.model.` or, as files written from
transformers' in-memory names have them, `model.language_model.`; the vision tower and projector
skipped); export writes `gemma3_text`, since archlab has no vision tower. Reference: transformers
`models/gemma3/modeling_gemma3.py`, `configuration_gemma3.py`; arXiv 2503.19786.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from archlab.interop.families.gemma import GEMMA_FIXED, GEMMA_SIZES
from archlab.interop.families.gemma2 import DOUBLE_NORMS, scalar_from_scale, scale_from_scalar
from archlab.interop.families.llama import llama_keys, llama_weights
from archlab.interop.family import FULL, SLIDING, Family, InteropError, Key, RopeKeys, copy

GLOBAL_EVERY = 6  # transformers' default sliding_window_pattern: every sixth layer is full


def gemma3_layer_types(hf: dict[str, Any], n_layers: int) -> list[str]:
    """Layers without `layer_types`: layer i is full when (i + 1) % sliding_window_pattern == 0."""
    every = hf.get("sliding_window_pattern", GLOBAL_EVERY)
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise InteropError(
            f"config.json sliding_window_pattern={every!r} is not supported for model_type "
            "'gemma3_text': a positive integer"
        )
    return [FULL if (i + 1) % every == 0 else SLIDING for i in range(n_layers)]


GEMMA3_TEXT = Family(
    model_type="gemma3_text",
    architecture="Gemma3ForCausalLM",
    fixed=GEMMA_FIXED | dict(norm_position="double", qk_norm="rmsnorm", qk_norm_scope="head"),
    keys=llama_keys(
        GEMMA_SIZES
        | dict(
            vocab_size=262_208,
            hidden_size=2304,
            intermediate_size=9216,
            num_hidden_layers=26,
            num_attention_heads=8,
            max_position_embeddings=131_072,
        ),
        tie=True,
        head_dim=256,
        act_key="hidden_activation",
        act="gelu_pytorch_tanh",
        kv_heads=4,
    )
    | {
        "attention_bias": Key("attn_bias", False),
        # read and never applied: transformers' Gemma3Attention does not pass it to attention (Gemma
        # 3 replaced Gemma 2's softcap with QK-norm), so it loads as no softcap, and a softcapped
        # model has no gemma3_text form
        "attn_logit_softcapping": Key(
            "attn_softcap", None, load=lambda cap, fields: None, save=lambda cap, c: None
        ),
        "final_logit_softcapping": Key("final_softcap", None),
        "query_pre_attn_scalar": Key(
            "attn_scale", 256, load=scale_from_scalar, save=scalar_from_scale
        ),
    },
    weights=llama_weights(DOUBLE_NORMS, qk_norm=True),
    rope=RopeKeys(
        theta_default=1_000_000.0,
        local_theta_key="rope_local_base_freq",
        local_theta_default=10_000.0,
    ),
    window="layer_types",
    default_layer_types=gemma3_layer_types,
    window_default=4096,
    ignore=(r"rotary_emb\.\w*inv_freq$",),
)

# the multimodal checkpoint, as transformers (4.50 on, and 5 when saving) names its tensors; read
# only
GEMMA3 = dataclasses.replace(
    GEMMA3_TEXT,
    model_type="gemma3",
    architecture="Gemma3ForConditionalGeneration",
    weights=llama_weights(DOUBLE_NORMS, qk_norm=True, prefix="language_model.model.")
    | {"lm_head.weight": copy("language_model.lm_head.weight")},
    text_config="text_config",
    head_aliases=("language_model.lm_head.weight",),  # a tied file may store the head too
    # files written from the in-memory names (transformers 4.52 on): model.language_model.*,
    # lm_head.weight
    key_aliases=(
        ("language_model.model.", "model.language_model."),
        ("language_model.lm_head.", "lm_head."),
    ),
    ignore=(
        *GEMMA3_TEXT.ignore,
        r"^(model\.)?vision_tower\.",
        r"^(model\.)?multi_modal_projector\.",
    ),
)
