"""`archlab train`: its flags, one call (`train.launch.train_run`: the run's configs resolved,
defaults < preset < --config YAML < flags, the run begun fresh, resumed or from weights, and
trained) and its printing.

The common case stays short: `archlab train --preset llama --size tiny --data FILE --steps 200
--out RUN`. Every other knob is a `--section.field value` flag generated from `TrainConfig`
(`--optimizer.lr 3e-4`, `--model.n_layers 4`); the few named flags below are aliases for the
most used keys.
"""

from __future__ import annotations

import argparse
import os
import sys

from archlab.overrides import load_yaml, parse_flags
from archlab.train.config_doc import alias_help, help_text

# the flags and --help come from the config dataclasses alone (torch-free); the trainer, checkpoints
# and interop import torch, so they are imported where a run starts (train/launch.py: how a run
# begins, fresh, resumed or from weights), not when the parser is built

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
        help="start from the weights of a Hugging Face folder or an archlab checkpoint (recorded "
        "as init_from in the run's config; validated at step 0); --model.FIELD changes switches "
        "where a principled mapping exists (fewer KV heads, RoPE scaling, max_seq_len, QK-norm, "
        "softcaps, dropout: docs/interop.md)",
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
    # torch: imported once a run starts
    from archlab.train.launch import NothingToTrain, train_run
    from archlab.train.trainer import TrainingDiverged

    try:
        result = train_run(layers, args.resume, args.extend, args.init_from)
    except NothingToTrain as done:  # a finished run resumes to itself (the README's order)
        print(done)
        return 0
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
