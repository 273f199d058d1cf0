"""Learning-rate schedules against their formulas at chosen steps (values worked out by hand)."""

from __future__ import annotations

import math

import pytest

from archlab.train.config import resolve_config
from archlab.train.schedule import build_schedule

MAX, MIN = 1.0, 0.1


def test_warmup_is_linear_and_reaches_max_lr_on_its_last_step() -> None:
    lr = build_schedule("cosine", MAX, total_steps=110, warmup_steps=10, min_lr=MIN)
    assert [lr(s) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])


def test_cosine_at_chosen_steps() -> None:
    lr = build_schedule("cosine", MAX, total_steps=110, warmup_steps=10, min_lr=MIN)
    assert lr(10) == pytest.approx(1.0)  # p = 0
    assert lr(35) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi / 4)))  # p = 1/4
    assert lr(60) == pytest.approx(0.55)  # p = 1/2: halfway between max and min
    assert lr(110) == pytest.approx(0.1)  # p = 1
    assert lr(500) == pytest.approx(0.1)  # past the end: held at min


def test_constant_with_warmup() -> None:
    lr = build_schedule("constant", 3e-4, total_steps=100, warmup_steps=4)
    assert [lr(s) for s in (0, 1, 3, 4, 99, 1000)] == pytest.approx([7.5e-5, 1.5e-4, 3e-4, 3e-4, 3e-4, 3e-4])


def test_constant_without_warmup_starts_at_max() -> None:
    assert build_schedule("constant", 2.0, total_steps=10)(0) == 2.0


@pytest.mark.parametrize(("shape", "left_at_half"), [("linear", 0.5), ("1-sqrt", 1 - math.sqrt(0.5))])
def test_wsd_stable_then_cooldown(shape: str, left_at_half: float) -> None:
    # 100 steps, 20% cooldown: steps 80..99 decay, with p = (step - 80) / 20
    lr = build_schedule("wsd", MAX, total_steps=100, warmup_steps=10, min_lr=MIN, decay_fraction=0.2,
                        decay_shape=shape)
    assert lr(5) == pytest.approx(0.6)
    assert [lr(s) for s in (10, 50, 79, 80)] == pytest.approx([1.0] * 4)
    assert lr(90) == pytest.approx(0.1 + 0.9 * left_at_half)
    assert lr(100) == pytest.approx(0.1)


def test_wsd_1_sqrt_sits_below_linear_during_the_cooldown() -> None:
    lin = build_schedule("wsd", MAX, 100, 0, MIN, 0.2, "linear")
    sqrt = build_schedule("wsd", MAX, 100, 0, MIN, 0.2, "1-sqrt")
    assert all(sqrt(s) < lin(s) for s in range(81, 100))


def test_unknown_schedule_and_shape_are_named() -> None:
    with pytest.raises(ValueError, match="unknown schedule 'linear'; choose one of"):
        build_schedule("linear", 1.0, 10)
    with pytest.raises(ValueError, match="unknown shape 'sqrt'"):
        build_schedule("wsd", 1.0, 10, decay_shape="sqrt")


def test_config_resolves_default_warmup_and_rejects_a_warmup_longer_than_the_run() -> None:
    train, _ = resolve_config([{"steps": "200"}])
    assert train.schedule.warmup_steps == 10  # 5% of the run
    with pytest.raises(ValueError, match="schedule.warmup_steps=50 is not allowed: fewer than steps=20"):
        resolve_config([{"steps": "20", "schedule.warmup_steps": "50"}])
    with pytest.raises(ValueError, match="schedule.name='step' is not allowed: one of cosine, constant, wsd"):
        resolve_config([{"schedule.name": "step"}])
