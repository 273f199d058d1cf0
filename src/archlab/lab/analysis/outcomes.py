"""The outcomes a lab claim can have, and the one record every claim test returns (`ClaimTest`).

The rule that produces them lives in `archlab.lab.analysis.stats` (t-based claims) and
`archlab.lab.analysis.discrete` (divergence, counts, ranks); docs/lab-statistics.md states it. This
module holds only the vocabulary both share, so the two can import it without importing each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CONFIRMED = "confirmed"
CONTRADICTED = "contradicted"
INCONCLUSIVE = "inconclusive"
# no events, exact ties of a stochastic measure: no error estimate
UNTESTABLE = "untestable by this design"
# arithmetic (a formula), never counted as an experiment nor in a family
BY_CONSTRUCTION = "by construction"

EXPECTS = ("better", "same", "equivalent")
BETTERS = ("lower", "higher")


@dataclass(frozen=True)
class ClaimTest:
    """One claim's test: the outcome and everything it was decided from.

    `estimate` is mean(a - b) (`rank_test`: the median of the paired differences); `ci` is its
    two-sided 1 - 2*alpha interval, the interval whose one-sided bounds the decisions use. `p` is
    the one-sided p-value of the test that would confirm the claim, `p_contra` that of the test
    that would contradict it; `p_adjusted` and `p_contra_adjusted` are set by `stats.adjust` and
    `level` is then the level the seeds were planned at. `seeds_needed` (seeds per arm) is set
    for inconclusive outcomes when a planning spread exists, else None. `sigma_d` is the spread
    of one paired difference the plan used (for a pooled residual sigma: sigma * sqrt(2)); `arms`
    is the number of arms of a pooled analysis (its df are (arms - 1)(n - 1)), None for a pair's
    own spread. `smallest_effect` is the smallest effect of interest stated before the run (metric
    units: the gain a "better" claim is planned for; a "same" / "equivalent" claim is planned at
    a true difference 0 against its margin); `mde` the minimum detectable effect at this n and
    level (80% power: for "better" the smallest true gain the test confirms 80% of the time, for
    "same" / "equivalent" how far inside the margin the truth must lie to be confirmed 80% of the
    time); `items` the number of items of a seed x item test (0 for seed-level tests), `components`
    its REML variance components (sigma_s^2, sigma_i^2, sigma_e^2; archlab.lab.analysis.items),
    `truncated` those the moment estimator put below 0 (set to 0), and `items_needed` the items
    an inconclusive one would need at its seeds when no number of seeds suffices at its items.
    `exact_p` / `exact_p_contra` are the exact item sign-flip test's one-sided p-values over
    its `informative` items (a "better" claim on hits: NaN otherwise); when they are set, `p` /
    `p_contra` are the larger of them and the t's (the more conservative test decides).
    """

    outcome: str
    p: float
    ci: tuple[float, float]
    estimate: float
    df: float
    seeds_needed: int | None
    expect: str
    better: str
    # which test decided it: "paired t", "pooled RCBD t", "Welch t", "exact binomial", ...
    test: str
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
    smallest_effect: float = 0.0
    mde: float = math.nan
    items: int = 0
    components: tuple[float, float, float] | None = None
    items_needed: int | None = None
    truncated: tuple[str, ...] = ()
    exact_p: float = math.nan
    exact_p_contra: float = math.nan
    informative: int = 0

    @property
    def decided(self) -> bool:
        """Whether the outcome is confirmed or contradicted."""
        return self.outcome in (CONFIRMED, CONTRADICTED)

    @property
    def short_of_min_effect(self) -> bool:
        """A "better" claim whose estimate falls short of its min_effect: more seeds would not
        confirm it at this estimate (confirming needs the estimate to reach min_effect), so it gets
        no seed plan."""
        gain = -self.estimate if self.better == "lower" else self.estimate
        return self.expect == "better" and self.min_effect > 0 and gain < self.min_effect

    @property
    def worse_by(self) -> float:
        """How much worse the arm is in the claim's bad direction (w: > 0 worse, < 0 better)."""
        return self.estimate if self.better == "lower" else -self.estimate

    @property
    def against_the_data(self) -> bool:
        """The 1 - 2 alpha interval excludes 0 on the side against the claim (the arm significantly
        worse before any adjustment): a seed plan toward the claim would go against the data, so
        none is made."""
        low, high = self.ci
        if not (math.isfinite(low) and math.isfinite(high)):
            return False
        return low > 0 if self.better == "lower" else high < 0

    @property
    def in_family(self) -> bool:
        """Whether the test belongs to a multiplicity family (untestable and by-construction
        claims do not)."""
        return self.outcome not in (UNTESTABLE, BY_CONSTRUCTION) and not math.isnan(self.p)


def decide(p: float, p_contra: float, level: float, reaches_min_effect: bool = True) -> str:
    """The outcome from the two one-sided p-values at `level`.

    Significance is strict: p < level (a p exactly at the level is not significant), so "confirmed"
    is the same event as "the one-sided 1 - level bound excludes the null value".
    """
    if p < level and reaches_min_effect:
        return CONFIRMED
    if p_contra < level:
        return CONTRADICTED
    return INCONCLUSIVE


def _num(x: float) -> str:
    return f"{x:.3g}"


def _short_of_min_effect(test: ClaimTest, versus: str, u: str, gain: str) -> str:
    """A gain whose interval excludes 0 but whose estimate falls short of the claim's
    min_effect ("far better"): what held it back, and whether the family's correction did too."""
    text = (
        f"better than {versus} by {_num(-test.worse_by)}{u}, short of the claim's minimum "
        f"effect {_num(test.min_effect)}{u}"
    )
    p = test.p if test.p_adjusted is None else test.p_adjusted
    if not p < test.alpha:
        text += ", and not shown after the suite's multiplicity correction"
    return f"{text} {gain}"


def statement(test: ClaimTest, versus: str, unit: str = "") -> str:
    """What the test showed, in words that follow it (docs/lab-statistics.md): superiority says by
    how much (with the interval of the gain), non-inferiority "not worse than B by more than m"
    (and, when the interval excludes 0 on the worse side, "but worse by X"), equivalence "as good as
    B within +-m"; an undecided test says what its interval allows; an untestable one why."""
    if test.outcome == UNTESTABLE:
        return f"{UNTESTABLE}: {test.note}" if test.note else UNTESTABLE
    u = f" {unit}" if unit else ""
    w = test.worse_by
    # interval of w, the deficit
    low, high = sorted(-x if test.better == "higher" else x for x in test.ci)
    if not math.isfinite(low):
        return test.outcome
    deficit = f"(90% CI of the deficit {_num(low)} to {_num(high)}{u})"
    gain = f"(90% CI of the gain {_num(-high)} to {_num(-low)}{u})"
    m = _num(test.margin)
    if test.expect == "better":
        if test.outcome == CONFIRMED:
            return f"better than {versus} by {_num(-w)}{u} {gain}"
        if test.outcome == CONTRADICTED:
            return f"worse than {versus} by {_num(w)}{u} {deficit}"
        if low > 0:
            return f"not shown; worse than {versus} by {_num(w)}{u} {deficit}"
        if high < 0 and test.short_of_min_effect:
            return _short_of_min_effect(test, versus, u, gain)
        if high < 0:  # significant alone, not after the family's correction
            return f"not shown after the suite's multiplicity correction {gain}"
        return f"not shown {gain}"
    if test.outcome == CONFIRMED and test.expect == "same":
        text = f"not worse than {versus} by more than {m}{u}"
        if low > 0:
            text += f", but worse by {_num(w)}{u}"
        elif high < 0:
            text += f", and better by {_num(-w)}{u}"
        return f"{text} {deficit}"
    if test.outcome == CONFIRMED:  # equivalent
        text = f"as good as {versus} within +-{m}{u}"
        return f"{text}, though worse by {_num(w)}{u} {deficit}" if low > 0 else f"{text} {deficit}"
    if test.outcome == CONTRADICTED:
        side = "worse" if w > 0 else "better"
        return f"{side} than {versus} by more than {m}{u}: by {_num(abs(w))}{u} {deficit}"
    if low > 0:
        return f"not shown; worse than {versus} by {_num(w)}{u} {deficit}"
    if high < 0:
        return (
            f"not shown after the suite's multiplicity correction; better than {versus} "
            f"by {_num(-w)}{u} {deficit}"
        )
    if test.expect == "same" and high < test.margin:
        return f"not shown after the suite's multiplicity correction {deficit}"
    return f"not shown {deficit}"
