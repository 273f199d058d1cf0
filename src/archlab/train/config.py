"""`TrainConfig`: every training knob as one typed, commented field, and the merge that fills it.

Values are layered defaults < preset < YAML file < `--dotted.key value` flags (a resumed run starts from
its saved config instead of the defaults). Keys under `model.` go to the `ModelConfig` built from
`preset`/`size`; every other key names a `TrainConfig` field, e.g. `--optimizer.lr 3e-4`. Each section
checks its values in `__post_init__` and names the field, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from archlab.nn.config import ModelConfig, parse_value
from archlab.nn.presets import PRESETS, SIZES
from archlab.train.optim import DEFAULT_BETAS, OPTIMIZERS
from archlab.train.schedule import DECAY_SHAPES, SCHEDULES

DISTRIBUTED = ("none", "ddp", "fsdp")  # none: one process; ddp / fsdp: launched by torchrun
DTYPES = ("fp32", "bf16")  # bf16 = autocast for matmuls; weights, grads and optimizer state stay fp32
DEVICES = ("auto", "cpu", "cuda")  # auto = cuda when available
BYTE_VOCAB = 256

Value = str | int | float | bool | None | tuple | list | dict


def _check(ok: bool, name: str, value: object, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{name}={value!r} is not allowed: {allowed}")


@dataclass
class DataConfig:
    source: str = "stdlib"  # text/JSONL file or folder, `stdlib` (offline Python sources), `hf:NAME`, a prepared folder
    tokenizer: str = "byte"  # byte (256 ids, nothing to train) | bpe (trained on the corpus) | path to a tokenizer.json
    vocab_size: int = 8192  # ids a bpe tokenizer learns; ignored by byte
    val_fraction: float = 0.05  # share of documents held out for validation
    dir: str = ""  # where the token memmaps go; empty = RUN_DIR/data
    batch_size: int = 32  # sequences per optimizer step, all ranks and micro-steps together
    block_size: int | None = None  # tokens per sequence; None = model.max_seq_len

    def __post_init__(self) -> None:
        _check(self.batch_size >= 1, "data.batch_size", self.batch_size, "an integer >= 1")
        _check(self.block_size is None or self.block_size >= 1, "data.block_size", self.block_size, "None or >= 1")
        _check(0 < self.val_fraction < 1, "data.val_fraction", self.val_fraction, "a fraction in (0, 1)")


@dataclass
class OptimizerConfig:
    name: str = "adamw"  # adamw | lion | tiger (train/optim.py OPTIMIZERS)
    lr: float = 1e-3  # peak learning rate; 1e-3 suits tiny models with AdamW, use ~3-10x less with lion/tiger
    betas: tuple[float, ...] | None = None  # None = default: adamw (0.9, 0.95), lion (0.9, 0.99), tiger (0.945,)
    eps: float = 1e-8  # AdamW's denominator guard
    weight_decay: float = 0.1  # decoupled decay on weight matrices only (GPT-3, LLaMA, PaLM use 0.1)
    decay_embeddings: bool = False  # also decay embedding / position tables (usually hurts rare tokens)
    grad_clip: float = 1.0  # clip the global gradient L2 norm to this; 0 = no clipping (norm still logged)
    grad_accum: int = 1  # micro-steps whose gradients add up to one optimizer step (same batch, less memory)

    def __post_init__(self) -> None:
        _check(self.name in OPTIMIZERS, "optimizer.name", self.name, "one of " + ", ".join(OPTIMIZERS))
        _check(self.lr >= 0, "optimizer.lr", self.lr, "a learning rate >= 0")
        _check(self.weight_decay >= 0, "optimizer.weight_decay", self.weight_decay, "a value >= 0")
        _check(self.grad_clip >= 0, "optimizer.grad_clip", self.grad_clip, "a norm >= 0 (0 = off)")
        _check(self.grad_accum >= 1, "optimizer.grad_accum", self.grad_accum, "an integer >= 1")
        _check(self.eps > 0, "optimizer.eps", self.eps, "a value > 0")
        if self.betas is None:
            self.betas = DEFAULT_BETAS[self.name]
        self.betas = tuple(float(b) for b in self.betas)
        want = len(DEFAULT_BETAS[self.name])
        _check(len(self.betas) == want and all(0 <= b < 1 for b in self.betas), "optimizer.betas",
               list(self.betas), f"{want} value(s) in [0, 1) for {self.name}")


@dataclass
class ScheduleConfig:
    name: str = "cosine"  # cosine | constant | wsd (train/schedule.py SCHEDULES)
    warmup_steps: int | None = None  # linear warmup length; None = 5% of the run, at least 1, at most 1000
    min_lr_ratio: float = 0.1  # lr at the end of the decay, as a fraction of optimizer.lr (LLaMA: 0.1)
    decay_fraction: float = 0.2  # wsd: share of the run spent cooling down at the end
    decay_shape: str = "linear"  # wsd cooldown: linear | 1-sqrt (Hägele et al., arXiv 2405.18392)
    horizon: int | None = None  # steps the schedule is planned for; None = steps. A resume keeps it (see --extend)
    extensions: tuple[int, ...] = ()  # set by --resume --extend: (at step, new end) pairs, flattened

    def end(self) -> int:
        """The step where the lr schedule ends: the planned horizon, or the last extension's end."""
        return self.extensions[-1] if self.extensions else int(self.horizon or 0)

    def extension_pairs(self) -> list[tuple[int, int]]:
        return list(zip(self.extensions[::2], self.extensions[1::2]))

    def __post_init__(self) -> None:
        _check(self.name in SCHEDULES, "schedule.name", self.name, "one of " + ", ".join(SCHEDULES))
        _check(self.warmup_steps is None or self.warmup_steps >= 0, "schedule.warmup_steps", self.warmup_steps,
               "None or an integer >= 0")
        _check(0 <= self.min_lr_ratio <= 1, "schedule.min_lr_ratio", self.min_lr_ratio, "a fraction in [0, 1]")
        _check(0 < self.decay_fraction <= 1, "schedule.decay_fraction", self.decay_fraction, "a fraction in (0, 1]")
        _check(self.decay_shape in DECAY_SHAPES, "schedule.decay_shape", self.decay_shape,
               "one of " + ", ".join(DECAY_SHAPES))
        _check(self.horizon is None or self.horizon >= 1, "schedule.horizon", self.horizon, "None or an integer >= 1")
        self.extensions = tuple(int(v) for v in self.extensions)
        pairs = self.extension_pairs()
        _check(len(self.extensions) % 2 == 0 and all(at < end for at, end in pairs), "schedule.extensions",
               list(self.extensions), "(at step, new end) pairs with at < end")


@dataclass
class PrecisionConfig:
    dtype: str = "fp32"  # fp32 | bf16 (autocast; master weights and optimizer state stay fp32)
    device: str = "auto"  # auto | cpu | cuda; under torchrun each rank takes cuda:LOCAL_RANK
    compile: bool = False  # torch.compile the model (faster steps after a slow first one)

    def __post_init__(self) -> None:
        _check(self.dtype in DTYPES, "precision.dtype", self.dtype, "one of " + ", ".join(DTYPES))
        _check(self.device in DEVICES, "precision.device", self.device, "one of " + ", ".join(DEVICES))


@dataclass
class CheckpointConfig:
    save_every: int = 100  # steps between checkpoints; 0 = only at the end (and on Ctrl-C / SIGTERM)
    keep_last: int = 2  # newest checkpoints kept; the best by val loss is kept as well
    max_bad_steps: int = 5  # consecutive non-finite steps (skipped) before the run stops

    def __post_init__(self) -> None:
        _check(self.save_every >= 0, "checkpoint.save_every", self.save_every, "an integer >= 0 (0 = end only)")
        _check(self.keep_last >= 1, "checkpoint.keep_last", self.keep_last, "an integer >= 1")
        _check(self.max_bad_steps >= 1, "checkpoint.max_bad_steps", self.max_bad_steps, "an integer >= 1")


@dataclass
class LoggingConfig:
    log_every: int = 10  # steps between metrics.jsonl / TensorBoard rows (every step is in the progress bar)
    eval_every: int = 100  # steps between validation losses; 0 = only at the end
    eval_batches: int = 10  # validation batches per evaluation (the same batches every time)
    ratio_every: int = 100  # steps between per-layer update/param norm ratios; 0 = never
    samples: int = 1  # generated samples shown at each evaluation; 0 = none
    sample_tokens: int = 64  # new tokens per sample
    sample_prompt: str | None = None  # prompt of the samples; None = the first 4 characters of the validation text
    temperature: float = 0.8  # sampling temperature of the samples; 0 = greedy
    tensorboard: bool = True  # also write TensorBoard event files under RUN_DIR/tb
    progress: bool = True  # progress on rank 0: a bar on a terminal, else a line every ~5% of the run

    def __post_init__(self) -> None:
        for name in ("log_every",):
            _check(getattr(self, name) >= 1, f"logging.{name}", getattr(self, name), "an integer >= 1")
        for name in ("eval_every", "eval_batches", "ratio_every", "samples", "sample_tokens"):
            _check(getattr(self, name) >= 0, f"logging.{name}", getattr(self, name), "an integer >= 0")
        _check(self.temperature >= 0, "logging.temperature", self.temperature, "a value >= 0 (0 = greedy)")
        _check(self.sample_prompt is None or bool(self.sample_prompt) or not self.samples, "logging.sample_prompt",
               self.sample_prompt, "a non-empty prompt (or None) when logging.samples > 0")


@dataclass
class TrainConfig:
    preset: str = "llama"  # architecture (archlab.nn.presets.PRESETS); model.* keys override its fields
    size: str = "tiny"  # size (archlab.nn.presets.SIZES)
    steps: int = 200  # optimizer steps of the whole run (a resumed run continues up to this)
    seed: int = 0  # seeds weights, dropout and the batch order
    out: str = ""  # run directory; empty = runs/{preset}-{size}
    distributed: str = "none"  # none | ddp | fsdp (launch with torchrun --nproc-per-node N -m archlab train ...)
    z_loss_coef: float = 0.0  # PaLM z-loss weight on log(Z)^2 (1e-4 in PaLM, OLMo 2); 0 = off
    data: DataConfig = field(default_factory=DataConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def __post_init__(self) -> None:
        _check(self.preset in PRESETS, "preset", self.preset, "one of " + ", ".join(PRESETS))
        _check(self.size in SIZES, "size", self.size, "one of " + ", ".join(SIZES))
        _check(self.steps >= 1, "steps", self.steps, "an integer >= 1")
        _check(self.distributed in DISTRIBUTED, "distributed", self.distributed, "one of " + ", ".join(DISTRIBUTED))
        _check(self.z_loss_coef >= 0, "z_loss_coef", self.z_loss_coef, "a value >= 0")
        if not self.out:
            self.out = f"runs/{self.preset}-{self.size}"
        if self.schedule.horizon is None:
            self.schedule.horizon = self.steps
        horizon = self.schedule.horizon
        if self.schedule.warmup_steps is None:
            self.schedule.warmup_steps = min(1000, max(1, horizon // 20))
        planned = f"steps={horizon}" if horizon == self.steps else f"schedule.horizon={horizon}"
        _check(self.schedule.warmup_steps < horizon or self.schedule.name == "constant", "schedule.warmup_steps",
               self.schedule.warmup_steps, f"fewer than {planned}")

    def to_dict(self) -> dict[str, Value]:
        return json.loads(json.dumps(dataclasses.asdict(self)))  # tuples -> lists: plain JSON/YAML values


# ----------------------------------------------------------------------------------------- typed values
def _coerce(hint: Any, value: Value, name: str) -> Value:
    """`value` (a CLI string or a YAML scalar/list) as the type `hint` of field `name`."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
        if type(None) in options:
            return None
    for kind in options:
        if typing.get_origin(kind) is tuple:
            items = value if isinstance(value, (list, tuple)) else str(value).strip("()[] ").split(",")
            inner = typing.get_args(kind)[0]
            return tuple(_coerce(inner, v.strip() if isinstance(v, str) else v, name) for v in items if v != "")
        if kind is bool and isinstance(value, bool):
            return value
        if kind is bool and isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        if kind in (int, float) and not isinstance(value, bool):
            try:
                number = kind(value)
            except (TypeError, ValueError):
                continue
            if kind is int and isinstance(value, float) and number != value:
                continue
            return number
        if kind is str and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    allowed = " or ".join(getattr(k, "__name__", str(k)).replace("NoneType", "None") for k in options)
    raise ValueError(f"{name}={value!r} is not allowed: expected {allowed}")


def _defaults(cls: type) -> dict[str, Value]:
    """The field defaults of a dataclass tree as nested dicts, before any __post_init__ resolves them."""
    out: dict[str, Value] = {}
    for f in fields(cls):
        if f.default_factory is not dataclasses.MISSING:
            out[f.name] = _defaults(f.default_factory)
        else:
            out[f.name] = f.default
    return out


def _set_dotted(cls: type, tree: dict[str, Value], key: str, value: Value, prefix: str = "") -> None:
    """Set `a.b.c` in the nested dict `tree` of dataclass `cls`, coercing to the field's declared type."""
    head, _, rest = key.partition(".")
    hints = typing.get_type_hints(cls)
    where = f"{prefix}{head}"
    if head not in hints:
        known = ", ".join(f.name for f in fields(cls))
        raise ValueError(f"unknown config key {prefix + key!r}: {cls.__name__} has the fields {known}")
    sub = hints[head]
    if rest:
        if not dataclasses.is_dataclass(sub):
            raise ValueError(f"unknown config key {prefix + key!r}: {where} has no sub-fields")
        _set_dotted(sub, tree[head], rest, value, f"{where}.")
    elif dataclasses.is_dataclass(sub):
        raise ValueError(f"config key {where!r} is a section; set its fields, e.g. {where}.{fields(sub)[0].name}")
    else:
        tree[head] = _coerce(sub, value, where)


def _build(cls: type, tree: dict[str, Value]) -> Any:
    """The dataclass tree from nested dicts (inner sections first, so each __post_init__ checks once)."""
    hints = typing.get_type_hints(cls)
    kwargs = {k: _build(hints[k], v) if dataclasses.is_dataclass(hints[k]) else v for k, v in tree.items()}
    return cls(**kwargs)


def flatten(tree: dict[str, Value], prefix: str = "") -> dict[str, Value]:
    """{"optimizer": {"lr": 1}} -> {"optimizer.lr": 1}; `model` stays one level deep (its own fields)."""
    flat: dict[str, Value] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and not (prefix == "model." and key == "rope_scaling"):
            flat.update(flatten(value, f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


def parse_flags(args: list[str]) -> dict[str, str]:
    """`--a.b value` / `--a.b=value` pairs -> {"a.b": "value"} (dashes in names become underscores)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        flag = args[i]
        if not flag.startswith("--") or len(flag) == 2:
            raise ValueError(f"expected --key value, got {flag!r}")
        key, has_eq, value = flag[2:].partition("=")
        if not has_eq:
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                raise ValueError(f"flag {flag} needs a value")
            value, i = args[i + 1], i + 1
        out[key.replace("-", "_")] = value
        i += 1
    return out


def load_yaml(path: str | Path) -> dict[str, Value]:
    """A YAML run config as flat dotted keys."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    tree = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(tree, dict):
        raise ValueError(f"config file {path} must hold a mapping of keys to values, got {type(tree).__name__}")
    return flatten(tree)


# ------------------------------------------------------------------------------------------- resolution
def tokenizer_vocab_size(data: DataConfig) -> int:
    """Ids the tokenizer will have, known before the data is prepared: the model's default vocab_size."""
    prepared = Path(data.source) / "meta.json"
    if prepared.is_file():
        return int(json.loads(prepared.read_text(encoding="utf-8"))["tokenizer"]["vocab_size"])
    if data.tokenizer == "byte":
        return BYTE_VOCAB
    if data.tokenizer == "bpe":
        return data.vocab_size  # a small corpus may yield fewer ids; the spare rows are never used
    from archlab.data.tokenizer import Tokenizer  # a tokenizer file: read its size

    return Tokenizer.load(data.tokenizer).vocab_size


def _model_value(name: str, value: Value) -> Value:
    """A `model.*` value typed like its ModelConfig field (CLI strings are parsed, YAML values kept)."""
    if name not in {f.name for f in fields(ModelConfig)}:
        known = ", ".join(f.name for f in fields(ModelConfig))
        raise ValueError(f"unknown config key 'model.{name}': ModelConfig has the fields {known}")
    return parse_value(ModelConfig, name, value) if isinstance(value, str) else value


def _model_diff(old: ModelConfig, new: ModelConfig) -> str:
    a, b = old.to_dict(), new.to_dict()
    return ", ".join(f"{k} {a[k]!r} -> {b[k]!r}" for k in a if a[k] != b[k])


def resolve_model(
    train: TrainConfig, overrides: dict[str, Value], saved: dict[str, Value] | None = None
) -> ModelConfig:
    """The ModelConfig: preset at size (or a resumed run's saved model), then `model.*` overrides.

    vocab_size follows the tokenizer unless set explicitly. A resumed run must rebuild the same model.
    """
    typed = {k.removeprefix("model."): _model_value(k.removeprefix("model."), v) for k, v in overrides.items()}
    if saved is None:
        typed.setdefault("vocab_size", tokenizer_vocab_size(train.data))
        return ModelConfig.from_preset(train.preset, train.size, **typed)
    old = ModelConfig.from_dict(dict(saved))
    new = ModelConfig.from_dict({**old.to_dict(), **typed})
    if new != old:
        raise ValueError(f"--resume: the model config differs from the checkpoint's ({_model_diff(old, new)}); "
                         "resume with the same model or start a new --out")
    return old


def resolve_config(
    layers: list[dict[str, Value]], saved: dict[str, dict[str, Value]] | None = None
) -> tuple[TrainConfig, ModelConfig]:
    """Merge flat dotted layers (YAML file, then flags) over the defaults, or over a resumed run's config.

    `saved` is a checkpoint's config.json ({"train": ..., "model": ...}); preset and size may not change.
    """
    tree = _defaults(TrainConfig)
    if saved is not None:
        for key, value in flatten(saved["train"]).items():
            _set_dotted(TrainConfig, tree, key, value)
    model_overrides: dict[str, Value] = {}
    for layer in layers:
        for key, value in layer.items():
            if key.startswith("model."):
                model_overrides[key] = value
            elif key == "model":
                raise ValueError("config key 'model' is a section; set its fields, e.g. model.n_layers")
            else:
                _set_dotted(TrainConfig, tree, key, value)
    train = _build(TrainConfig, tree)
    if saved is not None:
        for name in ("preset", "size"):
            if getattr(train, name) != saved["train"][name]:
                raise ValueError(f"--resume: {name} {getattr(train, name)!r} differs from the checkpoint's "
                                 f"{saved['train'][name]!r}; resume with the same model or start a new --out")
    model = resolve_model(train, model_overrides, saved["model"] if saved is not None else None)
    if train.data.block_size is None:
        train.data.block_size = model.max_seq_len
    if train.data.block_size > model.max_seq_len:
        raise ValueError(f"data.block_size={train.data.block_size} is not allowed: at most model.max_seq_len="
                         f"{model.max_seq_len} (raise --model.max_seq_len)")
    return train, model
