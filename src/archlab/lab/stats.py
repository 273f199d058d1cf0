"""The verdict rule: Welch's t-test on the seeds' results, Holm-Bonferroni over a suite's claims, the noise floor.

The rule, stated once (docs/lab.md repeats it):
- For each claim, Welch's unequal-variance t-test compares the seeds of the claimed arm with the seeds of the
  arm it is compared against, on the seeds both ran (the base arm's extra seeds serve the noise floor only: a
  mean over other seeds would mix seed-to-seed differences into the comparison). Its two-sided p-value is the
  Student-t tail at the Welch-Satterthwaite degrees of freedom (computed here with the regularized incomplete
  beta function; no scipy).
- The p-values of all claims of a suite are adjusted together with Holm's step-down method (Holm 1979), which
  keeps the chance of any false "confirmed" in the suite at ALPHA.
- The noise floor is the standard deviation of the base config over its seeds: a difference smaller than it is
  never called a result, however small the p-value (Narang et al. 2021, arXiv 2102.11972, report the base
  config's spread over runs for the same reason).
- "better" claims: confirmed when adjusted p < ALPHA and the mean moves the claimed way by more than the noise
  floor; contradicted when the same holds the other way; otherwise not visible at this scale.
- "same" claims ("as good as"): contradicted when the claimed arm is worse with adjusted p < ALPHA and by more
  than the noise floor; confirmed when it is not worse by more than the noise floor; otherwise not visible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

ALPHA = 0.05  # family-wise error rate of a suite's claims after Holm's correction
CONFIRMED, NOT_VISIBLE, CONTRADICTED = "confirmed", "not visible at this scale", "contradicted"
_CF_ITERATIONS, _CF_EPS, _CF_TINY = 300, 3e-16, 1e-300  # Lentz's continued fraction (Numerical Recipes 6.4)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1); the std of a single value is 0."""
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var)


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function, by the modified Lentz method."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _CF_TINY else _CF_TINY)
    h = d
    for m in range(1, _CF_ITERATIONS + 1):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _CF_TINY else _CF_TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _CF_TINY else _CF_TINY
            h *= d * c
        if abs(d * c - 1.0) < _CF_EPS:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):  # the fraction converges fast on this side; use symmetry on the other
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with `df` degrees of freedom: I_{df/(df+t^2)}(df/2, 1/2)."""
    if math.isinf(t):
        return 0.0
    return incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


@dataclass
class Welch:
    """Welch's t-test of a against b: difference of means (a - b), t, degrees of freedom, two-sided p."""

    diff: float
    t: float
    df: float
    p: float


def welch_test(a: Sequence[float], b: Sequence[float]) -> Welch:
    """Welch's unequal-variance t-test; p is NaN with fewer than 2 values on a side.

    Deterministic measurements (both spreads 0, e.g. KV-cache bytes) give p = 0 when the means differ and
    p = 1 when they agree, the limit of the test as the spreads shrink.
    """
    (ma, sa), (mb, sb) = mean_std(a), mean_std(b)
    diff = ma - mb
    if len(a) < 2 or len(b) < 2:
        return Welch(diff, math.nan, math.nan, math.nan)
    va, vb = sa * sa / len(a), sb * sb / len(b)
    if va + vb == 0.0:
        return Welch(diff, math.copysign(math.inf, diff) if diff else 0.0, math.inf, 0.0 if diff else 1.0)
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1))
    return Welch(diff, t, df, t_two_sided_p(t, df))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order (NaN stays NaN and is not counted).

    Sorted ascending, the i-th of m p-values (from 0) is multiplied by m - i, then made non-decreasing.
    """
    finite = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m, running = len(finite), 0.0
    adjusted = [math.nan] * len(p_values)
    for rank, (p, i) in enumerate(finite):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def verdict(diff: float, p_adjusted: float, noise_floor: float, better: str, expect: str) -> str:
    """Confirmed / not visible at this scale / contradicted for one claim (the rule in the module doc).

    `diff` is mean(claimed arm) - mean(compared arm); `better` is "lower" or "higher" for the metric.
    """
    gain = -diff if better == "lower" else diff  # > 0: the claimed arm is better
    significant = not math.isnan(p_adjusted) and p_adjusted < ALPHA
    if expect == "better":
        if significant and gain > noise_floor:
            return CONFIRMED
        if significant and -gain > noise_floor:
            return CONTRADICTED
        return NOT_VISIBLE
    if significant and -gain > noise_floor:
        return CONTRADICTED
    if math.isnan(p_adjusted):
        return NOT_VISIBLE
    return CONFIRMED if -gain <= noise_floor else NOT_VISIBLE
