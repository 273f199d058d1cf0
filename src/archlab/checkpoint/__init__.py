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

The package by concept: save.py (atomic writes, pruning, the step-0 weights), manifest.py
(the files' sizes and sha256, verification), load.py (a checkpoint, a run's config, a trained
model and its tokenizer), weights.py (model.safetensors with its tied aliases; a model built
around weights on the meta device), safetensors_file.py (the file's header written in one
order: same state, same bytes) and rng.py (every random stream a step draws from). Import from
here: `from archlab.checkpoint import load_model`. Where checkpoints live is run_folder.py
(torch-free), re-exported here.
"""

from archlab.checkpoint.load import (
    Checkpoint,
    checkpoint_tokenizer,
    load_checkpoint,
    load_initial_weights,
    load_model,
    read_run_config,
)
from archlab.checkpoint.manifest import read_manifest, verify_checkpoint
from archlab.checkpoint.rng import capture_rng_state, restore_rng_state
from archlab.checkpoint.save import prune_checkpoints, save_checkpoint, save_initial_weights
from archlab.checkpoint.weights import (
    build_model,
    check_weights_fit,
    load_weights,
    module_training_state,
    tied_aliases,
)
from archlab.run_folder import (  # where checkpoints live, found without torch
    CHECKPOINTS,
    MANIFEST,
    CheckpointError,
    checkpoint_name,
    latest_checkpoint,
    list_checkpoints,
    read_checkpoint_config,
    resolve_checkpoint,
)

__all__ = [
    "CHECKPOINTS",
    "MANIFEST",
    "Checkpoint",
    "CheckpointError",
    "build_model",
    "capture_rng_state",
    "check_weights_fit",
    "checkpoint_name",
    "checkpoint_tokenizer",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "load_initial_weights",
    "load_model",
    "load_weights",
    "module_training_state",
    "prune_checkpoints",
    "read_checkpoint_config",
    "read_manifest",
    "read_run_config",
    "resolve_checkpoint",
    "restore_rng_state",
    "save_checkpoint",
    "save_initial_weights",
    "tied_aliases",
    "verify_checkpoint",
]
