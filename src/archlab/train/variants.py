"""The optimizers and lr schedules of train/ by name, and the defaults `TrainConfig`
shows, without torch.

An optimizer is one `OptimizerKind` entry of `OPTIMIZERS`: its builder (torch, named lazily as
"module:function" and resolved when a run builds it), its default betas and whether it is a sign
optimizer. train/sections.py validates `optimizer.name` against the keys without importing torch;
train/optim.py builds the entry's optimizer. A schedule and a cooldown shape are one entry of
`SCHEDULES` / `DECAY_SHAPES` each, their pure functions in train/schedule.py (which builds a
`ScheduleConfig`'s schedule, so the section cannot read its names from there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from archlab.nn.registry import Registry, resolve


@dataclass(frozen=True)
class OptimizerKind:
    """What archlab knows about one optimizer."""

    builder: str  # "module:function", (groups, lr, betas, eps, **options) -> torch.optim.Optimizer
    # the default betas (as many as it takes), used where the config leaves betas unset
    betas: tuple[float, ...]
    # it steps each coordinate by a sign: the embedding remedies apply (kexue.fm/archives/9736)
    sign: bool = False

    def build_function(self) -> Callable[..., Any]:
        return resolve(self.builder)


OPTIMIZERS: dict[str, OptimizerKind] = {
    # beta2 0.95 instead of 0.999: faster reaction to loss spikes (GPT-3, LLaMA)
    "adamw": OptimizerKind("archlab.train.optim:adamw", (0.9, 0.95)),
    # the paper's language-model betas
    "lion": OptimizerKind("archlab.train.optim:lion", (0.9, 0.99), sign=True),
    # kexue.fm/archives/9512 and bojone/tiger for language models (0.945 is the vision value)
    "tiger": OptimizerKind("archlab.train.optim:tiger", (0.965,), sign=True),
}
DEFAULT_BETAS: dict[str, tuple[float, ...]] = {
    name: kind.betas for name, kind in OPTIMIZERS.items()
}
# the embedding remedies' optimizers
SIGN_OPTIMIZERS = tuple(name for name, kind in OPTIMIZERS.items() if kind.sign)
# how tables are stepped: like everything else, or by AdamW (mixed)
EMBEDDING_OPTIMIZERS = ("same", "adamw")
EMBEDDING_LR_RATIO = 3.0  # mixed optimizer: the tables' AdamW lr = this x the sign optimizer's lr
# Tiger's NaN guard: theta <- 0.99 theta (gains: 1 + 0.99 (theta - 1)) (bojone/tiger)
NAN_SHRINK = 0.99

# lr schedule name -> its pure function of the step (train/schedule.py)
SCHEDULES = Registry(
    "schedule",
    {
        "cosine": "archlab.train.schedule:warmup_cosine",
        "constant": "archlab.train.schedule:warmup_constant",
        "wsd": "archlab.train.schedule:warmup_stable_decay",
    },
)
# WSD cooldown shape name -> f(p) in [0, 1], the share of (max_lr - min_lr) left at progress p
# (1-sqrt: Hägele et al., arXiv 2405.18392)
DECAY_SHAPES = Registry(
    "decay shape",
    {
        "linear": "archlab.train.schedule:linear_cooldown",
        "1-sqrt": "archlab.train.schedule:sqrt_cooldown",
    },
)
