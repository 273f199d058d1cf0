"""`Registry`: one variant family by name, each name a lazy `"module:attr"` reference to its code.

A family's names are what a config validates against, lists in its error messages and offers on the
CLI; its code is torch. Holding the code as text (the pattern `cli.COMMANDS` uses for commands)
keeps the names torch-free, so a config is checked and costed without importing torch, while each
variant is still one entry: its name and where it lives. `registry[name]` imports the module on
first use and returns the attribute (cached); iterating, `in` and `len` never import anything.
tests/nn/test_registry.py resolves every reference of every registry.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

ALL: list[Registry] = []  # every registry built, in import order (the resolve test walks them)


class Registry(Mapping[str, Any]):
    """name -> "package.module:attribute", resolved on first lookup. `family` names it in errors."""

    def __init__(self, family: str, references: dict[str, str]) -> None:
        for name, ref in references.items():
            _check_reference(family, name, ref)
        self.family = family
        self.references = dict(references)
        self._resolved: dict[str, Any] = {}
        ALL.append(self)

    def __getitem__(self, name: str) -> Any:
        if name not in self.references:
            raise KeyError(f"{self.family} has no {name!r}: one of {', '.join(self.references)}")
        if name not in self._resolved:
            self._resolved[name] = resolve(self.references[name])
        return self._resolved[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.references)

    def __len__(self) -> int:
        return len(self.references)

    def __contains__(self, name: object) -> bool:
        return name in self.references

    def register(self, name: str, reference: str) -> None:
        """Add (or replace) `name` -> `reference`; a plugin or a test registers a
        variant this way."""
        _check_reference(self.family, name, reference)
        self.references[name] = reference
        self._resolved.pop(name, None)

    def unregister(self, name: str) -> None:
        self.references.pop(name)
        self._resolved.pop(name, None)

    def __repr__(self) -> str:
        return f"Registry({self.family!r}, {self.references!r})"


def resolve(reference: str) -> Any:
    """The object a `"package.module:attr"` reference names (importing the module)."""
    module, _, attr = reference.partition(":")
    return getattr(importlib.import_module(module), attr)


def _check_reference(family: str, name: str, reference: str) -> None:
    module, sep, attr = reference.partition(":")
    if not (isinstance(name, str) and name and sep and module and attr.isidentifier()):
        raise ValueError(
            f"{family}[{name!r}] = {reference!r} is not allowed: a name and a 'package.module:attr'"
        )
