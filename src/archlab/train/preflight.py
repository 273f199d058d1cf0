"""The checks a run passes before its first line is logged and before anything is allocated.

`check_settings` first, before the run folder is made or locked: what the settings decide alone
(steps past the schedule's end, a batch that does not split, an emulated bf16, a run the memory
estimate does not fit: it needs the vocabulary size, which the config holds, never the tokens). Then
`check_run` on the locked folder: a resume without checkpoints or a restart over checkpoints, a
resumed run's checkpoint and metrics.jsonl, the data (prepared here: a corpus too short for one
window is refused before anything is published or logged), the precision's advice and the memory
estimate's line. Each refusal is one line naming what is wrong.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from archlab.checkpoint import (
    Checkpoint,
    check_weights_fit,
    latest_checkpoint,
    load_checkpoint,
    read_checkpoint_config,
)
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM
from archlab.train import distributed as dist_utils
from archlab.train import hardware
from archlab.train.config import TrainConfig
from archlab.train.memory import check_fits, describe, memory_estimate
from archlab.train.metrics import METRICS, parse_metrics
from archlab.train.resume import check_resume, checkpoint_step
from archlab.train.run_data import RunData, open_run_data

logger = logging.getLogger(__name__)


def check_settings(
    train: TrainConfig, model: ModelConfig, ctx: dist_utils.DistContext, resume: bool
) -> None:
    """Refuse what the settings decide alone, before any folder is made, data prepared or model
    built: steps past the schedule's end (a resume checks its own against the saved schedule), a
    batch that does not split over the ranks, an emulated bf16, and a run whose memory estimate
    exceeds the device's (one line each; nothing is logged)."""
    check_steps_and_batch(train, ctx.world_size, resume)
    p = train.precision
    hardware.refuse_emulated_bf16(p.dtype, ctx.device, p.allow_slow_bf16)
    check_fits(memory_estimate(train, model, ctx), ctx.device)


def check_steps_and_batch(train: TrainConfig, world_size: int, resume: bool) -> None:
    """Refuse steps past the schedule's end (a resume checks its own against the saved schedule)
    and a batch that does not split over the ranks and accumulation steps."""
    if not resume and train.steps > train.schedule.end():
        raise ValueError(
            f"steps={train.steps} is not allowed: past the end of the lr schedule "
            f"(schedule.horizon={train.schedule.horizon})"
        )
    d = train.data
    if d.batch_size % (world_size * train.optimizer.grad_accum):
        raise ValueError(
            f"data.batch_size={d.batch_size} is not allowed: must divide evenly over "
            f"{world_size} ranks x {train.optimizer.grad_accum} accumulation steps"
        )


def check_setup(train: TrainConfig, world_size: int, resume: bool) -> Path | None:
    """Refuse a resume without checkpoints, a restart over checkpoints, a resume past or short of
    its schedule, and (again, for a `Trainer` built without `train()`) `check_steps_and_batch` (one
    line each, before anything is logged or allocated); the checkpoint a resume starts from."""
    run_dir = Path(train.out)
    latest = latest_checkpoint(run_dir)
    if resume and latest is None:
        raise FileNotFoundError(f"--resume: no checkpoint in {run_dir}/checkpoints to resume from")
    if not resume and latest is not None:
        raise ValueError(
            f"{run_dir} already holds checkpoints; pass --resume to continue it or "
            "choose another --out"
        )
    if resume:
        saved = read_checkpoint_config(latest, ("model", "train"))["train"]
        check_resume(train, saved, checkpoint_step(latest))
    check_steps_and_batch(train, world_size, resume)
    return latest if resume else None


def check_resumed_run(train: TrainConfig, model: ModelConfig, latest: Path) -> Checkpoint:
    """The checkpoint a resume starts from, read and checked (every file hashed, weights-only
    tensors, weights that fit the config) together with the run's metrics.jsonl: a damaged file is
    named in one line before the run logs anything."""
    checkpoint = load_checkpoint(latest)
    # a LoRA checkpoint's adapters are checked against the base once it is built
    if not train.lora_rank:
        with torch.device("meta"):
            check_weights_fit(TransformerLM(model), checkpoint.model, checkpoint.path)
    metrics = Path(train.out) / METRICS
    if metrics.is_file():
        parse_metrics(metrics)
    return checkpoint


def check_run(
    train: TrainConfig,
    model: ModelConfig,
    ctx: dist_utils.DistContext,
    resume: bool,
    step_flops: float,
) -> tuple[Checkpoint | None, RunData]:
    """The checks of `train()` on the locked run folder, in order, after `check_settings`; the
    checkpoint a resume starts from (read and checked) and the run's data."""
    p = train.precision
    latest = check_setup(train, ctx.world_size, resume)
    checkpoint = check_resumed_run(train, model, latest) if latest is not None else None
    # the data: prepared, then checked
    run_data = open_run_data(train, model, ctx, resume)
    hardware.check_precision(p.dtype, ctx.device, p.allow_slow_bf16, step_flops / ctx.world_size)
    if ctx.is_main:  # the estimate check_settings checked, now that every input passed
        logger.info("memory estimate per process: %s", describe(memory_estimate(train, model, ctx)))
    return checkpoint, run_data
