"""What every part of the config shares: `ConfigError` and its one-line refusals, the finite-number
check, and `Group`, the base of the option groups (nn/config/groups.py). A bad value fails with one
line naming the dotted field, the value and what is allowed (docs/configuration.md). No torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import fields
from typing import Any

from archlab.nn.registry import Registry


class ConfigError(ValueError):
    """A bad config value: the message names the field, the value and what is allowed."""


def bad(name: str, value: object, allowed: str) -> ConfigError:
    """The refusal of `ModelConfig.{name}` (a dotted name for a group's field: `rope.theta`)."""
    return ConfigError(f"ModelConfig.{name}={value!r} is not allowed: {allowed}")


def check_finite(config: object, prefix: str) -> None:
    """Every float of dataclass `config` (tuples included) is a finite number: NaN and inf pass most
    range checks (`nan <= 0` and `inf <= 1` are both False), so they are refused here first, naming
    `prefix` + the field."""
    for f in fields(config):
        value = getattr(config, f.name)
        items = value if isinstance(value, tuple) else (value,)
        if any(isinstance(v, float) and not math.isfinite(v) for v in items):
            raise ConfigError(f"{prefix}{f.name}={value!r} is not allowed: a finite number")


def positive_int(name: str, value: object, or_none: bool = False) -> None:
    if value is None and or_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad(name, value, "a positive integer" + (" or None" if or_none else ""))


def one_of(name: str, value: object, allowed: tuple[str, ...] | Registry) -> None:
    if value not in allowed:
        raise bad(name, value, "one of " + ", ".join(allowed))


def number(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad(name, value, "a finite number")


def flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise bad(name, value, "True or False")


def value_object(name: str, cls: type, d: dict[str, Any]) -> Any:
    """A value object (a RopeScaling, an option group) from a dict (a saved config, a Python
    caller), an unknown key named in one line."""
    known = [f.name for f in fields(cls)]
    unknown = [k for k in d if k not in known]
    if unknown:
        raise ConfigError(
            f"ModelConfig.{name} has no field {unknown[0]!r}; {cls.__name__} has "
            f"the fields {', '.join(known)}"
        )
    return cls(**d)


class Group:
    """What every option group offers: its fields derived from the model's shape where left None."""

    def derived(self, head_dim: int) -> dict[str, Any]:
        """field -> the value it takes when None (none by default)."""
        return {}

    def resolved(self, head_dim: int) -> Group:
        """These settings with every derived field that is None filled in."""
        fill = {k: v for k, v in self.derived(head_dim).items() if getattr(self, k) is None}
        return dataclasses.replace(self, **fill) if fill else self
