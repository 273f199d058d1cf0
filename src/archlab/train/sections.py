"""The sections of `TrainConfig`: data, optimizer, schedule, precision, checkpoint and logging.

Each is a dataclass of typed fields with a one-line comment each (what `archlab train --help`
shows, train/config_doc.py), and checks its values in `__post_init__`, naming the dotted key, the
value and what is allowed (`check_value`).
"""

from __future__ import annotations

from dataclasses import dataclass

from archlab.nn.config import check_finite
from archlab.train.variants import (
    DECAY_SHAPES,
    DEFAULT_BETAS,
    EMBEDDING_LR_RATIO,
    EMBEDDING_OPTIMIZERS,
    NAN_SHRINK,
    OPTIMIZERS,
    SCHEDULES,
    SIGN_OPTIMIZERS,
)

# bf16 = autocast for matmuls; weights, grads and optimizer state stay fp32
DTYPES = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")  # auto = cuda when available
# a bound on steps: a billion optimizer steps is past any run; `--steps 1e20` is a typo, not a plan
MAX_STEPS = 10**9


def check_value(ok: bool, name: str, value: object, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{name}={value!r} is not allowed: {allowed}")


@dataclass
class DataConfig:
    # text/JSONL file or folder, `stdlib` (offline Python sources), `hf:NAME`, a prepared folder
    source: str = "stdlib"
    # byte (256 ids, nothing to train) | bpe (trained on the corpus) | path to a tokenizer.json
    tokenizer: str = "byte"
    vocab_size: int = 8192  # ids a bpe tokenizer learns; ignored by byte
    val_fraction: float = 0.05  # share of documents held out for validation
    # BPE-dropout on the train split only (arXiv 1910.13267): merges skipped with this p
    bpe_dropout: float = 0.0
    dir: str = ""  # where the token memmaps go; empty = RUN_DIR/data
    batch_size: int = 32  # sequences per optimizer step, all ranks and micro-steps together
    block_size: int | None = None  # tokens per sequence; None = model.max_seq_len

    def __post_init__(self) -> None:
        check_finite(self, "data.")
        check_value(self.batch_size >= 1, "data.batch_size", self.batch_size, "an integer >= 1")
        check_value(
            self.block_size is None or self.block_size >= 1,
            "data.block_size",
            self.block_size,
            "None or >= 1",
        )
        check_value(
            0 < self.val_fraction < 1,
            "data.val_fraction",
            self.val_fraction,
            "a fraction in (0, 1)",
        )
        check_value(
            0 <= self.bpe_dropout < 1,
            "data.bpe_dropout",
            self.bpe_dropout,
            "a probability in [0, 1) (0 = off)",
        )


@dataclass
class OptimizerConfig:
    name: str = "adamw"  # adamw | lion | tiger (train/variants.py OPTIMIZERS)
    # peak lr; 1e-3 suits tiny models with AdamW, ~3-10x less for lion (tiger_rms_lr: relative step)
    lr: float = 1e-3
    # None = default: adamw (0.9, 0.95), lion (0.9, 0.99), tiger (0.965,)
    betas: tuple[float, ...] | None = None
    eps: float = 1e-8  # AdamW's denominator guard
    # decoupled decay on weight matrices only (GPT-3, LLaMA, PaLM use 0.1)
    weight_decay: float = 0.1
    # also decay embedding / position tables (usually hurts rare tokens)
    decay_embeddings: bool = False
    # with decay_embeddings: the tables' own decay (None = weight_decay)
    embedding_weight_decay: float | None = None
    # clip the global gradient L2 norm to this; 0 = no clipping (norm still logged)
    grad_clip: float = 1.0
    # micro-steps whose gradients add up to one optimizer step (same batch, less memory)
    grad_accum: int = 1
    # lion/tiger: table rows with an all-zero gradient are not moved (no-op when tied)
    lazy_embeddings: bool = False
    # same | adamw: lion/tiger with the tables stepped by AdamW (mixed optimizer)
    embedding_optimizer: str = "same"
    # embedding_optimizer adamw: the tables' lr = this x lr
    embedding_lr_ratio: float = EMBEDDING_LR_RATIO
    # tiger: lr x RMS(param) (rows for tables), 0.5 lr, no decay for gains/biases (9512)
    tiger_rms_lr: bool = True
    # tiger: a non-finite step keeps m and shrinks params by this; 1 = off
    tiger_nan_shrink: float = NAN_SHRINK

    def __post_init__(self) -> None:
        check_finite(self, "optimizer.")
        check_value(
            self.name in OPTIMIZERS, "optimizer.name", self.name, "one of " + ", ".join(OPTIMIZERS)
        )
        check_value(
            self.embedding_optimizer in EMBEDDING_OPTIMIZERS,
            "optimizer.embedding_optimizer",
            self.embedding_optimizer,
            "one of " + ", ".join(EMBEDDING_OPTIMIZERS),
        )
        for name in ("lazy_embeddings", "embedding_optimizer"):
            on = getattr(self, name) not in (False, "same")
            check_value(
                not on or self.name in SIGN_OPTIMIZERS,
                f"optimizer.{name}",
                getattr(self, name),
                f"only with optimizer.name {' or '.join(SIGN_OPTIMIZERS)} (got {self.name})",
            )
        check_value(
            self.embedding_lr_ratio > 0,
            "optimizer.embedding_lr_ratio",
            self.embedding_lr_ratio,
            "a value > 0",
        )
        check_value(
            0 < self.tiger_nan_shrink <= 1,
            "optimizer.tiger_nan_shrink",
            self.tiger_nan_shrink,
            "a factor in (0, 1] (1 = off)",
        )
        check_value(self.lr >= 0, "optimizer.lr", self.lr, "a learning rate >= 0")
        check_value(
            self.weight_decay >= 0, "optimizer.weight_decay", self.weight_decay, "a value >= 0"
        )
        check_value(
            self.embedding_weight_decay is None
            or (self.decay_embeddings and self.embedding_weight_decay >= 0),
            "optimizer.embedding_weight_decay",
            self.embedding_weight_decay,
            "None or a value >= 0, only with optimizer.decay_embeddings true",
        )
        check_value(
            self.grad_clip >= 0, "optimizer.grad_clip", self.grad_clip, "a norm >= 0 (0 = off)"
        )
        check_value(
            self.grad_accum >= 1, "optimizer.grad_accum", self.grad_accum, "an integer >= 1"
        )
        check_value(self.eps > 0, "optimizer.eps", self.eps, "a value > 0")
        if self.betas is None:
            self.betas = DEFAULT_BETAS[self.name]
        self.betas = tuple(float(b) for b in self.betas)
        want = len(DEFAULT_BETAS[self.name])
        check_value(
            len(self.betas) == want and all(0 <= b < 1 for b in self.betas),
            "optimizer.betas",
            list(self.betas),
            f"{want} value(s) in [0, 1) for {self.name}",
        )


@dataclass
class ScheduleConfig:
    name: str = "cosine"  # cosine | constant | wsd (train/variants.py SCHEDULES)
    # linear warmup; None = 5% of the run, 1 to 1000, and fewer than its steps
    warmup_steps: int | None = None
    # lr at the end of the decay, as a fraction of optimizer.lr (LLaMA: 0.1)
    min_lr_ratio: float = 0.1
    decay_fraction: float = 0.2  # wsd: share of the run spent cooling down at the end
    decay_shape: str = "linear"  # wsd cooldown: linear | 1-sqrt (Hägele et al., arXiv 2405.18392)
    # steps the schedule is planned for; None = steps. A resume keeps it (see --extend)
    horizon: int | None = None
    # set by --resume --extend: (at step, new end) pairs, flattened
    extensions: tuple[int, ...] = ()

    def end(self) -> int:
        """The step where the lr schedule ends: the planned horizon, or the last extension's end."""
        return self.extensions[-1] if self.extensions else int(self.horizon or 0)

    def extension_pairs(self) -> list[tuple[int, int]]:
        return list(zip(self.extensions[::2], self.extensions[1::2]))

    def __post_init__(self) -> None:
        check_finite(self, "schedule.")
        check_value(
            self.name in SCHEDULES, "schedule.name", self.name, "one of " + ", ".join(SCHEDULES)
        )
        check_value(
            self.warmup_steps is None or self.warmup_steps >= 0,
            "schedule.warmup_steps",
            self.warmup_steps,
            "None or an integer >= 0",
        )
        check_value(
            0 <= self.min_lr_ratio <= 1,
            "schedule.min_lr_ratio",
            self.min_lr_ratio,
            "a fraction in [0, 1]",
        )
        check_value(
            0 < self.decay_fraction <= 1,
            "schedule.decay_fraction",
            self.decay_fraction,
            "a fraction in (0, 1]",
        )
        check_value(
            self.decay_shape in DECAY_SHAPES,
            "schedule.decay_shape",
            self.decay_shape,
            "one of " + ", ".join(DECAY_SHAPES),
        )
        check_value(
            self.horizon is None or 1 <= self.horizon <= MAX_STEPS,
            "schedule.horizon",
            self.horizon,
            f"None or an integer from 1 to {MAX_STEPS:,}",
        )
        self.extensions = tuple(int(v) for v in self.extensions)
        pairs = self.extension_pairs()
        check_value(
            len(self.extensions) % 2 == 0 and all(at < end for at, end in pairs),
            "schedule.extensions",
            list(self.extensions),
            "(at step, new end) pairs with at < end",
        )


@dataclass
class PrecisionConfig:
    dtype: str = "fp32"  # fp32 | bf16 (autocast; master weights and optimizer state stay fp32)
    device: str = "auto"  # auto | cpu | cuda; under torchrun each rank takes cuda:LOCAL_RANK
    compile: bool = False  # torch.compile the model (faster steps after a slow first one)
    # CPU threads; 0 = auto: 1 for small steps, else the idle physical cores (train/hardware.py)
    threads: int = 0
    # run bf16 on a CPU without bf16 units (emulated: several times slower)
    allow_slow_bf16: bool = False

    def __post_init__(self) -> None:
        check_finite(self, "precision.")
        check_value(
            self.dtype in DTYPES, "precision.dtype", self.dtype, "one of " + ", ".join(DTYPES)
        )
        check_value(
            self.device in DEVICES, "precision.device", self.device, "one of " + ", ".join(DEVICES)
        )
        check_value(
            self.threads >= 0, "precision.threads", self.threads, "an integer >= 0 (0 = auto)"
        )


@dataclass
class CheckpointConfig:
    # steps between checkpoints; 0 = only at the end (and on Ctrl-C / SIGTERM)
    save_every: int = 100
    keep_last: int = 2  # newest checkpoints kept; the best by val loss is kept as well
    max_bad_steps: int = 5  # consecutive non-finite steps (skipped) before the run stops
    # save the step-0 weights to RUN_DIR/initial (the lab's embedding drift measures)
    keep_initial: bool = False

    def __post_init__(self) -> None:
        check_finite(self, "checkpoint.")
        check_value(
            self.save_every >= 0,
            "checkpoint.save_every",
            self.save_every,
            "an integer >= 0 (0 = end only)",
        )
        check_value(self.keep_last >= 1, "checkpoint.keep_last", self.keep_last, "an integer >= 1")
        check_value(
            self.max_bad_steps >= 1,
            "checkpoint.max_bad_steps",
            self.max_bad_steps,
            "an integer >= 1",
        )


@dataclass
class LoggingConfig:
    # steps between metrics.jsonl / TensorBoard rows (every step is in the progress bar)
    log_every: int = 10
    eval_every: int = 100  # steps between validation losses; 0 = only at the end
    eval_batches: int = 10  # validation batches per evaluation (the same batches every time)
    ratio_every: int = 100  # steps between per-layer update/param norm ratios; 0 = never
    samples: int = 1  # generated samples shown at each evaluation; 0 = none
    # new tokens per sample; None = 64, or fewer where the context ends sooner
    sample_tokens: int | None = None
    # prompt of the samples; None = the first 4 characters of the validation text
    sample_prompt: str | None = None
    temperature: float = 0.8  # sampling temperature of the samples; 0 = greedy
    tensorboard: bool = True  # also write TensorBoard event files under RUN_DIR/tb
    # progress on rank 0: a bar on a terminal, else a line every ~5% of the run
    progress: bool = True

    def __post_init__(self) -> None:
        check_finite(self, "logging.")
        for name in ("log_every",):
            check_value(
                getattr(self, name) >= 1, f"logging.{name}", getattr(self, name), "an integer >= 1"
            )
        for name in ("eval_every", "eval_batches", "ratio_every", "samples"):
            check_value(
                getattr(self, name) >= 0, f"logging.{name}", getattr(self, name), "an integer >= 0"
            )
        check_value(
            self.sample_tokens is None or self.sample_tokens >= 1,
            "logging.sample_tokens",
            self.sample_tokens,
            "None (64, fitted to the context) or an integer >= 1",
        )
        check_value(
            self.temperature >= 0,
            "logging.temperature",
            self.temperature,
            "a value >= 0 (0 = greedy)",
        )
        check_value(
            self.sample_prompt is None or bool(self.sample_prompt) or not self.samples,
            "logging.sample_prompt",
            self.sample_prompt,
            "a non-empty prompt (or None) when logging.samples > 0",
        )
