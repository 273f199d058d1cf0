"""What a test showed, in words that follow it (archlab.lab.analysis.outcomes.statement): each
outcome and side, the "but worse by" of a non-inferiority confirmed beside a significant deficit,
and the plan's guard."""

from __future__ import annotations

import math

from archlab.lab.analysis import stats
from archlab.lab.analysis.outcomes import statement


def test_statements_say_what_the_interval_shows() -> None:
    worse = [3.05, 3.06, 3.04, 3.05]  # 0.05 worse than base on every seed (sd of d 0.008)
    base = [3.0, 3.0, 3.0, 3.0]
    ni = stats.test_claim(worse, base, expect="same", better="lower", margin=0.1)
    assert ni.outcome == stats.CONFIRMED and ni.ci[0] > 0  # inside 0.1, yet significantly worse
    assert statement(ni, "B").startswith(
        "not worse than B by more than 0.1, but worse by 0.05 (90% CI of the deficit"
    )
    tight = stats.test_claim(worse, base, expect="same", better="lower", margin=0.03)
    assert tight.outcome == stats.CONTRADICTED
    assert statement(tight, "B").startswith("worse than B by more than 0.03: by 0.05")
    better = stats.test_claim(base, worse, expect="better", better="lower")
    assert statement(better, "B").startswith("better than B by 0.05 (90% CI of the gain 0.0")
    # higher is better: the same numbers read the other way
    higher = stats.test_claim(worse, base, expect="better", better="higher")
    assert statement(higher, "B").startswith("better than B by 0.05")
    tost = stats.test_claim(
        [3.001, 2.999, 3.002, 2.998], base, expect="equivalent", better="lower", margin=0.01
    )
    assert statement(tost, "B").startswith("as good as B within +-0.01 (90% CI of the deficit")
    undecided = stats.test_claim([3.0, 3.1, 2.9, 3.05], base, expect="better", better="lower")
    assert undecided.outcome == stats.INCONCLUSIVE and statement(undecided, "B").startswith(
        "not shown (90% CI of"
    )
    tie = stats.test_claim([3.1, 3.2, 3.3], [3.0, 3.1, 3.2], expect="better", better="lower")
    assert statement(tie, "B").startswith(
        "untestable by this design: the paired differences tie exactly"
    )
    one = stats.test_claim([3.0], [3.1], expect="better", better="lower")
    assert statement(one, "B") == stats.INCONCLUSIVE and math.isnan(one.ci[0])


def test_a_gain_short_of_the_claims_minimum_effect_says_so() -> None:
    """A "far better" claim whose gain is significant, even after the family's correction, but
    whose estimate falls short of min_effect is inconclusive for that reason, and its statement
    names the minimum, not the multiplicity correction (the GAU row of long-context)."""
    base = [3.04, 3.05, 3.03, 3.04, 3.045, 3.035]
    # 0.04 better on average (differences -0.038 to -0.042, sd 0.0014)
    arm = [b - 0.04 + e for b, e in zip(base, (0.002, -0.002, 0.001, -0.001, 0.0, 0.0))]
    short = stats.test_claim(arm, base, expect="better", better="lower", min_effect=0.05)
    assert short.outcome == stats.INCONCLUSIVE and short.ci[1] < 0  # significant, yet short
    (adjusted,) = stats.adjust([short])
    assert adjusted.p_adjusted < adjusted.alpha and adjusted.outcome == stats.INCONCLUSIVE
    assert statement(adjusted, "B").startswith(
        "better than B by 0.04, short of the claim's minimum effect 0.05 (90% CI of the gain 0.0"
    )
    # the same gain not significant after a family's correction says both
    corrected = stats.readjusted(short, p_adjusted=0.2, p_contra_adjusted=1.0)
    assert statement(corrected, "B").startswith(
        "better than B by 0.04, short of the claim's minimum effect 0.05, and not shown after the "
        "suite's multiplicity correction (90% CI"
    )
    # reaching the minimum, the same interval confirms
    enough = stats.test_claim(arm, base, expect="better", better="lower", min_effect=0.03)
    assert enough.outcome == stats.CONFIRMED
    assert statement(enough, "B").startswith("better than B by 0.04 (90% CI")
