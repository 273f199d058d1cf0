"""Reading checkpoints: every file verified, then read onto the CPU (weights-only: nothing in a
checkpoint runs code); a resumed run's config; the trained model and its tokenizer (`load_model`);
a run's step-0 weights.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import torch

from archlab.checkpoint.manifest import verify_checkpoint
from archlab.checkpoint.save import INITIAL
from archlab.checkpoint.weights import build_model, load_weights
from archlab.data.tokenizer import Tokenizer
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM
from archlab.run_folder import (
    CHECKPOINTS,
    CheckpointError,
    latest_checkpoint,
    read_checkpoint_config,
    resolve_checkpoint,
)


@dataclass
class Checkpoint:
    """A loaded checkpoint: full (unsharded) state dicts on CPU and the saved configs."""

    path: Path
    step: int
    model: dict[str, torch.Tensor]
    optimizer: dict
    state: dict
    config: dict


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Verify and read every file of checkpoint `path` onto the CPU."""
    path = Path(path)
    manifest = verify_checkpoint(path)
    optimizer, state = _load_tensors(path / "optimizer.pt"), _load_tensors(path / "state.pt")
    return Checkpoint(
        path,
        int(manifest["step"]),
        load_weights(path),
        optimizer,
        state,
        read_checkpoint_config(path),
    )


def _load_tensors(file: Path) -> dict:
    """A torch.save'd file of tensors and plain values; anything that would need unpickling
    code is refused."""
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    # its message advises weights_only=False: exactly what we refuse
    except pickle.UnpicklingError as err:
        raise CheckpointError(
            f"checkpoint {file.parent}: {file.name} holds Python objects, not only tensors; "
            "archlab loads weights-only files and never runs code from a checkpoint"
        ) from err
    except Exception as err:  # torch.load raises several unrelated types on a damaged zip
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"checkpoint {file.parent} is corrupt: {file.name} cannot be read ({first})"
        ) from err


def read_run_config(run_dir: str | Path) -> dict:
    """The config.json of a run's latest checkpoint (verified), which a resumed run starts from."""
    latest = latest_checkpoint(run_dir)
    if latest is None:
        raise FileNotFoundError(
            f"--resume: no checkpoint in {Path(run_dir) / CHECKPOINTS} to resume from"
        )
    verify_checkpoint(latest)
    return read_checkpoint_config(latest, ("model", "train"))


def load_model(
    checkpoint_dir: str | Path, device: str | torch.device = "cpu"
) -> tuple[TransformerLM, Tokenizer]:
    """The trained model (eval mode) and its tokenizer from a checkpoint, or from a
    run's latest one."""
    path = resolve_checkpoint(checkpoint_dir)
    verify_checkpoint(path)
    config = read_checkpoint_config(path)
    modules = (
        _load_tensors(path / "state.pt").get("modules") if (path / "state.pt").is_file() else None
    )
    model = build_model(
        ModelConfig.from_dict(config["model"]), load_weights(path), device, path, modules
    )
    return model.eval(), checkpoint_tokenizer(path, config)


def checkpoint_tokenizer(path: Path, config: dict) -> Tokenizer:
    """A checkpoint's tokenizer.json, with the EOS and stop ids its config.json records (`convert
    --from-hf` keeps the Hugging Face folder's, which tokenizer.json alone does not hold), so both
    load paths stop alike."""
    tokenizer = Tokenizer.load(path)
    saved = config.get("tokenizer") if isinstance(config.get("tokenizer"), dict) else {}
    if isinstance(saved.get("eos_id"), int):
        tokenizer.eos_id = saved["eos_id"]
    stops = saved.get("stop_ids")
    if isinstance(stops, list):
        tokenizer.extra_stop_ids = frozenset(
            i for i in stops if isinstance(i, int) and 0 <= i < tokenizer.vocab_size
        )
    return tokenizer


def load_initial_weights(run_dir: str | Path) -> dict[str, torch.Tensor] | None:
    """The step-0 weights `save_initial_weights` kept (tied aliases filled in), or None when the
    run has none."""
    path = Path(run_dir) / INITIAL
    return load_weights(path) if (path / "model.safetensors").is_file() else None
