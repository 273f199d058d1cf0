"""Divergence, count and rank claims (archlab.lab.analysis.discrete) against exact binomial
arithmetic worked by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from archlab.lab.analysis import stats


def test_exact_mcnemar_on_discordant_seeds():
    # b diverged at seeds 0-4, a at none; seeds 5-7 concordant: 5 discordant, all for a -> p = 2^-5
    a, b = [0] * 8, [1] * 5 + [0] * 3
    result = stats.paired_binary_test(a, b)
    assert result.p == pytest.approx(0.5**5) and result.outcome == stats.CONFIRMED
    assert result.estimate == pytest.approx(-5 / 8)
    four = stats.paired_binary_test([0] * 8, [1] * 4 + [0] * 4)
    assert four.p == pytest.approx(0.5**4) and four.outcome == stats.INCONCLUSIVE

    # planned at the observed rates (half the seeds discordant, all for a): p < 0.05 needs >=
    # 5 discordant seeds, so the power at n seeds is P(Binomial(n, 1/2) >= 5): 0.726 at 11,
    # 0.806 at 12
    def at_least_5(n: int) -> float:
        return sum(math.comb(n, j) for j in range(5, n + 1)) / 2**n

    assert at_least_5(11) < 0.8 <= at_least_5(12) and four.seeds_needed == 12
    # one discordant seed the other way: p = P(X <= 1 | 6, 1/2) = 7/64
    mixed = stats.paired_binary_test([1] + [0] * 7, [0] + [1] * 5 + [0] * 2)
    assert mixed.p == pytest.approx(7 / 64)
    # a diverges more: the claim is wrong
    assert stats.paired_binary_test(b, a).outcome == stats.CONTRADICTED


def test_mcnemar_interval_contains_the_difference_of_rates():
    result = stats.paired_binary_test([0] * 6 + [1] * 2, [1] * 6 + [0] * 2)  # 6 for a, 2 against
    low, high = result.ci
    assert result.estimate == pytest.approx(-0.5) and low <= -0.5 <= high < 0.5


def test_no_events_is_untestable_not_p_zero():
    for test in (
        stats.paired_binary_test([0, 0, 0], [0, 0, 0]),
        stats.paired_count_test([0, 0, 0], [0, 0, 0]),
    ):
        assert test.outcome == stats.UNTESTABLE and math.isnan(test.p) and not test.in_family
    # every run diverged
    assert stats.paired_binary_test([1, 1], [1, 1]).outcome == stats.UNTESTABLE


def test_conditional_binomial_on_paired_counts():
    # a spiked once, b nine times: p = P(X <= 1 | 10, 1/2) = 11 / 1024
    result = stats.paired_count_test([0, 1, 0], [3, 4, 2])
    assert result.p == pytest.approx(11 / 1024) and result.outcome == stats.CONFIRMED
    assert result.estimate == pytest.approx(-8 / 3)
    assert (
        stats.paired_count_test([0, 1, 0], [3, 4, 2], better="higher").outcome == stats.CONTRADICTED
    )
    with pytest.raises(ValueError, match=r"c_a\[1\] = 1.5: each value must be a count"):
        stats.paired_count_test([0, 1.5], [1, 2])


def test_conditional_binomial_keeps_its_level_under_seed_rate_differences():
    rng = np.random.default_rng(31)
    trials = 400
    rates = rng.gamma(1.0, 2.0, (trials, 4))  # seeds differ 10x in spike rate; the arms do not
    confirmed = 0
    for lam in rates:
        confirmed += (
            stats.paired_count_test(rng.poisson(lam), rng.poisson(lam)).outcome == stats.CONFIRMED
        )
    # discrete: at most alpha
    assert confirmed / trials <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / trials)


def test_rank_test_ranks_a_diverged_run_worst():
    # a lower at 4 seeds by 0.1-0.4, diverged at seed 0: |d| ranks 5 (diverged), 1..4; W+ = 5
    # one-sided exact P(W+ <= 5) over the 32 sign patterns: {}, {1}..{5}, {1,2}, {1,3}, {1,4}, {2,3}
    # -> 10 / 32
    a = [math.nan, 2.9, 2.8, 2.7, 2.6]
    b = [3.0, 3.0, 3.0, 3.0, 3.0]
    result = stats.rank_test(a, b, better="lower")
    assert result.p == pytest.approx(10 / 32) and result.outcome == stats.INCONCLUSIVE
    # if the diverged run counted as a small finite loss, a would look better at every seed:
    # p = 1/32
    assert stats.rank_test([2.95, 2.9, 2.8, 2.7, 2.6], b, better="lower").p == pytest.approx(1 / 32)
    won = stats.rank_test([2.9, 2.8, 2.7, 2.6, 2.5], [math.inf, 3.0, 3.0, 3.0, 3.0], better="lower")
    assert won.p == pytest.approx(1 / 32) and won.outcome == stats.CONFIRMED


def test_rank_test_degenerate_cases():
    both = stats.rank_test([math.nan, math.nan], [math.nan, math.nan], better="lower")
    assert both.outcome == stats.UNTESTABLE
    small = stats.rank_test([1.0, 1.1, 1.2], [1.5, 1.6, 1.7], better="lower")
    assert (
        small.p == pytest.approx(1 / 8)
        and small.outcome == stats.INCONCLUSIVE
        and small.seeds_needed == 5
    )
