"""How a run begins, for every caller (the command line, the lab's workers, Python), as one call:
`train_run(layers, resume=..., extend=..., init_from=...)`, the layers being dotted keys (a YAML
file's, then the flags'). There are three ways:

- a fresh run: its configs resolved from the layers (defaults < preset < YAML < flags);
- a resumed run (`resume`, with `extend` to lengthen its schedule): the latest checkpoint's config
  with the layers on top, checked (train/resume.py), continuing from the checkpoint's step; a run
  already at its end trains nothing (`NothingToTrain`); a LoRA run's frozen base is rebuilt from its
  `init_from` source as the run began (the state checks its sha256 against the checkpoint's);
- a run from existing weights (`init_from`: a Hugging Face folder or an archlab checkpoint):
  the source's config under the layers, `data.tokenizer` the source's, its weights adapted to
  the result (interop/surgery.py).

`plan_run` resolves and checks all of it (`check_request` first: what the request alone decides)
before any data is prepared, any model of the run built or any folder written, and returns a
`RunStart`; `train` trains one (the process group, the preflight checks, the CPU threads, the
`Trainer`). Torch-free at import: `archlab train --help` reads this module; torch comes where
a run starts.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from archlab.data.corpus import check_source
from archlab.nn.config import ModelConfig
from archlab.train.config import TrainConfig, resolve_config
from archlab.train.lock import check_folder
from archlab.train.sections import DataConfig

if TYPE_CHECKING:
    from archlab.nn.model import TransformerLM
    from archlab.train.distributed import DistContext
    from archlab.train.trainer import TrainResult

logger = logging.getLogger(__name__)


class NothingToTrain(Exception):  # noqa: N818 - a run already done, not an error
    """A resumed run already at its last step: nothing trains; the message says how to go on."""


@dataclass
class RunStart:
    """What a run begins with: its two configs, the step it starts at, and the weights it starts
    from (an `init_from` source adapted to `model`, or a resumed LoRA run's base; None: drawn from
    the seed, or the checkpoint's)."""

    train: TrainConfig
    model: ModelConfig
    step: int = 0  # 0 for a new run, the checkpoint's step for a resumed one
    resume: bool = False
    weights: TransformerLM | None = None

    @property
    def finished(self) -> bool:
        """A resumed run already at its last step."""
        return self.resume and self.step >= self.train.steps


def train_run(
    layers: list[dict],
    resume: bool = False,
    extend: bool = False,
    init_from: str | None = None,
) -> TrainResult:
    """The run these layers ask for, begun one of the three ways (module doc) and trained; a
    resumed run already at its end raises `NothingToTrain`. What `archlab train` runs."""
    start = plan_run(layers, resume, extend, init_from)
    if start.finished:
        s = start
        raise NothingToTrain(
            f"{s.train.out} is already at step {s.step} of {s.train.steps}: nothing to resume; to "
            f"train longer: --resume --steps N --extend (N > {s.step})"
        )
    return train(start.train, start.model, resume=start.resume, init_from=start.weights)


def plan_run(
    layers: list[dict],
    resume: bool = False,
    extend: bool = False,
    init_from: str | None = None,
) -> RunStart:
    """How the run begins (module doc), every refusal one line before any data, model or
    folder is touched."""
    check_request(layers, resume, extend, init_from=bool(init_from))
    if init_from:
        return from_weights(init_from, layers)
    train_cfg, model_cfg, step = run_configs(layers, resume, extend)
    start = RunStart(train_cfg, model_cfg, step, resume)
    if resume and not start.finished:
        start.weights = lora_base(train_cfg, model_cfg)
    return start


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
            "init_from is set by --init-from PATH, which also loads the weights; not as "
            "a config key"
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


def from_weights(path: str, layers: list[dict]) -> RunStart:
    """A new run from the weights at `path`: the source's config under the user's layers (so
    `--model.FIELD` changes it and data.tokenizer defaults to the source's tokenizer.json), and the
    source's weights adapted to it. What the settings decide alone is refused from the source's
    config.json, before its weights are read."""
    from archlab.interop.model_folder import find_model
    from archlab.interop.surgery import adapt

    source = find_model(path, "--init-from")
    source.check_tokenizer()
    base = {f"model.{k}": v for k, v in source.config().to_dict().items()} | {
        "data.tokenizer": str(source.tokenizer_file),
        "init_from": str(path),
    }
    train_cfg, model_cfg = resolve_config([base, *layers])
    check_settings_early(train_cfg, model_cfg)
    model, _ = source.load()
    return RunStart(train_cfg, model_cfg, 0, False, adapt(model, model_cfg))


def check_settings_early(
    train_cfg: TrainConfig, model_cfg: ModelConfig, resume: bool = False
) -> None:
    """`train/preflight.py`'s `check_settings`, for the runs that load a model before `train()`
    (an `--init-from` source, a resumed LoRA run's base): the memory estimate and the other
    refusals the settings decide come before those weights are read."""
    from archlab.train.distributed import planned_context
    from archlab.train.preflight import check_settings

    ctx = planned_context(train_cfg.distributed, train_cfg.precision.device)
    check_settings(train_cfg, model_cfg, ctx, resume)


def lora_base(train_cfg: TrainConfig, model_cfg: ModelConfig) -> TransformerLM | None:
    """The frozen base a resumed LoRA run from `init_from` continues on, rebuilt from that source
    as the run began (the state then checks its sha256 against the checkpoint's); None for
    every other run."""
    source = train_cfg.init_from
    if not (train_cfg.lora_rank and source):
        return None
    from archlab.interop.model_folder import find_model
    from archlab.interop.surgery import adapt

    check_settings_early(train_cfg, model_cfg, resume=True)
    if not os.path.exists(source):
        raise FileNotFoundError(
            f"--resume: LoRA run {train_cfg.out} was started from {source}, which is missing; "
            "its checkpoints hold the adapters, not the base: restore the source at that path, "
            f"or start a new run with --init-from {train_cfg.out}"
        )
    try:
        return adapt(find_model(source, "--init-from").load()[0], model_cfg)
    except (OSError, ValueError) as err:
        raise ValueError(
            f"--resume: the base of LoRA run {train_cfg.out}, {source}, cannot be loaded: {err}"
        ) from err


def train(
    train_config: TrainConfig,
    model_config: ModelConfig,
    resume: bool = False,
    init_from: TransformerLM | None = None,
) -> TrainResult:
    """Join the process group (if any), check every input, pick CPU threads, train (from
    `init_from`'s weights if given), and leave it again. Inputs are checked before the first
    line is logged (preflight.py): first what the settings decide alone (the schedule's end, the
    batch's split, an emulated bf16, the memory estimate), then the run folder and its checkpoints,
    a resumed run's checkpoint, metrics file and weights' shapes, the data (prepared here), and
    the precision's advice."""
    import torch

    from archlab.train import distributed as dist_utils
    from archlab.train.preflight import check_settings

    ctx = dist_utils.setup(train_config.distributed, train_config.precision.device)
    threads = torch.get_num_threads()
    try:
        # what the settings decide alone, before the run folder is made (preflight.py)
        check_settings(train_config, model_config, ctx, resume)
        return _train_checked(train_config, model_config, ctx, resume, init_from)
    finally:
        torch.set_num_threads(threads)
        dist_utils.teardown(ctx)


def _train_checked(
    train_config: TrainConfig,
    model_config: ModelConfig,
    ctx: DistContext,
    resume: bool,
    init_from: TransformerLM | None,
) -> TrainResult:
    """`train` once the settings passed: the run folder locked (before any line is logged, so a
    refused second writer prints one line only), the run's inputs checked, the CPU threads picked,
    the trainer run."""
    import torch

    from archlab.costs import flops_per_token
    from archlab.train import hardware, provenance
    from archlab.train.lock import RunLock
    from archlab.train.preflight import check_run
    from archlab.train.trainer import Trainer

    lock = RunLock(train_config.out).acquire() if ctx.is_main else None
    try:
        d = train_config.data
        step_flops = (
            flops_per_token(model_config, d.block_size)["training"] * d.batch_size * d.block_size
        )
        try:
            checkpoint, run_data = check_run(train_config, model_config, ctx, resume, step_flops)
        except BaseException:
            if lock is not None:
                lock.discard()  # refused: no run folder is left behind
            raise
        if ctx.device.type == "cpu":
            threads = train_config.precision.threads
            n, why = hardware.pick_threads(step_flops / ctx.world_size, threads)
            torch.set_num_threads(n)
            if ctx.is_main:
                logger.info("CPU threads: %d (%s; --precision.threads N to change)", n, why)
        trainer = Trainer(
            train_config, model_config, ctx, resume, init_from, lock, run_data, checkpoint
        )
        if ctx.is_main:  # what trains this session, before its first step (train/provenance.py)
            step = checkpoint.step if checkpoint is not None else 0
            provenance.start_session(
                train_config.out,
                provenance.session(
                    train_config, run_data.folder, ctx.device, ctx.world_size, step, resume
                ),
            )
        return trainer.fit()
    finally:
        if lock is not None:
            lock.release()
