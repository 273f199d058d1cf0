"""archlab: build, train, compare and extend modern transformer language models.

Every architecture choice of the modern LLM is a field of `ModelConfig`; `TransformerLM` builds it.
The names below load on first use (PEP 562), so `archlab --help` does not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from archlab.interop import InteropError, from_hf, save_hf
    from archlab.nn.config import ConfigError, ModelConfig, Rope
    from archlab.nn.kv_cache import KVCache
    from archlab.nn.model import TransformerLM
    from archlab.nn.positions.scaling import RopeScaling
    from archlab.nn.presets import PRESETS, SIZES, build_preset

_EXPORTS = {
    "InteropError": "archlab.interop",
    "from_hf": "archlab.interop",
    "save_hf": "archlab.interop",
    "ConfigError": "archlab.nn.config",
    "ModelConfig": "archlab.nn.config",
    "Rope": "archlab.nn.config",
    "KVCache": "archlab.nn.kv_cache",
    "TransformerLM": "archlab.nn.model",
    "PRESETS": "archlab.nn.presets",
    "SIZES": "archlab.nn.presets",
    "build_preset": "archlab.nn.presets",
    "RopeScaling": "archlab.nn.positions.scaling",
}
__all__ = [
    "ConfigError",
    "InteropError",
    "KVCache",
    "ModelConfig",
    "PRESETS",
    "Rope",
    "RopeScaling",
    "SIZES",
    "TransformerLM",
    "build_preset",
    "from_hf",
    "save_hf",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'archlab' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
