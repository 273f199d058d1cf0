"""Llama weights in Hugging Face's names (`LlamaForCausalLM`), from an archlab `TransformerLM`.

Our fused projections keep blocks contiguous, so export is slicing: `qkv_proj` rows are [q | k | v] and
`gate_up_proj` rows are [gate | up]. RoPE is half-split (rotate_half) on both sides, so q and k need no
permutation. Loading, configs and the other families belong to the interop work that builds on this table.
"""

from __future__ import annotations

import torch

from archlab.nn.model import TransformerLM

# per-layer: HF name -> our name, for the tensors that map one to one
LAYER_NAMES = {
    "self_attn.o_proj.weight": "attn.o_proj.weight",
    "mlp.down_proj.weight": "mlp.down_proj.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "mlp_norm.weight",
}


def llama_state_dict(model: TransformerLM) -> dict[str, torch.Tensor]:
    """The model's weights under `LlamaForCausalLM` state-dict names (views of ours, not copies)."""
    c = model.config
    shape = (c.norm, c.norm_position, c.block, c.ffn, c.position, c.rope_layout, c.bias, c.qk_norm, c.tie_embeddings)
    if shape != ("rmsnorm", "pre", "serial", "glu", "rope", "half", False, "none", False):
        raise ValueError("llama_state_dict needs a Llama-shaped model: rmsnorm, pre-norm, serial block, GLU, "
                         "half-split RoPE, no biases, no QK-norm, untied head")
    ours = model.state_dict()
    state = {"model.embed_tokens.weight": ours["embed_tokens.weight"], "model.norm.weight": ours["norm.weight"],
             "lm_head.weight": ours["lm_head.weight"]}
    sizes = [c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim, c.n_kv_heads * c.head_dim]
    for i in range(c.n_layers):
        hf, mine = f"model.layers.{i}.", f"layers.{i}."
        q, k, v = ours[mine + "attn.qkv_proj.weight"].split(sizes)
        gate, up = ours[mine + "mlp.gate_up_proj.weight"].chunk(2)
        state |= {hf + "self_attn.q_proj.weight": q, hf + "self_attn.k_proj.weight": k,
                  hf + "self_attn.v_proj.weight": v, hf + "mlp.gate_proj.weight": gate, hf + "mlp.up_proj.weight": up}
        state |= {hf + theirs: ours[mine + name] for theirs, name in LAYER_NAMES.items()}
    return state
