"""Hugging Face interop: `from_hf` / `save_hf` read and write checkpoint folders through one
engine driven by the per-family tables in `families/` (config keys, weight names, and the few
transforms between them).

The names below load on first use (PEP 562, as the package root does): the family tables are
plain data, so `archlab convert --help` lists them without importing torch, which `from_hf`
and `save_hf` need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from archlab.interop.family import InteropError
    from archlab.interop.hf import from_hf, load_hf_tokenizer, save_hf
    from archlab.interop.hf_config import is_hf_folder, read_hf_config

_EXPORTS = {
    "InteropError": "archlab.interop.family",
    "is_hf_folder": "archlab.interop.hf_config",
    "from_hf": "archlab.interop.hf",
    "load_hf_tokenizer": "archlab.interop.hf",
    "read_hf_config": "archlab.interop.hf_config",
    "save_hf": "archlab.interop.hf",
}
__all__ = [
    "InteropError",
    "from_hf",
    "is_hf_folder",
    "load_hf_tokenizer",
    "read_hf_config",
    "save_hf",
]


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'archlab.interop' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
