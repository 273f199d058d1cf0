"""A Hugging Face model folder on disk: `config.json` and safetensors weights, one file or sharded.

Reading opens every safetensors file as a memory map (`safe_open`) and answers key, shape and dtype
questions from the headers alone, so a folder is checked completely before any tensor is read;
a tensor is only copied out of the map when it is asked for. Every failure is one line naming
the file (and key). Pickled weights (`.bin`, `.pt`) are refused, never unpickled: unpickling
runs arbitrary code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from archlab.checkpoint.safetensors_file import save_file_sorted
from archlab.interop.family import InteropError

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
PICKLES = ("*.bin", "*.pt", "*.pth", "*.ckpt")
FLOAT_DTYPES = {
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
}
HOW_TO_CONVERT = (
    "archlab never unpickles weights; convert them once with transformers: "
    "AutoModelForCausalLM.from_pretrained(DIR).save_pretrained(OUT, safe_serialization=True)"
)


class HFFolder:
    """The config and the weight headers of a folder; `get(key)` reads one tensor."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise InteropError(f"Hugging Face folder {self.path} does not exist")
        self.config = self._read_json(self.path / "config.json")
        if not isinstance(self.config, dict) or "model_type" not in self.config:
            raise InteropError(
                f"{self.path / 'config.json'} has no model_type: not a Hugging Face model config"
            )
        self.handles: dict[str, Any] = {}
        self.file_of: dict[str, str] = {}  # tensor key -> file name
        for name in self._weight_files():
            self._open(name)

    def _read_json(self, file: Path) -> Any:
        if not file.is_file():
            raise InteropError(f"{file} is missing")
        try:
            return json.loads(file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
            raise InteropError(f"{file} is not valid JSON ({err})") from err

    def _weight_files(self) -> list[str]:
        """The safetensors files to read: those the index names, or model.safetensors."""
        index = self.path / INDEX
        if index.is_file():
            data = self._read_json(index)
            weight_map = data.get("weight_map") if isinstance(data, dict) else None
            if not isinstance(weight_map, dict) or not all(
                isinstance(v, str) for v in weight_map.values()
            ):
                raise InteropError(
                    f"{index} is malformed: it needs a 'weight_map' of tensor key -> file name"
                )
            self.index = weight_map
            for key, name in weight_map.items():
                if not (self.path / name).is_file():
                    raise InteropError(f"{index} maps {key!r} to {name}, which is missing")
            return sorted(set(weight_map.values()))
        self.index = None
        if (self.path / SINGLE).is_file():
            return [SINGLE]
        shards = sorted(p.name for p in self.path.glob("model-*-of-*.safetensors"))
        if shards:
            raise InteropError(
                f"{self.path} has shards ({shards[0]}, ...) but no {INDEX} to say which "
                "key is where"
            )
        pickles = sorted(p.name for pattern in PICKLES for p in self.path.glob(pattern))
        if pickles:
            raise InteropError(
                f"{self.path / pickles[0]} is a pickle and there is no {SINGLE}: {HOW_TO_CONVERT}"
            )
        raise InteropError(f"{self.path} has no {SINGLE} (nor a sharded {INDEX})")

    def _open(self, name: str) -> None:
        try:
            handle = safe_open(str(self.path / name), framework="pt")
        except (SafetensorError, OSError) as err:
            raise InteropError(
                f"{self.path / name} cannot be read, truncated or corrupt? ({err})"
            ) from err
        self.handles[name] = handle
        for key in handle.keys():
            if key in self.file_of:
                raise InteropError(
                    f"{self.path / name} holds {key!r}, which {self.file_of[key]} holds too"
                )
            self.file_of[key] = name
        if self.index is not None:
            for key, file in self.index.items():
                if file == name and key not in self.file_of:
                    raise InteropError(
                        f"{self.path / INDEX} maps {key!r} to {name}, which does not hold it"
                    )

    def keys(self) -> set[str]:
        return set(self.file_of)

    def where(self, key: str) -> Path:
        return self.path / self.file_of.get(key, SINGLE if self.index is None else INDEX)

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self.handles[self.file_of[key]].get_slice(key).get_shape())

    def dtype(self, key: str) -> torch.dtype:
        """The stored dtype of `key`; anything but a float is an error naming the file and key."""
        name = self.handles[self.file_of[key]].get_slice(key).get_dtype()
        if name not in FLOAT_DTYPES:
            raise InteropError(
                f"{self.where(key)}: {key!r} is stored as {name}; weights must be "
                f"one of {', '.join(FLOAT_DTYPES)}"
            )
        return FLOAT_DTYPES[name]

    def get(self, key: str) -> torch.Tensor:
        try:
            return self.handles[self.file_of[key]].get_tensor(key)
        except (SafetensorError, OSError) as err:
            raise InteropError(f"{self.where(key)}: {key!r} cannot be read ({err})") from err


def write_folder(path: Path, config: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    """config.json and model.safetensors into `path` (created if needed)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    # written beside, then renamed: a process still mapping the old file (from_hf's reads) keeps its
    # pages
    tmp = path / f".{SINGLE}.tmp"
    save_file_sorted(
        {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()},
        tmp,
        metadata={"format": "pt"},
    )
    os.replace(tmp, path / SINGLE)
