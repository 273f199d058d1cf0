"""Power planning and group-sequential levels (archlab.lab.analysis.power) against published
values and simulation."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from scipy import stats as scipy_stats

from archlab.lab.analysis.power import _crossing, power, seeds_needed, sequential_levels


def test_seeds_needed_matches_published_sample_sizes():
    # G*Power 3, t-test of one mean / matched pairs, d = 0.5, alpha 0.05, power 0.8: 27
    # one-tailed, 34 two-tailed
    assert seeds_needed(0.5, 1.0, alpha=0.05) == 27
    assert seeds_needed(0.5, 1.0, alpha=0.05, one_sided=False) == 34
    assert seeds_needed(1.0, 1.0, alpha=0.05, power=0.9) == 11  # d = 1, one-tailed, 90%


def test_seeds_needed_is_the_first_n_reaching_the_power():
    cases = (
        (0.02, 0.015, None),
        (0.01, 0.03, None),
        (0.02, 0.0212, 10),
        (0.3, 0.01, None),
        (1e-6, 0.1, None),
        # the last two: ~5e10 seeds, found by bisection (a walk down would never end)
        (1e-6, 0.1, 4),
    )
    for effect, sigma_d, arms in cases:
        n = seeds_needed(effect, sigma_d, alpha=0.05, arms=arms)
        assert power(effect, sigma_d, n, alpha=0.05, arms=arms) >= 0.8
        assert n == 2 or power(effect, sigma_d, n - 1, alpha=0.05, arms=arms) < 0.8


def test_power_is_scipy_noncentral_t():
    n, effect, sigma_d = 7, 0.02, 0.025
    df, ncp = n - 1, effect * math.sqrt(n) / sigma_d
    crit = scipy_stats.t.ppf(0.95, df)
    assert power(effect, sigma_d, n, alpha=0.05) == pytest.approx(
        scipy_stats.nct.sf(crit, df, ncp), rel=1e-9
    )
    df = 4 * (n - 1)  # a pooled analysis of 5 arms
    crit = scipy_stats.t.ppf(0.95, df)
    assert power(effect, sigma_d, n, alpha=0.05, arms=5) == pytest.approx(
        scipy_stats.nct.sf(crit, df, ncp)
    )


def test_bad_plans_are_refused():
    with pytest.raises(ValueError, match="effect must be a finite number > 0.*got 0"):
        seeds_needed(0, 0.01, alpha=0.05)
    with pytest.raises(ValueError, match="sigma_d must be .* got -1"):
        seeds_needed(0.01, -1, alpha=0.05)
    with pytest.raises(
        ValueError, match="kind must be one of pocock, obrien-fleming, got 'haybittle'"
    ):
        sequential_levels("haybittle", 2)


@pytest.mark.parametrize(
    ("kind", "looks", "published"),
    [
        # Jennison & Turnbull (2000), tables 2.1 and 2.3: C_P(K) = 2.178, 2.289, 2.413; C_B(K) =
        # 1.977, 2.004, 2.040
        ("pocock", 2, [2.178] * 2),
        ("pocock", 3, [2.289] * 3),
        ("pocock", 5, [2.413] * 5),
        ("obrien-fleming", 2, [1.977 * math.sqrt(2 / k) for k in (1, 2)]),
        ("obrien-fleming", 3, [2.004 * math.sqrt(3 / k) for k in (1, 2, 3)]),
        ("obrien-fleming", 5, [2.040 * math.sqrt(5 / k) for k in (1, 2, 3, 4, 5)]),
    ],
)
def test_sequential_levels_reproduce_the_published_boundaries(kind, looks, published):
    levels = sequential_levels(kind, looks)
    bounds = [-scipy_stats.norm.ppf(level / 2) for level in levels]
    assert bounds == pytest.approx(published, abs=1.5e-3)  # the tables print 3 decimals


def test_two_looks_give_the_quoted_nominal_levels():
    assert [round(v, 4) for v in sequential_levels("pocock", 2)] == [0.0294, 0.0294]
    assert [round(v, 4) for v in sequential_levels("obrien-fleming", 2)] == [0.0052, 0.0480]
    assert sequential_levels("pocock", 1, alpha=0.1) == pytest.approx([0.1])


def test_crossing_probability_against_multivariate_normal_and_simulation():
    bounds = np.array([2.5, 2.2])
    cov = [[1.0, math.sqrt(0.5)], [math.sqrt(0.5), 1.0]]
    inside = scipy_stats.multivariate_normal.cdf(
        bounds,
        mean=[0, 0],
        cov=cov,
        lower_limit=-bounds,
        abseps=1e-9,
        releps=0,
        rng=np.random.default_rng(0),
    )
    assert _crossing(bounds) == pytest.approx(1 - inside, abs=1e-6)
    # 4 Pocock looks: the overall two-sided level of simulated z-paths is alpha
    rng = np.random.default_rng(21)
    paths = 200_000
    z = np.cumsum(rng.normal(size=(paths, 4)), axis=1) / np.sqrt(np.arange(1, 5))
    bound = -scipy_stats.norm.ppf(sequential_levels("pocock", 4)[0] / 2)
    rate = float(np.mean(np.any(np.abs(z) >= bound, axis=1)))
    assert rate == pytest.approx(0.05, abs=3 * math.sqrt(0.05 * 0.95 / paths))


def test_unequal_looks_keep_the_overall_level_by_simulation() -> None:
    # a first look at 3 seeds and a second at 8 (the --max-seeds cap): the boundaries for those
    # information times cross at the stated overall level; equally spaced times give back
    # the tabulated levels
    assert sequential_levels("pocock", 2, times=[1, 2]) == pytest.approx(
        sequential_levels("pocock", 2), abs=1e-9
    )
    rng = np.random.default_rng(3)
    for kind in ("pocock", "obrien-fleming"):
        levels = sequential_levels(kind, 2, alpha=0.1, times=[3, 8])
        bounds = [NormalDist().inv_cdf(1 - level / 2) for level in levels]
        first = rng.normal(size=(200_000, 3)).sum(axis=1)
        second = first + rng.normal(size=(200_000, 5)).sum(axis=1)
        crossed = (np.abs(first / math.sqrt(3)) >= bounds[0]) | (
            np.abs(second / math.sqrt(8)) >= bounds[1]
        )
        assert crossed.mean() == pytest.approx(0.1, abs=4 * math.sqrt(0.09 / 200_000)), kind
    with pytest.raises(ValueError, match="times must be 2 increasing positive numbers"):
        sequential_levels("pocock", 2, times=[3, 3])


@pytest.mark.parametrize(
    ("effect", "sigma_d", "n", "arms"),
    [(0.004, 0.03, 4, None), (0.02, 0.025, 7, None), (0.001, 0.02, 3, 4)],
)
def test_two_sided_power_is_both_tails_of_scipy_noncentral_t(effect, sigma_d, n, arms):
    """P(T' > t_{1-alpha/2}) + P(T' < -t_{1-alpha/2}): at a small noncentrality the lower tail is a
    visible share of the power, so a power that drops it is caught."""
    df = (n - 1) * ((arms - 1) if arms else 1)
    ncp = effect * math.sqrt(n) / sigma_d
    crit = scipy_stats.t.ppf(1 - 0.05 / 2, df)
    upper, lower = scipy_stats.nct.sf(crit, df, ncp), scipy_stats.nct.cdf(-crit, df, ncp)
    got = power(effect, sigma_d, n, alpha=0.05, one_sided=False, arms=arms)
    assert got == pytest.approx(upper + lower, rel=1e-9)
    if ncp < 0.5:
        assert lower > 0.2 * upper  # the case really exercises the lower tail
