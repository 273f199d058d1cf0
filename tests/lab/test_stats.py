"""The verdict rule (archlab.lab.analysis.stats): hand-computed examples, and its error rates by
simulation with known truth.

Hand-computed references use closed forms in float64 (Student's t CDF at 2 and 3 df, the exact
binomial), not the code under test. Simulations use fixed generators; each rate is checked within 3
binomial standard errors, sqrt(p (1 - p) / N), of the figure the docs state (docs/lab-statistics.md
quotes the measured rates).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from archlab.lab.analysis import stats

# Monte Carlo tolerance: 3 binomial standard errors (a false alarm in ~1 of 370 checks)
MC_SIGMAS = 3.0


def _mc_tolerance(rate: float, trials: int) -> float:
    return MC_SIGMAS * math.sqrt(rate * (1.0 - rate) / trials)


def _t3_cdf(t: float) -> float:
    """Student's t CDF at 3 df in closed form."""
    return (
        0.5 + (t / (math.sqrt(3.0) * (1.0 + t * t / 3.0)) + math.atan(t / math.sqrt(3.0))) / math.pi
    )


def _t2_cdf(t: float) -> float:
    """Student's t CDF at 2 df in closed form."""
    return 0.5 + t / (2.0 * math.sqrt(2.0 + t * t))


def _quantile(cdf, q: float) -> float:
    low, high = -50.0, 50.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if cdf(mid) < q else (low, mid)
    return 0.5 * (low + high)


# --- hand-computed
# examples ------------------------------------------------------------------------------------

A = [3.10, 3.05, 3.20, 3.00]
# d = a - b = -0.02, -0.04, -0.01, -0.05: mean -0.03, sd sqrt(10e-4 / 3)
B = [3.12, 3.09, 3.21, 3.05]


def test_paired_t_against_the_closed_form_at_3_df():
    mean, sd = -0.03, math.sqrt(10e-4 / 3.0)
    se = sd / 2.0
    t = mean / se
    result = stats.test_claim(A, B, expect="better", better="lower")
    assert result.test == "paired t" and result.df == 3 and result.n == 4
    assert result.estimate == pytest.approx(mean, abs=1e-15)
    assert result.se == pytest.approx(se, rel=1e-12)
    # P(T <= t): "a lower" is the confirming side
    assert result.p == pytest.approx(_t3_cdf(t), rel=1e-10)
    assert result.p_contra == pytest.approx(1.0 - _t3_cdf(t), rel=1e-10)
    assert result.outcome == stats.CONFIRMED and result.seeds_needed is None
    # higher-is-better flips which side confirms: now a is significantly worse
    flipped = stats.test_claim(A, B, expect="better", better="higher")
    assert flipped.p == pytest.approx(result.p_contra) and flipped.outcome == stats.CONTRADICTED


def test_ci_is_the_textbook_interval_at_1_minus_2_alpha():
    t95 = _quantile(_t3_cdf, 0.95)
    assert t95 == pytest.approx(2.353363, abs=1e-6)  # the printed table value
    se = math.sqrt(10e-4 / 3.0) / 2.0
    for alpha, q in ((0.05, t95), (0.025, _quantile(_t3_cdf, 0.975))):
        low, high = stats.test_claim(A, B, expect="better", better="lower", alpha=alpha).ci
        assert low == pytest.approx(-0.03 - q * se, rel=1e-9) and high == pytest.approx(
            -0.03 + q * se, rel=1e-9
        )


def test_a_p_exactly_at_alpha_is_not_significant():
    p = stats.test_claim(A, B, expect="better", better="lower").p
    at = stats.test_claim(A, B, expect="better", better="lower", alpha=p, smallest_effect=0.01)
    assert at.p == p and at.outcome == stats.INCONCLUSIVE
    assert at.seeds_needed == stats.seeds_needed(0.01, math.sqrt(10e-4 / 3.0), alpha=p)
    above = stats.test_claim(A, B, expect="better", better="lower", alpha=math.nextafter(p, 1.0))
    assert above.outcome == stats.CONFIRMED


def test_an_estimate_exactly_at_min_effect_reaches_it():
    b = [2.0, 2.0, 2.0]
    a = [1.75, 1.5, 1.25]  # d = -0.25, -0.5, -0.75: mean -0.5 and sd 0.25, exact in binary
    t = -0.5 / (0.25 / math.sqrt(3.0))
    at = stats.test_claim(a, b, expect="better", better="lower", min_effect=0.5)
    assert at.estimate == -0.5 and at.p == pytest.approx(_t2_cdf(t), rel=1e-10) and at.p < 0.05
    assert at.outcome == stats.CONFIRMED
    short = stats.test_claim(
        a, b, expect="better", better="lower", min_effect=math.nextafter(0.5, 1.0)
    )
    # significant, but the estimate falls short of min_effect
    assert short.outcome == stats.INCONCLUSIVE
    # no smallest effect stated: no plan
    assert short.short_of_min_effect and short.seeds_needed is None
    assert not at.short_of_min_effect


def test_plans_target_the_stated_smallest_effect_never_the_estimate():
    b = [2.0, 2.0, 2.0]
    # d = -1.0, 0.2, -0.7: mean -0.5 reaches 0.3, but the spread leaves p above 0.05
    a = [1.0, 2.2, 1.3]
    sd = float(np.std(np.subtract(a, b), ddof=1))
    result = stats.test_claim(
        a, b, expect="better", better="lower", min_effect=0.3, smallest_effect=0.8
    )
    assert result.outcome == stats.INCONCLUSIVE
    # the gain beyond min_effect
    assert result.seeds_needed == stats.seeds_needed(0.8 - 0.3, sd, alpha=0.05)
    # the estimate does not enter: an arm whose estimate points the other way gets the same plan
    other = stats.test_claim(
        [3.0, 1.8, 2.7], b, expect="better", better="lower", min_effect=0.3, smallest_effect=0.8
    )
    assert other.outcome == stats.INCONCLUSIVE and other.seeds_needed == stats.seeds_needed(
        0.5, sd, alpha=0.05
    )
    # a smallest effect that does not exceed min_effect plans nothing, nor does an unstated one
    assert (
        stats.test_claim(
            a, b, expect="better", better="lower", min_effect=0.3, smallest_effect=0.3
        ).seeds_needed
        is None
    )
    assert stats.test_claim(a, b, expect="better", better="lower").seeds_needed is None
    with pytest.raises(ValueError, match="smallest_effect must be a finite number >= 0"):
        stats.test_claim(a, b, expect="better", better="lower", smallest_effect=-0.1)


def test_same_and_equivalent_plans_are_at_a_true_difference_of_zero():
    se = math.sqrt(10e-4 / 3.0) / 2.0
    sigma_d = 2 * se
    # A against B: A is better by 0.03, so equivalence within 0.045 is undecided (the interval
    # reaches -0.0515); the plan is the margin's at a true difference of 0, whatever the estimate;
    # higher-is-better flips the sides
    # 0.0085: A's advantage is significant, B's deficit too
    low_bound = 0.03 - _quantile(_t3_cdf, 0.95) * se
    for x, y, better in ((A, B, "lower"), (B, A, "higher")):  # the arm is better by 0.03 in both
        result = stats.test_claim(x, y, expect="equivalent", better=better, margin=0.045)
        assert result.outcome == stats.INCONCLUSIVE and not result.against_the_data
        assert result.seeds_needed == stats.seeds_needed(0.045, sigma_d, alpha=0.05, power=0.9)
    # the arm significantly worse (the interval of its deficit excludes 0): no plan
    # toward "not worse"
    for x, y, better in ((B, A, "lower"), (A, B, "higher")):
        result = stats.test_claim(x, y, expect="same", better=better, margin=0.045)
        assert (
            result.outcome == stats.INCONCLUSIVE
            and result.against_the_data
            and result.seeds_needed is None
        )
        assert result.ci[0 if better == "lower" else 1] == pytest.approx(
            low_bound if better == "lower" else -low_bound, rel=1e-9
        )
    # equivalence: 90% power for each one-sided test (so the TOST has at least 80%), not 80%
    tost = stats.test_claim(A, B, expect="equivalent", better="lower", margin=0.05)
    assert tost.outcome == stats.INCONCLUSIVE
    assert tost.seeds_needed == stats.seeds_needed(0.05, sigma_d, alpha=0.05, power=0.9)
    assert tost.seeds_needed != stats.seeds_needed(0.05, sigma_d, alpha=0.05, power=0.8)


def test_mde_is_the_effect_with_80_percent_power_against_scipys_noncentral_t():
    scipy_stats = pytest.importorskip("scipy.stats")
    result = stats.test_claim(A, B, expect="better", better="lower", alpha=0.01)  # n 4, 3 df
    sigma_d, n = result.sigma_d, result.n
    crit = scipy_stats.t.ppf(0.99, n - 1)
    power_at_mde = scipy_stats.nct.sf(crit, n - 1, result.mde * math.sqrt(n) / sigma_d)
    assert power_at_mde == pytest.approx(0.8, abs=1e-9)
    # a larger effect has more power, a smaller one less: the mde is where 80% is crossed
    assert scipy_stats.nct.sf(crit, n - 1, 0.99 * result.mde * math.sqrt(n) / sigma_d) < 0.8
    # adjusting the family re-measures it at the adjusted level (larger)
    adjusted = stats.adjust([result, stats.test_claim(B, A, expect="better", better="lower")])[0]
    assert (
        adjusted.mde
        > stats.test_claim(A, B, expect="better", better="lower", alpha=0.05 / 2).mde * 0.999
    )
    pooled = stats.test_claim(A, B, expect="better", better="lower", pooled=stats.Pooled(0.01, 9))
    crit9 = scipy_stats.t.ppf(0.95, 9)
    assert scipy_stats.nct.sf(crit9, 9, pooled.mde * 2 / (0.01 * math.sqrt(2))) == pytest.approx(
        0.8, abs=1e-9
    )


def test_an_equivalence_mde_has_90_percent_power_per_side_so_the_tost_has_80():
    from scipy import stats as scipy_stats

    result = stats.test_claim(A, B, expect="equivalent", better="lower", margin=0.05)  # n 4, 3 df
    sigma_d, n = result.sigma_d, result.n
    crit = scipy_stats.t.ppf(0.95, n - 1)
    # each one-sided test of the TOST has 90% power at a true difference of 0 against a
    # margin of mde
    assert scipy_stats.nct.sf(crit, n - 1, result.mde * math.sqrt(n) / sigma_d) == pytest.approx(
        0.9, abs=1e-9
    )
    # simulated truth: differences of sd sigma_d around 0; the TOST at margin = mde (both
    # 90% bounds inside
    # +-mde, written out here) confirms at least 80% of the time
    trials = 20000
    d = np.random.default_rng(7).normal(0.0, sigma_d, (trials, n))
    mean, se = d.mean(axis=1), d.std(axis=1, ddof=1) / math.sqrt(n)
    confirmed = float(np.mean((mean + crit * se < result.mde) & (mean - crit * se > -result.mde)))
    # measured 0.809 (0.641 at the 80%-per-side mde)
    assert confirmed >= 0.8 - _mc_tolerance(0.8, trials), confirmed


def test_below_min_effect_more_seeds_confirm_less_often():
    # why the plan tests gain - min_effect: at a true effect of 0.8 min_effect, the share confirmed
    # falls as the seeds grow (the estimate concentrates below min_effect), so no n reaches 80%
    rng = np.random.default_rng(0)
    rates = []
    for n in (3, 12, 48):
        d = rng.normal(-0.8, 0.5, size=(2000, n))
        rates.append(
            np.mean(
                [
                    stats.test_claim(
                        row, np.zeros(n), expect="better", better="lower", min_effect=1.0
                    ).outcome
                    == stats.CONFIRMED
                    for row in d
                ]
            )
        )
    assert rates[0] > rates[1] > rates[2] and rates[0] < 0.5 and rates[2] < 0.01


def test_non_inferiority_bound_against_the_margin():
    se, t95 = math.sqrt(10e-4 / 3.0) / 2.0, _quantile(_t3_cdf, 0.95)
    upper = 0.03 + t95 * se  # b against a: b is worse by 0.03 on average
    assert upper == pytest.approx(0.051483, abs=1e-6)
    confirmed = stats.test_claim(B, A, expect="same", better="lower", margin=0.052)
    assert confirmed.outcome == stats.CONFIRMED
    assert confirmed.p == pytest.approx(_t3_cdf((0.03 - 0.052) / se), rel=1e-10)
    assert (
        stats.test_claim(B, A, expect="same", better="lower", margin=0.051).outcome
        == stats.INCONCLUSIVE
    )
    lower = 0.03 - t95 * se  # 0.008518: worse than a margin of 0.008 with confidence
    assert (
        stats.test_claim(B, A, expect="same", better="lower", margin=lower - 1e-4).outcome
        == stats.CONTRADICTED
    )
    # inconclusive at 4 seeds, but b is significantly worse than a (its deficit's interval excludes
    # 0): no plan toward "not worse" (the data contradict a true difference of 0), whether the
    # estimate is inside the margin or beyond it
    for margin in (0.04, 0.02):
        undecided = stats.test_claim(B, A, expect="same", better="lower", margin=margin)
        assert undecided.outcome == stats.INCONCLUSIVE and undecided.seeds_needed is None
    # a's side of the same pair, with a margin its bound does not clear at alpha 0.001: planned at 0
    planned = stats.test_claim(A, B, expect="same", better="lower", margin=0.005, alpha=0.001)
    assert planned.outcome == stats.INCONCLUSIVE
    assert planned.seeds_needed == stats.seeds_needed(0.005, 2 * se, alpha=0.001)
    # higher is better: b's values lower by 0.03 are the worse side again
    assert (
        stats.test_claim(A, B, expect="same", better="higher", margin=0.052).outcome
        == stats.CONFIRMED
    )


def test_equivalence_needs_both_bounds_inside():
    se, t95 = math.sqrt(10e-4 / 3.0) / 2.0, _quantile(_t3_cdf, 0.95)
    inside = stats.test_claim(A, B, expect="equivalent", better="lower", margin=0.052)
    assert inside.outcome == stats.CONFIRMED  # interval (-0.0515, -0.0085) inside (-0.052, 0.052)
    assert inside.p == pytest.approx(
        max(_t3_cdf((0.03 - 0.052) / se), 1 - _t3_cdf((0.03 + 0.052) / se))
    )
    assert (
        stats.test_claim(A, B, expect="equivalent", better="lower", margin=0.05).outcome
        == stats.INCONCLUSIVE
    )
    assert (
        stats.test_claim(
            A, B, expect="equivalent", better="lower", margin=0.03 - t95 * se - 1e-4
        ).outcome
        == stats.CONTRADICTED
    )


def test_pooled_contrast_uses_sigma_sqrt_2_over_n_and_the_pooled_df():
    pooled = stats.Pooled(sigma=0.01, df=9)
    result = stats.test_claim(A, B, expect="better", better="lower", pooled=pooled)
    assert result.se == pytest.approx(0.01 * math.sqrt(2.0 / 4.0)) and result.df == 9
    assert result.arms == 4 and result.test == "pooled RCBD t"  # df 9 = (K - 1)(4 - 1)


def test_degenerate_inputs():
    tie = stats.test_claim([3.1, 3.2, 3.3], [3.0, 3.1, 3.2], expect="better", better="lower")
    # never p = 0 from rounding-level spread
    assert tie.outcome == stats.UNTESTABLE and math.isnan(tie.p)
    one = stats.test_claim([3.0], [3.1], expect="better", better="lower")
    assert one.outcome == stats.INCONCLUSIVE and math.isnan(one.p) and one.seeds_needed is None
    assert (
        stats.test_claim(
            [3.0], [3.1], expect="better", better="lower", pooled=stats.Pooled(0.01, 6)
        ).outcome
        == stats.CONFIRMED
    )
    with pytest.raises(ValueError, match=r"a\[1\] = nan"):
        stats.test_claim([3.0, math.nan], [3.1, 3.2], expect="better", better="lower")
    with pytest.raises(ValueError, match="margin must be > 0.*got 0.0"):
        stats.test_claim(A, B, expect="same", better="lower")
    with pytest.raises(ValueError, match="margin must be > 0.*got -0.01"):
        stats.test_claim(A, B, expect="same", better="lower", margin=-0.01)
    with pytest.raises(ValueError, match="len\\(a\\) = 4, len\\(b\\) = 3"):
        stats.test_claim(A, B[:3], expect="better", better="lower")
    with pytest.raises(ValueError, match="better must be one of lower, higher, got 'down'"):
        stats.test_claim(A, B, expect="better", better="down")
    with pytest.raises(ValueError, match="min_effect must be"):
        stats.test_claim(A, B, expect="better", better="lower", min_effect=-0.1)


def test_welch_unpaired_matches_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    result = stats.test_claim(A, B, expect="better", better="lower", paired=False)
    reference = scipy_stats.ttest_ind(A, B, equal_var=False, alternative="less")
    assert result.p == pytest.approx(reference.pvalue, rel=1e-10) and result.df == pytest.approx(
        reference.df
    )


# --- multiplicity
# -----------------------------------------------------------------------------------------------


def test_holm_and_bh_against_statsmodels():
    multipletests = pytest.importorskip("statsmodels.stats.multitest").multipletests
    p = [0.01, 0.04, 0.03, 0.005, 0.20, 0.04]
    assert stats.holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]))
    assert stats.benjamini_hochberg(p) == pytest.approx(list(multipletests(p, method="fdr_bh")[1]))
    # NaN stays NaN
    assert stats.holm([0.01, math.nan, 0.02])[1] != stats.holm([0.01, math.nan, 0.02])[1]
    # and is not counted in m
    assert stats.holm([0.01, math.nan, 0.02])[::2] == pytest.approx([0.02, 0.02])


def test_adjust_rederives_outcomes_and_leaves_untestable_out():
    b = [0.0, 0.0, 0.0, 0.0]
    tests = [
        stats.test_claim([-1.0, -1.2, -0.8, -1.1], b, expect="better", better="lower"),
        # p 0.042
        stats.test_claim([-0.10, -0.30, -0.02, -0.2], b, expect="better", better="lower"),
        stats.test_claim([1.0, 1.0, 1.0, 1.0], b, expect="better", better="lower"),
        # p 0.030
        stats.test_claim([-0.10, -0.30, -0.05, -0.2], b, expect="better", better="lower"),
    ]
    outcomes = [t.outcome for t in tests]
    assert outcomes == [stats.CONFIRMED, stats.CONFIRMED, stats.UNTESTABLE, stats.CONFIRMED]
    adjusted = stats.adjust(tests)
    # m = 3: the untestable claim is not in the family
    family = [tests[0].p, tests[1].p, tests[3].p]
    expected = stats.holm(family)
    assert [adjusted[i].p_adjusted for i in (0, 1, 3)] == pytest.approx(expected)
    # Holm's step-down
    assert expected[2] == pytest.approx(2 * tests[3].p) and expected[1] == expected[2]
    assert [t.outcome for t in adjusted] == [
        stats.CONFIRMED,
        stats.INCONCLUSIVE,
        stats.UNTESTABLE,
        stats.INCONCLUSIVE,
    ]
    # no effect stated
    assert adjusted[1].level == pytest.approx(0.05 / 3) and adjusted[1].seeds_needed is None
    planned = stats.adjust([dataclasses.replace(t, smallest_effect=0.1) for t in tests])
    assert planned[1].seeds_needed == stats.seeds_needed(0.1, tests[1].sigma_d, alpha=0.05 / 3)
    assert adjusted[2] == tests[2]
    bh = stats.adjust(tests, method="bh")
    assert [bh[i].p_adjusted for i in (0, 1, 3)] == pytest.approx(stats.benjamini_hochberg(family))
    # BH: 0.042 * 3 / 3 and 0.030 * 3 / 2 = 0.045 stay below 0.05
    assert bh[1].outcome == stats.CONFIRMED
    with pytest.raises(ValueError, match="method must be one of holm, bh, dunnett, got 'bonf'"):
        stats.adjust(tests, method="bonf")


# --- simulations with
# known truth -------------------------------------------------------------------------------


def _suites(
    rng: np.random.Generator, trials: int, n: int, effect: float, omega: float, tau: float = 0.03
):
    """a, b per seed with a shared seed effect (sd tau) and per-run noise (sd omega): sd of d =
    omega * sqrt(2)."""
    u = rng.normal(0.0, tau, (trials, n))
    b = 3.0 + u + rng.normal(0.0, omega, (trials, n))
    a = 3.0 + effect + u + rng.normal(0.0, omega, (trials, n))
    return a, b


def _rate(outcomes: list[str], which: str) -> float:
    return sum(o == which for o in outcomes) / len(outcomes)


def test_no_true_effect_confirms_and_contradicts_at_alpha():
    trials = 4000
    a, b = _suites(np.random.default_rng(1), trials, 3, 0.0, 0.01)
    outcomes = [
        stats.test_claim(x, y, expect="better", better="lower").outcome
        for x, y in zip(a, b, strict=True)
    ]
    for which in (stats.CONFIRMED, stats.CONTRADICTED):
        assert abs(_rate(outcomes, which) - 0.05) <= _mc_tolerance(0.05, trials), which


def test_non_inferiority_with_a_deficit_of_twice_the_margin_is_rarely_confirmed():
    trials, margin = 4000, 0.02
    sigma_d = 0.015
    a, b = _suites(np.random.default_rng(2), trials, 3, 2 * margin, sigma_d / math.sqrt(2))
    outcomes = [
        stats.test_claim(x, y, expect="same", better="lower", margin=margin).outcome
        for x, y in zip(a, b, strict=True)
    ]
    assert _rate(outcomes, stats.CONFIRMED) <= 0.05 + _mc_tolerance(0.05, trials)
    at_margin = _suites(np.random.default_rng(3), trials, 3, margin, sigma_d / math.sqrt(2))
    outcomes = [
        stats.test_claim(x, y, expect="same", better="lower", margin=margin).outcome
        for x, y in zip(*at_margin, strict=True)
    ]
    # the size, exactly
    assert abs(_rate(outcomes, stats.CONFIRMED) - 0.05) <= _mc_tolerance(0.05, trials)


def test_non_inferiority_power_at_the_documented_seeds():
    trials, margin, sigma_d = 3000, 0.02, 0.015
    n = stats.seeds_needed(margin, sigma_d, alpha=0.05)
    expected = stats.power(margin, sigma_d, n, alpha=0.05)
    assert n == 6 and expected >= 0.8
    a, b = _suites(np.random.default_rng(4), trials, n, 0.0, sigma_d / math.sqrt(2))
    outcomes = [
        stats.test_claim(x, y, expect="same", better="lower", margin=margin).outcome
        for x, y in zip(a, b, strict=True)
    ]
    assert abs(_rate(outcomes, stats.CONFIRMED) - expected) <= _mc_tolerance(expected, trials)


def test_superiority_power_matches_the_noncentral_t_plan():
    trials, effect, sigma_d = 3000, 0.02, 0.03
    n = stats.seeds_needed(effect, sigma_d, alpha=0.05)
    expected = stats.power(effect, sigma_d, n, alpha=0.05)
    a, b = _suites(np.random.default_rng(5), trials, n, -effect, sigma_d / math.sqrt(2))
    outcomes = [
        stats.test_claim(x, y, expect="better", better="lower").outcome
        for x, y in zip(a, b, strict=True)
    ]
    assert abs(_rate(outcomes, stats.CONFIRMED) - expected) <= _mc_tolerance(expected, trials)
    # with min_effect equal to the true effect, the estimate condition passes about half the
    # time at most
    outcomes = [
        stats.test_claim(x, y, expect="better", better="lower", min_effect=effect).outcome
        for x, y in zip(a, b, strict=True)
    ]
    assert _rate(outcomes, stats.CONFIRMED) <= 0.5 + _mc_tolerance(0.5, trials)


def test_holm_keeps_the_family_wise_rate_over_null_claims():
    suites, m, n = 1000, 4, 3
    rng = np.random.default_rng(6)
    any_false = 0
    for _ in range(suites):
        # every arm is compared with one base: correlated claims
        base = 3.0 + rng.normal(0.0, 0.03, n)
        tests = [
            stats.test_claim(base + rng.normal(0.0, 0.01, n), base, expect="better", better="lower")
            for _ in range(m)
        ]
        any_false += any(t.outcome == stats.CONFIRMED for t in stats.adjust(tests))
    assert any_false / suites <= 0.05 + _mc_tolerance(0.05, suites)


def test_benjamini_hochberg_keeps_the_false_discovery_rate():
    suites, m, q = 2000, 10, 0.05
    rng = np.random.default_rng(7)
    true = np.arange(m) < 5  # 5 real effects of 1 sd of the mean, 5 nulls
    z = rng.normal(0.0, 1.0, (suites, m)) - np.where(true, 2.5, 0.0)
    from scipy.special import ndtr  # an independent p: the one-sided z-test

    p = ndtr(z)
    fdp = []
    for row in p:
        rejected = np.array(stats.benjamini_hochberg(row)) < q
        fdp.append(np.sum(rejected & ~true) / max(1, np.sum(rejected)))
    fdr = float(np.mean(fdp))
    # BH: FDR = q m0 / m
    assert fdr <= q * 5 / m + MC_SIGMAS * float(np.std(fdp)) / math.sqrt(suites)


def test_pooled_rcbd_has_the_right_false_positive_rate():
    suites, k, n = 2000, 4, 3
    rng = np.random.default_rng(8)
    y = 3.0 + rng.normal(0.0, 0.03, (suites, 1, n)) + rng.normal(0.0, 0.01, (suites, k, n))
    confirmed = 0
    for table in y:
        fit = stats.rcbd({f"arm{i}": row for i, row in enumerate(table)})
        result = stats.test_claim(
            table[1], table[0], expect="better", better="lower", pooled=fit.pooled
        )
        confirmed += result.outcome == stats.CONFIRMED
    assert result.df == (k - 1) * (n - 1)
    assert abs(confirmed / suites - 0.05) <= _mc_tolerance(0.05, suites)


def test_dunnett_matches_scipy_on_a_one_way_layout():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(9)
    n, k = 5, 4
    samples = [rng.normal(0.0, 1.0, n) + (0.8 if i == 2 else 0.0) for i in range(k + 1)]
    reference = scipy_stats.dunnett(
        *samples[1:], control=samples[0], alternative="greater", rng=np.random.default_rng(0)
    )
    df = (k + 1) * (n - 1)
    sp = math.sqrt(sum(float(((s - s.mean()) ** 2).sum()) for s in samples) / df)
    t = [(s.mean() - samples[0].mean()) / (sp * math.sqrt(2 / n)) for s in samples[1:]]
    p = [float(scipy_stats.t.sf(v, df)) for v in t]
    # scipy's QMC error
    assert stats.dunnett(p, df) == pytest.approx(list(reference.pvalue), abs=2e-4)


def test_adjust_by_dunnett_needs_one_pooled_residual():
    pooled = stats.Pooled(0.01, 12)
    base = [3.0, 3.01, 2.99, 3.0, 3.02]
    tests = [
        stats.test_claim(
            [v - d for v in base], base, expect="better", better="lower", pooled=pooled
        )
        for d in (0.02, 0.011, 0.0)
    ]
    adjusted = stats.adjust(tests, method="dunnett")
    # between the raw p and Bonferroni's m p (Holm's first step)
    for d, t in zip(adjusted, tests, strict=True):
        assert t.p <= d.p_adjusted <= min(1.0, 3 * t.p)
    # correlated contrasts: strictly less than Bonferroni
    assert adjusted[0].p_adjusted < 0.9 * 3 * tests[0].p
    assert adjusted[0].outcome == stats.CONFIRMED and adjusted[2].outcome == stats.INCONCLUSIVE
    with pytest.raises(ValueError, match="dunnett needs every claim on one pooled residual"):
        stats.adjust(
            [tests[0], stats.test_claim(A, B, expect="better", better="lower")], method="dunnett"
        )
