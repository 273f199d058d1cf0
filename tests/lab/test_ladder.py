"""The compute ladder: the slope against statsmodels' OLS with seed fixed effects, its interval's
coverage by simulation with a known slope, the 1.25x gain and the multipliers by hand, the rungs'
steps, and the pages."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import statsmodels.formula.api as smf

from archlab.lab.analysis.ladder import fit_ladder
from archlab.lab.experiment import Experiment
from archlab.lab.runs import collect
from archlab.lab.runs.plan import plan_suite, write_plan
from archlab.lab.spec.arms import arm_keys
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite import SuiteError
from archlab.lab.spec.suite_file import load_suite
from tests.lab.test_report import _fake_runs

SCALES = (0.8, 1.0, 1.25, 1.5)


def _simulate(
    rng: np.random.Generator, slope: float, sigma: float, n: int
) -> dict[float, list[float]]:
    """L[s, x] = 2 + u_s - slope ln x + e, the seed effect u_s shared by a seed's rungs."""
    u = rng.normal(0, 0.05, n)
    return {x: list(2.0 + u - slope * math.log(x) + rng.normal(0, sigma, n)) for x in SCALES}


def test_slope_and_interval_equal_ols_with_seed_fixed_effects() -> None:
    values = _simulate(np.random.default_rng(0), 0.12, 0.01, 4)
    fit = fit_ladder(values)
    rows = [
        {"y": v[s], "logx": math.log(x), "seed": str(s)}
        for x, v in values.items()
        for s in range(4)
    ]
    import pandas as pd

    ols = smf.ols("y ~ logx + C(seed)", data=pd.DataFrame(rows)).fit()
    assert fit.slope == pytest.approx(-ols.params["logx"], rel=1e-10)
    low, high = ols.conf_int(alpha=0.05).loc["logx"]
    assert fit.slope_ci == pytest.approx((-high, -low), rel=1e-8)
    assert fit.df == int(ols.df_resid) == 4 * 3 - 1
    assert fit.means == pytest.approx([np.mean(values[x]) for x in SCALES])


def test_the_slopes_interval_covers_the_true_slope_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(1)
    trials, slope = 2000, 0.08
    covered = sum(
        lo <= slope <= hi
        for lo, hi in (fit_ladder(_simulate(rng, slope, 0.015, 3)).slope_ci for _ in range(trials))
    )
    mc = 3 * math.sqrt(0.05 * 0.95 / trials)  # three Monte Carlo standard errors
    assert abs(covered / trials - 0.95) < mc


def test_the_125_gain_and_the_multipliers_by_hand() -> None:
    values = {1.0: [2.10, 2.00, 2.05], 1.25: [2.07, 1.98, 2.01], 0.8: [2.14, 2.03, 2.09]}
    fit = fit_ladder(values)
    d = np.array([0.03, 0.02, 0.04])
    assert fit.gain_125 == pytest.approx(d.mean())
    half = 4.302652729911275 * d.std(ddof=1) / math.sqrt(3)  # t_{0.975, 2}
    assert fit.gain_125_ci == pytest.approx((d.mean() - half, d.mean() + half))
    assert fit.multiplier(0.02) == pytest.approx(math.exp(0.02 / fit.slope))
    low_b, high_b = fit.slope_ci
    expected_high = math.exp(0.02 / low_b) if low_b > 0 else math.inf
    assert fit.multiplier_ci(0.02) == pytest.approx((math.exp(0.02 / high_b), expected_high))
    # more steps did not help: no finite multiplier
    flat = fit_ladder({1.0: [2.0, 2.1], 1.25: [2.01, 2.12]})
    assert flat.slope < 0 and math.isinf(flat.multiplier(0.02))


def test_a_ladder_needs_two_rungs_two_seeds_and_finite_losses() -> None:
    assert fit_ladder({1.0: [2.0, 2.1]}) is None
    assert fit_ladder({1.0: [2.0], 1.25: [1.9]}) is None
    assert fit_ladder({1.0: [2.0, 2.1], 1.25: [1.9, math.nan]}) is None


def test_rungs_scale_steps_and_warmup_and_the_1x_rung_is_the_llama_base(tmp_path: Path) -> None:
    suite = load_suite("compute-ladder")
    small = BUDGETS["small"]
    got = {
        a.name: (
            int(arm_keys(suite, a, small)["steps"]),
            int(arm_keys(suite, a, small)["schedule.warmup_steps"]),
        )
        for a in suite.arms
    }
    assert got == {
        "steps-1x": (300, 30),
        "steps-0.8x": (240, 24),
        "steps-1.25x": (375, 38),
        "steps-1.5x": (450, 45),
    }
    store = tmp_path / "store"
    plan = plan_suite(suite, small, tmp_path / "ladder", store=store)
    heads = plan_suite(load_suite("heads"), small, tmp_path / "heads", store=store)
    # trains once for both
    assert plan.runs_of("steps-1x")[0].run_dir == heads.runs_of("mha")[0].run_dir
    assert [r.steps for r in plan.runs_of("steps-1.5x")] == [450] * 3


@pytest.mark.parametrize(
    "arm, message",
    [
        ("{steps_scale: 0}", "steps_scale=0; a number > 0"),
        ("{steps_scale: fast}", "steps_scale='fast'; a number > 0"),
        ("{steps_scale: 2, steps: 10}", "give steps or steps_scale, not both"),
    ],
)
def test_bad_steps_scale_is_one_line(tmp_path: Path, arm: str, message: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        f"name: s\nbase: {{preset: llama}}\narms: {{a: {{}}, b: {arm}}}\n"
        "claims:\n  - {text: x, metric: val_loss, arm: b, versus: a}\n"
    )
    with pytest.raises(SuiteError, match=message):
        load_suite(path)


def test_pages_price_the_margin_from_the_stored_ladder(tmp_path: Path) -> None:
    """The ladder's own page fits its rungs; another suite in the same store prices its margin
    with that fit."""
    store = tmp_path / "store"
    tiny = BUDGETS["tiny"]
    plan = plan_suite(load_suite("compute-ladder"), tiny, tmp_path / "ladder", store=store, seeds=3)
    values = {
        "steps-0.8x": [2.06, 2.00, 2.03],
        "steps-1x": [2.02, 1.97, 1.99],
        "steps-1.25x": [1.99, 1.93, 1.96],
        "steps-1.5x": [1.96, 1.91, 1.93],
    }
    _fake_runs(plan, values)
    write_plan(plan)
    Experiment.collect(plan.out).report("archlab ablate compute-ladder --budget tiny")
    page = (plan.out / "results.md").read_text()
    fit = fit_ladder({a.steps_scale: values[a.name] for a in plan.suite.arms})
    assert "Compute ladder" in page and f"{fit.slope:.4f} nats per e-fold" in page
    assert f"25% more steps buy {fit.gain_125:.4f} nats" in page
    assert collect.stored_ladder(store, tiny).slope == pytest.approx(fit.slope)

    heads = plan_suite(load_suite("heads"), tiny, tmp_path / "heads", store=store)
    before = collect.stored_ladder(tmp_path / "empty", tiny)
    assert before is None
    from archlab.lab.publishing.report import margin_pricing
    from archlab.lab.runs.collect import table_of

    text = margin_pricing(heads, table_of(heads, {}))
    assert f"worth {fit.multiplier(tiny.margin):.2f}x the base's compute" in text
    alone = plan_suite(load_suite("heads"), tiny, tmp_path / "alone", store=tmp_path / "empty")
    assert "archlab ablate compute-ladder --budget tiny" in margin_pricing(
        alone, table_of(alone, {})
    )
    assert json.loads((plan.out / "plan.json").read_text())["suite"].endswith("compute-ladder.yaml")
