"""Hugging Face `config.json` <-> `ModelConfig`: one engine driven by the per-family tables in `families/`.

`config_from_hf` reads a family's keys, RoPE (transformers 5's `rope_parameters` with `rope_theta` inside,
or the older top-level `rope_theta` + `rope_scaling`) and sliding-window layout, and refuses any value the
table cannot map exactly. `config_to_hf` writes the same keys back; `config_diff` reads that output again
and compares the two configs field by field, so export names every switch a family cannot carry.

Mapping of `RopeScaling.kind` to transformers' `rope_type` (modeling_rope_utils.py, ROPE_INIT_FUNCTIONS):
    none -> default, linear -> linear, dynamic -> dynamic, yarn -> yarn, llama3 -> llama3,
    ntk_by_parts -> llama3 (the same by-parts formula with alpha/beta as low/high_freq_factor),
    ntk -> default with the stretched base theta * s^(d/(d-2)) (transformers has no static NTK type).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from archlab.interop.family import FIXED_THETA, MISSING, Family, Fixed, InteropError, Key
from archlab.nn.config import ModelConfig
from archlab.nn.rope import RopeScaling, ntk_theta

# kind -> HF rope_type, and HF rope_parameters key -> RopeScaling field (ntk exports as `default`, see rope_to_hf)
HF_ROPE_TYPE = {"none": "default", "linear": "linear", "ntk_by_parts": "llama3", "dynamic": "dynamic",
                "yarn": "yarn", "llama3": "llama3"}
HF_ROPE_KEYS: dict[str, dict[str, str]] = {
    "none": {},
    "linear": {"factor": "factor"},
    "dynamic": {"factor": "factor"},
    "ntk_by_parts": {"factor": "factor", "original_max_position_embeddings": "original_max_seq_len",
                     "low_freq_factor": "beta_slow", "high_freq_factor": "beta_fast"},
    "yarn": {"factor": "factor", "original_max_position_embeddings": "original_max_seq_len",
             "beta_fast": "beta_fast", "beta_slow": "beta_slow", "attention_factor": "attention_factor",
             "mscale": "mscale", "mscale_all_dim": "mscale_all_dim", "truncate": "truncate"},
    "llama3": {"factor": "factor", "original_max_position_embeddings": "original_max_seq_len",
               "low_freq_factor": "low_freq_factor", "high_freq_factor": "high_freq_factor"},
}


def rope_to_hf(scaling: RopeScaling, theta: float, d_rot: int) -> dict[str, Any]:
    """transformers 5 `rope_parameters` (rope_theta included) that give the same frequencies.

    `ntk` has no HF type, so it exports as `default` with the stretched base (needs d_rot);
    `ntk_by_parts` exports as `llama3`, the same formula. For `dynamic`, transformers takes M from
    `max_position_embeddings`, so write `hf_max_position_embeddings(...)` there.
    """
    if scaling.kind == "ntk":
        return {"rope_type": "default", "rope_theta": ntk_theta(theta, d_rot, scaling.factor)}
    out: dict[str, Any] = {"rope_type": HF_ROPE_TYPE[scaling.kind], "rope_theta": theta}
    for hf_key, name in HF_ROPE_KEYS[scaling.kind].items():
        if getattr(scaling, name) is not None:
            out[hf_key] = getattr(scaling, name)
    return out


def hf_max_position_embeddings(scaling: RopeScaling, max_seq_len: int) -> int:
    """The `max_position_embeddings` to export: dynamic NTK reads its M from there; others keep ours."""
    return scaling.original_max_seq_len if scaling.kind == "dynamic" else max_seq_len


def rope_from_hf(params: dict[str, Any] | None, max_position_embeddings: int) -> RopeScaling:
    """Read HF `rope_parameters` / legacy `rope_scaling` (defaults filled as transformers 5 fills them)."""
    params = dict(params or {})
    hf_type = params.get("rope_type", params.get("type", "default"))
    kinds = {"default": "none", **{v: k for k, v in HF_ROPE_TYPE.items() if k not in ("none", "ntk_by_parts")}}
    if hf_type not in kinds:
        raise ValueError(f"rope_type={hf_type!r} is not supported: one of {', '.join(kinds)}")
    kind = kinds[hf_type]
    if kind in ("yarn", "llama3"):  # transformers' standardize_rope_params does the same
        params.setdefault("original_max_position_embeddings", max_position_embeddings)
    if kind == "yarn":
        if params.get("factor") is None:
            params["factor"] = max_position_embeddings / params["original_max_position_embeddings"]
        params["beta_fast"] = params.get("beta_fast") or 32.0  # HF reads these with `or`: 0/None -> default
        params["beta_slow"] = params.get("beta_slow") or 1.0
    values = {name: params[key] for key, name in HF_ROPE_KEYS[kind].items() if params.get(key) is not None}
    if kind == "dynamic":  # transformers' M is max_position_embeddings
        values["original_max_seq_len"] = max_position_embeddings
    return RopeScaling(kind=kind, **values)


# ------------------------------------------------------------------------------ config.json <-> ModelConfig
# config.json keys that change the function when set; a family that does not read one refuses a non-neutral
# value instead of ignoring it (value -> neutral values). `layer_types` is neutral when every layer is full.
FEATURE_KEYS: dict[str, tuple[Any, ...]] = {
    "attention_bias": (False,), "mlp_bias": (False,), "use_bias": (False,), "use_qkv_bias": (False,),
    "qk_layernorm": (False,), "use_qk_norm": (False,), "use_parallel_residual": (False,), "clip_qkv": (None,),
    "sliding_window": (None,), "use_sliding_window": (False,), "attn_logit_softcapping": (None,),
    "final_logit_softcapping": (None,), "query_pre_attn_scalar": (None,), "partial_rotary_factor": (None, 1.0),
    "rotary_pct": (None, 1.0), "rotary_dim": (None,), "scale_attn_by_inverse_layer_idx": (False,),
    "logit_scale": (None, 1.0), "alibi": (False,), "use_bidirectional_attention": (None, False),
    "embedding_multiplier": (None, 1.0), "residual_multiplier": (None, 1.0), "attention_multiplier": (None,),
    "logits_scaling": (None, 1.0), "rope_scaling": (None, {}),
}
# Fields that do not change a trained model's function: carried where a family has a key, never a reason to
# refuse an export. `bias` is resolved into attn_bias / mlp_bias, which are compared.
TRAINING_ONLY = ("dropout", "attn_dropout", "init", "attn_impl", "d_ff_multiple_of", "bias")
SLIDING, FULL = "sliding_attention", "full_attention"


def _unsupported(family: Family, key: str, value: object, allowed: str) -> InteropError:
    return InteropError(f"config.json {key}={value!r} is not supported for model_type {family.model_type!r}: "
                        f"{allowed}")


def config_from_hf(hf: dict[str, Any], family: Family) -> ModelConfig:
    """The ModelConfig of a family's config.json; any value the table cannot map exactly is refused by name."""
    fields: dict[str, Any] = dict(family.fixed)
    for key, spec in family.keys.items():
        if isinstance(spec, Fixed):
            if hf.get(key, spec.value) != spec.value:
                raise _unsupported(family, key, hf[key], f"archlab reads only {spec.value!r}")
            continue
        _read_key(hf, key, spec, family, fields)
    consumed = set(family.keys)
    if family.rope is not None:
        fields |= _read_rope(hf, family, fields)
        consumed |= {"rope_scaling", "partial_rotary_factor", family.rope.fraction_key, family.rope.rotary_dim_key}
    if family.window != "none":
        fields |= _read_window(hf, family, fields["n_layers"])
        consumed |= {"sliding_window", "layer_types", "use_sliding_window", "max_window_layers"}
    for key, neutral in FEATURE_KEYS.items():
        value = hf.get(key)
        if key not in hf or key in consumed or value in neutral:
            continue
        raise _unsupported(family, key, value, f"the {family.model_type} table does not map it (it reads "
                           f"{', '.join(sorted(family.keys))})")
    if set(hf.get("layer_types") or [FULL]) != {FULL} and "layer_types" not in consumed:
        raise _unsupported(family, "layer_types", hf["layer_types"], "this family has no sliding-window layers")
    try:
        return ModelConfig(**fields)
    except ValueError as err:
        raise InteropError(f"config.json of model_type {family.model_type!r} maps to an invalid config: {err}") from err


def _read_key(hf: dict[str, Any], key: str, spec: Key, family: Family, fields: dict[str, Any]) -> None:
    if key in hf:
        value = hf[key]
    elif spec.default is MISSING:
        raise InteropError(f"config.json has no {key!r}, which model_type {family.model_type!r} needs")
    else:
        value = spec.default(fields) if callable(spec.default) else spec.default
    if spec.values is not None:
        if value not in spec.values:
            raise _unsupported(family, key, value, "one of " + ", ".join(map(str, spec.values)))
        value = spec.values[value]
    if spec.load is not None:
        value = spec.load(value, fields)
    if spec.field in fields and fields[spec.field] != value:
        raise InteropError(f"config.json {key}={hf.get(key)!r} disagrees with another key that sets "
                           f"{spec.field}={fields[spec.field]!r}; archlab has one {spec.field}")
    fields[spec.field] = value


def _read_rope(hf: dict[str, Any], family: Family, fields: dict[str, Any]) -> dict[str, Any]:
    """rope_theta, rope_fraction, rope_layout and rope_scaling from either config dialect: transformers 5's
    `rope_parameters`, or top-level keys and `rope_scaling` (which wins, as in transformers)."""
    rope = family.rope
    params = dict(hf.get("rope_scaling") or hf.get("rope_parameters") or {})
    if rope.theta_key is None:  # a fixed base: refuse a config that asks for another
        theta = params.pop("rope_theta", hf.get("rope_theta", FIXED_THETA))
        if theta != FIXED_THETA:
            raise _unsupported(family, "rope_theta", theta, f"this family's base is fixed at {FIXED_THETA:g}")
    else:
        theta = params.pop("rope_theta", hf.get(rope.theta_key, hf.get("rope_theta", 10000.0)))
    fraction = params.pop("partial_rotary_factor", None)
    if fraction is None and rope.fraction_key is not None:
        fraction = hf.get(rope.fraction_key)
    if fraction is None:  # transformers moves a top-level partial_rotary_factor into rope_parameters
        fraction = hf.get("partial_rotary_factor")
    head_dim = fields.get("head_dim") or fields["d_model"] // fields["n_heads"]
    if rope.rotary_dim_key is not None:
        rotary_dim = hf.get(rope.rotary_dim_key, 64)
        if not isinstance(rotary_dim, int) or not 0 < rotary_dim <= head_dim:
            raise _unsupported(family, rope.rotary_dim_key, rotary_dim, f"an int in 1..head_dim={head_dim}")
        fraction = rotary_dim / head_dim
    if fraction is None:
        fraction = rope.fraction_default
    if fraction != 1.0 and rope.fraction_key is None and rope.rotary_dim_key is None:
        raise _unsupported(family, "partial_rotary_factor", fraction, "this family rotates whole heads (1.0)")
    hf_type = params.get("rope_type", params.get("type", "default"))
    if not rope.scaling and hf_type != "default":
        raise _unsupported(family, "rope_type", hf_type, "this family has no RoPE scaling (default only)")
    try:
        scaling = rope_from_hf(params, fields["max_seq_len"])
    except ValueError as err:
        raise InteropError(f"config.json of model_type {family.model_type!r}: {err}") from err
    return {"rope_theta": float(theta), "rope_fraction": fraction, "rope_layout": rope.layout,
            "rope_scaling": None if scaling.kind == "none" else scaling}


def _read_window(hf: dict[str, Any], family: Family, n_layers: int) -> dict[str, Any]:
    """sliding_window and window_pattern: one window on every layer (`all`), or per `layer_types`."""
    window = hf.get("sliding_window")
    if family.window == "qwen" and not hf.get("use_sliding_window", False):
        window = None  # Qwen2/3 configs keep a sliding_window value that applies only with use_sliding_window
    if family.window == "all":
        types = hf.get("layer_types")
        if types is not None and set(types) != {SLIDING if window is not None else FULL}:
            raise _unsupported(family, "layer_types", types, "this family's sliding_window covers every layer or none")
        return {"sliding_window": window, "window_pattern": "S"}
    types = hf.get("layer_types")
    if types is None and family.window == "qwen":
        first = hf.get("max_window_layers", 28)
        types = [SLIDING if window is not None and i >= first else FULL for i in range(n_layers)]
    elif types is None:
        types = family.default_layer_types(n_layers)
    if len(types) != n_layers or set(types) - {SLIDING, FULL}:
        raise _unsupported(family, "layer_types", types, f"{n_layers} entries of {SLIDING!r} / {FULL!r}")
    if window is None or SLIDING not in types:
        return {"sliding_window": None, "window_pattern": "S"}
    return {"sliding_window": window, "window_pattern": _shortest_period("".join(
        "S" if t == SLIDING else "F" for t in types))}


def _shortest_period(pattern: str) -> str:
    """The shortest string whose repetition, cut to len(pattern), is `pattern` ("SFSFSF" -> "SF")."""
    for n in range(1, len(pattern) + 1):
        if all(pattern[i] == pattern[i % n] for i in range(len(pattern))):
            return pattern[:n]
    return pattern


def config_to_hf(config: ModelConfig, family: Family) -> tuple[dict[str, Any], list[str]]:
    """A family's config.json for `config`, and the switches it could not write (empty when it could)."""
    c, problems = config, []
    hf: dict[str, Any] = {"architectures": [family.architecture], "model_type": family.model_type}
    for key, spec in family.keys.items():
        if isinstance(spec, Fixed):
            hf[key] = spec.value
            continue
        value = getattr(c, spec.field)
        if spec.save is not None:
            value = spec.save(value, c)
        elif spec.export_value is not None and value in spec.export_value:
            value = spec.export_value[value]
        elif spec.values is not None:
            spelled = [k for k, v in spec.values.items() if v == value]
            if not spelled:
                problems.append(f"{spec.field}={value!r} (config.json {key} takes {', '.join(map(str, spec.values))})")
                continue
            value = spelled[0]
        hf[key] = value
    if family.rope is not None and c.position == "rope":
        hf |= _write_rope(c, family)
    if family.window != "none":
        hf |= _write_window(c, family)
    return hf, problems


def _write_rope(c: ModelConfig, family: Family) -> dict[str, Any]:
    scaling = c.rope_scaling or RopeScaling()
    params = rope_to_hf(scaling, c.rope_theta, c.rope_dim)
    out: dict[str, Any] = {"rope_parameters": params} if family.rope.theta_key is not None else {}
    if scaling.kind == "dynamic":
        out["max_position_embeddings"] = hf_max_position_embeddings(scaling, c.max_seq_len)
    if family.rope.rotary_dim_key is not None:
        out[family.rope.rotary_dim_key] = c.rope_dim
    elif family.rope.fraction_key is not None:
        params["partial_rotary_factor"] = c.rope_fraction
    return out


def _write_window(c: ModelConfig, family: Family) -> dict[str, Any]:
    sliding = [c.layer_is_sliding(i) for i in range(c.n_layers)]
    window = c.sliding_window if any(sliding) else None
    if family.window == "all":
        return {"sliding_window": window}
    out: dict[str, Any] = {"sliding_window": window, "layer_types": [SLIDING if s else FULL for s in sliding]}
    if family.window == "qwen":
        out["use_sliding_window"] = window is not None
        out["max_window_layers"] = sliding.index(True) if window is not None else c.n_layers
    return out


def canonical(c: ModelConfig) -> dict[str, Any]:
    """The fields that decide a model's function, in one spelling each (ntk as its stretched base, the window
    pattern as one flag per layer, the attention scale resolved), so two configs compare equal iff they
    compute the same thing."""
    d = {k: v for k, v in c.to_dict().items() if k not in TRAINING_ONLY}
    sliding = tuple(c.layer_is_sliding(i) for i in range(c.n_layers))
    d["window_pattern"], d["sliding_window"] = (sliding, c.sliding_window) if any(sliding) else ((), None)
    d["attn_scale"] = round(c.resolved_attn_scale, 12)  # query_pre_attn_scalar round-trips through s^-2
    scaling = c.rope_scaling if c.rope_scaling is not None and c.rope_scaling.kind != "none" else None
    if scaling is not None and scaling.kind == "ntk":  # transformers spells static NTK as a stretched base
        d["rope_theta"], scaling = ntk_theta(c.rope_theta, c.rope_dim, scaling.factor), None
    elif scaling is not None and scaling.kind == "ntk_by_parts":  # the llama3 formula, renamed
        scaling = RopeScaling("llama3", scaling.factor, scaling.original_max_seq_len,
                              low_freq_factor=scaling.beta_slow, high_freq_factor=scaling.beta_fast)
    d["rope_scaling"] = None if scaling is None else dataclasses.asdict(scaling)
    d["rope_fraction"] = c.rope_dim  # the rotated dims, which is what int(head_dim * fraction) decides
    inert = {"relative_buckets": c.position != "relative", "relative_max_distance": c.position != "relative",
             "swish_beta": c.activation != "swish", "parallel_norms": c.block != "parallel",
             "qk_norm_scope": c.qk_norm == "none"}
    return {k: v for k, v in d.items() if not inert.get(k, False)}


def config_diff(config: ModelConfig, family: Family) -> list[str]:
    """The switches of `config` that `family` cannot carry (empty: it exports exactly)."""
    hf, problems = config_to_hf(config, family)
    if problems:
        return problems
    try:
        back = config_from_hf(json.loads(json.dumps(hf)), family)
    except InteropError as err:
        return [str(err)]
    ours, theirs = canonical(config), canonical(back)
    return [f"{k}={ours[k]!r} ({family.model_type} gives {theirs.get(k)!r})" for k in ours if ours[k] != theirs.get(k)]
