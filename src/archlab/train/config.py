"""`TrainConfig`: every training knob as one typed, commented field, and the merge that fills it.

Values are layered defaults < preset < YAML file < `--dotted.key value` flags (a resumed run starts
from its saved config instead of the defaults). Keys under `model.` go to the `ModelConfig` built
from `preset`/`size`; every other key names a `TrainConfig` field, e.g. `--optimizer.lr 3e-4`. How a
key and its text become a typed value is archlab/overrides.py (the grammar `archlab inspect` uses
too). Each section (train/sections.py) checks its values in `__post_init__` and names the field,
the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from archlab.nn.config import ModelConfig, check_finite, expand_shorthands, layer_over
from archlab.nn.presets import PRESETS, SIZES, build_preset
from archlab.overrides import Value, build, defaults, flatten, set_dotted, typed_overrides
from archlab.train.sections import (
    MAX_STEPS,
    CheckpointConfig,
    DataConfig,
    LoggingConfig,
    OptimizerConfig,
    PrecisionConfig,
    ScheduleConfig,
    check_value,
)

DISTRIBUTED = ("none", "ddp", "fsdp")  # none: one process; ddp / fsdp: launched by torchrun
BYTE_VOCAB = 256


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
        check_value(self.preset in PRESETS, "preset", self.preset, "one of " + ", ".join(PRESETS))
        check_value(self.size in SIZES, "size", self.size, "one of " + ", ".join(SIZES))
        check_value(
            1 <= self.steps <= MAX_STEPS, "steps", self.steps, f"an integer from 1 to {MAX_STEPS:,}"
        )
        check_value(
            self.distributed in DISTRIBUTED,
            "distributed",
            self.distributed,
            "one of " + ", ".join(DISTRIBUTED),
        )
        check_value(self.z_loss_coef >= 0, "z_loss_coef", self.z_loss_coef, "a value >= 0")
        self.trainable = tuple(p.strip() for p in self.trainable if p.strip())
        check_value(
            self.lora_rank >= 0, "lora_rank", self.lora_rank, "an integer >= 0 (0 = no LoRA)"
        )
        check_value(
            not (self.lora_rank and self.trainable),
            "trainable",
            ",".join(self.trainable),
            "empty with lora_rank > 0 (LoRA trains its adapters only)",
        )
        o = self.optimizer
        check_value(
            not (self.lora_rank and o.name == "tiger" and o.tiger_rms_lr),
            "optimizer.tiger_rms_lr",
            o.tiger_rms_lr,
            "false with lora_rank > 0 (LoRA's B starts at 0 and Tiger's rate lr x RMS(B) keeps it "
            "there: nothing would train)",
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
        check_value(
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
    """Ids the tokenizer will have, known before the data is prepared: the
    model's default vocab_size."""
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
    """The differing fields, by dotted key down into the groups: `rope.scaling.window 8 -> 9`."""
    a, b = flatten(old.to_dict()), flatten(new.to_dict())
    keys = {**a, **b}
    return ", ".join(f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in keys if a.get(k) != b.get(k))


def resolve_model(
    train: TrainConfig, overrides: dict[str, Value], saved: dict[str, Value] | None = None
) -> ModelConfig:
    """The ModelConfig: preset at size (or a resumed run's saved model), then `model.*` overrides.

    vocab_size follows the tokenizer unless set explicitly. A resumed run must rebuild
    the same model.
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
    """Merge flat dotted layers (YAML file, then flags) over the defaults, or over a
    resumed run's config.

    `saved` is a checkpoint's config.json ({"train": ..., "model": ...}); preset and size
    may not change.
    """
    train, model_overrides = _train_config(layers, saved)
    _check_data(train, layers)
    if saved is not None:
        for name in ("preset", "size"):
            if getattr(train, name) != saved["train"][name]:
                raise ValueError(
                    f"--resume: {name} {getattr(train, name)!r} differs from the checkpoint's "
                    f"{saved['train'][name]!r}; resume with the same model or start a new --out"
                )
    model = resolve_model(train, model_overrides, saved["model"] if saved is not None else None)
    _fit_to_the_model(train, model)
    return train, model


def _train_config(
    layers: list[dict[str, Value]], saved: dict[str, dict[str, Value]] | None
) -> tuple[TrainConfig, dict[str, Value]]:
    """The TrainConfig of the layers over the defaults (or a resumed run's saved train config), and
    the `model.*` keys, set aside for `resolve_model`."""
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
    return build(TrainConfig, tree), model_overrides


def _check_data(train: TrainConfig, layers: list[dict[str, Value]]) -> None:
    """A prepared data folder trains with its own tokenizer and tokens: a tokenizer or BPE-dropout
    asked for must be the folder's; BPE-dropout needs merges to drop."""
    prepared = (Path(train.data.source) / "meta.json").is_file()
    if prepared and any("data.tokenizer" in layer for layer in layers):
        from archlab.data.prepare import check_prepared_tokenizer  # numpy, tokenizers: when needed

        check_prepared_tokenizer(
            Path(train.data.source), train.data.tokenizer, train.data.vocab_size
        )
    if prepared and any("data.bpe_dropout" in layer for layer in layers):
        from archlab.data.prepare import check_prepared_dropout

        check_prepared_dropout(Path(train.data.source), train.data.bpe_dropout)
    check_value(
        prepared or not (train.data.bpe_dropout and train.data.tokenizer == "byte"),
        "data.bpe_dropout",
        train.data.bpe_dropout,
        "0 with data.tokenizer byte (it has no merges to drop)",
    )


def _fit_to_the_model(train: TrainConfig, model: ModelConfig) -> None:
    """The sequence length defaults to the model's and may not pass it; a sample needs room for a
    prompt within the model's context."""
    if train.data.block_size is None:
        train.data.block_size = model.max_seq_len
    if train.data.block_size > model.max_seq_len:
        raise ValueError(
            f"data.block_size={train.data.block_size} is not allowed: at most model.max_seq_len="
            f"{model.max_seq_len} (raise --model.max_seq_len)"
        )
    limit = model.context_limit
    n = train.logging.sample_tokens
    # no room for a prompt
    if train.logging.samples and n is not None and limit is not None and n >= limit:
        raise ValueError(
            f"logging.sample_tokens={n} is not allowed: below the model's {limit}-token context "
            "(the sample prompt needs a token of it); leave it unset to fit the default"
        )
