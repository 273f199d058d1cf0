"""The old spellings of `ModelConfig`, in one place: the flat keys of configs saved before the
option groups (`rope_theta`, `favor_features`, `vq_codes`, `gau_attention`, `cosine_scale`, ...)
and the old bool switch `cosine_attention`, read into their groups (`from_legacy`), spelled back
for the lab's run store (`flat_view`), and named with their new spelling where a Python caller
still uses them (`legacy_message`). The command line and suite files reach the same mapping through
archlab/overrides.py (docs/configuration.md). No torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import fields
from typing import Any

from archlab.nn.config.base import ConfigError
from archlab.nn.config.groups import GROUPS, VQ, Favor, Rope

# the flat keys of configs saved before the option groups -> (group, its field), each group's in
# the order the old fields had (flat_view spells them back in it)
LEGACY_KEYS: dict[str, tuple[str, str]] = {
    "gau_attention": ("gau", "attention"),
    **dict(
        zip(
            (
                "rope_theta",
                "rope_layout",
                "rope_fraction",
                "rope_scaling",
                "position_pattern",
                "rope_theta_local",
                "rope_scaling_local",
            ),
            (("rope", f.name) for f in fields(Rope)),
            strict=True,
        )
    ),
    "cosine_scale": ("cosine", "scale"),
    **{f"favor_{f.name}": ("favor", f.name) for f in fields(Favor)},
    **{f"vq_{f.name}": ("vq", f.name) for f in fields(VQ)},
}
# the old bool switches of groups that are their own switch now: True = the group (its defaults
# unless its keys say more), False = None
LEGACY_SWITCHES: dict[str, str] = {"cosine_attention": "cosine"}

GROUP_DEFAULTS = {
    name: {f.name: f.default for f in fields(cls)} for name, (cls, _, _) in GROUPS.items()
}


def legacy_message(key: str) -> str | None:
    """The one line that tells a caller the new spelling of old key `key` (None: not an old key)."""
    if key in LEGACY_SWITCHES:
        group = LEGACY_SWITCHES[key]
        cls = GROUPS[group][0]
        first = fields(cls)[0].name  # any of its keys turns it on: --model.cosine.scale fixed
        return (
            f"ModelConfig has no field {key!r}: it is {group} now ({group}={cls.__name__}() on, "
            f"None off; --model.{group}.{first} {GROUP_DEFAULTS[group][first]} on the command line)"
        )
    if key in LEGACY_KEYS:
        group, field = LEGACY_KEYS[key]
        cls = GROUPS[group][0].__name__
        return (
            f"ModelConfig has no field {key!r}: it is {group}.{field} now ({group}={cls}("
            f"{field}=...), or --model.{group}.{field} on the command line)"
        )
    return None


def _group_on(group: str, values: dict[str, Any], switch_defaults: dict[str, Any]) -> bool:
    """Whether `group` is on in `values`: its switch has its value, or (its own switch)
    it is set."""
    _, switch, on = GROUPS[group]
    if switch is None:
        return values.get(group) is not None
    return values.get(switch, switch_defaults[switch]) == on


def from_legacy(d: dict[str, Any], switch_defaults: dict[str, Any]) -> dict[str, Any]:
    """`d` with its old spellings in their groups: an old switch (`cosine_attention`) as its group
    or None, the flat keys (LEGACY_KEYS) as the group's fields. A flat key at its default whose
    group is off is dropped: every old config held them all."""
    out = {k: v for k, v in d.items() if k not in LEGACY_KEYS and k not in LEGACY_SWITCHES}
    for old in [k for k in d if k in LEGACY_SWITCHES]:
        group = LEGACY_SWITCHES[old]
        if d[old]:
            out[group] = out.get(group) if out.get(group) is not None else {}
        elif out.get(group) is not None:
            raise ConfigError(
                f"ModelConfig: {old}=False turns {group} off, but {group}={out[group]!r} is given; "
                f"give {group!r} alone (None is off)"
            )
    for old in [k for k in d if k in LEGACY_KEYS]:
        group, field = LEGACY_KEYS[old]
        if d[old] == GROUP_DEFAULTS[group][field] and not _group_on(group, out, switch_defaults):
            continue
        if d.get(group) is not None:
            raise ConfigError(
                f"ModelConfig: {old!r} is the old spelling of {group}.{field}; give {group!r} alone"
            )
        if not isinstance(out.get(group), dict):
            out[group] = {}
        out[group][field] = d[old]
    return out


def flat_view(nested: dict[str, Any]) -> dict[str, Any]:
    """`ModelConfig.to_dict()` output with each option group spelled as its old keys (a group that
    is off gives its defaults, an own-switch group its old bool too), in the old field order."""
    out: dict[str, Any] = {}
    for name, value in nested.items():
        if name not in GROUPS:
            out[name] = value
            continue
        out.update({old: value is not None for old, g in LEGACY_SWITCHES.items() if g == name})
        group = value if value is not None else dataclasses.asdict(GROUPS[name][0]())
        out.update({old: group[field] for old, (g, field) in LEGACY_KEYS.items() if g == name})
    return out
