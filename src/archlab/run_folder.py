"""Where a run folder keeps its checkpoints, found and read without torch:

    RUN_DIR/checkpoints/step_0000200/  manifest.json, config.json, model.safetensors, ...

checkpoint/ writes, verifies and loads checkpoints and re-exports these names; this module only
lists them, resolves a run folder to its latest one and reads a checkpoint's config.json, so that
`archlab inspect --checkpoint` and the CLI's early refusals answer without importing torch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"
STEP_DIR = re.compile(r"^step_(\d{7,})$")


class CheckpointError(ValueError):
    """A checkpoint that is missing, incomplete or corrupt; the message names the
    folder and file."""


def checkpoint_name(step: int) -> str:
    return f"step_{step:07d}"


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Finished checkpoint folders of a run, oldest first (temp folders are not listed)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [
        (int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := STEP_DIR.match(p.name))
    ]
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder, or a run folder's latest checkpoint."""
    path = Path(path)
    if (path / MANIFEST).is_file() or STEP_DIR.match(path.name):
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise FileNotFoundError(
            f"{path} is neither a checkpoint nor a run folder with checkpoints "
            f"(no {path / CHECKPOINTS}/step_*)"
        )
    return latest


def read_checkpoint_config(path: str | Path, sections: tuple[str, ...] = ("model",)) -> dict:
    """The config.json of checkpoint `path` ({"model": ..., "train": ...}), unverified: cheap,
    for checks. `sections` must be there (a run's checkpoint has "train" too; a model saved
    alone may not)."""
    file = Path(path) / "config.json"
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(
            f"checkpoint {path} is corrupt: config.json cannot be read ({err})"
        ) from err
    for key in sections:
        if not isinstance(config, dict) or not isinstance(config.get(key), dict):
            raise CheckpointError(
                f"checkpoint {path} is corrupt: config.json has no {key!r} section"
            )
    return config
