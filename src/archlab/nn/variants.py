"""The variants of nn/ by name, without torch: what `ModelConfig` validates its string switches against.

Each registry lives in the module that owns its concept (`NORMS` in norms.py, `ACTIVATIONS` in activations.py, ...)
and maps a name to torch code. Importing those modules imports torch (about 2 s), which a config does not need: the
CLI's `--help`, `archlab inspect` and the costs of a config only check and count. So the names each registry holds
are listed here too, in the registry's order, and `tests/nn/test_variants.py` fails when a registry and its list
differ: a new entry in one without the other cannot be committed. The data a config derives from besides names
(which norms a placement owns, the d_ff rule, the GLU shorthands) lives here as well, read by the config, `costs.py`
and the torch modules alike. RoPE scaling kinds, whose description is more than a name, are `ROPE_KINDS` of
nn/rope_scaling.py.

No torch, no numpy: this module and nn/rope_scaling.py are what nn/config.py imports.
"""

from __future__ import annotations

import math

# ----- norms (nn/norms.py NORMS) -----
NORM_NAMES = ("rmsnorm", "layernorm")

# norm placement (ModelConfig.norm_position; the formulas and diagram are in nn/block.py) -> the norms a layer
# owns: "in" = its input norms (attn_norm, mlp_norm; for `post` the norms after each residual add), "out" = the
# norms on each sublayer's output (attn_out_norm, mlp_out_norm). Block and costs.py both read this one table.
NORM_PLACEMENTS: dict[str, tuple[str, ...]] = {
    "pre": ("in",), "post": ("in",), "double": ("in", "out"), "nonresidual_post": ("out",), "deepnorm": ("in",),
}


def placement_norms(position: str, parallel: bool, parallel_norms: int, single: bool = False) -> list[str]:
    """The norms (attn_norm, mlp_norm, attn_out_norm, mlp_out_norm) a layer with norm placement `position` owns;
    a parallel block with one shared input norm (or a post-norm parallel block, one norm after the sum) owns
    attn_norm alone of the inputs; a layer of one sublayer (`single`: a GAU) owns the attn_* norms only."""
    one = single or parallel and (parallel_norms == 1 or position == "post")
    inputs = ["attn_norm"] if one else ["attn_norm", "mlp_norm"]
    groups = {"in": inputs, "out": ["attn_out_norm"] if single else ["attn_out_norm", "mlp_out_norm"]}
    return [name for group in NORM_PLACEMENTS[position] for name in groups[group]]


# ----- activations (nn/activations.py ACTIVATIONS) -----
ACTIVATION_NAMES = ("relu", "gelu", "gelu_tanh", "silu", "swish", "sigmoid", "tanh", "leaky_relu")

# ----- feed-forward (nn/ffn.py FFNS) and the d_ff rule -----
FFN_NAMES = ("mlp", "glu")
FFN_WIDTH_FACTOR = {"mlp": 4.0, "glu": 8.0 / 3.0}  # d_ff / d_model that keeps the two kinds at equal size
# Shorthands accepted by ModelConfig.ffn: name -> (ffn kind, activation)
GLU_SHORTHANDS = {"swiglu": ("glu", "silu"), "geglu": ("glu", "gelu"), "reglu": ("glu", "relu")}


def default_d_ff(kind: str, d_model: int, multiple_of: int = 64) -> int:
    """4 * d_model (mlp) or 8/3 * d_model (glu), rounded up to a multiple of `multiple_of`."""
    raw = FFN_WIDTH_FACTOR[kind] * d_model
    return multiple_of * math.ceil(raw / multiple_of)


# ----- positions (nn/positions.py ABSOLUTE_POSITIONS, ATTENTION_BIASES; RoPE in nn/rope.py) -----
ABSOLUTE_POSITION_NAMES = ("sinusoidal", "learned")  # added to the token embedding
ATTENTION_BIAS_NAMES = ("relative", "alibi")  # added to the attention scores
POSITIONS = ("rope", "none", *ABSOLUTE_POSITION_NAMES, *ATTENTION_BIAS_NAMES)  # ModelConfig.position
ROPE_LAYOUTS = ("half", "interleaved")  # rotate_half pairs (i, i + d/2) | adjacent pairs (2i, 2i+1): nn/rope.py

# ----- attention (nn/attention_kernels.py ATTENTION_KERNELS, nn/linear_kernels.py LINEAR_KERNELS) -----
ATTENTION_KERNEL_NAMES = ("sdpa", "eager")  # ModelConfig.attn_impl (besides "auto")
LINEAR_KERNEL_NAMES = ("favor", "vq")  # ModelConfig.attn_kernel (besides "softmax")
FAVOR_FEATURE_NAMES = ("positive", "hyperbolic")  # nn/favor.py FAVOR_FEATURES: ModelConfig.favor_feature
VQ_ASSIGNS = ("hard", "soft")  # nn/vq.py: nearest code + STE | softmax over codes (ModelConfig.vq_assign)
