"""RoPE in a Hugging Face `config.json` <-> the `rope` group of `ModelConfig`, for every family.

Three shapes of it exist:
- one `rope_parameters` dict (transformers 5, `rope_theta` inside) or the older
  top-level `rope_theta` + `rope_scaling` (which wins, as in transformers):
  rope.theta, rope.fraction, rope.scaling;
- Gemma 3: `rope_parameters` keyed by layer type, {"full_attention": {...}, "sliding_attention":
  {...}}, or the legacy `rope_theta` (full layers), `rope_local_base_freq` (window layers) and a
  `rope_scaling` that applies to the full layers only: rope.local_theta and rope.local_scaling
  (window layers unscaled, or scaled alike);
- SmolLM3: `no_rope_layers`, one 0 (NoPE) or 1 (RoPE) per layer, else a NoPE layer
  every `no_rope_layer_interval`: rope.pattern.

Mapping of `RopeScaling.kind` to transformers'
`rope_type` (modeling_rope_utils.py, ROPE_INIT_FUNCTIONS):
    none -> default, linear -> linear, dynamic -> dynamic, yarn -> yarn, llama3 -> llama3,
    ntk_by_parts -> llama3 (the same by-parts formula with alpha/beta as low/high_freq_factor),
    ntk -> default with the stretched base theta * s^(d/(d-2)) (transformers has no static NTK).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from archlab.interop.family import (
    FIXED_THETA,
    FULL,
    SLIDING,
    Family,
    InteropError,
    shortest_period,
    unsupported,
)
from archlab.nn.config import ModelConfig
from archlab.nn.positions.scaling import RopeScaling, ntk_theta

# kind -> HF rope_type, and HF rope_parameters key -> RopeScaling field (ntk exports as `default`
# with the stretched base, see rope_to_hf); every kind of nn/positions/scaling.py ROPE_KINDS is here
# or in HF_ROPE_REFUSED
HF_ROPE_TYPE = {
    "none": "default",
    "linear": "linear",
    "ntk": "default",
    "ntk_by_parts": "llama3",
    "dynamic": "dynamic",
    "yarn": "yarn",
    "llama3": "llama3",
}
# kinds whose HF spelling reads back as another kind (or none)
READ_AS_OTHER = ("none", "ntk", "ntk_by_parts")
# kind -> why transformers cannot express it; export refuses such a model in one line naming the
# kind
HF_ROPE_REFUSED = {
    "rerope": "transformers has no ReRoPE (relative positions clipped per query and key)",
    "leaky_rerope": "transformers has no Leaky ReRoPE (relative positions remapped per query, key)",
    "inv_leaky_rerope": "transformers has no inverse Leaky ReRoPE (relative positions remapped per "
    "query and key in training)",
    "ntk_mixed": "transformers has no NTK-RoPE-mixed (a different stretch per frequency pair)",
}
HF_ROPE_KEYS: dict[str, dict[str, str]] = {
    "none": {},
    "ntk": {},
    "linear": {"factor": "factor"},
    "dynamic": {"factor": "factor"},
    "ntk_by_parts": {
        "factor": "factor",
        "original_max_position_embeddings": "original_max_seq_len",
        "low_freq_factor": "beta_slow",
        "high_freq_factor": "beta_fast",
    },
    "yarn": {
        "factor": "factor",
        "original_max_position_embeddings": "original_max_seq_len",
        "beta_fast": "beta_fast",
        "beta_slow": "beta_slow",
        "attention_factor": "attention_factor",
        "mscale": "mscale",
        "mscale_all_dim": "mscale_all_dim",
        "truncate": "truncate",
    },
    "llama3": {
        "factor": "factor",
        "original_max_position_embeddings": "original_max_seq_len",
        "low_freq_factor": "low_freq_factor",
        "high_freq_factor": "high_freq_factor",
    },
}


def rope_to_hf(scaling: RopeScaling, theta: float, d_rot: int) -> dict[str, Any]:
    """transformers 5 `rope_parameters` (rope_theta included) that give the same frequencies.

    `ntk` has no HF type, so it exports as `default` with the stretched base (needs d_rot);
    `ntk_by_parts` exports as `llama3`, the same formula. For `dynamic`, transformers takes M from
    `max_position_embeddings`, so write `hf_max_position_embeddings(...)` there.
    """
    if scaling.kind in HF_ROPE_REFUSED:
        raise InteropError(rope_refusal(scaling))
    if scaling.kind == "ntk":
        return {"rope_type": "default", "rope_theta": ntk_theta(theta, d_rot, scaling.factor)}
    out: dict[str, Any] = {"rope_type": HF_ROPE_TYPE[scaling.kind], "rope_theta": theta}
    for hf_key, name in HF_ROPE_KEYS[scaling.kind].items():
        if getattr(scaling, name) is not None:
            out[hf_key] = getattr(scaling, name)
    return out


def rope_refusal(scaling: RopeScaling | None) -> str | None:
    """Why a Hugging Face config.json cannot carry `scaling` (a kind in
    HF_ROPE_REFUSED), or None."""
    if scaling is None or scaling.kind not in HF_ROPE_REFUSED:
        return None
    return f"rope.scaling.kind={scaling.kind!r} ({HF_ROPE_REFUSED[scaling.kind]})"


def hf_max_position_embeddings(scaling: RopeScaling, max_seq_len: int) -> int:
    """The `max_position_embeddings` to export: dynamic NTK reads its M from there;
    others keep ours."""
    return scaling.original_max_seq_len if scaling.kind == "dynamic" else max_seq_len


def rope_from_hf(params: dict[str, Any] | None, max_position_embeddings: int) -> RopeScaling:
    """Read HF `rope_parameters` / legacy `rope_scaling` (defaults filled as transformers
    5 fills them)."""
    params = dict(params or {})
    hf_type = params.get("rope_type", params.get("type", "default"))
    kinds = {"default": "none", **{v: k for k, v in HF_ROPE_TYPE.items() if k not in READ_AS_OTHER}}
    if hf_type not in kinds:
        raise ValueError(f"rope_type={hf_type!r} is not supported: one of {', '.join(kinds)}")
    kind = kinds[hf_type]
    if kind in ("yarn", "llama3"):  # transformers' standardize_rope_params does the same
        params.setdefault("original_max_position_embeddings", max_position_embeddings)
    if kind == "yarn":
        if params.get("factor") is None:
            params["factor"] = max_position_embeddings / params["original_max_position_embeddings"]
        # HF reads these with `or`: 0/None -> default
        params["beta_fast"] = params.get("beta_fast") or 32.0
        params["beta_slow"] = params.get("beta_slow") or 1.0
    values = {
        name: params[key] for key, name in HF_ROPE_KEYS[kind].items() if params.get(key) is not None
    }
    if kind == "dynamic":  # transformers' M is max_position_embeddings
        values["original_max_seq_len"] = max_position_embeddings
    return RopeScaling(kind=kind, **values)


# ------------------------------------------------------------------------------ config.json ->
# ModelConfig
def read_rope(hf: dict[str, Any], family: Family, fields: dict[str, Any]) -> dict[str, Any]:
    """The `rope` group of a family's config.json, as the fields of a `Rope` (see the module
    docstring for the dialects)."""
    rope = family.rope
    params, local = _rope_params(hf, family)
    if rope.theta_key is None:  # a fixed base: refuse a config that asks for another
        theta = params.pop("rope_theta", hf.get("rope_theta", FIXED_THETA))
        if theta != FIXED_THETA:
            raise unsupported(
                family, "rope_theta", theta, f"this family's base is fixed at {FIXED_THETA:g}"
            )
    else:
        theta = params.pop(
            "rope_theta", hf.get(rope.theta_key, hf.get("rope_theta", rope.theta_default))
        )
    fraction = _read_fraction(hf, family, fields, params.pop("partial_rotary_factor", None))
    scaling = _scaling(params, family, fields["max_seq_len"])
    out = {
        "theta": float(theta),
        "fraction": fraction,
        "layout": rope.layout,
        "scaling": None if scaling.kind == "none" else scaling,
    }
    if local is not None:
        out |= _read_local(local, float(theta), scaling, family, fields["max_seq_len"])
    if rope.nope_layers_key is not None:
        out["pattern"] = _read_nope(hf, family, fields["n_layers"])
    return out


def _rope_params(
    hf: dict[str, Any], family: Family
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The full layers' RoPE parameters and, for a family with per-layer-type RoPE,
    the window layers'."""
    rope = family.rope
    if rope.local_theta_key is None:
        return dict(hf.get("rope_scaling") or hf.get("rope_parameters") or {}), None
    nested = hf.get("rope_parameters") or {}
    if not isinstance(nested, dict) or set(nested) - {FULL, SLIDING}:
        raise unsupported(
            family, "rope_parameters", nested, f"a dict keyed by layer type ({FULL!r}, {SLIDING!r})"
        )
    # as transformers' Gemma3TextConfig: a legacy rope_scaling updates the full layers; top-level
    # bases fill in
    full = dict(nested.get(FULL) or {}) | dict(hf.get("rope_scaling") or {})
    full.setdefault("rope_theta", hf.get(rope.theta_key, rope.theta_default))
    local = dict(nested.get(SLIDING) or {})
    local.setdefault("rope_theta", hf.get(rope.local_theta_key, rope.local_theta_default))
    return full, local


def _read_fraction(
    hf: dict[str, Any], family: Family, fields: dict[str, Any], fraction: float | None
) -> float:
    """The rotary share of each head: from rope_parameters, the family's legacy key,
    or GPT-J's rotary_dim."""
    rope = family.rope
    if fraction is None and rope.fraction_key is not None:
        fraction = hf.get(rope.fraction_key)
    # transformers moves a top-level partial_rotary_factor into rope_parameters
    if fraction is None:
        fraction = hf.get("partial_rotary_factor")
    head_dim = fields.get("head_dim") or fields["d_model"] // fields["n_heads"]
    if rope.rotary_dim_key is not None:
        rotary_dim = hf.get(rope.rotary_dim_key, 64)
        if not isinstance(rotary_dim, int) or not 0 < rotary_dim <= head_dim:
            raise unsupported(
                family, rope.rotary_dim_key, rotary_dim, f"an int in 1..head_dim={head_dim}"
            )
        fraction = rotary_dim / head_dim
    if fraction is None:
        fraction = rope.fraction_default
    if fraction != 1.0 and rope.fraction_key is None and rope.rotary_dim_key is None:
        raise unsupported(
            family, "partial_rotary_factor", fraction, "this family rotates whole heads (1.0)"
        )
    return fraction


def _scaling(params: dict[str, Any], family: Family, max_seq_len: int) -> RopeScaling:
    hf_type = params.get("rope_type", params.get("type", "default"))
    if not family.rope.scaling and hf_type != "default":
        raise unsupported(
            family, "rope_type", hf_type, "this family has no RoPE scaling (default only)"
        )
    try:
        return rope_from_hf(params, max_seq_len)
    except ValueError as err:
        raise InteropError(f"config.json of model_type {family.model_type!r}: {err}") from err


def _read_local(
    local: dict[str, Any], theta: float, scaling: RopeScaling, family: Family, max_seq_len: int
) -> dict[str, Any]:
    """rope.local_theta and rope.local_scaling from the window layers' parameters: their base,
    and a scaling that is none (Gemma 3) or the full layers' own; anything else archlab's window
    layers cannot hold."""
    local_theta = float(local.pop("rope_theta"))
    if local.pop("partial_rotary_factor", 1.0) not in (None, 1.0):
        raise unsupported(
            family, f"rope_parameters.{SLIDING}.partial_rotary_factor", local, "1.0 (whole heads)"
        )
    local_scaling = _scaling(local, family, max_seq_len)
    if local_scaling.kind != "none" and local_scaling != scaling:
        raise unsupported(
            family,
            f"rope_parameters.{SLIDING}",
            local,
            "window layers take no RoPE scaling or the full layers' one",
        )
    return {
        "local_theta": None if local_theta == theta else local_theta,
        "local_scaling": scaling.kind == "none" or local_scaling.kind != "none",
    }


def _read_nope(hf: dict[str, Any], family: Family, n_layers: int) -> str:
    """rope.pattern from a per-layer RoPE list (1 = RoPE, 0 = NoPE) or a NoPE interval."""
    rope = family.rope
    layers = hf.get(rope.nope_layers_key)
    if layers is None:
        every = hf.get(rope.nope_interval_key, rope.nope_interval_default)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise unsupported(family, rope.nope_interval_key, every, "a positive integer")
        layers = [int((i + 1) % every != 0) for i in range(n_layers)]
    if (
        not isinstance(layers, list)
        or len(layers) < n_layers
        or any(x not in (0, 1) for x in layers[:n_layers])
    ):
        raise unsupported(
            family,
            rope.nope_layers_key,
            layers,
            f"a list of at least {n_layers} entries, each 1 (RoPE) or 0 (NoPE)",
        )
    return shortest_period("".join("R" if x else "N" for x in layers[:n_layers]))


# ------------------------------------------------------------------------------ ModelConfig ->
# config.json
def write_rope(c: ModelConfig, family: Family) -> dict[str, Any]:
    """The RoPE keys of a family's config.json for `c` (a RoPE model)."""
    rope, ours = family.rope, c.rope
    scaling = ours.scaling or RopeScaling()
    params = rope_to_hf(scaling, ours.theta, c.rope_dim)
    out: dict[str, Any] = {"rope_parameters": params} if rope.theta_key is not None else {}
    if rope.local_theta_key is not None:
        local_theta, local_scaling = ours.local
        local = rope_to_hf(local_scaling or RopeScaling(), local_theta, c.rope_dim)
        out["rope_parameters"] = {FULL: params, SLIDING: local}
    if scaling.kind == "dynamic":
        out["max_position_embeddings"] = hf_max_position_embeddings(scaling, c.max_seq_len)
    if rope.rotary_dim_key is not None:
        out[rope.rotary_dim_key] = c.rope_dim
    elif rope.fraction_key is not None:
        params["partial_rotary_factor"] = ours.fraction
    if rope.nope_layers_key is not None:
        out[rope.nope_layers_key] = [int(c.layer_rope(i) is not None) for i in range(c.n_layers)]
    return out


def canonical_rope(c: ModelConfig) -> dict[str, Any]:
    """The RoPE of each layer of `c` (a RoPE model) in one spelling: its base and scaling as
    transformers would compute them (ntk as a stretched base, ntk_by_parts as llama3), or "N" for a
    NoPE layer, so that two configs compare equal iff every layer rotates alike; plus the base and
    scaling of the full layers, the rotated dims (what int(head_dim * fraction) decides) and the
    layout, as `rope.*` keys."""
    rope = c.rope
    full = _canonical(rope.theta, rope.scaling, c.rope_dim)
    local = _canonical(*rope.local, c.rope_dim)
    kinds = {None: "N", "global": _spell(*full), "local": _spell(*local)}
    return {
        "rope.theta": full[0],
        "rope.scaling": None if full[1] is None else dataclasses.asdict(full[1]),
        "rope.pattern": tuple(kinds[c.layer_rope(i)] for i in range(c.n_layers)),
        "rope.rotary_dim": c.rope_dim,
        "rope.layout": rope.layout,
    }


def _canonical(
    theta: float, scaling: RopeScaling | None, d_rot: int
) -> tuple[float, RopeScaling | None]:
    if scaling is None or scaling.kind == "none":
        return theta, None
    if scaling.kind == "ntk":  # transformers spells static NTK as a stretched base
        return ntk_theta(theta, d_rot, scaling.factor), None
    if scaling.kind == "ntk_by_parts":  # the llama3 formula, renamed
        return theta, RopeScaling(
            "llama3",
            scaling.factor,
            scaling.original_max_seq_len,
            low_freq_factor=scaling.beta_slow,
            high_freq_factor=scaling.beta_fast,
        )
    return theta, scaling


def _spell(theta: float, scaling: RopeScaling | None) -> str:
    return f"R(theta={theta!r}, {'unscaled' if scaling is None else scaling.kind})"
