"""Verifying checkpoints (checkpoint/manifest.py): damaged files, a damaged manifest and a missing
folder are named in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archlab.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_model,
    read_run_config,
    verify_checkpoint,
)
from tests.checkpoint.conftest import save, tiny_model


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncate", r"model.safetensors has \d+ bytes, expected \d+ \(truncated\?\)"),
        ("delete", "incomplete: optimizer.pt is missing"),
        ("flip", "state.pt does not match its sha256"),
        ("manifest", "manifest.json is missing or unreadable"),
    ],
)
def test_corrupt_checkpoints_are_named(
    tmp_path: Path, tokenizer_file: Path, damage: str, message: str
) -> None:
    path = save(tmp_path / "run", 4, tiny_model(), tokenizer_file)
    if damage == "truncate":
        data = (path / "model.safetensors").read_bytes()
        (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif damage == "delete":
        (path / "optimizer.pt").unlink()
    elif damage == "flip":
        data = bytearray((path / "state.pt").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (path / "state.pt").write_bytes(bytes(data))
    else:
        (path / "manifest.json").unlink()
    for load in (verify_checkpoint, load_checkpoint, load_model):
        with pytest.raises(CheckpointError, match=f"checkpoint {path}.*{message}"):
            load(path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.pop("files"), "manifest.json has no 'files' table"),
        (lambda m: m.pop("step"), "manifest.json has no integer 'step'"),
        (
            lambda m: m["files"]["state.pt"].pop("sha256"),
            "manifest.json entry 'state.pt' lacks 'bytes' or 'sha256'",
        ),
    ],
    ids=["no-files", "no-step", "no-sha256"],
)
def test_a_manifest_missing_keys_is_named(
    edit, message: str, tmp_path: Path, tokenizer_file: Path
) -> None:
    path = save(tmp_path / "run", 1, tiny_model(), tokenizer_file)
    manifest = json.loads((path / "manifest.json").read_text())
    edit(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=f"checkpoint {path} is corrupt: {message}"):
        load_checkpoint(path)


def test_missing_checkpoint_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        verify_checkpoint(tmp_path / "checkpoints" / "step_0000009")
    with pytest.raises(FileNotFoundError, match="no checkpoint in"):
        read_run_config(tmp_path)
