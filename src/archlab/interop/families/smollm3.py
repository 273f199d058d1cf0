"""SmolLM3 (`SmolLM3ForCausalLM`): Llama's layout with a NoPE layer every fourth
(`no_rope_layers`, 1 = RoPE, 0 = NoPE, else `no_rope_layer_interval`: archlab's rope.pattern
"RRRN"), base 2M, a tied head, and optional sliding windows (`use_sliding_window`
+ `layer_types`; by default on the NoPE layers). Reference: transformers
`models/smollm3/modeling_smollm3.py`, `configuration_smollm3.py`; huggingface.co/blog/smollm3.
"""

from __future__ import annotations

from typing import Any

from archlab.interop.families.llama import LLAMA_FIXED, llama_keys, llama_weights
from archlab.interop.family import FULL, SLIDING, Family, Key, RopeKeys

NOPE_EVERY = 4  # transformers' default no_rope_layer_interval


def smollm3_layer_types(hf: dict[str, Any], n_layers: int) -> list[str]:
    """Layers without `layer_types`, as SmolLM3Config derives them: windowed where
    use_sliding_window is on, a window is given and the layer is NoPE (no_rope_layers[i] == 0)."""
    rope = hf.get("no_rope_layers") or [
        int((i + 1) % hf.get("no_rope_layer_interval", NOPE_EVERY) != 0) for i in range(n_layers)
    ]
    windowed = bool(hf.get("use_sliding_window")) and hf.get("sliding_window") is not None
    return [SLIDING if windowed and not rope[i] else FULL for i in range(min(n_layers, len(rope)))]


SMOLLM3 = Family(
    model_type="smollm3",
    architecture="SmolLM3ForCausalLM",
    fixed=LLAMA_FIXED,
    keys=llama_keys(
        dict(
            vocab_size=128256,
            hidden_size=2048,
            intermediate_size=11008,
            num_hidden_layers=36,
            num_attention_heads=16,
            max_position_embeddings=32768,
        ),
        tie=True,
        kv_heads=4,
    )
    | {
        "attention_bias": Key("attn_bias", False),
        "mlp_bias": Key("mlp_bias", False),
    },
    weights=llama_weights(),
    rope=RopeKeys(
        theta_default=2_000_000.0,
        nope_layers_key="no_rope_layers",
        nope_interval_key="no_rope_layer_interval",
        nope_interval_default=NOPE_EVERY,
    ),
    window="layer_types",
    default_layer_types=smollm3_layer_types,
    window_switch="use_sliding_window",
    ignore=(r"rotary_emb\.inv_freq$",),
    # transformers' default pad id 128004 lies past a smaller vocabulary, where nn.Embedding refuses
    # it; padding does not change the function, and the tokenizer files carry it
    export_keys={"pad_token_id": None},
)
