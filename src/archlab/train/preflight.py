"""The checks a run passes before its first line is logged and before anything is allocated.

The cheap refusals first (a resume without checkpoints, a restart over checkpoints, steps past the
schedule's end, a batch that does not split), then an emulated bf16, a resumed run's checkpoint and
metrics.jsonl, the data (prepared here), the precision's advice and the memory estimate: each is one
line naming what is wrong.
"""

from __future__ import annotations

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
from archlab.train.memory import check_memory
from archlab.train.metrics import METRICS, parse_metrics
from archlab.train.resume import check_resume, checkpoint_step
from archlab.train.run_data import RunData, open_run_data


def check_setup(train: TrainConfig, world_size: int, resume: bool) -> Path | None:
    """Refuse a resume without checkpoints, a restart over checkpoints, steps past the schedule's
    end and a batch that does not split (one line each, before anything is logged or allocated); the
    checkpoint a resume starts from."""
    run_dir = Path(train.out)
    latest = latest_checkpoint(run_dir)
    if resume and latest is None:
        raise FileNotFoundError(f"--resume: no checkpoint in {run_dir}/checkpoints to resume from")
    if not resume and latest is not None:
        raise ValueError(
            f"{run_dir} already holds checkpoints; pass --resume to continue it or choose another "
            "--out"
        )
    if resume:
        saved = read_checkpoint_config(latest, ("model", "train"))["train"]
        check_resume(train, saved, checkpoint_step(latest))
    elif train.steps > train.schedule.end():
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
    """Every check of `train()` before its first line, in order; the checkpoint a resume starts from
    (read and checked) and the run's data."""
    p = train.precision
    latest = check_setup(train, ctx.world_size, resume)  # the cheap refusals first
    hardware.refuse_emulated_bf16(p.dtype, ctx.device, p.allow_slow_bf16)
    checkpoint = check_resumed_run(train, model, latest) if latest is not None else None
    # the data: prepared, then checked
    run_data = open_run_data(train, model, ctx, resume)
    hardware.check_precision(p.dtype, ctx.device, p.allow_slow_bf16, step_flops / ctx.world_size)
    check_memory(train, model, ctx)  # before any model or batch is allocated
    return checkpoint, run_data
