"""Writing checkpoints: one folder per step, built in a hidden temp folder beside its final name,
every file fsynced, the manifest last, then renamed; pruned to the last N and the best. A crash
leaves either the old set of checkpoints or the new one, never a half-written `step_*` folder;
leftover temp folders are ignored and removed by the next save. Also a run's step-0 weights
(RUN_DIR/initial, `checkpoint.keep_initial`), written the same way and never a checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from archlab.checkpoint.manifest import FILES, read_manifest_if_any, sha256
from archlab.checkpoint.weights import save_weights
from archlab.run_folder import (
    CHECKPOINTS,
    MANIFEST,
    checkpoint_name,
    latest_checkpoint,
    list_checkpoints,
)
from archlab.storage import StorageError, describe, fix, storage_fault, writing

# RUN_DIR/initial/model.safetensors: step-0 weights (train key checkpoint.keep_initial)
INITIAL = "initial"
TMP_PREFIX = ".tmp-"
FILE_MODE = 0o644  # checkpoint files: readable like the run folder, writable by the owner


def _fsync_file(path: Path) -> None:
    with path.open("rb+") as handle:
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_files(
    tmp: Path,
    model_state: dict[str, torch.Tensor],
    aliases: dict[str, str],
    optimizer_state: dict,
    state: dict,
    config: dict,
    tokenizer_file: Path,
) -> None:
    save_weights(tmp / "model.safetensors", model_state, aliases)
    # through a Python file object: a full disk then raises with its errno (given a path, torch
    # writes in C++ and reports only "[enforce fail at inline_container.cc] ... unexpected pos")
    for name, obj in (("optimizer.pt", optimizer_state), ("state.pt", state)):
        with (tmp / name).open("wb") as handle:
            torch.save(obj, handle)
    (tmp / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    shutil.copyfile(tokenizer_file, tmp / "tokenizer.json")


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model_state: dict[str, torch.Tensor],
    optimizer_state: dict,
    state: dict,
    config: dict,
    tokenizer_file: str | Path,
    aliases: dict[str, str] | None = None,
    val_loss: float | None = None,
    provenance: dict[str, str] | None = None,
) -> Path:
    """Write checkpoint `step` atomically and return its folder (an existing one for `step`
    is kept). `provenance` (e.g. {"init_from": folder}) goes into the manifest: where the
    weights came from."""
    root = Path(run_dir) / CHECKPOINTS
    final = root / checkpoint_name(step)
    if final.exists():  # same step, same state (e.g. a signal right after a periodic save)
        return final
    try:
        root.mkdir(parents=True, exist_ok=True)
        # left by a crash mid-save; never a finished checkpoint
        for stale in root.glob(f"{TMP_PREFIX}*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{final.name}-", dir=root))
        try:
            # a checkpoint is as readable as its run folder (mkdtemp makes it private)
            os.chmod(tmp, 0o755)
            _write_all(
                tmp,
                final,
                root,
                step,
                val_loss,
                model_state,
                aliases or {},
                optimizer_state,
                state,
                config,
                Path(tokenizer_file),
                provenance,
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # only still there if something failed
    except Exception as err:
        code = storage_fault(err)
        if code is None:
            raise
        # the previous checkpoints are untouched: nothing is renamed until every file is written
        raise StorageError(
            code,
            f"{describe(code)} at {root}: checkpoint step {step} was not written; the previous "
            f"one ({latest_checkpoint(run_dir) or 'none'}) is still valid; {fix(code)}, then "
            "continue with --resume",
        ) from err
    return final


def _write_all(
    tmp: Path,
    final: Path,
    root: Path,
    step: int,
    val_loss: float | None,
    model_state: dict[str, torch.Tensor],
    aliases: dict[str, str],
    optimizer_state: dict,
    state: dict,
    config: dict,
    tokenizer_file: Path,
    provenance: dict[str, str] | None = None,
) -> None:
    """Every file into `tmp`, fsynced, the manifest last, then the rename that publishes
    it as `final`."""
    _write_files(tmp, model_state, aliases, optimizer_state, state, config, tokenizer_file)
    files = {}
    for name in FILES:
        _fsync_file(tmp / name)
        files[name] = {"bytes": (tmp / name).stat().st_size, "sha256": sha256(tmp / name)}
    manifest = {
        "step": step,
        "val_loss": val_loss,
        "files": files,
        **({"provenance": provenance} if provenance else {}),
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    # one mode for every file, whatever wrote it (torch, safetensors, shutil)
    for name in (*FILES, MANIFEST):
        os.chmod(tmp / name, FILE_MODE)
    _fsync_file(tmp / MANIFEST)
    _fsync_dir(tmp)
    os.rename(tmp, final)
    _fsync_dir(root)


def save_initial_weights(
    run_dir: str | Path, model_state: dict[str, torch.Tensor], aliases: dict[str, str] | None = None
) -> Path:
    """Write a run's step-0 weights to RUN_DIR/initial/model.safetensors atomically (a temp
    folder, fsynced, renamed); an existing one is kept. Not a checkpoint: never listed, pruned
    or resumed from."""
    final = Path(run_dir) / INITIAL
    if final.exists():
        return final
    with writing(final, "the step-0 weights"):
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{INITIAL}-", dir=final.parent))
        try:
            save_weights(tmp / "model.safetensors", model_state, aliases or {})
            os.chmod(tmp / "model.safetensors", FILE_MODE)
            _fsync_file(tmp / "model.safetensors")
            _fsync_dir(tmp)
            os.chmod(tmp, 0o755)
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # only still there if something failed
    return final


def prune_checkpoints(run_dir: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` checkpoints and the one with the lowest val loss."""
    found = list_checkpoints(run_dir)
    keep = set(found[-keep_last:])
    scored = [
        (m["val_loss"], p)
        for p in found
        if (m := read_manifest_if_any(p)) and m.get("val_loss") is not None
    ]
    if scored:
        keep.add(min(scored, key=lambda item: item[0])[1])
    removed = [p for p in found if p not in keep]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed
