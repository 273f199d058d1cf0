"""Trainer overhead: `archlab train` tokens/s against a bare PyTorch loop over the same
model and optimizer.

The bare loop is what a nanoGPT-style script does per step: draw a batch, forward, cross entropy,
backward, clip, AdamW step, zero grads. The trainer adds the lr schedule, the loss all-reduce and
finiteness checks, metrics rows, the progress bar and a final evaluation + checkpoint. Both runs use
the same config, seed, data and thread count, alternate (to share any background load) and report
their best repeat. Target: the trainer within 5% of the bare loop.

    python benchmarks/bench_train.py [--config configs/demo.yaml] [--steps 40] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import tempfile
import time
from pathlib import Path

import torch

from archlab import TransformerLM
from archlab.data.prepare import prepare_data
from archlab.data.tokens import TokenData
from archlab.nn.config import ModelConfig
from archlab.nn.fast import install as fused
from archlab.nn.functional import cross_entropy
from archlab.overrides import load_yaml
from archlab.train.config import TrainConfig, resolve_config
from archlab.train.launch import train
from archlab.train.optim import build_optimizer

REPO = Path(__file__).resolve().parents[1]


def bare_loop(train_cfg: TrainConfig, model_cfg: ModelConfig, data_dir: Path, steps: int) -> float:
    """Tokens/s of the plainest loop over the same model, optimizer, clipping and batches."""
    torch.manual_seed(train_cfg.seed)
    model = TransformerLM(model_cfg)
    fused.install(model)  # the same model as the trainer's
    o, d = train_cfg.optimizer, train_cfg.data
    optimizer = build_optimizer(model, o)
    data = TokenData(data_dir)
    generator = torch.Generator().manual_seed(train_cfg.seed)
    start = time.perf_counter()
    for _ in range(steps):
        x, y = data.get_batch("train", d.batch_size, d.block_size, generator, "cpu")
        loss = cross_entropy(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), o.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    loss.item()
    return steps * d.batch_size * d.block_size / (time.perf_counter() - start)


def trainer_run(layers: list[dict], data_dir: Path, steps: int, out: Path) -> float:
    """Tokens/s of `archlab train` (the library call behind the CLI), wall clock over
    the whole fit."""
    flags = {
        "data.source": str(data_dir),
        "out": str(out),
        "steps": str(steps),
        "checkpoint.save_every": "0",
        "logging.eval_batches": "1",
        "logging.samples": "0",
        "logging.tensorboard": "false",
        "logging.eval_every": "0",
        "schedule.warmup_steps": "1",
        # the bare loop's thread count: this measures the trainer's overhead, not
        # its thread choice
        "precision.threads": str(torch.get_num_threads()),
    }
    train_cfg, model_cfg = resolve_config([*layers, flags])
    start = time.perf_counter()
    # the progress bar still renders (and costs), unseen
    with contextlib.redirect_stderr(io.StringIO()):
        result = train(train_cfg, model_cfg)
    return (
        result.step
        * train_cfg.data.batch_size
        * train_cfg.data.block_size
        / (time.perf_counter() - start)
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=str(REPO / "configs" / "demo.yaml"))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    layers = [load_yaml(args.config)]
    train_cfg, model_cfg = resolve_config(layers)
    with tempfile.TemporaryDirectory() as tmp:
        d = train_cfg.data
        data_dir = prepare_data(
            d.source, Path(tmp) / "data", d.tokenizer, d.vocab_size, d.val_fraction
        )
        bare_loop(train_cfg, model_cfg, data_dir, 3)  # warm up allocator and kernels
        bare, ours = [], []
        for i in range(args.repeats):
            bare.append(bare_loop(train_cfg, model_cfg, data_dir, args.steps))
            ours.append(trainer_run(layers, data_dir, args.steps, Path(tmp) / f"run{i}"))
    b, t = max(bare), max(ours)
    print(
        f"model {sum(p.numel() for p in TransformerLM(model_cfg).parameters()):,} parameters, "
        f"batch {train_cfg.data.batch_size} x {train_cfg.data.block_size}, {args.steps} steps, "
        f"{torch.get_num_threads()} threads, best of {args.repeats}"
    )
    print(f"bare loop     : {b:10,.0f} tokens/s   (runs: {', '.join(f'{x:,.0f}' for x in bare)})")
    print(f"archlab train : {t:10,.0f} tokens/s   (runs: {', '.join(f'{x:,.0f}' for x in ours)})")
    print(f"trainer / bare: {t / b:.3f}  (target >= 0.95)")


if __name__ == "__main__":
    main()
