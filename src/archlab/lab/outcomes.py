"""The outcomes a lab claim can have, and the one record every claim test returns (`ClaimTest`).

The rule that produces them lives in `archlab.lab.stats` (t-based claims) and `archlab.lab.discrete` (divergence,
counts, ranks); docs/lab-statistics.md states it. This module holds only the vocabulary both share, so the two can
import it without importing each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CONFIRMED = "confirmed"
CONTRADICTED = "contradicted"
INCONCLUSIVE = "inconclusive"
UNTESTABLE = "untestable by this design"  # no events, exact ties of a stochastic measure: no error estimate
BY_CONSTRUCTION = "by construction"  # arithmetic (a formula), never counted as an experiment nor in a family

EXPECTS = ("better", "same", "equivalent")
BETTERS = ("lower", "higher")


@dataclass(frozen=True)
class ClaimTest:
    """One claim's test: the outcome and everything it was decided from.

    `estimate` is mean(a - b) (`rank_test`: the median of the paired differences); `ci` is its two-sided
    1 - 2*alpha interval, the interval whose one-sided bounds the decisions use. `p` is the one-sided p-value of the
    test that would confirm the claim, `p_contra` that of the test that would contradict it; `p_adjusted` and
    `p_contra_adjusted` are set by `stats.adjust` and `level` is then the level the seeds were planned at.
    `seeds_needed` (seeds per arm) is set for inconclusive outcomes when a planning spread exists, else None.
    `sigma_d` is the spread of one paired difference the plan used (for a pooled residual sigma: sigma * sqrt(2));
    `arms` is the number of arms of a pooled analysis (its df are (arms - 1)(n - 1)), None for a pair's own spread.
    """

    outcome: str
    p: float
    ci: tuple[float, float]
    estimate: float
    df: float
    seeds_needed: int | None
    expect: str
    better: str
    test: str  # which test decided it: "paired t", "pooled RCBD t", "Welch t", "exact binomial", ...
    n: int = 0  # seeds (pairs) the test used
    se: float = math.nan  # standard error of the estimate (t-based tests)
    sigma_d: float = math.nan
    arms: int | None = None
    p_contra: float = math.nan
    margin: float = 0.0
    min_effect: float = 0.0
    alpha: float = 0.05
    level: float = 0.05
    p_adjusted: float | None = None
    p_contra_adjusted: float | None = None
    note: str = ""

    @property
    def decided(self) -> bool:
        """Whether the outcome is confirmed or contradicted."""
        return self.outcome in (CONFIRMED, CONTRADICTED)

    @property
    def short_of_min_effect(self) -> bool:
        """A "better" claim whose estimate falls short of its min_effect: more seeds would not confirm it at this
        estimate (confirming needs the estimate to reach min_effect), so it gets no seed plan."""
        gain = -self.estimate if self.better == "lower" else self.estimate
        return self.expect == "better" and self.min_effect > 0 and gain < self.min_effect

    @property
    def in_family(self) -> bool:
        """Whether the test belongs to a multiplicity family (untestable and by-construction claims do not)."""
        return self.outcome not in (UNTESTABLE, BY_CONSTRUCTION) and not math.isnan(self.p)


def decide(p: float, p_contra: float, level: float, reaches_min_effect: bool = True) -> str:
    """The outcome from the two one-sided p-values at `level`.

    Significance is strict: p < level (a p exactly at the level is not significant), so "confirmed" is the same
    event as "the one-sided 1 - level bound excludes the null value".
    """
    if p < level and reaches_min_effect:
        return CONFIRMED
    if p_contra < level:
        return CONTRADICTED
    return INCONCLUSIVE
