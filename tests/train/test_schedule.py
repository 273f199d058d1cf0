"""Learning-rate schedules against their formulas at chosen steps (values worked out by hand)."""

from __future__ import annotations

import math

import pytest

from archlab.train.config import resolve_config
from archlab.train.schedule import build_schedule, lr_schedule

MAX, MIN = 1.0, 0.1


def test_warmup_is_linear_and_reaches_max_lr_on_its_last_step() -> None:
    lr = lr_schedule("cosine", MAX, total_steps=110, warmup_steps=10, min_lr=MIN)
    assert [lr(s) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])


def test_cosine_at_chosen_steps() -> None:
    lr = lr_schedule("cosine", MAX, total_steps=110, warmup_steps=10, min_lr=MIN)
    assert lr(10) == pytest.approx(1.0)  # p = 0
    assert lr(35) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi / 4)))  # p = 1/4
    assert lr(60) == pytest.approx(0.55)  # p = 1/2: halfway between max and min
    assert lr(110) == pytest.approx(0.1)  # p = 1
    assert lr(500) == pytest.approx(0.1)  # past the end: held at min


def test_constant_with_warmup() -> None:
    lr = lr_schedule("constant", 3e-4, total_steps=100, warmup_steps=4)
    assert [lr(s) for s in (0, 1, 3, 4, 99, 1000)] == pytest.approx(
        [7.5e-5, 1.5e-4, 3e-4, 3e-4, 3e-4, 3e-4]
    )


def test_constant_without_warmup_starts_at_max() -> None:
    assert lr_schedule("constant", 2.0, total_steps=10)(0) == 2.0


@pytest.mark.parametrize(
    ("shape", "left_at_half"), [("linear", 0.5), ("1-sqrt", 1 - math.sqrt(0.5))]
)
def test_wsd_stable_then_cooldown(shape: str, left_at_half: float) -> None:
    # 100 steps, 20% cooldown: steps 80..99 decay, with p = (step - 80) / 20
    lr = lr_schedule(
        "wsd",
        MAX,
        total_steps=100,
        warmup_steps=10,
        min_lr=MIN,
        decay_fraction=0.2,
        decay_shape=shape,
    )
    assert lr(5) == pytest.approx(0.6)
    assert [lr(s) for s in (10, 50, 79, 80)] == pytest.approx([1.0] * 4)
    assert lr(90) == pytest.approx(0.1 + 0.9 * left_at_half)
    assert lr(100) == pytest.approx(0.1)


def test_wsd_1_sqrt_sits_below_linear_during_the_cooldown() -> None:
    lin = lr_schedule("wsd", MAX, 100, 0, MIN, 0.2, "linear")
    sqrt = lr_schedule("wsd", MAX, 100, 0, MIN, 0.2, "1-sqrt")
    assert all(sqrt(s) < lin(s) for s in range(81, 100))


def test_unknown_schedule_and_shape_are_named() -> None:
    with pytest.raises(ValueError, match="unknown schedule 'linear'; choose one of"):
        lr_schedule("linear", 1.0, 10)
    with pytest.raises(ValueError, match="unknown shape 'sqrt'"):
        lr_schedule("wsd", 1.0, 10, decay_shape="sqrt")


def test_config_resolves_default_warmup_and_rejects_a_warmup_longer_than_the_run() -> None:
    train, _ = resolve_config([{"steps": "200"}])
    assert train.schedule.warmup_steps == 10  # 5% of the run
    with pytest.raises(
        ValueError, match="schedule.warmup_steps=50 is not allowed: fewer than steps=20"
    ):
        resolve_config([{"steps": "20", "schedule.warmup_steps": "50"}])
    with pytest.raises(
        ValueError, match="schedule.name='step' is not allowed: one of cosine, constant, wsd"
    ):
        resolve_config([{"schedule.name": "step"}])


@pytest.mark.parametrize(("steps", "warmup"), [(1, 0), (2, 1), (19, 1), (40, 2), (10**6, 1000)])
def test_the_derived_warmup_fits_any_number_of_steps(steps: int, warmup: int) -> None:
    """`--steps 1` must not fail on a warmup the user never set: the derived one is always shorter
    than the run."""
    train, _ = resolve_config([{"steps": str(steps)}])
    assert train.schedule.warmup_steps == warmup
    lr = lr_schedule("cosine", MAX, steps, warmup_steps=warmup, min_lr=MIN)
    assert lr(0) == pytest.approx(MAX if warmup == 0 else MAX / warmup)


def test_a_runs_schedule_is_built_from_its_whole_section() -> None:
    """`build_schedule(cfg, lr)` reads every field of the section: the name, the resolved horizon
    and warmup, min_lr_ratio times the peak lr, the WSD decay, and the extensions (each compared
    with the formula given the same values by hand, at every step, and checked at chosen steps
    against the formula itself)."""
    train, _ = resolve_config(
        [
            {
                "steps": "100",
                "schedule.name": "wsd",
                "schedule.decay_fraction": "0.3",
                "schedule.decay_shape": "1-sqrt",
                "schedule.min_lr_ratio": "0.25",
                "schedule.warmup_steps": "5",
                "schedule.extensions": "60,150",
            }
        ]
    )
    lr = build_schedule(train.schedule, 2.0)
    by_hand = lr_schedule("wsd", 2.0, 100, 5, 0.5, 0.3, "1-sqrt", [(60, 150)])
    assert [lr(s) for s in range(200)] == [by_hand(s) for s in range(200)]
    assert lr(0) == pytest.approx(2.0 / 5) and lr(50) == 2.0  # warmup, then the stable phase
    # min_lr_ratio x lr at the new end
    assert lr(150) == pytest.approx(0.5) and lr(199) == pytest.approx(0.5)
    decay = round(0.3 * 150)  # the cooldown moved to the extension's end, 1-sqrt shaped
    assert lr(150 - decay // 2) == pytest.approx(
        0.5 + 1.5 * (1 - math.sqrt((decay - decay // 2) / decay))
    )


def test_an_unresolved_section_is_refused_in_one_line() -> None:
    from archlab.train.sections import ScheduleConfig

    with pytest.raises(
        ValueError,
        match=r"^schedule.horizon=None, schedule.warmup_steps=None: resolved by the TrainConfig",
    ):
        build_schedule(ScheduleConfig(), 1.0)


def test_absurd_step_counts_are_refused_in_one_line() -> None:
    with pytest.raises(
        ValueError,
        match=r"^steps=100000000000000000000 is not allowed: an integer from 1 to 1,000,000,000$",
    ):
        resolve_config([{"steps": "1e20"}])
    with pytest.raises(ValueError, match="schedule.horizon=10000000000 is not allowed"):
        resolve_config([{"schedule.horizon": "1e10"}])


# --------------------------------------------------------------------------------------- extensions
def test_wsd_decay_steps_are_rounded_to_the_nearest_step() -> None:
    # 0.2 * 38 = 7.6 -> 8 decay steps (floor would give 7); 0.2 * 37 = 7.4 -> 7 (ceil would give 8)
    for total, decay in ((38, 8), (37, 7)):
        lr = lr_schedule("wsd", MAX, total, warmup_steps=2, min_lr=MIN, decay_fraction=0.2)
        start = total - decay
        assert lr(start - 1) == lr(start) == MAX and lr(start + 1) == pytest.approx(
            MIN + (MAX - MIN) * (1 - 1 / decay)
        )


def test_cosine_extended_mid_decay_continues_as_a_new_tail_from_the_current_lr() -> None:
    old = lr_schedule("cosine", MAX, 100, warmup_steps=10, min_lr=MIN)
    new = lr_schedule("cosine", MAX, 100, warmup_steps=10, min_lr=MIN, extensions=[(60, 200)])
    assert [new(s) for s in range(60)] == [old(s) for s in range(60)]
    lr0 = old(60)  # 0.55, halfway down
    assert new(60) == pytest.approx(lr0)
    assert new(130) == pytest.approx(MIN + (lr0 - MIN) * 0.5)  # p = 1/2 of the new half cosine
    assert new(200) == pytest.approx(MIN) and new(999) == pytest.approx(MIN)
    assert all(new(s + 1) < new(s) for s in range(60, 199))  # no jump: the decay goes on


def test_a_finished_cosine_extended_rewarms_and_decays_to_the_new_end() -> None:
    """A 200-step cosine extended at its end to 400 (the README's --extend): min_lr at step 200, a
    linear re-warm over the 10 warmup steps onto the cosine planned for 400, that cosine down to
    min_lr at 400."""
    w = 10

    # explicit: warmup 10, half cosine from MAX to MIN over steps 10..400
    def cosine_400(s: int) -> float:
        return MIN + 0.5 * (MAX - MIN) * (1 + math.cos(math.pi * (s - w) / (400 - w)))

    new = lr_schedule("cosine", MAX, 200, warmup_steps=w, min_lr=MIN, extensions=[(200, 400)])
    old = lr_schedule("cosine", MAX, 200, warmup_steps=w, min_lr=MIN)
    assert [new(s) for s in range(200)] == [old(s) for s in range(200)]
    target = cosine_400(200 + w)
    for s in range(200, 200 + w):
        assert new(s) == pytest.approx(MIN + (target - MIN) * (s - 200 + 1) / w, rel=1e-12)
    for s in range(200 + w, 401):
        assert new(s) == pytest.approx(cosine_400(s), rel=1e-12)
    # it decays to the new end
    assert new(400) == pytest.approx(MIN) and new(300) > new(350) > new(399) > MIN
    jump = lr_schedule("cosine", MAX, 200, warmup_steps=0, min_lr=MIN, extensions=[(250, 400)])
    # no warmup
    assert jump(250) == pytest.approx(MIN + 0.5 * (MAX - MIN) * (1 + math.cos(math.pi * 250 / 400)))


def test_a_finished_wsd_extended_rewarms_into_its_stable_phase_and_cools_down_at_the_new_end() -> (
    None
):
    new = lr_schedule(
        "wsd", MAX, 100, warmup_steps=4, min_lr=MIN, decay_fraction=0.2, extensions=[(100, 300)]
    )
    # the old cooldown's last step
    assert new(99) == pytest.approx(MIN + (MAX - MIN) * (1 - 19 / 20))
    assert [new(s) for s in range(100, 104)] == pytest.approx(
        [MIN + (MAX - MIN) * k / 4 for k in (1, 2, 3, 4)]
    )
    # stable again; cooldown = the last 20% of 300
    assert all(new(s) == MAX for s in range(104, 241))
    assert new(270) == pytest.approx(MIN + (MAX - MIN) * 0.5) and new(300) == pytest.approx(MIN)
    again = lr_schedule(
        "wsd",
        MAX,
        100,
        warmup_steps=4,
        min_lr=MIN,
        decay_fraction=0.2,
        # extended again in that stable phase
        extensions=[(100, 300), (200, 500)],
    )
    assert [again(s) for s in range(200)] == [new(s) for s in range(200)]
    assert again(399) == MAX and again(450) == pytest.approx(MIN + (MAX - MIN) * 0.5)


def test_wsd_extended_exactly_at_its_decay_start_keeps_max_and_moves_the_cooldown() -> None:
    # 100 steps, cooldown 80..100: extended at step 80 (its first cooldown step, still at
    # MAX) to 200
    new = lr_schedule(
        "wsd", MAX, 100, warmup_steps=10, min_lr=MIN, decay_fraction=0.2, extensions=[(80, 200)]
    )
    old = lr_schedule("wsd", MAX, 100, warmup_steps=10, min_lr=MIN, decay_fraction=0.2)
    assert old(80) == MAX and [new(s) for s in range(81)] == [old(s) for s in range(81)]
    for s in range(80, 201):  # stable until 160 = 200 - 20% of 200, then linear to MIN at 200
        want = MAX if s < 160 else MIN + (MAX - MIN) * (1 - (s - 160) / 40)
        assert new(s) == pytest.approx(want, rel=1e-12)


def test_cosine_extended_in_its_warmup_replans_for_the_new_end() -> None:
    early = lr_schedule("cosine", MAX, 100, warmup_steps=10, min_lr=MIN, extensions=[(5, 300)])
    plan = lr_schedule("cosine", MAX, 300, warmup_steps=10, min_lr=MIN)
    assert [early(s) for s in range(0, 301, 7)] == [plan(s) for s in range(0, 301, 7)]


def test_wsd_extended_in_the_stable_phase_moves_the_cooldown_to_the_new_end() -> None:
    # 100 steps planned (cooldown 80..100), extended at step 50 to 300: cooldown 240..300
    # (20% of 300)
    new = lr_schedule(
        "wsd", MAX, 100, warmup_steps=10, min_lr=MIN, decay_fraction=0.2, extensions=[(50, 300)]
    )
    plan = lr_schedule("wsd", MAX, 300, warmup_steps=10, min_lr=MIN, decay_fraction=0.2)
    assert [new(s) for s in range(301)] == [plan(s) for s in range(301)]
    assert new(90) == MAX and new(240) == MAX and new(270) == pytest.approx(0.55)
    # extended at step 79 (still stable) to 85: 20% of 85 would start the cooldown at 68, before the
    # step the run is at, so it starts at 79 and spans 6 steps
    late = lr_schedule(
        "wsd", MAX, 100, warmup_steps=10, min_lr=MIN, decay_fraction=0.2, extensions=[(79, 85)]
    )
    assert (
        late(78) == late(79) == MAX
        and late(82) == pytest.approx(0.55)
        and late(85) == pytest.approx(MIN)
    )


def test_wsd_extended_during_its_cooldown_decays_from_the_current_lr_along_its_shape() -> None:
    new = lr_schedule(
        "wsd",
        MAX,
        100,
        warmup_steps=10,
        min_lr=MIN,
        decay_fraction=0.2,
        decay_shape="1-sqrt",
        extensions=[(90, 190)],
    )
    lr0 = MIN + (MAX - MIN) * (1 - math.sqrt(0.5))  # the old cooldown at p = 1/2
    assert new(90) == pytest.approx(lr0)
    assert new(115) == pytest.approx(MIN + (lr0 - MIN) * (1 - math.sqrt(0.25)))
    assert new(190) == pytest.approx(MIN)


def test_constant_is_unchanged_by_an_extension() -> None:
    new = lr_schedule("constant", MAX, 10, warmup_steps=2, extensions=[(10, 50)])
    assert [new(s) for s in (0, 1, 5, 30, 50)] == pytest.approx([0.5, 1.0, 1.0, 1.0, 1.0])


def test_wsd_extended_exactly_at_its_decay_start_is_still_the_stable_phase() -> None:
    """100 steps, cooldown over 80..100: step 80 is the last undecayed step (p = 0, lr = max).
    Extending there replans as from the stable phase (cooldown 240..300, the plan for 300 steps at
    every step); one step later the cooldown has begun and the extension is a tail from lr(81).
    Either way the steps run so far keep their lr."""
    old = lr_schedule("wsd", MAX, 100, warmup_steps=10, min_lr=MIN, decay_fraction=0.2)
    assert old(80) == MAX and old(81) < MAX
    at_start = lr_schedule(
        "wsd", MAX, 100, warmup_steps=10, min_lr=MIN, decay_fraction=0.2, extensions=[(80, 300)]
    )
    plan = lr_schedule("wsd", MAX, 300, warmup_steps=10, min_lr=MIN, decay_fraction=0.2)
    assert [at_start(s) for s in range(301)] == [plan(s) for s in range(301)]
    assert at_start(81) == at_start(240) == MAX
    after = lr_schedule(
        "wsd", MAX, 100, warmup_steps=10, min_lr=MIN, decay_fraction=0.2, extensions=[(81, 300)]
    )
    assert [after(s) for s in range(82)] == [old(s) for s in range(82)]
    assert after(81) == old(81) and after(300) == pytest.approx(MIN)
    assert after(190) == pytest.approx(MIN + (old(81) - MIN) * (1 - (190 - 81) / (300 - 81)))
