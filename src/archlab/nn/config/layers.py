"""A `ModelConfig` from layers of fields: an upper layer over a lower one (`layer_over`: a preset
under the caller's fields, a built config under `replace`'s changes, a saved config under a resumed
run's flags), an option group given in part editing the group below, and the ffn shorthands spelled
out per layer (`expand_shorthands`). No torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from archlab.nn.config.base import bad
from archlab.nn.config.choices import GLU_SHORTHANDS
from archlab.nn.config.groups import GROUPS

# a value object given with this field starts from its defaults; without it, it edits the one below
REPLACING_FIELD = "kind"


def layer_over(lower: dict[str, Any], upper: dict[str, Any]) -> dict[str, Any]:
    """`upper`'s fields over `lower`'s. An option group that `upper` gives as a dict edits
    `lower`'s group, down into its value objects: `rope={"scaling": {"window": 64}}` (what
    `--model.rope.scaling.window 64` parses to) keeps hwfa2's ReRoPE and sets its window. A value
    object given with its kind (`{"kind": "yarn", ...}`), an instance or None replaces."""
    out = {**lower, **upper}
    for name in GROUPS:
        change, base = upper.get(name), lower.get(name)
        if isinstance(change, dict) and base is not None:
            out[name] = _edit(base, change)
    return out


def _edit(base: Any, change: dict[str, Any]) -> dict[str, Any]:
    """`change` (some fields of a value object, as a dict) over `base` (the object or its dict):
    a field that is itself a value object edits `base`'s unless `change` names its kind."""
    out = _as_dict(base)
    for key, value in change.items():
        below = out.get(key)
        if isinstance(value, dict) and REPLACING_FIELD not in value and below is not None:
            out[key] = _edit(below, value)
        else:
            out[key] = value
    return out


def _as_dict(value: Any) -> dict[str, Any]:
    """A value object's fields, one level deep (its own value objects stay as they are)."""
    if dataclasses.is_dataclass(value):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return dict(value)


def expand_shorthands(layer: dict[str, Any]) -> dict[str, Any]:
    """One layer of fields with an ffn shorthand spelled out: {"ffn": "swiglu"} -> {"ffn": "glu",
    "activation": "silu"}, so the shorthand's activation beats a lower layer's (a preset's). The
    same layer setting another activation fails."""
    if layer.get("ffn") not in GLU_SHORTHANDS:
        return dict(layer)
    ffn, activation = expand_ffn(layer["ffn"], layer.get("activation"))
    return {**layer, "ffn": ffn, "activation": activation}


def expand_ffn(ffn: str, activation: str | None) -> tuple[str, str | None]:
    """(ffn, activation) with a GLU shorthand spelled out; a shorthand with
    another activation fails."""
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
