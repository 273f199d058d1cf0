"""A run from layers of dotted keys: what `archlab train` does between its flags and the trainer,
for every caller (the command line, the lab's worker processes).

`check_request` refuses what the request alone decides (a config key that only a flag may set,
`--extend` without `--resume`, a file as the run folder, a missing corpus); `run_configs` resolves
the configs a run trains with: a new run's from its layers, a resumed run's from its latest
checkpoint with the layers on top, checked (train/resume.py), with the step it continues from. Both
come before any data is prepared, any model built or any folder written. Torch-free: the trainer is
imported where a run starts.
"""

from __future__ import annotations

from pathlib import Path

from archlab.data.corpus import check_source
from archlab.nn.config import ModelConfig
from archlab.train.config import TrainConfig, resolve_config
from archlab.train.lock import check_folder
from archlab.train.sections import DataConfig


def run_folder(layers: list[dict]) -> str | None:
    """The `out` of the last layer that names one (the layers override each other in order)."""
    return next((layer["out"] for layer in reversed(layers) if layer.get("out")), None)


def check_request(
    layers: list[dict], resume: bool = False, extend: bool = False, init_from: bool = False
) -> None:
    """Refuse, one line each, what the request decides before a config is resolved."""
    # a config key alone would record weights never loaded
    if any("init_from" in layer for layer in layers):
        raise ValueError(
            "init_from is set by --init-from PATH, which also loads the weights; not as a "
            "config key"
        )
    if extend and not resume:
        raise ValueError("--extend lengthens a resumed run: use it with --resume")
    out = run_folder(layers)
    if out is not None:  # a file as the run folder: one line, not mkdir's traceback
        check_folder(Path(str(out)))
    # a missing corpus in one line, before a model is loaded (a resumed run reads its own data)
    if not resume:
        source = (layer["data.source"] for layer in reversed(layers) if "data.source" in layer)
        check_source(str(next(source, DataConfig().source)))
    if init_from and resume:
        raise ValueError(
            "--init-from starts a new run and --resume continues one: give one of them"
        )


def run_configs(
    layers: list[dict], resume: bool = False, extend: bool = False
) -> tuple[TrainConfig, ModelConfig, int]:
    """The configs a run trains with and the step it starts from (0 for a new run)."""
    if not resume:
        return (*resolve_config(layers), 0)
    return resumed_config(layers, extend)


def resumed_config(layers: list[dict], extend: bool) -> tuple[TrainConfig, ModelConfig, int]:
    """The config a `--resume` continues with (the latest checkpoint's, the user's layers on top),
    checked, and the step it resumes from."""
    from archlab.checkpoint import latest_checkpoint, read_run_config
    from archlab.train.resume import check_resume, checkpoint_step, extend_schedule

    out = run_folder(layers)
    saved = read_run_config(out or resolve_config(layers)[0].out)
    train_cfg, model_cfg = resolve_config(layers, saved)
    step = checkpoint_step(latest_checkpoint(train_cfg.out))
    if extend:
        extend_schedule(train_cfg, saved["train"], step)
    check_resume(train_cfg, saved["train"], step)
    return train_cfg, model_cfg, step
