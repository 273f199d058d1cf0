"""Helpers of the checkpoint tests: a tokenizer file, a tiny model, one saved checkpoint,
a manifest re-hashed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from archlab import TransformerLM, build_preset
from archlab.checkpoint import capture_rng_state, save_checkpoint, tied_aliases
from archlab.data.tokenizer import build_tokenizer


@pytest.fixture
def tokenizer_file(tmp_path: Path) -> Path:
    return build_tokenizer("byte", 256, None).save(tmp_path / "tok")


def tiny_model(preset: str = "gpt2") -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(build_preset(preset, "tiny", d_model=32, n_layers=1))


def save(
    run: Path, step: int, model: TransformerLM, tokenizer_file: Path, val_loss: float | None = None
) -> Path:
    opt = torch.optim.AdamW(model.parameters())
    config = {"model": model.config.to_dict(), "train": {"steps": 10}}
    state = {"step": step, "rng": [capture_rng_state()]}
    return save_checkpoint(
        run,
        step,
        model.state_dict(),
        opt.state_dict(),
        state,
        config,
        tokenizer_file,
        tied_aliases(model),
        val_loss,
    )


def rehash(path: Path) -> None:
    """Re-write the manifest's sizes and hashes, so only the change itself is left to be found."""
    manifest = json.loads((path / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        data = (path / name).read_bytes()
        entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (path / "manifest.json").write_text(json.dumps(manifest))
