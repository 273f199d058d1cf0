"""Every string switch's choices, in one place: the registries of the variant families of nn/
(name -> where its code lives), the plain lists of the other switches, and the data a config
derives from a choice (which norms a placement owns, the d_ff rule, the GLU shorthands).

A registry (nn/registry.py) maps each name to a lazy `"module:attr"` reference, resolved when a
model is built (`NORMS["rmsnorm"]` imports nn/norms.py and returns `RMSNorm`), so `ModelConfig`
validates its string switches against the keys, lists them in its errors and offers them on the CLI
without importing torch. A new variant is its code in the module of its concept and one entry here
(docs/adding-a-variant.md); tests/nn/test_registry.py resolves every reference. `CHOICES` is the
table `ModelConfig` checks its top-level string fields against; an option group (groups.py) checks
its own against the lists below. RoPE scaling kinds are `ROPE_KINDS` of nn/positions/scaling.py,
one rich entry per kind beside its formulas.

No torch, no numpy: the config imports this module.
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
# rope.layout: rotate_half pairs (i, i + d/2) | adjacent pairs (2i, 2i+1): nn/positions/rope.py
ROPE_LAYOUTS = ("half", "interleaved")
POSITION_LAYERS = "RN"  # rope.pattern letters: R = RoPE layer, N = no positions (NoPE) layer

# ----- attention: the score kernels, (q, k, v, KernelCall) -> the heads' output;
# ModelConfig.attn_impl (besides "auto") -----
ATTENTION_KERNELS = Registry(
    "attn_impl",
    {
        "sdpa": "archlab.nn.attention.kernels:sdpa",
        "eager": "archlab.nn.attention.kernels:eager",
    },
)
# the linear attention kernels (ModelConfig.attn_kernel besides softmax) -> their option group,
# which knows what the kernel costs and builds it (kernels.py; docs/linear-attention.md)
LINEAR_KERNELS = Registry(
    "linear attention kernel",
    {"favor": "archlab.nn.config.kernels:Favor", "vq": "archlab.nn.config.kernels:VQ"},
)
ATTN_KERNELS = ("softmax", *LINEAR_KERNELS)
ATTN_IMPLS = ("auto", *ATTENTION_KERNELS)  # auto = sdpa unless softcapping needs the scores (eager)
# FAVOR+ feature maps (nn/attention/linear/favor.py): positive exp features | hyperbolic exp(+-w.x),
# lower variance (paper, lemma 2)
FAVOR_FEATURES = Registry(
    "favor feature",
    {
        "positive": "archlab.nn.attention.linear.favor:positive_features",
        "hyperbolic": "archlab.nn.attention.linear.favor:hyperbolic_features",
    },
)
# vq.assign (nn/attention/linear/codebook.py): nearest code + straight-through | softmax over codes
# (Su, kexue.fm/archives/9862)
VQ_ASSIGNS = ("hard", "soft")
# gau.attention: softmax (Su, kexue.fm/archives/8934) | relu(s)^2 / n (Hua et al.)
GAU_ATTENTIONS = ("softmax", "relu2")
# cosine.scale, lambda's n: 4 log(max_seq_len / 2) | 4 log(keys seen)
COSINE_SCALES = ("fixed", "dynamic")

# ----- the other switches -----
# serial | parallel | gau (one gated attention unit per layer, no FFN: Hua et al. arXiv 2202.10447;
# nn/attention/gau.py)
BLOCKS = ("serial", "parallel", "gau")
QK_NORMS = ("none", *NORMS)
QK_NORM_SCOPES = ("head", "proj")
EMBED_SCALES = ("none", "sqrt_d")
INITS = ("trunc_normal", "gpt2")
# what a tied head applies after the final norm (Su, kexue.fm/archives/9698): nothing, the
# parameter-free swap of the two channel halves, or an orthogonally initialised d x d projection;
# either makes the self-logit ~ 0 at init
TIED_HEADS = ("plain", "swap", "proj")
# tied table std: the init's (d^-1/2 for trunc_normal) | log(V)/d
TIED_EMBED_INITS = ("default", "log_n_over_d")
WINDOW_LAYERS = "SF"  # window_pattern letters: S = sliding-window layer, F = full-attention layer
# full_layers: HWFA2's one full layer at L/2, or two at L/3 and 2L/3 (9731)
FULL_LAYER_COUNTS = (1, 2)
# norm placements whose last block already normed: final_norm defaults to False
POST_NORMS = ("post", "deepnorm")

# ModelConfig's string field -> its choices (an option group checks its own fields)
CHOICES = {
    "norm": NORMS,
    "norm_position": tuple(NORM_PLACEMENTS),
    "block": BLOCKS,
    "ffn": (*FFNS, *GLU_SHORTHANDS),
    "activation": ACTIVATIONS,
    "position": POSITIONS,
    "qk_norm": QK_NORMS,
    "qk_norm_scope": QK_NORM_SCOPES,
    "embed_scale": EMBED_SCALES,
    "init": INITS,
    "attn_impl": ATTN_IMPLS,
    "attn_kernel": ATTN_KERNELS,
    "tied_head": TIED_HEADS,
    "tied_embed_init": TIED_EMBED_INITS,
}
