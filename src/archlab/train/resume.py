"""What `--resume` may change in a run, and how `--extend` lengthens its learning-rate schedule.

A resumed run continues exactly: same model, same corpus and tokenizer, same lr curve.
So resuming refuses
- another corpus or tokenizer (`data.source`, `data.tokenizer`, `data.vocab_size`,
  `data.val_fraction`, `data.dir`, `data.bpe_dropout`): the weights were trained on the run's token
  ids, and its prepared data is never replaced;
- another schedule (`schedule.*`): the lr curve is part of the run;
- another optimizer, betas, eps, weight decay, embedding remedy or Tiger option (`OPTIMIZER_KEYS`):
  the saved state and param groups belong to it, and loading them would put the run's values back
  without a word;
- another LoRA rank, alpha or target list (`LORA_KEYS`), or another `trainable` list: the adapters
  and the optimizer state exist for those parameters only (the LoRA base itself is checked by its
  sha256 in the trainer);
- a `--steps` past the schedule's end, unless `--extend` stretches the schedule to it
  (train/schedule.py says how the lr continues); a smaller `--steps` stops early on the same curve;
- a `--steps` below the step the run has reached (resuming a finished run to its own end
  is a no-op).
Each refusal is one line naming the run's value and the new one. The model config is checked
in train/config.py (`resolve_model`).
"""

from __future__ import annotations

import os
from pathlib import Path

from archlab.train.config import TrainConfig

DATA_KEYS = ("source", "tokenizer", "vocab_size", "val_fraction", "dir", "bpe_dropout")
# what the optimizer's saved param groups hold: `load_state_dict` puts the checkpoint's values back
# (only lr is set again each step), so a new value would be written to config.json and silently not
# used
OPTIMIZER_KEYS = (
    "name",
    "betas",
    "eps",
    "weight_decay",
    "decay_embeddings",
    "lazy_embeddings",
    "embedding_optimizer",
    "embedding_lr_ratio",
    "embedding_weight_decay",
    "tiger_rms_lr",
    "tiger_nan_shrink",
)
# the adapters' shapes and scale: part of the run
LORA_KEYS = ("lora_rank", "lora_alpha", "lora_targets")
SCHEDULE_KEYS = ("name", "warmup_steps", "min_lr_ratio", "decay_fraction", "decay_shape", "horizon")


def saved_horizon(saved: dict) -> int:
    """The schedule horizon of a saved train config (runs saved before `horizon`
    existed planned `steps`)."""
    return int(saved["schedule"].get("horizon") or saved["steps"])


def extend_schedule(train: TrainConfig, saved: dict, step: int) -> None:
    """`--extend`: stretch the run's schedule from `step` to end at `train.steps` (recorded
    in the config)."""
    end = train.schedule.end()
    if train.steps <= end:
        raise ValueError(
            f"--extend: --steps {train.steps} does not lengthen the run, whose lr schedule already "
            f"ends at step {end}; give a larger --steps"
        )
    train.schedule.horizon = saved_horizon(saved)
    train.schedule.extensions = (*train.schedule.extensions, step, train.steps)


def _same_path_or_value(new: object, old: object) -> bool:
    if new == old:
        return True
    if isinstance(new, str) and isinstance(old, str) and new and old:
        return os.path.realpath(new) == os.path.realpath(old)
    return False


def check_lora(train: TrainConfig, saved: dict) -> None:
    """Refuse another LoRA rank, alpha or target list (or adding / dropping LoRA) on resume."""
    for key in LORA_KEYS:
        new = getattr(train, key)
        old = saved.get(key, new)
        old = tuple(old) if isinstance(new, tuple) else old
        if new != old:
            new, old = (",".join(new), ",".join(old)) if isinstance(new, tuple) else (new, old)
            raise ValueError(
                f"--resume: {key} {new!r} differs from the run's {old!r}; the adapters and their "
                "optimizer state belong to it: resume without changing it, or start a new run "
                "with --init-from RUN_DIR"
            )


def check_resume(train: TrainConfig, saved: dict, step: int) -> None:
    """Refuse a resume from checkpoint `step` of a run whose saved train config is `saved`,
    as listed above."""
    _check_data(train, saved)
    check_lora(train, saved)
    _check_optimizer(train, saved)
    _check_schedule(train, saved, step)


def _check_data(train: TrainConfig, saved: dict) -> None:
    """The run's corpus and tokenizer, and the parameters it trains."""
    old_data = saved.get("data", {})
    for key in DATA_KEYS:
        new = getattr(train.data, key)
        old = old_data.get(key, new)
        if not _same_path_or_value(new, old):
            raise ValueError(
                f"--resume: data.{key} {new!r} differs from the run's {old!r}; a run trains on one "
                "corpus and tokenizer: resume without changing data.*, or start a new --out"
            )
    old_trainable = tuple(saved.get("trainable", ()))
    # the optimizer state exists for the trained parameters only
    if train.trainable != old_trainable:
        raise ValueError(
            f"--resume: trainable {','.join(train.trainable) or '(all)'!r} differs from the run's "
            f"{','.join(old_trainable) or '(all)'!r}; resume with the same parameters or start "
            "a new --out"
        )


def _check_optimizer(train: TrainConfig, saved: dict) -> None:
    """What the optimizer's saved state and param groups hold (OPTIMIZER_KEYS)."""
    for key in OPTIMIZER_KEYS:
        new = getattr(train.optimizer, key)
        old = saved.get("optimizer", {}).get(key, new)
        # betas come back as a list
        old = tuple(old) if isinstance(new, tuple) and isinstance(old, list) else old
        if new != old:
            raise ValueError(
                f"--resume: optimizer.{key} {new!r} differs from the run's {old!r}; the "
                "optimizer's state belongs to its setup: resume without changing it, or start "
                "a new --out"
            )


def _check_schedule(train: TrainConfig, saved: dict, step: int) -> None:
    """The run's lr schedule, its extensions (made by --extend only) and a --steps it covers."""
    # an older run: its horizon was its steps, not the new --steps
    if "horizon" not in saved["schedule"]:
        train.schedule.horizon = saved_horizon(saved)
    for key in SCHEDULE_KEYS:
        new = getattr(train.schedule, key)
        old = saved_horizon(saved) if key == "horizon" else saved["schedule"].get(key, new)
        if new != old:
            raise ValueError(
                f"--resume: schedule.{key} {new!r} differs from the run's {old!r}; the lr schedule "
                "is part of the run (lengthen it with --steps N --extend)"
            )
    ext, old_ext = train.schedule.extensions, tuple(saved["schedule"].get("extensions", ()))
    if ext[: len(old_ext)] != old_ext or any(at != step for at in ext[len(old_ext) :: 2]):
        raise ValueError(
            f"--resume: schedule.extensions {list(ext)} do not continue the run's {list(old_ext)} "
            "(set them with --extend, not by hand)"
        )
    end = train.schedule.end()
    if train.steps < step:
        raise ValueError(
            f"--resume: the run is already at step {step}, so --steps {train.steps} leaves nothing "
            f"to do; to train longer: --resume --steps N --extend (N > {max(end, step)})"
        )
    if train.steps > end:
        raise ValueError(
            f"--resume: --steps {train.steps} is past the end of the run's lr schedule (step "
            f"{end}); add --extend to stretch the schedule to {train.steps} steps, or give "
            f"--steps <= {end}"
        )


def checkpoint_step(path: Path) -> int:
    """The step of a checkpoint folder `step_0000123`."""
    return int(path.name.removeprefix("step_"))
