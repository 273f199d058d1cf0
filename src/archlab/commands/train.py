"""`archlab train`: resolve the run config (defaults < preset < --config YAML < flags) and train.

The common case stays short: `archlab train --preset llama --size tiny --data FILE --steps 200 --out
RUN`. Every other knob is a `--section.field value` flag generated from `TrainConfig`
(`--optimizer.lr 3e-4`, `--model.n_layers 4`); the few named flags below are aliases for the most
used keys.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from archlab.nn.config import ModelConfig
from archlab.overrides import load_yaml, parse_flags
from archlab.train.config import TrainConfig, resolve_config
from archlab.train.config_doc import alias_help, help_text
from archlab.train.launch import check_request, run_configs

if TYPE_CHECKING:
    from archlab.nn.model import TransformerLM

# the flags and --help come from the config dataclasses alone (torch-free); the trainer, checkpoints
# and interop import torch, so they are imported where a run starts, not when the parser is built

# named flag (argparse dest) -> the config key it sets
ALIASES = {
    "preset": "preset",
    "size": "size",
    "data": "data.source",
    "steps": "steps",
    "out": "out",
    "save_every": "checkpoint.save_every",
    "distributed": "distributed",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a model (single process, or under torchrun with --distributed ddp|fsdp)",
        description=__doc__,
        epilog=help_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # so --data.batch_size is never mistaken for --data
    )
    parser.add_argument(
        "--config", help="YAML run config, e.g. configs/tiny-llama.yaml (flags override it)"
    )
    for dest, key in ALIASES.items():  # generated from the config's fields: no help written by hand
        parser.add_argument(f"--{dest.replace('_', '-')}", dest=dest, help=alias_help(key))
    parser.add_argument(
        "--resume", action="store_true", help="continue --out from its latest checkpoint"
    )
    parser.add_argument(
        "--extend",
        action="store_true",
        help="with --resume: stretch the lr schedule to a larger --steps (docs/training.md)",
    )
    parser.add_argument(
        "--init-from",
        help="start from the weights of a Hugging Face folder or an archlab "
        "checkpoint (recorded as init_from in the run's config; validated at step 0); "
        "--model.FIELD "
        "changes switches where a principled mapping exists (fewer KV heads, RoPE scaling, "
        "max_seq_len, QK-norm, softcaps, dropout: docs/interop.md)",
    )
    parser.set_defaults(func=run, accepts_overrides=True)


def run(args: argparse.Namespace) -> int:
    flags = parse_flags(list(args.overrides or []))
    flags.update(
        {
            key: getattr(args, dest)
            for dest, key in ALIASES.items()
            if getattr(args, dest) is not None
        }
    )
    layers = ([load_yaml(args.config)] if args.config else []) + [flags]
    check_request(layers, args.resume, args.extend, init_from=bool(args.init_from))
    init = None
    if args.init_from:
        train_cfg, model_cfg, init = init_from(args.init_from, layers)
    else:  # every refusal comes before any data, model or folder is touched
        train_cfg, model_cfg, step = run_configs(layers, args.resume, args.extend)
        # nothing left: a finished run resumes to itself (the README's order)
        if args.resume and step == train_cfg.steps:
            print(
                f"{train_cfg.out} is already at step {step} of {train_cfg.steps}: nothing to "
                "resume; to train "
                f"longer: --resume --steps N --extend (N > {step})"
            )
            return 0
        if args.resume:
            init = lora_base(train_cfg, model_cfg)
    from archlab.train.trainer import TrainingDiverged, train  # torch: imported once a run starts

    try:
        result = train(train_cfg, model_cfg, resume=args.resume, init_from=init)
    except TrainingDiverged as err:
        print(f"archlab train: {err}", file=sys.stderr)
        return 1
    if int(os.environ.get("RANK", "0")) == 0:
        val = f"{result.val_loss:.4f}" if result.val_loss is not None else "-"
        loss = f"{result.train_loss:.4f}" if result.train_loss is not None else "-"
        stopped = f" (stopped by {result.interrupted})" if result.interrupted else ""
        print(
            f"step {result.step}{stopped}: train loss {loss}, val loss {val}, "
            f"{result.tokens_per_s:,.0f} tokens/s; checkpoint {result.checkpoint}"
        )
    return 0


def init_from(path: str, layers: list[dict]) -> tuple[TrainConfig, ModelConfig, TransformerLM]:
    """The run config with the source model's config under the user's layers (so `--model.FIELD`
    changes it and data.tokenizer defaults to the source's tokenizer.json), and the source weights
    adapted to it."""
    from archlab.interop.surgery import adapt, load_source, source_config

    def resolved(config: ModelConfig, tokenizer_file: Path) -> tuple[TrainConfig, ModelConfig]:
        base = {f"model.{k}": v for k, v in config.to_dict().items()} | {
            "data.tokenizer": str(tokenizer_file),
            "init_from": str(path),
        }
        return resolve_config([base, *layers])

    # what the settings decide alone, from the source's config.json, before its weights are loaded
    check_settings_early(*resolved(*source_config(path)))
    source, tokenizer_file = load_source(path)
    train_cfg, model_cfg = resolved(source.config, tokenizer_file)
    return train_cfg, model_cfg, adapt(source, model_cfg)


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
    """The frozen base a resumed LoRA run from `init_from` continues on, rebuilt from that source as
    the run began (the trainer then checks its sha256 against the checkpoint's); None for every
    other run."""
    source = train_cfg.init_from
    if not (train_cfg.lora_rank and source):
        return None
    from archlab.interop.surgery import adapt, load_source

    check_settings_early(train_cfg, model_cfg, resume=True)

    if not os.path.exists(source):
        raise FileNotFoundError(
            f"--resume: LoRA run {train_cfg.out} was started from {source}, which is missing; "
            "its checkpoints hold the adapters, not the base: restore the source at that path, "
            f"or start a new run with --init-from {train_cfg.out}"
        )
    try:
        return adapt(load_source(source)[0], model_cfg)
    except (OSError, ValueError) as err:
        raise ValueError(
            f"--resume: the base of LoRA run {train_cfg.out}, {source}, cannot be loaded: {err}"
        ) from err
