"""The one dotted-key grammar: `--a.b value` flags and YAML files -> a dataclass tree's values.

It serves `ModelConfig` (`archlab inspect --n_kv_heads 1`), `TrainConfig` (`archlab train`, whose
`model.*` keys are ModelConfig fields) and ablation suites (an arm is a dict of dotted overrides on
a base). One set of rules for all of them:

- flags: `--a.b value` or `--a.b=value` -> key `a.b`; dashes in a key become underscores; a value
  never starts with `--`; the last of repeated keys wins.
- YAML files: mappings flattened to dotted keys (`model: {rope: {scaling: {kind:
  yarn}}}` -> `model.rope.scaling.kind`).
- bool: true/false, yes/no, on/off, 1/0 (any case), or a YAML bool.
- int: an integer, or an integral number (`3.0`, `1e4`); `3.5` is an error.
- float: any number (`5e5`, `3`), never a bool.
- str: the text as given; `none` stays the string "none" unless the field may be None.
- `X | None`: `none` / `null` (any case) or a YAML null -> None.
- tuple: `0.9,0.99`, `[0.9, 0.99]`, `(0.9, 0.99)` or a YAML list, each item typed.
- `D | None` with D a dataclass is a value object (`model.rope`: a `Rope`, `model.rope.scaling`: a
  `RopeScaling`; `model.favor`: a `Favor`): a JSON object or YAML mapping of D's fields, a bare
  string for D's first field (`yarn` = kind=yarn), an instance of D, or one sub-key at a time
  (`model.rope.scaling.factor 4`), each starting from D's defaults. Given without a `kind`, the
  fields stay a dict (`typed_overrides`) that edits the value of the layer below (a preset's, a
  resumed run's: `layer_over` in nn/config/layers.py), so `--preset hwfa2
  --model.rope.scaling.window 64` keeps hwfa2's ReRoPE and changes its window.
- old spellings (nn/config/legacy.py): ModelConfig's flat fields of older configs are aliases of
  their option group's keys (`RENAMED`: `model.rope_theta` = `model.rope.theta`,
  `model.favor_features` = `model.favor.features`), and an old bool switch of a group that is now
  its own switch turns it on or off (`SWITCHES`: `model.cosine_attention true` = `model.cosine` with
  its defaults; docs/configuration.md).
- `D` alone is a section (`optimizer`): it takes no value itself, only its fields (`optimizer.lr`).

An unknown key or a value of the wrong type raises `ConfigError` with one line naming the dotted
key, the value and what is allowed, before anything is built. Each dataclass then checks its own
values in `__post_init__`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from archlab.nn.config import LEGACY_KEYS, LEGACY_SWITCHES, ConfigError, ModelConfig
from archlab.nn.config.layers import REPLACING_FIELD
from archlab.yaml_file import read_yaml

# what a flag, a YAML file or a saved config holds
Value = str | int | float | bool | None | tuple | list | dict
T = TypeVar("T")
BOOL_WORDS = {
    "true": True,
    "yes": True,
    "on": True,
    "1": True,
    "false": False,
    "no": False,
    "off": False,
    "0": False,
}
NONE_WORDS = ("none", "null")
# a dataclass -> {old key: its new dotted key}: old spellings accepted as aliases (ModelConfig's
# flat group fields)
RENAMED: dict[type, dict[str, str]] = {
    ModelConfig: {old: f"{g}.{f}" for old, (g, f) in LEGACY_KEYS.items()}
}
# a dataclass -> {old bool key: the group field it turns on (true) or off (false)}
SWITCHES: dict[type, dict[str, str]] = {ModelConfig: dict(LEGACY_SWITCHES)}


class _NoMatch(Exception):
    """`value` does not fit this one type of a union; try the next."""


# ------------------------------------------------------------------------------------------ sources
def parse_flags(args: list[str]) -> dict[str, str]:
    """`--a.b value` / `--a.b=value` pairs -> {"a.b": "value"} (dashes in
    keys become underscores)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        flag = args[i]
        if not flag.startswith("--") or len(flag) == 2:
            raise ConfigError(f"expected --key value, got {flag!r}")
        key, has_eq, value = flag[2:].partition("=")
        if not has_eq:
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                raise ConfigError(f"flag {flag} needs a value")
            value, i = args[i + 1], i + 1
        out[key.replace("-", "_")] = value
        i += 1
    return out


def flatten(tree: Mapping[str, Value], prefix: str = "") -> dict[str, Value]:
    """{"optimizer": {"lr": 1}} -> {"optimizer.lr": 1}, down to the leaves."""
    flat: dict[str, Value] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def load_yaml(path: str | Path) -> dict[str, Value]:
    """A YAML config file as flat dotted keys (read by yaml_file.py: one line for a folder, a
    missing file, bad bytes, a syntax error or a key given twice)."""
    tree = read_yaml(path, "config file") or {}
    if not isinstance(tree, dict):
        raise ConfigError(
            f"config file {path} must hold a mapping of keys to values, got {type(tree).__name__}"
        )
    return flatten(tree)


# -------------------------------------------------------------------------------------- typed
# values
def _options(hint: object) -> tuple[object, ...]:
    """The members of a union (`int | None` -> (int, NoneType)), or the type alone."""
    return typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)


def _describe(kind: object) -> str:
    if kind is type(None):
        return "None"
    if kind is bool:
        return "bool (true/false, yes/no, on/off, 1/0)"
    if typing.get_origin(kind) is tuple:
        return f"a list of {_describe(typing.get_args(kind)[0])}"
    return getattr(kind, "__name__", str(kind))


def _one(kind: object, value: Value) -> Value:
    """`value` as the single type `kind`, or _NoMatch."""
    if typing.get_origin(kind) is tuple:
        items = value if isinstance(value, (list, tuple)) else None
        if isinstance(value, str):
            items = [v.strip() for v in value.strip().strip("()[]").split(",") if v.strip()]
        if items is None:
            raise _NoMatch
        return tuple(_one(typing.get_args(kind)[0], item) for item in items)
    if isinstance(value, bool) and kind is not bool:
        raise _NoMatch  # YAML's true/false is never a number or a word
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, (str, int)) and str(value).strip().lower() in BOOL_WORDS:
            return BOOL_WORDS[str(value).strip().lower()]
    elif kind is int:
        return _integer(value)
    elif kind is float:
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    elif kind is str:
        if isinstance(value, (str, int, float)):
            return str(value)
    elif isinstance(kind, type) and isinstance(value, kind):
        return value
    raise _NoMatch


def _integer(value: Value) -> int:
    """An int from `3`, `"3"`, `3.0` or `"1e4"`; a non-integral number is _NoMatch."""
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _NoMatch from None
    if not math.isfinite(number) or number != int(number):
        raise _NoMatch
    return int(number)


def coerce(hint: object, value: Value, key: str) -> Value:
    """`value` (a flag's text or a YAML value) as the declared type `hint` of the field
    at dotted `key`."""
    options = _options(hint)
    if value is None or (isinstance(value, str) and value.strip().lower() in NONE_WORDS):
        if type(None) in options:
            return None
    for kind in options:
        if kind is type(None):
            continue
        try:
            return _one(kind, value)
        except _NoMatch:
            continue
    allowed = " or ".join(_describe(k) for k in options)
    if str in options and isinstance(value, bool):
        allowed += " (YAML reads yes/no/on/off as booleans: quote the word)"
    raise ConfigError(f"{key}={value!r} is not allowed: expected {allowed}")


# ------------------------------------------------------------------------------------ dataclass
# trees
@functools.cache
def _hints(cls: type) -> dict[str, object]:
    return typing.get_type_hints(cls)


def _dataclass_in(hint: object) -> type | None:
    """The dataclass type of a field typed `D` or `D | None`, else None."""
    return next(
        (k for k in _options(hint) if isinstance(k, type) and dataclasses.is_dataclass(k)), None
    )


def defaults(cls: type) -> dict[str, Value]:
    """The field defaults of a dataclass tree as nested dicts, before any
    __post_init__ resolves them."""
    out: dict[str, Value] = {}
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING:
            out[f.name] = defaults(f.default_factory)
        else:
            out[f.name] = f.default
    return out


def set_dotted(cls: type, tree: dict[str, Value], key: str, value: Value, prefix: str = "") -> None:
    """Set `a.b.c` in the nested dict `tree` of dataclass `cls`, typed as the field declares.
    `tree` may be sparse (only the keys set so far); `prefix` is the dotted path of `cls`
    itself, for messages."""
    head, _, rest = key.partition(".")
    # an old spelling: `favor_features` = `favor.features`
    if head in RENAMED.get(cls, {}) and head not in _hints(cls):
        return set_dotted(
            cls, tree, RENAMED[cls][head] + (f".{rest}" if rest else ""), value, prefix
        )
    if head in SWITCHES.get(cls, {}) and head not in _hints(cls) and not rest:
        return _set_switch(tree, SWITCHES[cls][head], coerce(bool, value, prefix + head))
    where = f"{prefix}{head}"
    if head not in _hints(cls):
        known = ", ".join(f.name for f in dataclasses.fields(cls))
        near = [
            f"{prefix}{name}.{head}"
            for name, hint in _hints(cls).items()
            # `lr` -> optimizer.lr
            if (sub := _dataclass_in(hint)) is not None and head in _hints(sub)
        ]
        near += [
            f"{prefix}{name}"
            for name in difflib.get_close_matches(head, list(_hints(cls)), n=2, cutoff=0.75)
        ]
        hint_text = f"did you mean {' or '.join(near)}? " if near else ""
        raise ConfigError(
            f"unknown config key {prefix + key!r}: {hint_text}{cls.__name__} has the fields {known}"
        )
    hint = _hints(cls)[head]
    sub = _dataclass_in(hint)
    if sub is None:
        if rest:
            raise ConfigError(f"unknown config key {prefix + key!r}: {where} has no sub-fields")
        tree[head] = coerce(hint, value, where)
    elif type(None) not in _options(hint):  # a section
        if not rest:
            first = dataclasses.fields(sub)[0].name
            raise ConfigError(
                f"config key {where!r} is a section; set its fields, e.g. {where}.{first}"
            )
        set_dotted(sub, tree.setdefault(head, {}), rest, value, f"{where}.")
    elif rest:  # one field of a value object
        if not isinstance(tree.get(head), dict):
            tree[head] = {}
        set_dotted(sub, tree[head], rest, value, f"{where}.")
    elif value is None or (isinstance(value, str) and value.strip().lower() in NONE_WORDS):
        tree[head] = None
    else:  # a whole value object, from its own defaults
        tree[head] = {}
        for name, item in _as_mapping(sub, value, where).items():
            set_dotted(sub, tree[head], name, item, f"{where}.")


def _set_switch(tree: dict[str, Value], group: str, on: bool) -> None:
    """An old bool switch (`cosine_attention`): on = the group's sub-keys given so far, or its
    defaults (an empty edit); off = None."""
    if not on:
        tree[group] = None
    elif not isinstance(tree.get(group), dict):
        tree[group] = {}


def _as_mapping(cls: type, value: Value | object, key: str) -> Mapping[str, Value]:
    """A value object given as a mapping, a JSON object, an instance, or a string for
    its first field."""
    if isinstance(value, Mapping):
        return value
    if isinstance(value, cls):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(cls)}
    first = dataclasses.fields(cls)[0].name
    allowed = f"expected None, a JSON object of {cls.__name__} fields or a {first} name"
    if not isinstance(value, str):
        raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")
    if not value.lstrip().startswith("{"):
        return {first: value}
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"{key}={value!r} is not allowed: {allowed} (JSON error: {err})"
        ) from None
    if not isinstance(parsed, dict):
        raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")
    return parsed


def build_fields(cls: type, tree: Mapping[str, Value], edits: bool = False) -> dict[str, object]:
    """The keyword arguments of `cls` from a (possibly sparse) tree: nested dicts built into their
    dataclasses, inner ones first so each __post_init__ checks once. With `edits`, a value object
    given without its `kind` (REPLACING_FIELD) stays a dict of the (typed) fields given, its own
    value objects built the same way: an edit of the value below (module doc)."""
    kwargs: dict[str, object] = {}
    for name, value in tree.items():
        sub = _dataclass_in(_hints(cls)[name])
        if sub is None or not isinstance(value, dict):
            kwargs[name] = value
        elif edits and type(None) in _options(_hints(cls)[name]) and REPLACING_FIELD not in value:
            kwargs[name] = build_fields(sub, value, edits=True)  # an edit; its value objects built
        else:
            kwargs[name] = sub(**build_fields(sub, value))
    return kwargs


def build(cls: type[T], tree: Mapping[str, Value]) -> T:
    """The dataclass `cls` from a nested dict tree."""
    return cls(**build_fields(cls, tree))


def typed_overrides(cls: type, flat: Mapping[str, Value], prefix: str = "") -> dict[str, object]:
    """{dotted key under `cls`: raw value} -> {field: typed value}, ready for `cls(**...)`,
    a preset or `replace`; a value object given without its kind is a dict of the fields
    given (module doc)."""
    tree: dict[str, Value] = {}
    for key, value in flat.items():
        set_dotted(cls, tree, key, value, prefix)
    return build_fields(cls, tree, edits=True)
