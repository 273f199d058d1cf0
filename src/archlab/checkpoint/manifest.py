"""A checkpoint's manifest.json: the size and sha256 of every file, written last; verification.

`verify_checkpoint` re-hashes every file, so truncation or bit rot is reported with the checkpoint
and file named.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from archlab.run_folder import MANIFEST, CheckpointError

FILES = ("model.safetensors", "optimizer.pt", "state.pt", "config.json", "tokenizer.json")
HASH_CHUNK = 1 << 20


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest_if_any(path: Path) -> dict | None:
    """The manifest of checkpoint `path`, or None when it is missing or unreadable."""
    try:
        return json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def read_manifest(path: str | Path) -> dict:
    """The manifest.json of checkpoint `path`, unverified: cheap, for checks (e.g. a LoRA
    run's base digest)."""
    manifest = read_manifest_if_any(Path(path))
    if manifest is None:
        raise CheckpointError(
            f"checkpoint {path} is incomplete or corrupt: {MANIFEST} is missing or unreadable"
        )
    return manifest


def _check_manifest(path: Path, manifest: object) -> None:
    """The manifest's shape: {"step": int, "files": {name: {"bytes": int, "sha256": str}}}."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("step"), int):
        raise CheckpointError(f"checkpoint {path} is corrupt: {MANIFEST} has no integer 'step'")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise CheckpointError(f"checkpoint {path} is corrupt: {MANIFEST} has no 'files' table")
    for name, entry in files.items():
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("bytes"), int)
            and isinstance(entry.get("sha256"), str)
        )
        if not ok:
            raise CheckpointError(
                f"checkpoint {path} is corrupt: {MANIFEST} entry {name!r} lacks 'bytes' or 'sha256'"
            )


def verify_checkpoint(path: str | Path) -> dict:
    """The manifest of checkpoint `path`, after checking every file's presence, size and sha256."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist")
    manifest = read_manifest_if_any(path)
    if manifest is None:
        raise CheckpointError(
            f"checkpoint {path} is incomplete or corrupt: {MANIFEST} is missing or unreadable"
        )
    _check_manifest(path, manifest)
    for name in FILES:
        file, want = path / name, manifest["files"].get(name)
        if want is None or not file.is_file():
            raise CheckpointError(f"checkpoint {path} is incomplete: {name} is missing")
        size = file.stat().st_size
        if size != want["bytes"]:
            raise CheckpointError(
                f"checkpoint {path} is corrupt: {name} has {size} bytes, "
                f"expected {want['bytes']} (truncated?)"
            )
        if sha256(file) != want["sha256"]:
            raise CheckpointError(
                f"checkpoint {path} is corrupt: {name} does not match its sha256 in {MANIFEST}"
            )
    return manifest
