"""Learning-rate schedules as pure functions of the step.

`step` counts the optimizer updates already taken (0 for the first update). Every schedule starts
with a linear warmup, `max_lr * (step + 1) / warmup_steps` for `step < warmup_steps`, because Adam's
second-moment estimate is noisy for the first steps and a full lr then can blow the model up.
After the warmup:

- cosine: `min_lr + (max_lr - min_lr) * (1 + cos(pi * p)) / 2`, p = (step - warmup) / (total -
  warmup) (GPT-3, LLaMA; nanoGPT's `get_lr`).
- constant: `max_lr`.
- wsd (warmup-stable-decay): `max_lr` until the last `decay_steps`, then a cooldown to `min_lr`
  with p = (step - decay_start) / decay_steps, shaped `linear` (1 - p) or `1-sqrt` (1 - sqrt(p));
  the 1-sqrt cooldown is from Hägele et al., arXiv 2405.18392. A run can be extended from
  the stable phase.

p is clamped to [0, 1], so steps past the end stay at `min_lr`. `build_schedule(cfg, lr)` is a run's
schedule from its `ScheduleConfig` section; `lr_schedule` the same from plain arguments.

Extending a run (`archlab train --resume --steps N --extend`): the schedule's end is part of the
run, so a longer run is an explicit choice, recorded as `(at, end)` pairs in the run config. Each
extension keeps every step before `at` unchanged and always decays to `min_lr` at the new end
(docs/training.md states the rule for users):
- decay not begun at `at` (still in warmup, or in WSD's stable phase): the schedule is the one
  planned for the new end: WSD's stable phase goes on and its cooldown moves to the new end, as
  Hägele et al. (arXiv 2405.18392) extend a run from a stable-phase checkpoint; its length is
  `decay_fraction` of the new end, but never starts before `at`;
- decay under way (`at` before the schedule's end): a new tail decays from the lr at `at` down to
  `min_lr` at the new end (cosine: a half cosine; WSD: its cooldown shape), so the lr never jumps;
- decay finished (`at` at or past the end, the lr at `min_lr`): the lr re-warms linearly over
  `warmup_steps` steps from `min_lr` to the schedule planned for the new end, then follows that
  plan, the re-warm-then-decay of continued pre-training (Gupta et al., arXiv 2308.04014). With
  `warmup_steps` 0 it steps straight onto the plan.
- constant has no end: extending it changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

from archlab.train.sections import ScheduleConfig
from archlab.train.variants import DECAY_SHAPES, SCHEDULES


def linear_cooldown(p: float) -> float:
    """WSD's linear cooldown: the share 1 - p of (max_lr - min_lr) left at progress p."""
    return 1.0 - p


def sqrt_cooldown(p: float) -> float:
    """WSD's 1-sqrt cooldown (Hägele et al., arXiv 2405.18392): 1 - sqrt(p) left at progress p."""
    return 1.0 - math.sqrt(p)


def _progress(step: int, start: int, length: int) -> float:
    return min(1.0, max(0.0, (step - start) / max(1, length)))


def warmup_cosine(
    step: int, max_lr: float, min_lr: float, warmup_steps: int, total_steps: int
) -> float:
    """Linear warmup, then a half cosine from max_lr down to min_lr at `total_steps`."""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    p = _progress(step, warmup_steps, total_steps - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * p))


def warmup_constant(step: int, max_lr: float, warmup_steps: int) -> float:
    """Linear warmup, then max_lr for ever."""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    return max_lr


def warmup_stable_decay(
    step: int,
    max_lr: float,
    min_lr: float,
    warmup_steps: int,
    total_steps: int,
    decay_steps: int,
    shape: str = "linear",
) -> float:
    """Linear warmup, max_lr, then the last `decay_steps` cool down to min_lr along `shape`."""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    start = total_steps - decay_steps
    if step < start:
        return max_lr
    return min_lr + (max_lr - min_lr) * DECAY_SHAPES[shape](_progress(step, start, decay_steps))


def build_schedule(cfg: ScheduleConfig, lr: float) -> Callable[[int], float]:
    """`lr_at(step) -> float` of a run's schedule section (a `TrainConfig`'s, whose horizon and
    warmup are resolved) with peak `lr`: decaying to `lr * cfg.min_lr_ratio`, extended by each of
    its `--extend` pairs."""
    if cfg.horizon is None or cfg.warmup_steps is None:
        raise ValueError(
            f"schedule.horizon={cfg.horizon!r}, schedule.warmup_steps={cfg.warmup_steps!r}: "
            "resolved by the TrainConfig that holds the section; build the schedule "
            "from its `schedule`"
        )
    return lr_schedule(
        cfg.name,
        lr,
        cfg.horizon,
        cfg.warmup_steps,
        lr * cfg.min_lr_ratio,
        cfg.decay_fraction,
        cfg.decay_shape,
        cfg.extension_pairs(),
    )


def lr_schedule(
    name: str,
    max_lr: float,
    total_steps: int,
    warmup_steps: int = 0,
    min_lr: float = 0.0,
    decay_fraction: float = 0.2,
    decay_shape: str = "linear",
    extensions: Sequence[tuple[int, int]] = (),
) -> Callable[[int], float]:
    """`lr_at(step) -> float` for the named schedule planned for `total_steps`, then each `(at,
    end)` extension in order (see the module docstring)."""
    if name not in SCHEDULES:
        raise ValueError(
            f"schedule.name: unknown schedule {name!r}; choose one of {sorted(SCHEDULES)}"
        )
    if decay_shape not in DECAY_SHAPES:
        raise ValueError(
            f"schedule.decay_shape: unknown shape {decay_shape!r}; one of {sorted(DECAY_SHAPES)}"
        )
    decay_steps = max(1, round(decay_fraction * total_steps))
    lr_at = _planned(name, max_lr, min_lr, warmup_steps, total_steps, decay_steps, decay_shape)
    decay_start: int | None = _decay_start(name, warmup_steps, total_steps, decay_steps)
    plan_end = total_steps
    for at, end in extensions:
        if decay_start is None:  # constant: nothing depends on the end
            continue
        new_decay = max(1, round(decay_fraction * end))
        # nothing has decayed yet: the plan for the new end equals the old one before `at`
        if at <= decay_start:
            new_decay = end - max(at, end - new_decay)
            lr_at = partial(
                _switch,
                before=lr_at,
                at=at,
                after=_planned(name, max_lr, min_lr, warmup_steps, end, new_decay, decay_shape),
            )
            decay_start = _decay_start(name, warmup_steps, end, new_decay)
        elif at < plan_end:
            shape = _half_cosine if name == "cosine" else DECAY_SHAPES[decay_shape]
            lr_at = partial(
                _tail, before=lr_at, at=at, end=end, start_lr=lr_at(at), min_lr=min_lr, shape=shape
            )
            decay_start = -1  # decaying from here on: any later extension is another tail
        else:  # finished at min_lr: re-warm onto the plan for the new end
            plan = _planned(name, max_lr, min_lr, warmup_steps, end, new_decay, decay_shape)
            lr_at = partial(
                _rewarm, before=lr_at, at=at, warmup=warmup_steps, start_lr=lr_at(at), plan=plan
            )
            start = _decay_start(name, warmup_steps, end, new_decay)
            # WSD re-warmed into its stable phase
            decay_start = start if start >= at + warmup_steps else -1
        plan_end = end
    return lr_at


def _planned(
    name: str,
    max_lr: float,
    min_lr: float,
    warmup_steps: int,
    total_steps: int,
    decay_steps: int,
    shape: str,
) -> Callable[[int], float]:
    if name == "cosine":
        return partial(
            warmup_cosine,
            max_lr=max_lr,
            min_lr=min_lr,
            warmup_steps=warmup_steps,
            total_steps=total_steps,
        )
    if name == "constant":
        return partial(warmup_constant, max_lr=max_lr, warmup_steps=warmup_steps)
    return partial(
        warmup_stable_decay,
        max_lr=max_lr,
        min_lr=min_lr,
        warmup_steps=warmup_steps,
        total_steps=total_steps,
        decay_steps=decay_steps,
        shape=shape,
    )


def _decay_start(name: str, warmup_steps: int, total_steps: int, decay_steps: int) -> int | None:
    """The last step whose lr is still the undecayed plan (None: the schedule never decays)."""
    if name == "constant":
        return None
    return warmup_steps if name == "cosine" else max(warmup_steps, total_steps - decay_steps)


def _switch(
    step: int, before: Callable[[int], float], at: int, after: Callable[[int], float]
) -> float:
    """`before` up to `at`, `after` from there on."""
    return before(step) if step < at else after(step)


def _rewarm(
    step: int,
    before: Callable[[int], float],
    at: int,
    warmup: int,
    start_lr: float,
    plan: Callable[[int], float],
) -> float:
    """`before` up to `at`; then linearly from `start_lr` to `plan(at + warmup)` over `warmup` steps
    (the first warmup's (s + 1) / W shape); then `plan`."""
    if step < at:
        return before(step)
    if step < at + warmup:
        return start_lr + (plan(at + warmup) - start_lr) * (step - at + 1) / warmup
    return plan(step)


def _half_cosine(p: float) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * p))


def _tail(
    step: int,
    before: Callable[[int], float],
    at: int,
    end: int,
    start_lr: float,
    min_lr: float,
    shape: Callable[[float], float],
) -> float:
    """`before` up to `at`, then from `start_lr` down to `min_lr` at `end` along `shape`."""
    if step < at:
        return before(step)
    return min_lr + (start_lr - min_lr) * shape(_progress(step, at, end - at))
