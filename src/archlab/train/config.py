"""`TrainConfig`: every training knob as one typed, commented field, and the merge that fills it.

Values are layered defaults < preset < YAML file < `--dotted.key value` flags (a resumed run starts
from its saved config instead of the defaults). Keys under `model.` go to the `ModelConfig` built
from `preset`/`size`; every other key names a `TrainConfig` field, e.g. `--optimizer.lr 3e-4`. How a
key and its text become a typed value is archlab/overrides.py (the grammar `archlab inspect` uses
too). Each section checks its values in `__post_init__` and names the field, the value and what is
allowed.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from archlab.nn.config import ModelConfig, check_finite, expand_shorthands, layer_over
from archlab.nn.positions.scaling import ROPE_KINDS
from archlab.nn.presets import PRESETS, SIZES, build_preset
from archlab.overrides import Value, build, defaults, flatten, set_dotted, typed_overrides
from archlab.train.schedule import DECAY_SHAPES, SCHEDULES
from archlab.train.variants import (
    DEFAULT_BETAS,
    EMBEDDING_LR_RATIO,
    EMBEDDING_OPTIMIZERS,
    NAN_SHRINK,
    OPTIMIZERS,
    SIGN_OPTIMIZERS,
)

DISTRIBUTED = ("none", "ddp", "fsdp")  # none: one process; ddp / fsdp: launched by torchrun
# bf16 = autocast for matmuls; weights, grads and optimizer state stay fp32
DTYPES = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")  # auto = cuda when available
BYTE_VOCAB = 256
# a bound on steps: a billion optimizer steps is past any run; `--steps 1e20` is a typo, not a plan
MAX_STEPS = 10**9


def _check(ok: bool, name: str, value: object, allowed: str) -> None:
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
        _check(self.batch_size >= 1, "data.batch_size", self.batch_size, "an integer >= 1")
        _check(
            self.block_size is None or self.block_size >= 1,
            "data.block_size",
            self.block_size,
            "None or >= 1",
        )
        _check(
            0 < self.val_fraction < 1,
            "data.val_fraction",
            self.val_fraction,
            "a fraction in (0, 1)",
        )
        _check(
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
        _check(
            self.name in OPTIMIZERS, "optimizer.name", self.name, "one of " + ", ".join(OPTIMIZERS)
        )
        _check(
            self.embedding_optimizer in EMBEDDING_OPTIMIZERS,
            "optimizer.embedding_optimizer",
            self.embedding_optimizer,
            "one of " + ", ".join(EMBEDDING_OPTIMIZERS),
        )
        for name in ("lazy_embeddings", "embedding_optimizer"):
            on = getattr(self, name) not in (False, "same")
            _check(
                not on or self.name in SIGN_OPTIMIZERS,
                f"optimizer.{name}",
                getattr(self, name),
                f"only with optimizer.name {' or '.join(SIGN_OPTIMIZERS)} (got {self.name})",
            )
        _check(
            self.embedding_lr_ratio > 0,
            "optimizer.embedding_lr_ratio",
            self.embedding_lr_ratio,
            "a value > 0",
        )
        _check(
            0 < self.tiger_nan_shrink <= 1,
            "optimizer.tiger_nan_shrink",
            self.tiger_nan_shrink,
            "a factor in (0, 1] (1 = off)",
        )
        _check(self.lr >= 0, "optimizer.lr", self.lr, "a learning rate >= 0")
        _check(self.weight_decay >= 0, "optimizer.weight_decay", self.weight_decay, "a value >= 0")
        _check(
            self.embedding_weight_decay is None
            or (self.decay_embeddings and self.embedding_weight_decay >= 0),
            "optimizer.embedding_weight_decay",
            self.embedding_weight_decay,
            "None or a value >= 0, only with optimizer.decay_embeddings true",
        )
        _check(self.grad_clip >= 0, "optimizer.grad_clip", self.grad_clip, "a norm >= 0 (0 = off)")
        _check(self.grad_accum >= 1, "optimizer.grad_accum", self.grad_accum, "an integer >= 1")
        _check(self.eps > 0, "optimizer.eps", self.eps, "a value > 0")
        if self.betas is None:
            self.betas = DEFAULT_BETAS[self.name]
        self.betas = tuple(float(b) for b in self.betas)
        want = len(DEFAULT_BETAS[self.name])
        _check(
            len(self.betas) == want and all(0 <= b < 1 for b in self.betas),
            "optimizer.betas",
            list(self.betas),
            f"{want} value(s) in [0, 1) for {self.name}",
        )


@dataclass
class ScheduleConfig:
    name: str = "cosine"  # cosine | constant | wsd (train/schedule.py SCHEDULES)
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
        _check(self.name in SCHEDULES, "schedule.name", self.name, "one of " + ", ".join(SCHEDULES))
        _check(
            self.warmup_steps is None or self.warmup_steps >= 0,
            "schedule.warmup_steps",
            self.warmup_steps,
            "None or an integer >= 0",
        )
        _check(
            0 <= self.min_lr_ratio <= 1,
            "schedule.min_lr_ratio",
            self.min_lr_ratio,
            "a fraction in [0, 1]",
        )
        _check(
            0 < self.decay_fraction <= 1,
            "schedule.decay_fraction",
            self.decay_fraction,
            "a fraction in (0, 1]",
        )
        _check(
            self.decay_shape in DECAY_SHAPES,
            "schedule.decay_shape",
            self.decay_shape,
            "one of " + ", ".join(DECAY_SHAPES),
        )
        _check(
            self.horizon is None or 1 <= self.horizon <= MAX_STEPS,
            "schedule.horizon",
            self.horizon,
            f"None or an integer from 1 to {MAX_STEPS:,}",
        )
        self.extensions = tuple(int(v) for v in self.extensions)
        pairs = self.extension_pairs()
        _check(
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
        _check(self.dtype in DTYPES, "precision.dtype", self.dtype, "one of " + ", ".join(DTYPES))
        _check(
            self.device in DEVICES, "precision.device", self.device, "one of " + ", ".join(DEVICES)
        )
        _check(self.threads >= 0, "precision.threads", self.threads, "an integer >= 0 (0 = auto)")


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
        _check(
            self.save_every >= 0,
            "checkpoint.save_every",
            self.save_every,
            "an integer >= 0 (0 = end only)",
        )
        _check(self.keep_last >= 1, "checkpoint.keep_last", self.keep_last, "an integer >= 1")
        _check(
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
            _check(
                getattr(self, name) >= 1, f"logging.{name}", getattr(self, name), "an integer >= 1"
            )
        for name in ("eval_every", "eval_batches", "ratio_every", "samples"):
            _check(
                getattr(self, name) >= 0, f"logging.{name}", getattr(self, name), "an integer >= 0"
            )
        _check(
            self.sample_tokens is None or self.sample_tokens >= 1,
            "logging.sample_tokens",
            self.sample_tokens,
            "None (64, fitted to the context) or an integer >= 1",
        )
        _check(
            self.temperature >= 0,
            "logging.temperature",
            self.temperature,
            "a value >= 0 (0 = greedy)",
        )
        _check(
            self.sample_prompt is None or bool(self.sample_prompt) or not self.samples,
            "logging.sample_prompt",
            self.sample_prompt,
            "a non-empty prompt (or None) when logging.samples > 0",
        )


@dataclass
class TrainConfig:
    # architecture (archlab.nn.presets.PRESETS); model.* keys override its fields
    preset: str = "llama"
    size: str = "tiny"  # size (archlab.nn.presets.SIZES)
    steps: int = 200  # optimizer steps of the whole run (a resumed run continues up to this)
    seed: int = 0  # seeds weights, dropout and the batch order
    out: str = ""  # run directory; empty = runs/{preset}-{size}
    # none | ddp | fsdp (launch with torchrun --nproc-per-node N -m archlab train ...)
    distributed: str = "none"
    # the weights the run started from (HF folder or archlab checkpoint); empty = random init
    init_from: str = ""
    # parameter-name patterns that train, e.g. "layers.1.*,norm.*"; empty = all
    trainable: tuple[str, ...] = ()
    # LoRA adapters of this rank on lora_targets (peft), the rest frozen; 0 = off
    lora_rank: int = 0
    # LoRA scale alpha / rank (Hu et al. 2021 keep alpha fixed as the rank varies)
    lora_alpha: float = 16.0
    # linear layers
    lora_targets: tuple[str, ...] = ("qkv_proj", "o_proj", "gate_up_proj", "up_proj", "down_proj")
    z_loss_coef: float = 0.0  # PaLM z-loss weight on log(Z)^2 (1e-4 in PaLM, OLMo 2); 0 = off
    data: DataConfig = field(default_factory=DataConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def __post_init__(self) -> None:
        check_finite(self, "")
        _check(self.preset in PRESETS, "preset", self.preset, "one of " + ", ".join(PRESETS))
        _check(self.size in SIZES, "size", self.size, "one of " + ", ".join(SIZES))
        _check(
            1 <= self.steps <= MAX_STEPS, "steps", self.steps, f"an integer from 1 to {MAX_STEPS:,}"
        )
        _check(
            self.distributed in DISTRIBUTED,
            "distributed",
            self.distributed,
            "one of " + ", ".join(DISTRIBUTED),
        )
        _check(self.z_loss_coef >= 0, "z_loss_coef", self.z_loss_coef, "a value >= 0")
        self.trainable = tuple(p.strip() for p in self.trainable if p.strip())
        _check(self.lora_rank >= 0, "lora_rank", self.lora_rank, "an integer >= 0 (0 = no LoRA)")
        _check(
            not (self.lora_rank and self.trainable),
            "trainable",
            ",".join(self.trainable),
            "empty with lora_rank > 0 (LoRA trains its adapters only)",
        )
        o = self.optimizer
        _check(
            not (self.lora_rank and o.name == "tiger" and o.tiger_rms_lr),
            "optimizer.tiger_rms_lr",
            o.tiger_rms_lr,
            "false with lora_rank > 0 (LoRA's B starts at 0 and Tiger's rate lr x RMS(B) keeps it "
            "there: "
            "nothing would train)",
        )
        if not self.out:
            self.out = f"runs/{self.preset}-{self.size}"
        if self.schedule.horizon is None:
            self.schedule.horizon = self.steps
        horizon = self.schedule.horizon
        # derived: always fits the run, so `--steps 1` just works
        if self.schedule.warmup_steps is None:
            self.schedule.warmup_steps = min(1000, max(1, horizon // 20), horizon - 1)
        planned = f"steps={horizon}" if horizon == self.steps else f"schedule.horizon={horizon}"
        _check(
            self.schedule.warmup_steps < horizon or self.schedule.name == "constant",
            "schedule.warmup_steps",
            self.schedule.warmup_steps,
            f"fewer than {planned}",
        )

    def to_dict(self) -> dict[str, Value]:
        # tuples -> lists: plain JSON/YAML values
        return json.loads(json.dumps(dataclasses.asdict(self)))


# -------------------------------------------------------------------------------------------
# resolution
def tokenizer_vocab_size(data: DataConfig) -> int:
    """Ids the tokenizer will have, known before the data is prepared: the model's default
    vocab_size."""
    prepared = Path(data.source) / "meta.json"
    if prepared.is_file():
        return int(json.loads(prepared.read_text(encoding="utf-8"))["tokenizer"]["vocab_size"])
    if data.tokenizer == "byte":
        return BYTE_VOCAB
    if data.tokenizer == "bpe":
        return data.vocab_size  # a small corpus may yield fewer ids; the spare rows are never used
    from archlab.data.tokenizer import Tokenizer  # a tokenizer file: read its size

    return Tokenizer.load(data.tokenizer).vocab_size


def _model_diff(old: ModelConfig, new: ModelConfig) -> str:
    a, b = old.to_dict(), new.to_dict()
    return ", ".join(f"{k} {a[k]!r} -> {b[k]!r}" for k in a if a[k] != b[k])


def resolve_model(
    train: TrainConfig, overrides: dict[str, Value], saved: dict[str, Value] | None = None
) -> ModelConfig:
    """The ModelConfig: preset at size (or a resumed run's saved model), then `model.*` overrides.

    vocab_size follows the tokenizer unless set explicitly. A resumed run must rebuild the same
    model.
    """
    typed = typed_overrides(
        ModelConfig, {k.removeprefix("model."): v for k, v in overrides.items()}, "model."
    )
    if saved is None:
        typed.setdefault("vocab_size", tokenizer_vocab_size(train.data))
        return build_preset(train.preset, train.size, **typed)
    old = ModelConfig.from_dict(dict(saved))
    new = ModelConfig.from_dict(layer_over(old.to_dict(), expand_shorthands(typed)))
    if new != old:
        raise ValueError(
            f"--resume: the model config differs from the checkpoint's ({_model_diff(old, new)}); "
            "resume with the same model or start a new --out"
        )
    return old


def resolve_config(
    layers: list[dict[str, Value]], saved: dict[str, dict[str, Value]] | None = None
) -> tuple[TrainConfig, ModelConfig]:
    """Merge flat dotted layers (YAML file, then flags) over the defaults, or over a resumed run's
    config.

    `saved` is a checkpoint's config.json ({"train": ..., "model": ...}); preset and size may not
    change.
    """
    tree = defaults(TrainConfig)
    if saved is not None:
        for key, value in flatten(saved["train"]).items():
            set_dotted(TrainConfig, tree, key, value)
    model_overrides: dict[str, Value] = {}
    for layer in layers:
        for key, value in layer.items():
            if key.startswith("model."):
                model_overrides[key] = value
            elif key == "model":
                raise ValueError(
                    "config key 'model' is a section; set its fields, e.g. model.n_layers"
                )
            else:
                set_dotted(TrainConfig, tree, key, value)
    train = build(TrainConfig, tree)
    asked = any("data.tokenizer" in layer for layer in layers)
    if asked and (Path(train.data.source) / "meta.json").is_file():
        from archlab.data.prepare import (
            check_prepared_tokenizer,  # numpy and tokenizers only when needed
        )

        check_prepared_tokenizer(
            Path(train.data.source), train.data.tokenizer, train.data.vocab_size
        )
    # trains with its own tokenizer and tokens
    prepared = (Path(train.data.source) / "meta.json").is_file()
    if any("data.bpe_dropout" in layer for layer in layers) and prepared:
        from archlab.data.prepare import check_prepared_dropout

        check_prepared_dropout(Path(train.data.source), train.data.bpe_dropout)
    _check(
        prepared or not (train.data.bpe_dropout and train.data.tokenizer == "byte"),
        "data.bpe_dropout",
        train.data.bpe_dropout,
        "0 with data.tokenizer byte (it has no merges to drop)",
    )
    if saved is not None:
        for name in ("preset", "size"):
            if getattr(train, name) != saved["train"][name]:
                raise ValueError(
                    f"--resume: {name} {getattr(train, name)!r} differs from the checkpoint's "
                    f"{saved['train'][name]!r}; resume with the same model or start a new --out"
                )
    model = resolve_model(train, model_overrides, saved["model"] if saved is not None else None)
    if train.data.block_size is None:
        train.data.block_size = model.max_seq_len
    if train.data.block_size > model.max_seq_len:
        raise ValueError(
            f"data.block_size={train.data.block_size} is not allowed: at most model.max_seq_len="
            f"{model.max_seq_len} (raise --model.max_seq_len)"
        )
    limit = context_tokens(model)
    n = train.logging.sample_tokens
    # no room for a prompt
    if train.logging.samples and n is not None and limit is not None and n >= limit:
        raise ValueError(
            f"logging.sample_tokens={n} is not allowed: below the model's {limit}-token context "
            "(the "
            "sample prompt needs a token of it); leave it unset to fit the default"
        )
    return train, model


def context_tokens(model: ModelConfig) -> int | None:
    """Tokens the model handles (infer/prompts.py's context_limit, without torch): max_seq_len, or
    its RoPE scaling kind's limit (None: ReRoPE has none)."""
    s = model.rope_scaling
    if model.position != "rope" or s is None:
        return model.max_seq_len
    return ROPE_KINDS[s.kind].context_limit(s, model.max_seq_len)
