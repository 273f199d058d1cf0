"""Open a model folder, Hugging Face or archlab, in one place: `open_model(path) -> (model,
tokenizer)` (litgpt's `LLM.load` is the model), and before any weights, `find_model(path)`: which
kind of folder it is, its config and its tokenizer file.

A Hugging Face folder is a `config.json` with a `model_type` (read through interop/hf_config.py and
hf.py); anything else is an archlab checkpoint, or a run folder whose latest checkpoint is meant
(run_folder.py, checkpoint/). Every caller that takes either (`generate`, `inspect`, `eval`,
`convert`, `train --init-from`) goes through here, so the refusals are the same one line naming the
flag and the path: a path that does not exist, a folder that is neither, a Hugging Face folder
without the tokenizer.json a model needs. Torch-free until `ModelFolder.load`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archlab.interop.hf_config import is_hf_folder, read_hf_config
from archlab.nn.config import ModelConfig
from archlab.run_folder import latest_checkpoint, read_checkpoint_config, resolve_checkpoint

if TYPE_CHECKING:
    import torch

    from archlab.data.tokenizer import Tokenizer
    from archlab.nn.model import TransformerLM

HF, ARCHLAB = "hf", "archlab"
TOKENIZER = "tokenizer.json"


def model_kind(path: str | Path) -> str | None:
    """HF for a Hugging Face folder, ARCHLAB for a checkpoint or a run folder with checkpoints, None
    for anything else (reads config.json and folder names only)."""
    folder = Path(path)
    if is_hf_folder(folder):
        return HF
    if (folder / "manifest.json").is_file() or latest_checkpoint(folder) is not None:
        return ARCHLAB
    return None


@dataclass(frozen=True)
class ModelFolder:
    """A model on disk, found but not loaded."""

    path: Path  # as the user gave it
    hf: bool  # a Hugging Face folder (else an archlab checkpoint)
    # the archlab checkpoint, a run folder resolved to its latest (None for a Hugging Face folder)
    checkpoint: Path | None
    flag: str = "--checkpoint"  # how the user gave the path, for refusals

    @property
    def tokenizer_file(self) -> Path:
        return (self.path if self.hf else self.checkpoint) / TOKENIZER

    def saved(self) -> dict[str, Any]:
        """An archlab checkpoint's config.json ({"model": ..., "train": ...}); {} for a
        Hugging Face folder."""
        return {} if self.hf else read_checkpoint_config(self.checkpoint)

    def config(self) -> ModelConfig:
        """The model's config, from config.json alone (no weights, no torch)."""
        if self.hf:
            return read_hf_config(self.path)
        return ModelConfig.from_dict(self.saved()["model"])

    def check_tokenizer(self) -> None:
        """A Hugging Face folder must carry its tokenizer.json (an archlab
        checkpoint always does)."""
        if self.hf and not self.tokenizer_file.is_file():
            raise FileNotFoundError(
                f"{self.flag} {self.path}: this Hugging Face folder has no tokenizer.json (the "
                "model's tokenizer, which encodes its prompts and data)"
            )

    def load(self, dtype: torch.dtype | None = None) -> tuple[TransformerLM, Tokenizer]:
        """The model (a Hugging Face model built on the meta device, no random init; `dtype`: its
        weights cast, None keeps them as stored) and its tokenizer."""
        self.check_tokenizer()
        if self.hf:
            from archlab.interop.hf import from_hf, load_hf_tokenizer

            return from_hf(self.path, dtype=dtype), load_hf_tokenizer(self.path)
        from archlab.checkpoint import load_model

        model, tokenizer = load_model(self.checkpoint)
        return (model if dtype is None else model.to(dtype)), tokenizer


def find_model(path: str | Path, flag: str = "--checkpoint") -> ModelFolder:
    """The model folder at `path`, refused in one line naming `flag` when it does not exist or
    holds no model."""
    folder = Path(path)
    if not folder.exists():
        raise FileNotFoundError(f"{flag} {path}: no such file or folder")
    if model_kind(folder) == HF:
        return ModelFolder(folder, True, None, flag)
    return ModelFolder(folder, False, resolve_checkpoint(folder), flag)


def open_model(
    path: str | Path, flag: str = "--checkpoint", dtype: torch.dtype | None = None
) -> tuple[TransformerLM, Tokenizer]:
    """A model and its tokenizer from a Hugging Face folder or an archlab checkpoint
    / run folder."""
    return find_model(path, flag).load(dtype)
