"""A `ModelConfig` from dicts: layers of fields over each other (`layer_over`), value objects and
option groups from dicts (`value_object`), and the flat keys of configs saved before the option
groups (`favor_features`, `vq_codes`, `gau_attention`, `cosine_scale`, ...), read into their groups
and spelled back for the lab's run store (docs/configuration.md). No torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import fields
from typing import Any

from archlab.nn.attention.options import GROUPS, VQ, Favor, OptionError
from archlab.nn.config_rules import ConfigError
from archlab.nn.positions.scaling import RopeScaling

# the flat keys of configs saved before the option groups -> (group, its field)
# (docs/configuration.md)
LEGACY_KEYS: dict[str, tuple[str, str]] = {
    "gau_attention": ("gau", "attention"),
    "cosine_scale": ("cosine", "scale"),
    **{f"favor_{f.name}": ("favor", f.name) for f in fields(Favor)},
    **{f"vq_{f.name}": ("vq", f.name) for f in fields(VQ)},
}


GROUP_DEFAULTS = {
    name: {f.name: f.default for f in fields(cls)} for name, (cls, _, _) in GROUPS.items()
}


def from_legacy(d: dict[str, Any], switch_defaults: dict[str, Any]) -> dict[str, Any]:
    """`d` with the flat keys of configs saved before the option groups (LEGACY_KEYS) moved into
    their groups. A flat key at its default whose group's switch is off is dropped: every old config
    held them all."""
    out = {k: v for k, v in d.items() if k not in LEGACY_KEYS}
    for old in [k for k in d if k in LEGACY_KEYS]:
        group, field = LEGACY_KEYS[old]
        cls, switch, on = GROUPS[group]
        if (
            d[old] == GROUP_DEFAULTS[group][field]
            and out.get(switch, switch_defaults[switch]) != on
        ):
            continue
        if group in d:
            raise ConfigError(
                f"ModelConfig: {old!r} is the old spelling of {group}.{field}; give {group!r} alone"
            )
        out.setdefault(group, {})[field] = d[old]
    return out


def flat_view(nested: dict[str, Any]) -> dict[str, Any]:
    """`ModelConfig.to_dict()` output with each option group spelled as its flat keys (a group that
    is off gives its defaults), in the old field order."""
    out: dict[str, Any] = {}
    for name, value in nested.items():
        if name not in GROUPS:
            out[name] = value
            continue
        group = value if value is not None else dataclasses.asdict(GROUPS[name][0]())
        out.update({old: group[field] for old, (g, field) in LEGACY_KEYS.items() if g == name})
    return out


def layer_over(lower: dict[str, Any], upper: dict[str, Any]) -> dict[str, Any]:
    """`upper`'s fields over `lower`'s (a preset under the caller's, a built config under
    `replace`'s changes, a saved config under a resume's flags). A value object that `upper` gives
    as a dict without its kind, `rope_scaling={"window": 64}` (what `--model.rope_scaling.window 64`
    parses to), edits `lower`'s value rather than starting from RopeScaling's defaults: hwfa2's
    ReRoPE window is set that way. A dict naming a kind, an instance or None replaces the value, as
    before."""
    out = {**lower, **upper}
    for name in VALUE_OBJECTS:
        change, base = upper.get(name), lower.get(name)
        if isinstance(change, dict) and "kind" not in change and base is not None:
            base = dataclasses.asdict(base) if dataclasses.is_dataclass(base) else dict(base)
            out[name] = {**base, **change}
    return out


VALUE_OBJECTS = {"rope_scaling": RopeScaling, **{name: cls for name, (cls, _, _) in GROUPS.items()}}


def value_object(name: str, cls: type, d: dict[str, Any]) -> Any:
    """A RopeScaling or option group from a dict (a saved config, or Python callers), unknown keys
    named in one line; a group's own refusal as a ConfigError."""
    known = [f.name for f in fields(cls)]
    unknown = [k for k in d if k not in known]
    if unknown:
        raise ConfigError(
            f"ModelConfig.{name} has no field {unknown[0]!r}; {cls.__name__} has the fields "
            f"{', '.join(known)}"
        )
    try:
        return cls(**d)
    except OptionError as err:
        raise ConfigError(str(err)) from None
