"""A training run's state: what it holds, built from its two configs, saved and restored.

`RunState` builds the model (drawn once on the meta device, or `init_from`'s weights), the trainable
selection (LoRA, its base checked on resume), the fast paths and the parallel wrapping, the
optimizer, the lr schedule, the RNG streams and the batch generator and the counters; it writes the
run's config, saves a checkpoint of all of it and restores one, so a resumed run continues bit for
bit. `Trainer` (trainer.py) owns a RunState beside what only the loop needs (the data, the metrics,
the signals) and trains it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import yaml

from archlab.checkpoint import (
    Checkpoint,
    build_model,
    capture_rng_state,
    check_weights_fit,
    load_checkpoint,
    module_training_state,
    prune_checkpoints,
    read_manifest,
    restore_rng_state,
    save_checkpoint,
    save_initial_weights,
    tied_aliases,
)
from archlab.nn.config import ModelConfig
from archlab.nn.fast import install as fast_paths
from archlab.nn.model import TransformerLM
from archlab.storage import replace_text, writing
from archlab.train import distributed as dist_utils
from archlab.train.config import TrainConfig
from archlab.train.metrics import EmbeddingWatch
from archlab.train.optim import build_optimizer
from archlab.train.schedule import build_schedule
from archlab.train.trainable import (
    adapter_state,
    base_digest,
    check_merged,
    merged_state,
    select_trainable,
    unmerged_state,
)

logger = logging.getLogger(__name__)


@dataclass
class TrainStats:
    """Counters that travel with checkpoints (state.pt), so a resumed run keeps them."""

    tokens_seen: int = 0
    bad_steps: int = 0  # consecutive skipped steps
    skipped: int = 0  # skipped steps in the whole run
    best_val_loss: float | None = None
    best_step: int | None = None


class RunState:
    """What a run holds and its checkpoints keep, built from its two configs: the model (`raw`, and
    `model` as wrapped for the ranks), the optimizer and lr schedule, the batch generator, the
    counters, the outlier signature and the step. `restore` continues a checkpoint bit for bit,
    `save` writes one. `Trainer` (trainer.py) owns one and runs the loop over it."""

    def __init__(
        self,
        train: TrainConfig,
        model_config: ModelConfig,
        ctx: dist_utils.DistContext,
        tokenizer_file: Path,
        init_from: TransformerLM | None = None,
        resume_from: Path | None = None,
        checkpoint: Checkpoint | None = None,
    ) -> None:
        """A fresh run's state, or with `resume_from` (a checkpoint folder) the state saved there;
        `checkpoint` is that folder already read, when the caller read it. `init_from`: the weights
        a run starts from (an `--init-from` source, a resumed LoRA run's base)."""
        self.cfg, self.model_config, self.ctx = train, model_config, ctx
        self.run_dir = Path(train.out)
        self.tokenizer_file = tokenizer_file  # copied into every checkpoint
        self.raw = self._build_model(init_from, fresh=resume_from is None)
        # the frozen base LoRA trains on
        self.base_sha256 = base_digest(self.raw) if train.lora_rank else None
        if resume_from is not None and train.lora_rank:
            self._check_lora_base(resume_from, init_from is not None)
        self._select_trainable()
        # the CPU training fast paths, on the devices they were measured on (nn/fast/)
        fast_paths.install(self.raw)
        self.model = dist_utils.parallelize(self.raw, ctx, train.precision.compile)
        self.optimizer = build_optimizer(self.raw, train.optimizer)
        # the outlier signature
        self.embed_watch = EmbeddingWatch(model_config.vocab_size, ctx.device)
        self.lr_at = build_schedule(train.schedule, train.optimizer.lr)
        torch.manual_seed(train.seed + ctx.rank)  # per-rank dropout streams
        # the batch order: same on every rank
        self.generator = torch.Generator().manual_seed(train.seed)
        self.stats, self.step = TrainStats(), 0
        if resume_from is not None:
            self.restore(checkpoint if checkpoint is not None else load_checkpoint(resume_from))

    def _select_trainable(self) -> None:
        """Freeze what `train.trainable` leaves out, or add LoRA adapters; LoRA's A is drawn from
        the run's seed, not the global stream."""
        train = self.cfg
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(train.seed)
            note = select_trainable(
                self.raw, train.trainable, train.lora_rank, train.lora_alpha, train.lora_targets
            )
        if note and self.ctx.is_main:
            logger.info(note)

    def _build_model(self, init_from: TransformerLM | None, fresh: bool) -> TransformerLM:
        """The model on this rank's device: built on the meta device, then drawn once by
        `init_weights(seed)`, each parameter from its own generator (the same on every rank, so FSDP
        needs no broadcast, and an arm that reshapes one tensor keeps the others' init); or
        `init_from`'s weights. With `checkpoint.keep_initial` a fresh run saves its step-0 weights
        beside it (drift measures read them)."""
        # existing weights (archlab train --init-from), never randomly initialised first
        if init_from is not None:
            raw = build_model(self.model_config, init_from.state_dict(), self.ctx.device)
        else:
            with torch.device("meta"):
                raw = TransformerLM(self.model_config)
            raw.to_empty(device=self.ctx.device)
            raw.init_weights(seed=self.cfg.seed)
        if self.cfg.checkpoint.keep_initial and self.ctx.is_main and fresh:
            save_initial_weights(self.run_dir, raw.state_dict(), tied_aliases(raw))
        return raw

    def _check_lora_base(self, resume_from: Path, given: bool) -> None:
        """Refuse (one line) to resume a LoRA run on a base other than the one its adapters
        were trained on."""
        source = self.cfg.init_from
        if source and not given:
            raise ValueError(
                f"--resume of LoRA run {self.run_dir} needs its base {source}: pass it as "
                "init_from (archlab train --resume loads it from the run's init_from)"
            )
        old = read_manifest(resume_from).get("provenance", {}).get("base_sha256")
        if old is None:
            raise ValueError(
                f"--resume: checkpoint {resume_from} of LoRA run {self.run_dir} has no adapter "
                "tensors (written before LoRA runs resumed); continue with a new run: --init-from "
                f"{resume_from} --lora_rank {self.cfg.lora_rank}"
            )
        if self.base_sha256 == old:
            return
        if source:
            raise ValueError(
                f"--resume: the base weights from {source} have sha256 "
                f"{self.base_sha256[:16]}..., but LoRA run {self.run_dir} was trained on "
                f"{old[:16]}... (checkpoint {resume_from.name}): its adapters fit that base only; "
                f"restore {source} as it was, or start a new run with --init-from {resume_from}"
            )
        raise ValueError(self._seeded_base_refusal(resume_from, old))

    def _seeded_base_refusal(self, resume_from: Path, old: str) -> str:
        """Why a LoRA run's seeded base (no init_from: rebuilt from the seed on resume) is not the
        one its adapters trained on: another --seed, or an initialisation changed since."""
        try:
            saved = json.loads((resume_from / "config.json").read_text(encoding="utf-8"))
            seed = int(saved["train"]["seed"])
        except (OSError, ValueError, KeyError, TypeError):
            seed = self.cfg.seed
        trained = (
            f"LoRA run {self.run_dir} was trained on the seed-{seed} initialisation with sha256 "
            f"{old[:16]}... (checkpoint {resume_from.name})"
        )
        if seed != self.cfg.seed:
            return (
                f"--resume: {trained}, but --seed {self.cfg.seed} builds a base with sha256 "
                f"{self.base_sha256[:16]}...; its adapters fit that base only: resume without "
                f"--seed (the run's seed is {seed})"
            )
        return (
            f"--resume: {trained}, but this archlab rebuilds it as {self.base_sha256[:16]}... (the "
            "model's initialisation changed since); its adapters fit that base only: resume with "
            f"the archlab that started the run, or start a new run with --init-from {resume_from}"
        )

    def restore(self, ckpt: Checkpoint) -> None:
        """The state `ckpt` saved: weights, optimizer, every RNG stream, the batch generator, the
        counters and the step."""
        state = ckpt.state
        # a LoRA checkpoint's weights are merged: the base is already in place (digest checked), the
        # adapters come unmerged from state.pt
        weights = (
            unmerged_state(self.raw, state["lora"]["adapters"])
            if self.cfg.lora_rank
            else ckpt.model
        )
        check_weights_fit(self.raw, weights, ckpt.path)
        if self.cfg.lora_rank:
            check_merged(weights, ckpt.model, self.cfg.lora_rank, self.cfg.lora_alpha, ckpt.path)
        dist_utils.load_full_state(self.raw, self.optimizer, weights, ckpt.optimizer)
        rng = state["rng"]
        if len(rng) != self.ctx.world_size:
            logger.warning(
                "checkpoint saved by %d ranks, resuming on %d: dropout streams restart "
                "from rank 0's",
                len(rng),
                self.ctx.world_size,
            )
        restore_rng_state(rng[self.ctx.rank] if self.ctx.rank < len(rng) else rng[0])
        self.generator.set_state(state["generator"])
        self.stats = TrainStats(**state["stats"])
        if "embed_watch" in state:  # checkpoints written before the outlier signature have none
            self.embed_watch.load_state_dict(state["embed_watch"])
        for name, module_state in state.get("modules", {}).items():  # FAVOR's redraw count
            self.raw.get_submodule(name).load_training_state(module_state)
        self.step = int(state["step"])
        if self.ctx.is_main:
            logger.info("resumed %s at step %d", ckpt.path, self.step)

    def write_config(self) -> None:
        """The run's config.json and config.yaml (rank 0), each replaced whole: a full disk leaves
        a resumed run's files as they were."""
        if not self.ctx.is_main:
            return
        config = {"model": self.model_config.to_dict(), "train": self.cfg.to_dict()}
        for name, text in (
            ("config.json", json.dumps(config, indent=2)),
            ("config.yaml", yaml.safe_dump(config, sort_keys=False)),
        ):
            with writing(self.run_dir / name, "the run's config"):
                replace_text(self.run_dir / name, text)

    def save(self, val_loss: float | None = None) -> Path | None:
        """Checkpoint the current step (all ranks gather; rank 0 writes and prunes)."""
        model_state, optim_state = dist_utils.full_state_dicts(self.raw, self.optimizer)
        lora = None
        # the plain model's weights (loads without peft); the adapters unmerged, to resume
        if self.cfg.lora_rank:
            lora = {"adapters": adapter_state(model_state), "base_sha256": self.base_sha256}
            model_state = merged_state(model_state, self.cfg.lora_rank, self.cfg.lora_alpha)
        rng = dist_utils.all_gather_objects(capture_rng_state(), self.ctx)
        path = None
        if self.ctx.is_main:
            state = {
                "step": self.step,
                "rng": rng,
                "generator": self.generator.get_state(),
                "embed_watch": self.embed_watch.state_dict(),
                "stats": asdict(self.stats),
                "modules": module_training_state(self.raw),
                **({"lora": lora} if lora else {}),
            }
            config = {"model": self.model_config.to_dict(), "train": self.cfg.to_dict()}
            provenance = ({"init_from": self.cfg.init_from} if self.cfg.init_from else {}) | (
                {"base_sha256": self.base_sha256} if lora else {}
            )
            path = save_checkpoint(
                self.run_dir,
                self.step,
                model_state,
                optim_state,
                state,
                config,
                self.tokenizer_file,
                tied_aliases(self.raw),
                val_loss,
                provenance or None,
            )
            prune_checkpoints(self.run_dir, self.cfg.checkpoint.keep_last)
        dist_utils.barrier(self.ctx)
        return path
