"""Checkpoints: one folder per step, written atomically, verified on load, pruned to the last N.

    RUN_DIR/checkpoints/step_0000100/
        model.safetensors  weights (a tied head is stored once; metadata names its aliases)
        optimizer.pt       optimizer state by parameter name (independent of DDP/FSDP wrapping)
        state.pt           step, RNG states (torch, cuda, python, numpy) per rank, batches, stats
        config.json        {"model": ModelConfig, "train": TrainConfig}, resolved
        tokenizer.json     the tokenizer the token ids belong to
        manifest.json      step, val loss, size and sha256 of every file above; written last
    RUN_DIR/initial/model.safetensors  the step-0 weights (`checkpoint.keep_initial`; drift)

A checkpoint is built in a hidden temp folder beside its final name, every file fsynced, then
renamed: a crash leaves either the old set of checkpoints or the new one, never a half-written
`step_*` folder. Leftover temp folders are ignored and removed by the next save. `verify_checkpoint`
re-hashes every file, so truncation or bit rot is reported with the checkpoint and file named.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import pickle
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from archlab.data.tokenizer import Tokenizer
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM
from archlab.run_folder import (  # re-exported: where checkpoints live, found without torch
    CHECKPOINTS,
    MANIFEST,
    CheckpointError,
    checkpoint_name,
    latest_checkpoint,
    list_checkpoints,
    read_checkpoint_config,
    resolve_checkpoint,
)

logger = logging.getLogger(__name__)

# RUN_DIR/initial/model.safetensors: step-0 weights (train key checkpoint.keep_initial)
INITIAL = "initial"
FILES = ("model.safetensors", "optimizer.pt", "state.pt", "config.json", "tokenizer.json")
TMP_PREFIX = ".tmp-"
HASH_CHUNK = 1 << 20
FILE_MODE = 0o644  # checkpoint files: readable like the run folder, writable by the owner


@dataclass
class Checkpoint:
    """A loaded checkpoint: full (unsharded) state dicts on CPU and the saved configs."""

    path: Path
    step: int
    model: dict[str, torch.Tensor]
    optimizer: dict
    state: dict
    config: dict


def tied_aliases(module: nn.Module) -> dict[str, str]:
    """{alias: canonical name} for parameters registered under several names (a tied lm_head)."""
    first: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        if id(param) in first:
            aliases[name] = first[id(param)]
        else:
            first[id(param)] = name
    return aliases


# ------------------------------------------------------------------------------------------------
# save
def _fsync_file(path: Path) -> None:
    with path.open("rb+") as handle:
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _save_weights(
    file: Path, model_state: dict[str, torch.Tensor], aliases: dict[str, str]
) -> None:
    weights = {
        k: v.detach().to("cpu").contiguous() for k, v in model_state.items() if k not in aliases
    }
    save_file(weights, file, metadata={"tied": json.dumps(aliases), "format": "pt"})


def _write_files(
    tmp: Path,
    model_state: dict[str, torch.Tensor],
    aliases: dict[str, str],
    optimizer_state: dict,
    state: dict,
    config: dict,
    tokenizer_file: Path,
) -> None:
    _save_weights(tmp / "model.safetensors", model_state, aliases)
    torch.save(optimizer_state, tmp / "optimizer.pt")
    torch.save(state, tmp / "state.pt")
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
    """Write checkpoint `step` atomically and return its folder (an existing one for `step` is
    kept). `provenance` (e.g. {"init_from": folder}) goes into the manifest: where the weights came
    from."""
    root = Path(run_dir) / CHECKPOINTS
    final = root / checkpoint_name(step)
    if final.exists():  # same step, same state (e.g. a signal right after a periodic save)
        return final
    root.mkdir(parents=True, exist_ok=True)
    # left by a crash mid-save; never a finished checkpoint
    for stale in root.glob(f"{TMP_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{final.name}-", dir=root))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; a checkpoint is as readable as its run folder
    try:
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
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):  # the previous checkpoints are untouched
            raise CheckpointError(
                f"no space left on device at {root}: checkpoint step {step} was not written; "
                f"the previous one ({latest_checkpoint(run_dir) or 'none'}) is still valid"
            ) from err
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # only still there if something failed
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
    """Every file into `tmp`, fsynced, the manifest last, then the rename that publishes it as
    `final`."""
    _write_files(tmp, model_state, aliases, optimizer_state, state, config, tokenizer_file)
    files = {}
    for name in FILES:
        _fsync_file(tmp / name)
        files[name] = {"bytes": (tmp / name).stat().st_size, "sha256": _sha256(tmp / name)}
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
    """Write a run's step-0 weights to RUN_DIR/initial/model.safetensors atomically (a temp folder,
    fsynced, renamed); an existing one is kept. Not a checkpoint: never listed, pruned or resumed
    from."""
    final = Path(run_dir) / INITIAL
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{INITIAL}-", dir=final.parent))
    try:
        _save_weights(tmp / "model.safetensors", model_state, aliases or {})
        os.chmod(tmp / "model.safetensors", FILE_MODE)
        _fsync_file(tmp / "model.safetensors")
        _fsync_dir(tmp)
        os.chmod(tmp, 0o755)
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # only still there if something failed
    return final


def load_initial_weights(run_dir: str | Path) -> dict[str, torch.Tensor] | None:
    """The step-0 weights `save_initial_weights` kept (tied aliases filled in), or None when the run
    has none."""
    path = Path(run_dir) / INITIAL
    return load_weights(path) if (path / "model.safetensors").is_file() else None


def prune_checkpoints(run_dir: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` checkpoints and the one with the lowest val loss."""
    found = list_checkpoints(run_dir)
    keep = set(found[-keep_last:])
    scored = [
        (m["val_loss"], p)
        for p in found
        if (m := _read_manifest(p)) and m.get("val_loss") is not None
    ]
    if scored:
        keep.add(min(scored, key=lambda item: item[0])[1])
    removed = [p for p in found if p not in keep]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


# ------------------------------------------------------------------------------------------------
# load
def _read_manifest(path: Path) -> dict | None:
    try:
        return json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def read_manifest(path: str | Path) -> dict:
    """The manifest.json of checkpoint `path`, unverified: cheap, for checks (e.g. a LoRA run's base
    digest)."""
    manifest = _read_manifest(Path(path))
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
    manifest = _read_manifest(path)
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
                f"checkpoint {path} is corrupt: {name} has {size} bytes, expected {want['bytes']} "
                "(truncated?)"
            )
        if _sha256(file) != want["sha256"]:
            raise CheckpointError(
                f"checkpoint {path} is corrupt: {name} does not match its sha256 in {MANIFEST}"
            )
    return manifest


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    """The full state dict from model.safetensors, with tied aliases filled back in."""
    file = path / "model.safetensors"
    try:
        weights = load_file(file)
        with safe_open(file, framework="pt") as handle:
            aliases = json.loads((handle.metadata() or {}).get("tied", "{}"))
    except (SafetensorError, OSError, json.JSONDecodeError) as err:
        raise CheckpointError(
            f"checkpoint {path} is corrupt: model.safetensors cannot be read ({err})"
        ) from err
    for alias, canonical in aliases.items():
        weights[alias] = weights[canonical]
    return weights


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
    """A torch.save'd file of tensors and plain values; anything that would need unpickling code is
    refused."""
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
    """The trained model (eval mode) and its tokenizer from a checkpoint, or from a run's latest
    one."""
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


def module_training_state(model: nn.Module) -> dict[str, dict]:
    """Per module, the training state it keeps outside its tensors (`training_state()`: FAVOR+'s
    count of training forwards, which decides its redraws), for state.pt; restored through
    `load_training_state`."""
    return {
        name: m.training_state()
        for name, m in model.named_modules()
        if hasattr(m, "training_state")
    }


def build_model(
    config: ModelConfig,
    weights: dict[str, torch.Tensor],
    device: str | torch.device = "cpu",
    path: Path | None = None,
    training_state: dict[str, dict] | None = None,
) -> TransformerLM:
    """The model of `config` holding `weights`, without a random init that the weights would
    overwrite.

    Built on the meta device, the weights become its parameters (cast to the dtype the model is
    built in, float32 unless changed, as load_state_dict would); the computed buffers (RoPE tables,
    ALiBi slopes) are then made on `device`. For a SmolLM2-135M-shaped checkpoint the random init
    was over half of the load time (docs/inference.md). `path` names the checkpoint in a misfit's
    message. `training_state` (`module_training_state` of the model the weights come from, or a
    checkpoint's state.pt "modules") puts back what lives outside the tensors: a FAVOR+ layer
    trained with `favor_redraw` then uses the projection its training reached, not its seed's first
    draw.
    """
    with torch.device("meta"):
        model = TransformerLM(config)
    check_weights_fit(model, weights, path or Path("(weights)"))
    device = torch.device(device)
    expected = model.state_dict()
    state = {k: weights[k].to(device=device, dtype=expected[k].dtype) for k in expected}
    model.load_state_dict(state, assign=True)
    if config.tie_embeddings:  # assign gave the head its own Parameter object: tie it again
        model.lm_head.weight = model.embed_tokens.weight
    model.materialise_buffers(device)
    for name, state in (training_state or {}).items():
        module = model.get_submodule(name)
        if hasattr(module, "load_training_state"):
            module.load_training_state(state)
    return model


def check_weights_fit(model: nn.Module, weights: dict[str, torch.Tensor], path: Path) -> None:
    """Every tensor the model expects, with its shape, and nothing else; one line naming the first
    misfit."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in weights]
    unexpected = [k for k in weights if k not in expected]
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {path}: model.safetensors does not fit config.json: missing "
            f"{missing[:3]}, "
            f"unexpected {unexpected[:3]}"
        )
    for name, tensor in expected.items():
        if tuple(weights[name].shape) != tuple(tensor.shape):
            raise CheckpointError(
                f"checkpoint {path}: {name} is {list(weights[name].shape)} in model.safetensors "
                f"but config.json builds {list(tensor.shape)}"
            )


# ------------------------------------------------------------------------------------------ RNG
# state
def capture_rng_state() -> dict:
    """Every global random stream a step can draw from: torch (CPU, CUDA), python `random`, numpy.

    Stored as tensors and plain values so `torch.load(weights_only=True)` can read it back.
    """
    name, key, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "python": random.getstate(),
        "numpy": {
            "name": name,
            "key": torch.from_numpy(key.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
    }


def restore_rng_state(state: dict) -> None:
    """Put back what `capture_rng_state` saved (CUDA states only where this machine has the
    devices)."""
    torch.set_rng_state(state["torch"])
    if (
        state["cuda"]
        and torch.cuda.is_available()
        and len(state["cuda"]) == torch.cuda.device_count()
    ):
        torch.cuda.set_rng_state_all(state["cuda"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state(
        (n["name"], n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"])
    )
