"""archlab: build, train, compare and extend modern transformer language models.

Every architecture choice of the modern LLM is a field of `ModelConfig`; `TransformerLM` builds it.
"""

from archlab.interop import InteropError, from_hf, save_hf
from archlab.nn.config import ConfigError, ModelConfig
from archlab.nn.kv_cache import KVCache
from archlab.nn.model import TransformerLM
from archlab.nn.presets import PRESETS, SIZES, build_preset
from archlab.nn.rope import RopeScaling

__all__ = ["ConfigError", "InteropError", "KVCache", "ModelConfig", "PRESETS", "RopeScaling", "SIZES", "TransformerLM",
           "build_preset", "from_hf", "save_hf"]
__version__ = "0.1.0"
