"""Hugging Face `config.json` <-> `ModelConfig`: one engine driven by the tables of `families/`.

`config_from_hf` reads a family's keys, RoPE (hf_rope.py: both config dialects, per-layer-type and
NoPE layers) and sliding-window layout, and refuses any value the table cannot map exactly.
`config_to_hf` writes the same keys back; `config_diff` reads that output again and compares the two
configs field by field, so export names every switch a family cannot carry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from archlab.interop.families import FAMILIES, READ_ONLY
from archlab.interop.family import (
    FULL,
    MISSING,
    SLIDING,
    Family,
    Fixed,
    InteropError,
    Key,
    shortest_period,
    text_part,
    unsupported,
)
from archlab.interop.hf_rope import canonical_rope, read_rope, rope_refusal, write_rope
from archlab.nn.config import ModelConfig

# ------------------------------------------------------------------------------ config.json <->
# ModelConfig config.json keys that change the function when set; a family that does not read one
# refuses a non-neutral value instead of ignoring it (value -> neutral values). `layer_types` is
# neutral when every layer is full.
FEATURE_KEYS: dict[str, tuple[Any, ...]] = {
    "attention_bias": (False,),
    "mlp_bias": (False,),
    "use_bias": (False,),
    "use_qkv_bias": (False,),
    "qk_layernorm": (False,),
    "use_qk_norm": (False,),
    "use_parallel_residual": (False,),
    "clip_qkv": (None,),
    "sliding_window": (None,),
    "use_sliding_window": (False,),
    "attn_logit_softcapping": (None,),
    "final_logit_softcapping": (None,),
    "query_pre_attn_scalar": (None,),
    "partial_rotary_factor": (None, 1.0),
    "rotary_pct": (None, 1.0),
    "rotary_dim": (None,),
    "scale_attn_by_inverse_layer_idx": (False,),
    "logit_scale": (None, 1.0),
    "alibi": (False,),
    "use_bidirectional_attention": (None, False),
    "embedding_multiplier": (None, 1.0),
    "residual_multiplier": (None, 1.0),
    "attention_multiplier": (None,),
    "logits_scaling": (None, 1.0),
    "rope_scaling": (None, {}),
}
# Fields that do not change a trained model's function: carried where a family has a key, never a
# reason to refuse an export. `bias` is resolved into attn_bias / mlp_bias, which are compared.
TRAINING_ONLY = (
    "dropout",
    "attn_dropout",
    "init",
    "attn_impl",
    "d_ff_multiple_of",
    "bias",
    "parallel_fused",
    "tied_embed_init",
)


def config_from_hf(hf: dict[str, Any], family: Family) -> ModelConfig:
    """The ModelConfig of a family's config.json; any value the table cannot map exactly is
    refused by name."""
    hf = text_part(hf, family)
    fields: dict[str, Any] = dict(family.fixed)
    for key, spec in family.keys.items():
        if isinstance(spec, Fixed):
            if hf.get(key, spec.value) != spec.value:
                raise unsupported(family, key, hf[key], f"archlab reads only {spec.value!r}")
            continue
        _read_key(hf, key, spec, family, fields)
    consumed = set(family.keys)
    if family.rope is not None:
        fields["rope"] = read_rope(hf, family, fields)
        consumed |= {
            "rope_scaling",
            "partial_rotary_factor",
            family.rope.fraction_key,
            family.rope.rotary_dim_key,
            family.rope.local_theta_key,
            family.rope.nope_layers_key,
            family.rope.nope_interval_key,
        }
    if family.window != "none":
        fields |= _read_window(hf, family, fields["n_layers"])
        consumed |= {"sliding_window", "layer_types", "use_sliding_window", "max_window_layers"}
    for key, neutral in FEATURE_KEYS.items():
        value = hf.get(key)
        if key not in hf or key in consumed or value in neutral:
            continue
        raise unsupported(
            family,
            key,
            value,
            f"the {family.model_type} table does not map it (it reads "
            f"{', '.join(sorted(family.keys))})",
        )
    if set(hf.get("layer_types") or [FULL]) != {FULL} and "layer_types" not in consumed:
        raise unsupported(
            family, "layer_types", hf["layer_types"], "this family has no sliding-window layers"
        )
    try:
        return ModelConfig(**fields)
    except ValueError as err:
        raise InteropError(
            f"config.json of model_type {family.model_type!r} maps to an invalid config: {err}"
        ) from err


def _read_key(
    hf: dict[str, Any], key: str, spec: Key, family: Family, fields: dict[str, Any]
) -> None:
    if key in hf:
        value = hf[key]
    elif spec.default is MISSING:
        raise InteropError(
            f"config.json has no {key!r}, which model_type {family.model_type!r} needs"
        )
    else:
        value = spec.default(fields) if callable(spec.default) else spec.default
    if spec.values is not None:
        if value not in spec.values:
            raise unsupported(family, key, value, "one of " + ", ".join(map(str, spec.values)))
        value = spec.values[value]
    if spec.load is not None:
        value = spec.load(value, fields)
    if spec.field in fields and fields[spec.field] != value:
        raise InteropError(
            f"config.json {key}={hf.get(key)!r} disagrees with another key that sets "
            f"{spec.field}={fields[spec.field]!r}; archlab has one {spec.field}"
        )
    fields[spec.field] = value


def _read_window(hf: dict[str, Any], family: Family, n_layers: int) -> dict[str, Any]:
    """sliding_window and window_pattern: one window on every layer (`all`),
    or per `layer_types`."""
    window = hf.get("sliding_window", family.window_default)
    if family.window == "qwen" and not hf.get("use_sliding_window", False):
        # Qwen2/3 configs keep a sliding_window value that applies only with use_sliding_window
        window = None
    if family.window == "all":
        types = hf.get("layer_types")
        if types is not None and set(types) != {SLIDING if window is not None else FULL}:
            raise unsupported(
                family,
                "layer_types",
                types,
                "this family's sliding_window covers every layer or none",
            )
        return {"sliding_window": window, "window_pattern": "S"}
    types = hf.get("layer_types")
    if types is None and family.window == "qwen":
        first = hf.get("max_window_layers", 28)
        types = [SLIDING if window is not None and i >= first else FULL for i in range(n_layers)]
    elif types is None:
        types = family.default_layer_types(hf, n_layers)
    if not isinstance(types, list) or len(types) != n_layers or set(types) - {SLIDING, FULL}:
        raise unsupported(
            family, "layer_types", types, f"{n_layers} entries of {SLIDING!r} / {FULL!r}"
        )
    switch = family.window_switch
    if switch is not None and window is not None and SLIDING in types and not hf.get(switch, False):
        # transformers' eager and SDPA paths window these layers, its flash-attention path does not
        raise unsupported(
            family, switch, hf.get(switch), f"true when layer_types has {SLIDING!r} layers"
        )
    if (
        window is None
        and SLIDING in types
        and family.rope is not None
        and family.rope.local_theta_key is not None
    ):
        # Gemma 3's window layers rotate with their own base: without a window they are neither kind
        # of ours
        raise unsupported(
            family,
            "sliding_window",
            window,
            f"a window size, since layer_types has {SLIDING!r} layers",
        )
    if window is None or SLIDING not in types:
        return {"sliding_window": None, "window_pattern": "S"}
    return {
        "sliding_window": window,
        "window_pattern": shortest_period("".join("S" if t == SLIDING else "F" for t in types)),
    }


def config_to_hf(config: ModelConfig, family: Family) -> tuple[dict[str, Any], list[str]]:
    """A family's config.json for `config`, and the switches it could not write (empty
    when it could)."""
    c, problems = config, []
    hf: dict[str, Any] = {
        "architectures": [family.architecture],
        "model_type": family.model_type,
        **family.export_keys,
    }
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
                problems.append(
                    f"{spec.field}={value!r} (config.json {key} takes "
                    f"{', '.join(map(str, spec.values))})"
                )
                continue
            value = spelled[0]
        hf[key] = value
    refused = rope_refusal(c.rope.scaling) if c.rope is not None else None
    if family.rope is not None and c.rope is not None and refused:
        problems.append(refused)
    elif family.rope is not None and c.rope is not None:
        hf |= write_rope(c, family)
    if family.window != "none":
        hf |= _write_window(c, family)
    return hf, problems


def _write_window(c: ModelConfig, family: Family) -> dict[str, Any]:
    sliding = [c.layer_is_sliding(i) for i in range(c.n_layers)]
    window = c.sliding_window if any(sliding) else None
    if family.window == "all":
        return {"sliding_window": window}
    out: dict[str, Any] = {
        "sliding_window": window,
        "layer_types": [SLIDING if s else FULL for s in sliding],
    }
    if family.window_switch is not None:
        out[family.window_switch] = window is not None
    if family.window == "qwen":
        out["use_sliding_window"] = window is not None
        out["max_window_layers"] = sliding.index(True) if window is not None else c.n_layers
    return out


def canonical(c: ModelConfig) -> dict[str, Any]:
    """The fields that decide a model's function, in one spelling each (ntk as its stretched base,
    the window pattern as one flag per layer, the attention scale resolved), so two configs compare
    equal iff they compute the same thing."""
    d = {k: v for k, v in c.to_dict().items() if k not in TRAINING_ONLY}
    sliding = tuple(c.layer_is_sliding(i) for i in range(c.n_layers))
    d["window_pattern"], d["sliding_window"] = (
        (sliding, c.sliding_window) if any(sliding) else ((), None)
    )
    # which layers are full is in the flags above, however the config placed them
    del d["full_layers"]
    # query_pre_attn_scalar round-trips through s^-2
    d["attn_scale"] = round(c.resolved_attn_scale, 12)
    # per layer: NoPE, or its base and scaling as transformers computes them (nothing without RoPE)
    del d["rope"]
    d |= canonical_rope(c) if c.rope is not None else {}
    inert = {
        "relative_buckets": c.position != "relative",
        "relative_max_distance": c.position != "relative",
        "swish_beta": c.activation != "swish",
        "parallel_norms": c.block != "parallel",
        "qk_norm_scope": c.qk_norm == "none",
    }
    return {k: v for k, v in d.items() if not inert.get(k, False)}


def fixed_diff(config: ModelConfig, family: Family) -> list[str]:
    """The switches of `config` that differ from those every model of `family` has (its `fixed`
    fields), skipping those that do nothing in `config` (canonical's inert fields)."""
    ours, live = config.to_dict(), canonical(config)
    return [
        f"{k}={ours[k]!r} ({family.model_type} gives {v!r})"
        for k, v in family.fixed.items()
        if k in live and ours[k] != v
    ]


def config_diff(config: ModelConfig, family: Family) -> list[str]:
    """The switches of `config` that `family` cannot carry (empty: it exports exactly)."""
    hf, problems = config_to_hf(config, family)
    if problems:
        return problems
    try:
        back = config_from_hf(json.loads(json.dumps(hf)), family)
    except InteropError as err:
        # a model whose switches the family fixes otherwise may not read back at all, and then fails
        # on a key that is only a symptom (gptj's rotary_dim default, for a model without RoPE): the
        # switches are the reason
        return fixed_diff(config, family) or [str(err)]
    ours, theirs = canonical(config), canonical(back)
    return [
        f"{k}={ours[k]!r} ({family.model_type} gives {theirs.get(k)!r})"
        for k in ours
        if ours[k] != theirs.get(k)
    ]


def is_hf_folder(path: str | Path) -> bool:
    """Whether `path` is a Hugging Face model folder (a config.json with a model_type), not
    an archlab run."""
    file = Path(path) / "config.json"
    if not file.is_file():
        return False
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(config, dict) and "model_type" in config and "model" not in config


def family_of(hf_config: dict) -> Family:
    """The family table of a config.json, by its model_type."""
    model_type = hf_config.get("model_type")
    if model_type in READ_ONLY:
        return READ_ONLY[model_type]
    if model_type not in FAMILIES:
        raise InteropError(
            f"model_type {model_type!r} is not supported: one of "
            f"{', '.join([*FAMILIES, *READ_ONLY])}"
        )
    return FAMILIES[model_type]


def read_hf_config(path: str | Path) -> ModelConfig:
    """The ModelConfig of a Hugging Face folder's config.json (no weights read)."""
    file = Path(path) / "config.json"
    try:
        folder_config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise InteropError(f"{file} cannot be read as JSON ({err})") from err
    return config_from_hf(folder_config, family_of(folder_config))
