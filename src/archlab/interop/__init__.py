"""Hugging Face interop: `from_hf` / `save_hf` read and write checkpoint folders through one engine driven by
the per-family tables in `families/` (config keys, weight names, and the few transforms between them)."""

from archlab.interop.family import InteropError
from archlab.interop.folder import is_hf_folder
from archlab.interop.hf import from_hf, load_hf_tokenizer, read_hf_config, save_hf

__all__ = ["InteropError", "from_hf", "is_hf_folder", "load_hf_tokenizer", "read_hf_config", "save_hf"]
