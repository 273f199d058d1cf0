"""What `ModelConfig` accepts (nn/config.py): the choices of its string switches, the fields that
belong to one value of a switch (`ONLY_WITH`), and the checks `__post_init__` runs, as the methods
of `ConfigChecks` (ModelConfig inherits them, so each reads the config's fields by name). Bad values
fail with one line naming the field, the value and what is allowed (docs/configuration.md). No
torch.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from archlab.nn.attention.options import GROUPS, LINEAR_KERNELS
from archlab.nn.variants import (
    ATTENTION_KERNELS,
    GLU_SHORTHANDS,
    NORM_PLACEMENTS,
    NORMS,
)

# pre | post | double | nonresidual_post | deepnorm (nn/variants.py, block.py)
NORM_POSITIONS = tuple(NORM_PLACEMENTS)
# placements whose last block already normed: final_norm defaults to False
POST_NORMS = ("post", "deepnorm")
# serial | parallel | gau (one gated attention unit per layer, no FFN: Hua et al. arXiv 2202.10447;
# nn/attention/gau.py)
BLOCKS = ("serial", "parallel", "gau")
QK_NORMS = ("none", *NORMS)
QK_NORM_SCOPES = ("head", "proj")
EMBED_SCALES = ("none", "sqrt_d")
INITS = ("trunc_normal", "gpt2")
ATTN_IMPLS = ("auto", *ATTENTION_KERNELS)  # auto = sdpa unless softcapping needs the scores (eager)
ATTN_KERNELS = ("softmax", *LINEAR_KERNELS)  # softmax, or a linear kernel (nn/attention/options.py)
# what a tied head applies after the final norm (Su, kexue.fm/archives/9698): nothing, the
# parameter-free swap of the two channel halves, or an orthogonally initialised d x d projection;
# either makes the self-logit ~ 0 at init
TIED_HEADS = ("plain", "swap", "proj")
# tied table std: the init's (d^-1/2 for trunc_normal) | log(V)/d
TIED_EMBED_INITS = ("default", "log_n_over_d")
WINDOW_LAYERS = "SF"  # window_pattern letters: S = sliding-window layer, F = full-attention layer
POSITION_LAYERS = "RN"  # position_pattern letters: R = RoPE layer, N = no positions (NoPE) layer
# full_layers: HWFA2's one full layer at L/2, or two at L/3 and 2L/3 (9731)
FULL_LAYER_COUNTS = (1, 2)
# cosine attention's temperature per log n: lambda = 4 log n (Su, kexue.fm/archives/9859)
COSINE_LAMBDA = 4.0
# a GAU's value width e = 2 d_model by default (Hua et al. arXiv 2202.10447, section 2)
GAU_EXPANSION = 2.0
# the activation when neither `activation` nor an ffn shorthand names one
DEFAULT_ACTIVATION = "silu"
# fields resolved in __post_init__ when None; `ModelConfig.replace` re-derives them
# (`derived_values`)
DERIVED = ("n_kv_heads", "head_dim", "d_ff", "activation", "attn_bias", "mlp_bias", "final_norm")
# field -> (switch, value): the field means something only with switch == value, and must keep its
# default otherwise
ONLY_WITH = {
    "rope_theta": ("position", "rope"),
    "rope_layout": ("position", "rope"),
    "rope_fraction": ("position", "rope"),
    "rope_scaling": ("position", "rope"),
    "norm_bias": ("norm", "layernorm"),
    "position_pattern": ("position", "rope"),
    "rope_theta_local": ("position", "rope"),
    "rope_scaling_local": ("position", "rope"),
    # an option group belongs to its switch
    **{name: (switch, on) for name, (_, switch, on) in GROUPS.items()},
}


class ConfigError(ValueError):
    """A bad config value: the message names the field, the value and what is allowed."""


def check_finite(config: object, prefix: str) -> None:
    """Every float of dataclass `config` (tuples included) is a finite number: NaN and inf pass most
    range checks (`nan <= 0` and `inf <= 1` are both False), so they are refused here first, naming
    `prefix` + the field."""
    for f in fields(config):
        value = getattr(config, f.name)
        items = value if isinstance(value, tuple) else (value,)
        if any(isinstance(v, float) and not math.isfinite(v) for v in items):
            raise ConfigError(f"{prefix}{f.name}={value!r} is not allowed: a finite number")


def bad(name: str, value: object, allowed: str) -> ConfigError:
    return ConfigError(f"ModelConfig.{name}={value!r} is not allowed: {allowed}")


def middle_layers(n_layers: int, count: int) -> tuple[int, ...]:
    """The full layers of `full_layers=count` (HWFA2, Su kexue.fm/archives/9731): in the middle of
    the stack, L/2 for one, L/3 and 2L/3 for two."""
    return (n_layers // 2,) if count == 1 else (n_layers // 3, 2 * n_layers // 3)


def inapplicable_fields(values: dict[str, Any], defaults: dict[str, Any]) -> list[str]:
    """The fields of `values` set away from their default although their switch (ONLY_WITH) is
    off."""
    return [
        name
        for name, (switch, want) in ONLY_WITH.items()
        if values.get(switch, defaults[switch]) != want
        and values.get(name, defaults[name]) != defaults[name]
    ]


def expand_shorthands(layer: dict[str, Any]) -> dict[str, Any]:
    """One layer of fields with an ffn shorthand spelled out: {"ffn": "swiglu"} -> {"ffn": "glu",
    "activation": "silu"}, so the shorthand's activation beats a lower layer's (a preset's). The
    same layer setting another activation fails."""
    if layer.get("ffn") not in GLU_SHORTHANDS:
        return dict(layer)
    ffn, activation = expand_ffn(layer["ffn"], layer.get("activation"))
    return {**layer, "ffn": ffn, "activation": activation}


def expand_ffn(ffn: str, activation: str | None) -> tuple[str, str | None]:
    """(ffn, activation) with a GLU shorthand spelled out; a shorthand with another activation
    fails."""
    if ffn not in GLU_SHORTHANDS:
        return ffn, activation
    kind, act = GLU_SHORTHANDS[ffn]
    if activation not in (None, act):
        raise bad(
            "activation",
            activation,
            f"not with ffn={ffn!r} (= glu + {act}): set ffn='glu' for another activation",
        )
    return kind, act
