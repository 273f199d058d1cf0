"""Every variant family of nn/, one registry each: name -> where its code lives, without torch.

A registry (nn/registry.py) maps each name to a lazy `"module:attr"` reference, resolved when a
model is built (`NORMS["rmsnorm"]` imports nn/norms.py and returns `RMSNorm`), so `ModelConfig`
validates its string switches against the keys, lists them in its errors and offers them on the CLI
without importing torch. A new variant is its code in the module of its concept and one entry here
(docs/adding-a-variant.md); tests/nn/test_registry.py resolves every reference. The data a config
derives values from besides names (which norms a placement owns, the d_ff rule, the GLU shorthands)
lives here as well, read by the config, `costs.py` and the torch modules alike. RoPE scaling kinds
are `ROPE_KINDS` of nn/positions/scaling.py; linear attention kernels are option groups
(nn/attention/options.py).

No torch, no numpy: nn/config.py imports this module.
"""

from __future__ import annotations

import math

from archlab.nn.registry import Registry

NORMS = Registry(
    "norm", {"rmsnorm": "archlab.nn.norms:RMSNorm", "layernorm": "archlab.nn.norms:LayerNorm"}
)

# norm placement (ModelConfig.norm_position; the formulas and diagram are in nn/block.py) -> the
# norms a layer owns: "in" = its input norms (attn_norm, mlp_norm; for `post` the norms after each
# residual add), "out" = the norms on each sublayer's output (attn_out_norm, mlp_out_norm). Block
# and costs.py both read this one table.
NORM_PLACEMENTS: dict[str, tuple[str, ...]] = {
    "pre": ("in",),
    "post": ("in",),
    "double": ("in", "out"),
    "nonresidual_post": ("out",),
    "deepnorm": ("in",),
}


def placement_norms(
    position: str, parallel: bool, parallel_norms: int, single: bool = False
) -> list[str]:
    """The norms (attn_norm, mlp_norm, attn_out_norm, mlp_out_norm) a layer with norm placement
    `position` owns; a parallel block with one shared input norm (or a post-norm parallel block, one
    norm after the sum) owns attn_norm alone of the inputs; a layer of one sublayer (`single`: a
    GAU) owns the attn_* norms only."""
    one = single or parallel and (parallel_norms == 1 or position == "post")
    inputs = ["attn_norm"] if one else ["attn_norm", "mlp_norm"]
    groups = {
        "in": inputs,
        "out": ["attn_out_norm"] if single else ["attn_out_norm", "mlp_out_norm"],
    }
    return [name for group in NORM_PLACEMENTS[position] for name in groups[group]]


# activation name -> function (x) -> y; `swish` takes ModelConfig.swish_beta (nn/activations.py
# get_activation)
ACTIVATIONS = Registry(
    "activation",
    {
        "relu": "torch.nn.functional:relu",
        "gelu": "torch.nn.functional:gelu",
        "gelu_tanh": "archlab.nn.activations:gelu_tanh",
        "silu": "torch.nn.functional:silu",
        "swish": "archlab.nn.activations:swish",
        "sigmoid": "torch:sigmoid",
        "tanh": "torch:tanh",
        "leaky_relu": "torch.nn.functional:leaky_relu",
    },
)

# ----- feed-forward and the d_ff rule -----
FFNS = Registry("ffn", {"mlp": "archlab.nn.ffn:MLP", "glu": "archlab.nn.ffn:GatedMLP"})
# d_ff / d_model that keeps the two kinds at equal size
FFN_WIDTH_FACTOR = {"mlp": 4.0, "glu": 8.0 / 3.0}
# Shorthands accepted by ModelConfig.ffn: name -> (ffn kind, activation)
GLU_SHORTHANDS = {"swiglu": ("glu", "silu"), "geglu": ("glu", "gelu"), "reglu": ("glu", "relu")}


def default_d_ff(kind: str, d_model: int, multiple_of: int = 64) -> int:
    """4 * d_model (mlp) or 8/3 * d_model (glu), rounded up to a multiple of `multiple_of`."""
    raw = FFN_WIDTH_FACTOR[kind] * d_model
    return multiple_of * math.ceil(raw / multiple_of)


# ----- positions (RoPE: nn/positions/rope.py, its kinds nn/positions/scaling.py) -----
# added to the token embedding: (d_model, max_seq_len)
ABSOLUTE_POSITIONS = Registry(
    "absolute position",
    {
        "sinusoidal": "archlab.nn.positions.absolute:SinusoidalPositions",
        "learned": "archlab.nn.positions.absolute:LearnedPositions",
    },
)
ATTENTION_BIASES = Registry(
    "attention bias",
    {  # added to the attention scores
        "relative": "archlab.nn.positions.biases:RelativePositionBias",
        "alibi": "archlab.nn.positions.biases:ALiBi",
    },
)
POSITIONS = ("rope", "none", *ABSOLUTE_POSITIONS, *ATTENTION_BIASES)  # ModelConfig.position
# rotate_half pairs (i, i + d/2) | adjacent pairs (2i, 2i+1): nn/positions/rope.py
ROPE_LAYOUTS = ("half", "interleaved")

# ----- attention kernels: (q, k, v, KernelCall) -> the heads' output; ModelConfig.attn_impl
# (besides "auto") -----
ATTENTION_KERNELS = Registry(
    "attn_impl",
    {
        "sdpa": "archlab.nn.attention.kernels:sdpa",
        "eager": "archlab.nn.attention.kernels:eager",
    },
)
