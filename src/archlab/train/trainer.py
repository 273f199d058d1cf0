"""The training loop: batches -> loss -> clipped gradients -> optimizer step, evals, checkpoints.

One step: the lr from the schedule; `grad_accum` micro-batches (autocast forward, backward, gradient
sync only on the last); loss and a stop flag all-reduced in one call; global-norm clipping; and,
only when loss and gradient norm are finite, the optimizer update. A non-finite step is skipped
and logged; `checkpoint.max_bad_steps` in a row stop the run (`TrainingDiverged`) naming the last
good checkpoint. SIGINT / SIGTERM finish the current step, save a checkpoint and return. Resuming
restores weights, optimizer, every RNG stream and the batch generator, so the run continues
bit for bit.
"""

from __future__ import annotations

import logging
import math
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from archlab.checkpoint import Checkpoint, latest_checkpoint
from archlab.infer.generate import generate_text
from archlab.infer.sampling import SamplingConfig
from archlab.nn.config import ModelConfig
from archlab.nn.functional import cross_entropy
from archlab.nn.model import TransformerLM
from archlab.train import distributed as dist_utils
from archlab.train.config import TrainConfig
from archlab.train.lock import RunLock
from archlab.train.metrics import MetricsLogger, grouped_norms
from archlab.train.optim import clip_gradients, set_lr
from archlab.train.preflight import check_setup
from archlab.train.run_data import RunData, open_run_data
from archlab.train.state import RunState

logger = logging.getLogger(__name__)

# without a terminal, progress is about this many lines per run, not a redrawn bar
PROGRESS_LINES = 20


class TrainingDiverged(RuntimeError):
    """Too many consecutive non-finite steps; the message names the last good checkpoint."""


@dataclass
class TrainResult:
    """What `Trainer.fit` returns: where the run ended and how it went."""

    step: int
    train_loss: float | None
    val_loss: float | None
    checkpoint: Path | None
    interrupted: str | None  # the signal name when SIGINT/SIGTERM stopped the run
    tokens_per_s: float


class Trainer:
    """A run's loop over the state it owns (`state`: a `RunState`, state.py): `fit()` trains up to
    `train.steps`. Beside the state it holds what only the loop needs: the data and its tokenizer,
    the sample prompt, the metrics log, the signal flags and the run folder's lock."""

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
        already; else they are opened here. `init_from`: the weights the run starts from."""
        self.cfg, self.ctx = train, ctx
        self.run_dir = Path(train.out)
        # one writer per folder: refused here, before anything is written, while another process
        # holds it
        self.lock = (lock or RunLock(self.run_dir)).acquire() if ctx.is_main else None
        try:
            self._start(model_config, resume, init_from, run_data, checkpoint)
        # a failed start leaves no run folder behind (one that held anything stays)
        except BaseException:
            if self.lock is not None:
                self.lock.discard()
            raise

    def _start(
        self,
        model_config: ModelConfig,
        resume: bool,
        init_from: TransformerLM | None,
        run_data: RunData | None,
        checkpoint: Checkpoint | None,
    ) -> None:
        train, ctx = self.cfg, self.ctx
        resume_from = check_setup(train, ctx.world_size, resume)
        run_data = run_data or open_run_data(train, model_config, ctx, resume)
        self.data, self.tokenizer = run_data.tokens, run_data.tokenizer
        self.sample_prompt, self.sample_tokens = run_data.sample_prompt, run_data.sample_tokens
        self.state = RunState(
            train,
            model_config,
            ctx,
            run_data.folder / "tokenizer.json",
            init_from,
            resume_from,
            checkpoint,
        )
        self.micro_batch = train.data.batch_size // (ctx.world_size * train.optimizer.grad_accum)
        self.metrics = MetricsLogger(
            self.run_dir, self.state.step, train.logging.tensorboard, ctx.is_main
        )
        if resume_from is not None:  # `archlab plot run` marks where the run was resumed
            self.metrics.log(
                self.state.step,
                "resume",
                {
                    "checkpoint": resume_from.name,
                    "steps": train.steps,
                    "schedule_end": train.schedule.end(),
                },
            )
        self._signal: str | None = None  # set by the handler, on this rank only
        self.stopping = False  # set when any rank got a signal (decided on the all-reduced vote)
        # whether the last forward returned a kernel loss (set by _micro_steps)
        self.has_aux = False
        self._progress_lines = False  # fit() decides: lines when stderr is not a terminal
        self.state.write_config()
        self._log_start()

    def _log_start(self) -> None:
        if not self.ctx.is_main:
            return
        c, d = self.cfg, self.cfg.data
        # a fine-tune names its source
        label = f"from {c.init_from}" if c.init_from else f"{c.preset}/{c.size}"
        logger.info(
            "%s, %s parameters; %d steps of %d x %d tokens; %s train tokens of %s; config: %s",
            label,
            f"{self.state.raw.num_parameters():,}",
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
        state, accum, block = self.state, self.cfg.optimizer.grad_accum, self.cfg.data.block_size
        ce_sum = torch.zeros((), device=self.ctx.device)
        z_sum = torch.zeros((), device=self.ctx.device)
        aux_sum = torch.zeros((), device=self.ctx.device)
        for i in range(accum):
            x, y = self.data.get_batch(
                "train", self.micro_batch, block, state.generator, self.ctx.device
            )
            state.embed_watch.see(x)
            with dist_utils.gradient_sync(state.model, enabled=i == accum - 1):
                # the model computes head and loss together (chunked: no (B, T, V) logits)
                with self._autocast():
                    out = state.model(x, targets=y, z_loss_coef=self.cfg.z_loss_coef)
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
        state, start = self.state, time.perf_counter()
        lr = state.lr_at(state.step)
        set_lr(state.optimizer, lr)
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
        grad_norm = clip_gradients(state.raw.parameters(), self.cfg.optimizer.grad_clip)
        ok = math.isfinite(loss + zl + aux) and math.isfinite(grad_norm)
        ratios = self._ratio_step() if ok and self._due(self.cfg.logging.ratio_every) else None
        if ok and ratios is None:
            state.optimizer.step()
        # Tiger: keep m, shrink the weights
        elif not ok and getattr(state.optimizer, "guards_nan", False):
            state.optimizer.shrink()
        state.optimizer.zero_grad(set_to_none=True)
        state.stats.bad_steps = 0 if ok else state.stats.bad_steps + 1
        state.stats.skipped += 0 if ok else 1
        tokens = self.cfg.data.batch_size * self.cfg.data.block_size
        state.stats.tokens_seen += tokens
        state.step += 1
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
        """Whether the step about to finish (state.step + 1) is a multiple of `every`
        (0 = never)."""
        return every > 0 and (self.state.step + 1) % every == 0

    def _ratio_step(self) -> dict[str, float]:
        """The optimizer step, measuring per-layer ||update|| / ||param|| (spikes show
        up here first)."""
        params = dict(self.state.raw.named_parameters())
        before = {n: p.detach().clone() for n, p in params.items()}
        self.state.optimizer.step()
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
        model = self.state.model
        model.eval()
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
                total += cross_entropy(model(x), y).float()
        model.train()
        total = dist_utils.all_reduce_sum(total, self.ctx)
        return float(total) / (self.cfg.logging.eval_batches * self.ctx.world_size)

    def samples(self) -> list[str]:
        """A few continuations of the sample prompt, decoded with the
        KV cache (archlab.infer.generate).

        Every rank runs them (FSDP forwards are collective); the sampler's own seeded generator
        leaves the training RNG streams alone, so samples never change the run itself.
        """
        lg = self.cfg.logging
        sampling = SamplingConfig(
            max_new_tokens=self.sample_tokens, temperature=lg.temperature, seed=self.cfg.seed
        )
        return generate_text(
            self.state.raw, self.tokenizer, [self.sample_prompt] * lg.samples, sampling
        ).texts

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
        """Show and log the step, stop a diverged run, then evaluate and sample when due; returns
        the val loss if measured."""
        step, steps, every = self.state.step, self.cfg.steps, self.cfg.logging.eval_every
        ratios = row.pop("ratios", None)
        self._show(row, bar)
        self._log_step(row, ratios)
        if self.state.stats.bad_steps >= self.cfg.checkpoint.max_bad_steps:
            last = latest_checkpoint(self.run_dir)
            raise TrainingDiverged(
                f"training diverged: {self.state.stats.bad_steps} consecutive steps (up to step "
                f"{step}) had a non-finite loss or gradient; last good checkpoint: "
                f"{last or 'none (no checkpoint saved yet)'}"
            )
        if not ((every and step % every == 0) or step == steps):
            return None
        return self._evaluate_and_log()

    def _show(self, row: dict, bar: tqdm) -> None:
        """The step on the progress bar, or as one of ~PROGRESS_LINES lines in a log file."""
        step, steps = self.state.step, self.cfg.steps
        bar.set_postfix(
            loss=f"{row['loss']:.4f}",
            lr=f"{row['lr']:.2e}",
            gnorm=f"{row['grad_norm']:.3f}",
            tok_s=f"{row['tokens_per_s']:.0f}",
            refresh=False,
        )
        bar.update(1)
        every = math.ceil(steps / PROGRESS_LINES)
        if self._progress_lines and (step % every == 0 or step == steps):
            logger.info(
                "step %d/%d: loss %.4f, lr %.2e, grad norm %.3f, %s tokens/s",
                step,
                steps,
                row["loss"],
                row["lr"],
                row["grad_norm"],
                f"{row['tokens_per_s']:,.0f}",
            )

    def _log_step(self, row: dict, ratios: dict[str, float] | None) -> None:
        """The step's rows in metrics.jsonl (a skipped step also as a warning) when due."""
        step = self.state.step
        if row["skipped"]:
            if self.ctx.is_main:
                logger.warning(
                    "step %d skipped: non-finite loss %s or grad norm %s (%d in a row)",
                    step,
                    row["loss"],
                    row["grad_norm"],
                    self.state.stats.bad_steps,
                )
            skipped = {"loss": str(row["loss"]), "grad_norm": str(row["grad_norm"])}
            self.metrics.log(step, "skip", skipped)
        if step % self.cfg.logging.log_every == 0 or step == self.cfg.steps:
            self.metrics.log(step, "train", row)
        if ratios:
            self.metrics.log(step, "ratios", ratios)

    def _evaluate_and_log(self) -> float:
        state, o = self.state, self.cfg.optimizer
        val = self.evaluate()
        if state.stats.best_val_loss is None or val < state.stats.best_val_loss:
            state.stats.best_val_loss, state.stats.best_step = val, state.step
        signature = state.embed_watch.measure(
            state.raw.embed_tokens.weight,
            o.weight_decay if o.decay_embeddings else 0.0,
            lambda t: dist_utils.all_reduce_sum(t, self.ctx),
        )
        self.metrics.log(state.step, "eval", {"loss": val, **signature})
        texts = self.samples() if self.cfg.logging.samples else []
        if self.ctx.is_main:
            logger.info("step %d: val loss %.4f", state.step, val)
            for text in texts:
                logger.info("sample at step %d:\n%s%s", state.step, self.sample_prompt, text)
                self.metrics.log(state.step, "sample", {"text": text})
        return val

    def _loop(self, bar: tqdm) -> tuple[dict, float | None, Path | None]:
        """Steps until the end or a signal; returns the last step's row, the last val
        loss, the checkpoint."""
        state, steps, every = self.state, self.cfg.steps, self.cfg.checkpoint.save_every
        row, val, path = {}, None, latest_checkpoint(self.run_dir)
        while state.step < steps:
            row = self.train_step()
            measured = self._after_step(row, bar)
            val = measured if measured is not None else val
            # no periodic saves inside a run of skipped steps: they could prune the last good
            # checkpoint
            periodic = every and state.step % every == 0 and state.stats.bad_steps == 0
            if self.stopping or periodic or state.step == steps:
                path = state.save(measured)
            if self.stopping:
                if self.ctx.is_main:
                    logger.info(
                        "%s: stopped at step %d, checkpoint %s; continue with --resume",
                        self._signal or "a signal on another rank",
                        state.step,
                        path,
                    )
                break
        return row, val, path

    def fit(self) -> TrainResult:
        """Train from the current step up to `train.steps`; checkpoint when due, at the end and
        on a signal."""
        previous = self._install_signals()
        show = self.ctx.is_main and self.cfg.logging.progress
        # a log file gets lines, not bar redraws
        self._progress_lines = show and not sys.stderr.isatty()
        bar = tqdm(
            total=self.cfg.steps,
            initial=self.state.step,
            desc="train",
            dynamic_ncols=True,
            disable=not show or self._progress_lines,
        )
        start, start_step = time.perf_counter(), self.state.step
        try:
            with logging_redirect_tqdm():  # log lines print above the progress bar, not through it
                # the loaded weights' loss: what a fine-tune starts from
                if self.cfg.init_from and self.state.step == 0:
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
        step, d = self.state.step, self.cfg.data
        tokens = (step - start_step) * d.batch_size * d.block_size
        interrupted = (self._signal or "a signal on another rank") if self.stopping else None
        return TrainResult(step, row.get("loss"), val, path, interrupted, tokens / seconds)
