"""The training loop: batches -> loss -> clipped gradients -> optimizer step, evals, checkpoints.

One step: the lr from the schedule; `grad_accum` micro-batches (autocast forward, backward, gradient
sync only on the last); loss and a stop flag all-reduced in one call; global-norm clipping; and,
only when loss and gradient norm are finite, the optimizer update. A non-finite step is skipped and
logged; `checkpoint.max_bad_steps` in a row stop the run (`TrainingDiverged`) naming the last good
checkpoint. SIGINT / SIGTERM finish the current step, save a checkpoint and return. Resuming
restores weights, optimizer, every RNG stream and the batch generator, so the run continues bit for
bit.
"""

from __future__ import annotations

import json
import logging
import math
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import yaml
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from archlab.checkpoint import (
    Checkpoint,
    build_model,
    capture_rng_state,
    check_weights_fit,
    latest_checkpoint,
    load_checkpoint,
    module_training_state,
    prune_checkpoints,
    read_checkpoint_config,
    read_manifest,
    restore_rng_state,
    save_checkpoint,
    save_initial_weights,
    tied_aliases,
)
from archlab.costs import flops_per_token
from archlab.infer.generate import generate_text
from archlab.infer.sampling import SamplingConfig
from archlab.nn.config import ModelConfig
from archlab.nn.fast import install as fast_paths
from archlab.nn.functional import cross_entropy
from archlab.nn.model import TransformerLM
from archlab.train import distributed as dist_utils
from archlab.train import hardware
from archlab.train.config import TrainConfig
from archlab.train.lock import RunLock
from archlab.train.memory import check_memory
from archlab.train.metrics import (
    METRICS,
    EmbeddingWatch,
    MetricsLogger,
    grouped_norms,
    parse_metrics,
)
from archlab.train.optim import build_optimizer, clip_gradients, set_lr
from archlab.train.resume import check_resume, checkpoint_step
from archlab.train.run_data import RunData, open_run_data
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

# without a terminal, progress is about this many lines per run, not a redrawn bar
PROGRESS_LINES = 20


class TrainingDiverged(RuntimeError):
    """Too many consecutive non-finite steps; the message names the last good checkpoint."""


@dataclass
class TrainStats:
    """Counters that travel with checkpoints (state.pt), so a resumed run keeps them."""

    tokens_seen: int = 0
    bad_steps: int = 0  # consecutive skipped steps
    skipped: int = 0  # skipped steps in the whole run
    best_val_loss: float | None = None
    best_step: int | None = None


@dataclass
class TrainResult:
    """What `Trainer.fit` returns: where the run ended and how it went."""

    step: int
    train_loss: float | None
    val_loss: float | None
    checkpoint: Path | None
    interrupted: str | None  # the signal name when SIGINT/SIGTERM stopped the run
    tokens_per_s: float


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


class Trainer:
    """Builds everything a run needs from its two configs; `fit()` trains up to `train.steps`."""

    def __init__(
        self,
        train: TrainConfig,
        model_config: ModelConfig,
        ctx: dist_utils.DistContext,
        resume: bool = False,
        init_from: TransformerLM | None = None,
        lock: RunLock | None = None,
        run_data: RunData | None = None,
        checkpoint: Checkpoint | None = None,
    ) -> None:
        """`run_data` and `checkpoint` (the one a resume starts from), when `train()` opened them
        already; else they are opened here."""
        self.cfg, self.model_config, self.ctx = train, model_config, ctx
        self.run_dir = Path(train.out)
        # one writer per folder: refused here, before anything is written, while another process
        # holds it
        self.lock = (lock or RunLock(self.run_dir)).acquire() if ctx.is_main else None
        try:
            self._setup(resume, init_from, run_data, checkpoint)
        # a failed start leaves no run folder behind (one that held anything stays)
        except BaseException:
            if self.lock is not None:
                self.lock.discard()
            raise

    def _setup(
        self,
        resume: bool,
        init_from: TransformerLM | None,
        run_data: RunData | None,
        checkpoint: Checkpoint | None,
    ) -> None:
        train, ctx = self.cfg, self.ctx
        resume_from = check_setup(train, ctx.world_size, resume)
        run_data = run_data or open_run_data(train, self.model_config, ctx, resume)
        self.data, self.tokenizer = run_data.tokens, run_data.tokenizer
        self.tokenizer_file = run_data.folder / "tokenizer.json"
        self.sample_prompt, self.sample_tokens = run_data.sample_prompt, run_data.sample_tokens
        self.raw = self._build_model(init_from, fresh=resume_from is None)
        # the frozen base LoRA trains on
        self.base_sha256 = base_digest(self.raw) if train.lora_rank else None
        if resume_from is not None and train.lora_rank:
            self._check_lora_base(resume_from, init_from is not None)
        # LoRA's A is drawn from the run's seed, not the global stream
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(train.seed)
            note = select_trainable(
                self.raw, train.trainable, train.lora_rank, train.lora_alpha, train.lora_targets
            )
        if note and ctx.is_main:
            logger.info(note)
        # the CPU training fast paths, on the devices they were measured on (nn/fast/)
        fast_paths.install(self.raw)
        self.model = dist_utils.parallelize(self.raw, ctx, train.precision.compile)
        o = train.optimizer
        self.optimizer = build_optimizer(
            self.raw,
            o.name,
            o.lr,
            o.betas,
            o.weight_decay,
            o.eps,
            o.decay_embeddings,
            lazy_embeddings=o.lazy_embeddings,
            embedding_optimizer=o.embedding_optimizer,
            embedding_lr_ratio=o.embedding_lr_ratio,
            embedding_weight_decay=o.embedding_weight_decay,
            rms_lr=o.tiger_rms_lr,
            nan_shrink=o.tiger_nan_shrink,
        )
        # the outlier signature
        self.embed_watch = EmbeddingWatch(self.model_config.vocab_size, ctx.device)
        s = train.schedule
        self.lr_at = build_schedule(
            s.name,
            o.lr,
            s.horizon,
            s.warmup_steps,
            o.lr * s.min_lr_ratio,
            s.decay_fraction,
            s.decay_shape,
            s.extension_pairs(),
        )
        torch.manual_seed(train.seed + ctx.rank)  # per-rank dropout streams
        # the batch order: same on every rank
        self.generator = torch.Generator().manual_seed(train.seed)
        self.stats, self.step = TrainStats(), 0
        self.micro_batch = train.data.batch_size // (ctx.world_size * o.grad_accum)
        if resume_from is not None:
            self._restore(checkpoint if checkpoint is not None else load_checkpoint(resume_from))
        self.metrics = MetricsLogger(
            self.run_dir, self.step, train.logging.tensorboard, ctx.is_main
        )
        if resume_from is not None:  # `archlab plot run` marks where the run was resumed
            self.metrics.log(
                self.step,
                "resume",
                {"checkpoint": resume_from.name, "steps": train.steps, "schedule_end": s.end()},
            )
        self._signal: str | None = None  # set by the handler, on this rank only
        self.stopping = False  # set when any rank got a signal (decided on the all-reduced vote)
        # whether the last forward returned a kernel loss (set by _micro_steps)
        self.has_aux = False
        self._progress_lines = False  # fit() decides: lines when stderr is not a terminal
        self._write_config()

    # ------------------------------------------------------------------------------------------
    # setup
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
        """Refuse (one line) to resume a LoRA run on a base other than the one its adapters were
        trained on."""
        source = self.cfg.init_from
        if source and not given:
            raise ValueError(
                f"--resume of LoRA run {self.run_dir} needs its base {source}: pass it as "
                "init_from "
                "(archlab train --resume loads it from the run's init_from)"
            )
        old = read_manifest(resume_from).get("provenance", {}).get("base_sha256")
        if old is None:
            raise ValueError(
                f"--resume: checkpoint {resume_from} of LoRA run {self.run_dir} has no adapter "
                "tensors "
                "(written before LoRA runs resumed); continue with a new run: --init-from "
                f"{resume_from} "
                f"--lora_rank {self.cfg.lora_rank}"
            )
        if self.base_sha256 != old:
            base = source or f"the seed-{self.cfg.seed} initialisation"
            raise ValueError(
                f"--resume: the base weights from {base} have sha256 {self.base_sha256[:16]}..., "
                "but LoRA "
                f"run {self.run_dir} was trained on {old[:16]}... (checkpoint {resume_from.name}): "
                "its "
                f"adapters fit that base only; restore {base} as it was, or start a new run with "
                f"--init-from {resume_from}"
            )

    def _restore(self, ckpt: Checkpoint) -> None:
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
                "checkpoint saved by %d ranks, resuming on %d: dropout streams restart from rank "
                "0's",
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

    def _write_config(self) -> None:
        if not self.ctx.is_main:
            return
        config = {"model": self.model_config.to_dict(), "train": self.cfg.to_dict()}
        (self.run_dir / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        (self.run_dir / "config.yaml").write_text(
            yaml.safe_dump(config, sort_keys=False), encoding="utf-8"
        )
        c, d = self.cfg, self.cfg.data
        # a fine-tune names its source
        label = f"from {c.init_from}" if c.init_from else f"{c.preset}/{c.size}"
        logger.info(
            "%s, %s parameters; %d steps of %d x %d tokens; %s train tokens of %s; config: %s",
            label,
            f"{self.raw.num_parameters():,}",
            c.steps,
            d.batch_size,
            d.block_size,
            f"{self.data.num_tokens('train'):,}",
            d.source,
            self.run_dir / "config.yaml",
        )

    # -------------------------------------------------------------------------------------------
    # step
    def _autocast(self) -> torch.autocast:
        return torch.autocast(
            self.ctx.device.type, dtype=torch.bfloat16, enabled=self.cfg.precision.dtype == "bf16"
        )

    def _micro_steps(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Forward and backward over grad_accum micro-batches; returns summed CE, z-loss and the
        attention kernels' losses (detached)."""
        accum, block = self.cfg.optimizer.grad_accum, self.cfg.data.block_size
        ce_sum = torch.zeros((), device=self.ctx.device)
        z_sum = torch.zeros((), device=self.ctx.device)
        aux_sum = torch.zeros((), device=self.ctx.device)
        for i in range(accum):
            x, y = self.data.get_batch(
                "train", self.micro_batch, block, self.generator, self.ctx.device
            )
            self.embed_watch.see(x)
            with dist_utils.gradient_sync(self.model, enabled=i == accum - 1):
                # the model computes head and loss together (chunked: no (B, T, V) logits)
                with self._autocast():
                    out = self.model(x, targets=y, z_loss_coef=self.cfg.z_loss_coef)
                (out.loss / accum).backward()
            ce_sum += out.ce.detach()
            z_sum += out.z.detach()
            # the model's kernels add a loss of their own (VQ's commitment)
            self.has_aux = out.aux is not None
            if self.has_aux:
                aux_sum += out.aux.detach()
        return ce_sum, z_sum, aux_sum

    def train_step(self) -> dict[str, float | bool]:
        """One optimizer step (or a skipped one); returns what the logs show."""
        start = time.perf_counter()
        lr = self.lr_at(self.step)
        set_lr(self.optimizer, lr)
        ce_sum, z_sum, aux_sum = self._micro_steps()
        vote = torch.tensor(1.0 if self._signal else 0.0, device=ce_sum.device)
        packed = dist_utils.all_reduce_sum(
            torch.stack([ce_sum, z_sum, aux_sum, vote]).float(), self.ctx
        ).tolist()
        scale = self.ctx.world_size * self.cfg.optimizer.grad_accum
        loss, zl, aux, stop_votes = (
            packed[0] / scale,
            packed[1] / scale,
            packed[2] / scale,
            packed[3],
        )
        grad_norm = clip_gradients(self.raw.parameters(), self.cfg.optimizer.grad_clip)
        ok = math.isfinite(loss + zl + aux) and math.isfinite(grad_norm)
        ratios = self._ratio_step() if ok and self._due(self.cfg.logging.ratio_every) else None
        if ok and ratios is None:
            self.optimizer.step()
        # Tiger: keep m, shrink the weights
        elif not ok and getattr(self.optimizer, "guards_nan", False):
            self.optimizer.shrink()
        self.optimizer.zero_grad(set_to_none=True)
        self.stats.bad_steps = 0 if ok else self.stats.bad_steps + 1
        self.stats.skipped += 0 if ok else 1
        tokens = self.cfg.data.batch_size * self.cfg.data.block_size
        self.stats.tokens_seen += tokens
        self.step += 1
        # the same on every rank, so all of them stop after this step
        self.stopping = stop_votes > 0
        row = {
            "loss": loss,
            "lr": lr,
            "grad_norm": grad_norm,
            "tokens_per_s": tokens / (time.perf_counter() - start),
        }
        if self.cfg.z_loss_coef:
            row["z_loss"] = zl
        if self.has_aux:
            row["aux_loss"] = aux  # e.g. VQ's commitment loss, part of the objective
        return {**row, "skipped": not ok, **({"ratios": ratios} if ratios else {})}

    def _due(self, every: int) -> bool:
        """Whether the step about to finish (self.step + 1) is a multiple of `every` (0 = never)."""
        return every > 0 and (self.step + 1) % every == 0

    def _ratio_step(self) -> dict[str, float]:
        """The optimizer step, measuring per-layer ||update|| / ||param|| (spikes show up here
        first)."""
        params = dict(self.raw.named_parameters())
        before = {n: p.detach().clone() for n, p in params.items()}
        self.optimizer.step()
        updates = grouped_norms({n: p.detach() - before[n] for n, p in params.items()})
        norms = grouped_norms(before)
        return {g: updates[g] / max(norms[g], 1e-12) for g in updates}

    # ------------------------------------------------------------------------------------ eval,
    # samples
    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean validation CE over `eval_batches` x the global micro-batch windows, evenly strided
        over the validation split (`TokenData.strided_windows`): the same text at every evaluation,
        for every seed and arm, so evaluations of runs that share data compare like with like. Each
        rank scores its share."""
        self.model.eval()
        batches, ranks, block = (
            self.cfg.logging.eval_batches,
            self.ctx.world_size,
            self.cfg.data.block_size,
        )
        starts = self.data.strided_windows("val", batches * ranks * self.micro_batch, block)
        # (eval_batches, micro_batch)
        mine = starts.reshape(ranks, batches, self.micro_batch)[self.ctx.rank]
        total = torch.zeros((), device=self.ctx.device)
        for batch in mine:
            x, y = self.data.windows_at("val", batch, block, self.ctx.device)
            with self._autocast():
                total += cross_entropy(self.model(x), y).float()
        self.model.train()
        total = dist_utils.all_reduce_sum(total, self.ctx)
        return float(total) / (self.cfg.logging.eval_batches * self.ctx.world_size)

    def samples(self) -> list[str]:
        """A few continuations of the sample prompt, decoded with the KV cache
        (archlab.infer.generate).

        Every rank runs them (FSDP forwards are collective); the sampler's own seeded generator
        leaves the training RNG streams alone, so samples never change the run itself.
        """
        lg = self.cfg.logging
        sampling = SamplingConfig(
            max_new_tokens=self.sample_tokens, temperature=lg.temperature, seed=self.cfg.seed
        )
        return generate_text(
            self.raw, self.tokenizer, [self.sample_prompt] * lg.samples, sampling
        ).texts

    # --------------------------------------------------------------------------------------
    # checkpoints
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

    # -------------------------------------------------------------------------------------------
    # loop
    def _on_signal(self, signum: int, frame: object) -> None:
        self._signal = signal.Signals(signum).name
        # a second Ctrl-C interrupts at once instead of waiting for the checkpoint
        signal.signal(
            signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
        )

    def _install_signals(self) -> dict[int, object]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    def _after_step(self, row: dict, bar: tqdm) -> float | None:
        """Log the step, then evaluate / sample / checkpoint when due; returns the val loss if
        measured."""
        lg, steps = self.cfg.logging, self.cfg.steps
        ratios = row.pop("ratios", None)
        bar.set_postfix(
            loss=f"{row['loss']:.4f}",
            lr=f"{row['lr']:.2e}",
            gnorm=f"{row['grad_norm']:.3f}",
            tok_s=f"{row['tokens_per_s']:.0f}",
            refresh=False,
        )
        bar.update(1)
        if self._progress_lines and (
            self.step % math.ceil(steps / PROGRESS_LINES) == 0 or self.step == steps
        ):
            logger.info(
                "step %d/%d: loss %.4f, lr %.2e, grad norm %.3f, %s tokens/s",
                self.step,
                steps,
                row["loss"],
                row["lr"],
                row["grad_norm"],
                f"{row['tokens_per_s']:,.0f}",
            )
        if row["skipped"]:
            if self.ctx.is_main:
                logger.warning(
                    "step %d skipped: non-finite loss %s or grad norm %s (%d in a row)",
                    self.step,
                    row["loss"],
                    row["grad_norm"],
                    self.stats.bad_steps,
                )
            self.metrics.log(
                self.step, "skip", {"loss": str(row["loss"]), "grad_norm": str(row["grad_norm"])}
            )
        if self.step % lg.log_every == 0 or self.step == steps:
            self.metrics.log(self.step, "train", row)
        if ratios:
            self.metrics.log(self.step, "ratios", ratios)
        if self.stats.bad_steps >= self.cfg.checkpoint.max_bad_steps:
            last = latest_checkpoint(self.run_dir)
            raise TrainingDiverged(
                f"training diverged: {self.stats.bad_steps} consecutive steps (up to step "
                f"{self.step}) had a "
                "non-finite loss or gradient; last good checkpoint: "
                f"{last or 'none (no checkpoint saved yet)'}"
            )
        if not ((lg.eval_every and self.step % lg.eval_every == 0) or self.step == steps):
            return None
        return self._evaluate_and_log()

    def _evaluate_and_log(self) -> float:
        val = self.evaluate()
        if self.stats.best_val_loss is None or val < self.stats.best_val_loss:
            self.stats.best_val_loss, self.stats.best_step = val, self.step
        o = self.cfg.optimizer
        signature = self.embed_watch.measure(
            self.raw.embed_tokens.weight,
            o.weight_decay if o.decay_embeddings else 0.0,
            lambda t: dist_utils.all_reduce_sum(t, self.ctx),
        )
        self.metrics.log(self.step, "eval", {"loss": val, **signature})
        texts = self.samples() if self.cfg.logging.samples else []
        if self.ctx.is_main:
            logger.info("step %d: val loss %.4f", self.step, val)
            for text in texts:
                logger.info("sample at step %d:\n%s%s", self.step, self.sample_prompt, text)
                self.metrics.log(self.step, "sample", {"text": text})
        return val

    def _loop(self, bar: tqdm) -> tuple[dict, float | None, Path | None]:
        """Steps until the end or a signal; returns the last step's row, the last val loss, the
        checkpoint."""
        steps, every = self.cfg.steps, self.cfg.checkpoint.save_every
        row, val, path = {}, None, latest_checkpoint(self.run_dir)
        while self.step < steps:
            row = self.train_step()
            measured = self._after_step(row, bar)
            val = measured if measured is not None else val
            # no periodic saves inside a run of skipped steps: they could prune the last good
            # checkpoint
            periodic = every and self.step % every == 0 and self.stats.bad_steps == 0
            if self.stopping or periodic or self.step == steps:
                path = self.save(measured)
            if self.stopping:
                if self.ctx.is_main:
                    logger.info(
                        "%s: stopped at step %d, checkpoint %s; continue with --resume",
                        self._signal or "a signal on another rank",
                        self.step,
                        path,
                    )
                break
        return row, val, path

    def fit(self) -> TrainResult:
        """Train from the current step up to `train.steps`; checkpoint when due, at the end and on a
        signal."""
        previous = self._install_signals()
        show = self.ctx.is_main and self.cfg.logging.progress
        # a log file gets lines, not bar redraws
        self._progress_lines = show and not sys.stderr.isatty()
        bar = tqdm(
            total=self.cfg.steps,
            initial=self.step,
            desc="train",
            dynamic_ncols=True,
            disable=not show or self._progress_lines,
        )
        start, start_step = time.perf_counter(), self.step
        try:
            with logging_redirect_tqdm():  # log lines print above the progress bar, not through it
                # the loaded weights' loss: what a fine-tune starts from
                if self.cfg.init_from and self.step == 0:
                    self.metrics.log(0, "init", {"init_from": self.cfg.init_from})
                    self._evaluate_and_log()
                row, val, path = self._loop(bar)
        finally:
            bar.close()
            self.metrics.close()
            if self.lock is not None:  # the folder's next writer may start
                self.lock.release()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        seconds = max(time.perf_counter() - start, 1e-9)
        tokens = (self.step - start_step) * self.cfg.data.batch_size * self.cfg.data.block_size
        interrupted = (self._signal or "a signal on another rank") if self.stopping else None
        return TrainResult(self.step, row.get("loss"), val, path, interrupted, tokens / seconds)


def train(
    train_config: TrainConfig,
    model_config: ModelConfig,
    resume: bool = False,
    init_from: TransformerLM | None = None,
) -> TrainResult:
    """Join the process group (if any), check every input, pick CPU threads, train (from
    `init_from`'s weights if given), and leave it again. Inputs are checked before the first line is
    logged: the run folder and its checkpoints, an emulated bf16, a resumed run's checkpoint,
    metrics file and weights' shapes, the data (prepared here), then the precision's advice and the
    memory estimate."""
    ctx = dist_utils.setup(train_config.distributed, train_config.precision.device)
    threads = torch.get_num_threads()
    lock = RunLock(train_config.out) if ctx.is_main else None
    try:
        # before any line is logged: a refused second writer prints one line only
        if lock is not None:
            lock.acquire()
        p, d = train_config.precision, train_config.data
        step_flops = (
            flops_per_token(model_config, d.block_size)["training"] * d.batch_size * d.block_size
        )
        try:
            latest = check_setup(train_config, ctx.world_size, resume)  # the cheap refusals first
            hardware.refuse_emulated_bf16(p.dtype, ctx.device, p.allow_slow_bf16)
            checkpoint = (
                check_resumed_run(train_config, model_config, latest)
                if latest is not None
                else None
            )
            # the data: prepared, then checked
            run_data = open_run_data(train_config, model_config, ctx, resume)
            hardware.check_precision(
                p.dtype, ctx.device, p.allow_slow_bf16, step_flops / ctx.world_size
            )
            check_memory(train_config, model_config, ctx)  # before any model or batch is allocated
        except BaseException:
            if lock is not None:
                lock.discard()  # refused: no run folder is left behind
            raise
        if ctx.device.type == "cpu":
            n, why = hardware.pick_threads(step_flops / ctx.world_size, p.threads)
            torch.set_num_threads(n)
            if ctx.is_main:
                logger.info("CPU threads: %d (%s; --precision.threads N to change)", n, why)
        return Trainer(
            train_config, model_config, ctx, resume, init_from, lock, run_data, checkpoint
        ).fit()
    finally:
        if lock is not None:
            lock.release()
        torch.set_num_threads(threads)
        dist_utils.teardown(ctx)


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
