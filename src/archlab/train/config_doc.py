"""`archlab train --help`, generated: every config key with its default and its field's comment.

Nothing is written by hand: a field added to `TrainConfig` (or `ModelConfig`) with its one-line
comment shows up in the help, as torchtitan's `test_no_new_cli_options.py` keeps its CLI generated.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
from dataclasses import fields

from archlab.nn.config import GROUPS, ModelConfig
from archlab.nn.presets import build_preset
from archlab.train.config import TrainConfig

FIELD_LINE = re.compile(r"^\s+(\w+)\s*:[^#]*#\s*(.+)$")  # `name: type = default  # comment`
BARE_FIELD = re.compile(r"^\s+(\w+)\s*:[^#]*$")  # a field whose comment is on the lines above it


# `train --help` asks once per named flag: inspect.getsource parses the class's module each time
@functools.cache
def field_comments(cls: type) -> dict[str, str]:
    """{field: the comment on its line, or on the comment lines right above it where its line has
    none} for a dataclass defined in a source file (do not modify the result: it is cached)."""
    names = {f.name for f in fields(cls)}
    comments: dict[str, str] = {}
    above: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        if (m := FIELD_LINE.match(line)) and m.group(1) in names:
            comments[m.group(1)] = m.group(2).strip()
        elif (m := BARE_FIELD.match(line)) and m.group(1) in names and above:
            comments[m.group(1)] = " ".join(above)
        stripped = line.strip()
        is_comment = stripped.startswith("#") and not stripped.startswith("# ---")
        above = [*above, stripped.lstrip("#").strip()] if is_comment else []
    return comments


def _default(f: dataclasses.Field) -> object:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def key_docs() -> list[tuple[str, object, str]]:
    """(key, default, description) for every TrainConfig leaf and every ModelConfig field
    (`model.*`, whose defaults are those of the default preset and size)."""
    rows: list[tuple[str, object, str]] = []

    def walk(cls: type, prefix: str) -> None:
        comments = field_comments(cls)
        for f in fields(cls):
            default = _default(f)
            if dataclasses.is_dataclass(default):
                walk(type(default), f"{prefix}{f.name}.")
            else:
                rows.append((f"{prefix}{f.name}", default, comments.get(f.name, "")))

    walk(TrainConfig, "")
    train = TrainConfig()
    model = build_preset(train.preset, train.size)
    comments = field_comments(ModelConfig)
    for f in fields(ModelConfig):
        value = getattr(model, f.name)
        if f.name not in GROUPS:
            rows.append((f"model.{f.name}", value, comments.get(f.name, "")))
            continue
        # an option group: the group (on or None), then its fields one key each
        # (`--model.rope.theta`, `--model.favor.features`)
        group, switch, on = GROUPS[f.name]
        shown = None if value is None else f"{group.__name__}(...)"
        rows.append((f"model.{f.name}", shown, comments.get(f.name, "")))
        when = f"{switch}={on!r}" if switch is not None else f"{f.name} on"
        sub = field_comments(group)
        rows += [
            (f"model.{f.name}.{g.name}", g.default, f"{when}: {sub.get(g.name, '')}")
            for g in fields(group)
        ]
    return rows


def _shown(value: object) -> str:
    if value == "":
        return '""'
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "()"
    return str(value)


def help_text() -> str:
    """The epilog of `archlab train --help`: one line per key, `--key DEFAULT  description`."""
    rows = [(f"--{key} {_shown(default)}", doc) for key, default, doc in key_docs()]
    width = min(48, max(len(flag) for flag, _ in rows))
    train = TrainConfig()
    head = (
        "every config key, with its default (set with --KEY VALUE; model.* defaults are those of "
        f"--preset {train.preset} --size {train.size}):"
    )
    return "\n".join([head, *(f"  {flag:<{width}}  {doc}" for flag, doc in rows)])


def alias_help(key: str) -> str:
    """Help of a named flag that sets `key`: the field's comment and its real default."""
    docs = {k: (default, doc) for k, default, doc in key_docs()}
    default, doc = docs[key]
    if key == "out":
        default = "runs/{preset}-{size}"
    same = "" if "." not in key else f"= --{key}; "  # a dotted key is worth naming beside its alias
    return f"{doc} ({same}default {_shown(default)})"
