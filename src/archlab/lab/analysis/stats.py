"""The verdict rule: one pure function, `test_claim`, judges a claim from per-seed values
of two arms.

Every arm runs the same seeds, so a[s] and b[s] share the batch order, the evaluation windows and
the init, and the claim is judged on the paired differences d[s] = a[s] - b[s] (or on a suite's
pooled residual, `rcbd`). Write w = the mean of d oriented so that w > 0 means "a is worse" (w =
mean(d) when lower is better, -mean(d) when higher is better), SE its standard error and t_q the
q-quantile of Student's t at the test's df. Significance is strict (p < alpha; a p exactly at alpha
is not significant). docs/lab-statistics.md states the rule with its simulated error rates.

- expect "better" (superiority): p = P(T >= -w / SE), the one-sided paired t-test of "a is better".
  confirmed: p < alpha and -w >= min_effect (the estimate reaches the smallest effect of interest);
  contradicted: the one-sided test the other way is significant, P(T <= -w / SE) < alpha (a is
  worse); otherwise inconclusive. With no true difference each of confirmed and contradicted has
  probability alpha (less for confirmed when min_effect > 0).
- expect "same" (non-inferiority, Schuirmann 1987's one-sided test; Lakens 2017): a is not worse
  than b by more than `margin` (> 0, metric units). confirmed: the one-sided 1 - alpha upper bound w
  + t_{1-alpha} SE < margin (p = P(T <= (w - margin) / SE) < alpha); contradicted: the lower bound w
  - t_{1-alpha} SE > margin; otherwise inconclusive. At a true deficit of exactly margin, confirmed
  has probability alpha; at a larger one, less.
- expect "equivalent" (two one-sided tests, TOST): confirmed when the 1 - 2 alpha interval of w
  lies inside (-margin, margin) (p = the larger TOST p); contradicted when it lies wholly outside,
  beyond either side.
- `ci` is the two-sided 1 - 2 alpha interval of mean(a - b): estimate -/+ t_{1-alpha} SE, the
  interval whose one-sided bounds the decisions use.
- Items (`items=(A, B)`, each seeds x items: per-item outcomes of both arms on the same items in the
  same order, whose row means are a and b): the estimate's variance is that of the crossed seed x
  item random model (`archlab.lab.analysis.items`), so a verdict generalises to other items of the
  same kind, not to these items only. The test is "seed x item t" at the REML variance components
  (a component the moment estimator puts below 0 is truncated at 0) with the Satterthwaite df of
  those components; everything else (sides, margins, outcomes) is as above. A "better" claim on hits
  (every per-item outcome -1, 0 or 1) also gets the exact item sign-flip test (`items.sign_flip`),
  and the larger of the two one-sided p-values (each direction apart) decides.
- Every t-based outcome carries `mde`, the minimum detectable effect at its n and level (80%
  power; `power.mde`), and inconclusive outcomes carry `seeds_needed`: the seeds per arm for 80%
  power at the effect stated before the run, never at the estimate (the winner's curse inflates
  observed effects, and an estimate pointing the other way would plan toward the side the data
  contradict): for "better", a true gain of `smallest_effect` (when min_effect > 0, the test of
  gain - min_effect, so the plan covers the estimate condition too; none when smallest_effect does
  not exceed min_effect, or is not stated); for "same", a true difference of 0 against the margin
  (the non-inferiority bound at 0 has the power of the superiority test at effect margin); for
  "equivalent", the same with 90% power for each one-sided test, which gives the TOST at least
  80%. A seed x item test is planned on its variance components (`items.seeds_for` / `items_for`):
  seeds at its items, else more items. No plan where the data contradict the planned scenario
  (`ClaimTest.against_the_data`: the 1 - 2 alpha interval excludes 0 against the claim): more seeds
  would most likely decide it the other way.
- Degenerate inputs: NaN or infinite values raise ValueError (diverged runs go to `rank_test`);
  fewer than 2 pairs without a pooled residual give "inconclusive" with no p and no plan;
  differences with zero spread (exact ties) give "untestable by this design" with p NaN, never p = 0
  (an exact measure is "by construction").

Multiplicity: `holm` (Holm 1979) within a suite, or `dunnett` (Dunnett 1955) for every arm against
one base on a pooled residual; `benjamini_hochberg` (Benjamini & Hochberg 1995) across the published
summary; `adjust` re-derives a family's outcomes from the adjusted p-values. Divergence, count and
rank tests are in `archlab.lab.analysis.discrete`, the RCBD fit in `archlab.lab.analysis.rcbd`,
power in `archlab.lab.analysis.power`; all are re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import special

from archlab.lab.analysis.discrete import paired_binary_test, paired_count_test, rank_test
from archlab.lab.analysis.items import as_table, fit_items, is_hits, plan_design, sign_flip
from archlab.lab.analysis.multiplicity import benjamini_hochberg, dunnett, holm
from archlab.lab.analysis.outcomes import (
    BETTERS,
    BY_CONSTRUCTION,
    CONFIRMED,
    CONTRADICTED,
    EXPECTS,
    INCONCLUSIVE,
    UNTESTABLE,
    ClaimTest,
    decide,
)
from archlab.lab.analysis.power import mde, mde_from_se, power, seeds_needed, sequential_levels
from archlab.lab.analysis.rcbd import HETEROSCEDASTIC_RATIO, Pooled, Rcbd, rcbd

__all__ = [
    "ALPHA",
    "BY_CONSTRUCTION",
    "CONFIRMED",
    "CONTRADICTED",
    "HETEROSCEDASTIC_RATIO",
    "INCONCLUSIVE",
    "UNTESTABLE",
    "ClaimTest",
    "Pooled",
    "Rcbd",
    "adjust",
    "benjamini_hochberg",
    "dunnett",
    "holm",
    "mde",
    "paired_binary_test",
    "paired_count_test",
    "power",
    "rank_test",
    "rcbd",
    "seeds_needed",
    "sequential_levels",
    "test_claim",
    "test_estimate",
]

ALPHA = 0.05  # the default one-sided level of each claim (before a family's adjustment)
PLAN_POWER = 0.8
# an sd below this times the values' magnitude is rounding, not spread
TIE_RTOL = 64 * np.finfo(np.float64).eps
ADJUSTMENTS = ("holm", "bh", "dunnett")
T_TESTS = ("paired t", "pooled RCBD t", "Welch t")  # the tests _plan can re-plan (noncentral t)
ITEM_TEST = "seed x item t"  # archlab.lab.analysis.items: seeds and items both random
OLS_TEST = "OLS t"  # an effect of a fitted design (lab/analysis/screening.py): test_estimate


def _values(name: str, values: Sequence[float]) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError(f"{name} has no values: test_claim needs one value per seed")
    bad = np.nonzero(~np.isfinite(x))[0]
    if bad.size:
        raise ValueError(
            f"{name}[{bad[0]}] = {float(x[bad[0]])!r}: values must be finite (judge diverged runs "
            "with rank_test or paired_binary_test)"
        )
    return x


def _check_claim(
    expect: str,
    better: str,
    margin: float,
    min_effect: float,
    alpha: float,
    smallest_effect: float = 0.0,
) -> None:
    if expect not in EXPECTS:
        raise ValueError(f"expect must be one of {', '.join(EXPECTS)}, got {expect!r}")
    if better not in BETTERS:
        raise ValueError(f"better must be one of {', '.join(BETTERS)}, got {better!r}")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must lie in (0, 0.5), got {alpha!r}")
    if expect == "better":
        if margin != 0:
            raise ValueError(
                f"margin = {margin!r} applies to expect 'same' or 'equivalent'; "
                "a 'better' claim takes min_effect"
            )
        if not (math.isfinite(min_effect) and min_effect >= 0):
            raise ValueError(f"min_effect must be a finite number >= 0, got {min_effect!r}")
    elif not (math.isfinite(margin) and margin > 0):
        raise ValueError(f"margin must be > 0 for expect {expect!r} (metric units), got {margin!r}")
    if not (math.isfinite(smallest_effect) and smallest_effect >= 0):
        raise ValueError(
            f"smallest_effect must be a finite number >= 0 (metric units), got {smallest_effect!r}"
        )


@dataclass(frozen=True)
class _Fit:
    """The estimate and its error model, before any decision."""

    estimate: float
    se: float
    df: float
    sigma_d: float
    n: int
    test: str
    arms: int | None = None
    outcome: str = ""  # set (with a note) when no test is possible
    note: str = ""
    items: int = 0
    components: tuple[float, float, float] | None = None
    truncated: tuple[str, ...] = ()
    # items.sign_flip of d: (P(T >= t), P(T <= t), informative items)
    exact: tuple[float, float, int] | None = None


def _is_tie(sd: float, a: np.ndarray, b: np.ndarray) -> bool:
    return sd <= TIE_RTOL * max(float(np.abs(a).max()), float(np.abs(b).max()), 1.0)


def _fit(a: np.ndarray, b: np.ndarray, paired: bool, pooled: Pooled | None) -> _Fit:
    if not paired:
        if pooled is not None:
            raise ValueError(
                "pooled residuals come from the paired (blocked) design: pass "
                "paired=True with pooled"
            )
        return _fit_welch(a, b)
    if a.size != b.size:
        raise ValueError(
            f"paired values need one value per seed on both sides: len(a) = {a.size}, "
            f"len(b) = {b.size}"
        )
    d, n = a - b, a.size
    estimate = float(d.mean())
    if pooled is not None:
        arms = pooled.df / (n - 1) + 1 if n > 1 else math.nan
        sigma_d = pooled.sigma * math.sqrt(2.0)
        fit = _Fit(
            estimate,
            sigma_d / math.sqrt(n),
            pooled.df,
            sigma_d,
            n,
            "pooled RCBD t",
            int(arms) if float(arms).is_integer() else None,
        )
        if pooled.sigma == 0:
            return replace(
                fit, outcome=UNTESTABLE, note="the pooled residual is 0: the runs have no spread"
            )
        return fit
    if n < 2:
        return _Fit(
            estimate,
            math.nan,
            0,
            math.nan,
            n,
            "paired t",
            outcome=INCONCLUSIVE,
            note="1 seed: a paired test needs at least 2 (or a pooled residual)",
        )
    sd = math.sqrt(float(np.dot(d - estimate, d - estimate)) / (n - 1))
    fit = _Fit(estimate, sd / math.sqrt(n), n - 1, sd, n, "paired t")
    if _is_tie(sd, a, b):
        return replace(
            fit,
            outcome=UNTESTABLE,
            note="the paired differences tie exactly (zero spread): "
            "no error estimate; an exact measure is by construction",
        )
    return fit


def _fit_items(
    a: np.ndarray, b: np.ndarray, items: tuple[object, object], pooled: Pooled | None
) -> _Fit:
    """The seed x item fit (archlab.lab.analysis.items) of per-item tables whose row means must be
    a and b."""
    if pooled is not None:
        raise ValueError("items= and pooled= are two error models: pass one")
    if not (isinstance(items, (tuple, list)) and len(items) == 2):
        raise ValueError("items must be a pair (per-item outcomes of a, of b), each seeds x items")
    ta, tb = as_table("items[0]", items[0]), as_table("items[1]", items[1])
    if ta.shape != tb.shape:
        raise ValueError(
            "items of a and b must have one shape (seeds x items, the same items): "
            f"{ta.shape} vs {tb.shape}"
        )
    if ta.shape[0] != a.size or b.size != a.size:
        raise ValueError(f"items hold {ta.shape[0]} seeds but a has {a.size} and b {b.size} values")
    for name, table, means in (("a", ta, a), ("b", tb, b)):
        if not np.allclose(table.mean(axis=1), means, rtol=1e-9, atol=1e-12):
            raise ValueError(
                f"{name} must be the per-seed means of its items: "
                f"{means.tolist()} vs {table.mean(axis=1).tolist()}"
            )
    d = ta - tb
    n_seeds, n_items = d.shape
    if n_seeds < 2 or n_items < 2:
        return _Fit(
            float(d.mean()),
            math.nan,
            0,
            math.nan,
            n_seeds,
            ITEM_TEST,
            outcome=INCONCLUSIVE,
            note=f"{n_seeds} seeds x {n_items} items: the seed x item test needs at least "
            "2 of each",
        )
    fit = fit_items(d)
    truncated = f"; {_truncated_words(fit.truncated)}" if fit.truncated else ""
    result = _Fit(
        fit.estimate,
        fit.se,
        fit.df,
        math.nan,
        n_seeds,
        ITEM_TEST,
        note=f"{n_items} items; items' share of the variance {fit.item_share:.0%}{truncated}",
    )
    if _is_tie(fit.se, ta, tb):
        return replace(
            result,
            outcome=UNTESTABLE,
            note="the per-item differences tie exactly (zero spread): no error estimate",
        )
    return replace(
        result,
        items=n_items,
        components=fit.components,
        truncated=fit.truncated,
        exact=sign_flip(d) if is_hits(ta, tb) else None,
    )


def _exact_p(fit: _Fit, expect: str, better: str) -> tuple[float, float]:
    """The exact item test's (confirming, contradicting) p of a "better" claim on hits, else
    NaN (module doc)."""
    if fit.exact is None or expect != "better":
        return math.nan, math.nan
    # d = a - b: "a is better" is a large sum when higher is better
    at_least, at_most, _ = fit.exact
    return (at_least, at_most) if better == "higher" else (at_most, at_least)


def _truncated_words(truncated: tuple[str, ...]) -> str:
    return (
        f"the {' and '.join(truncated)} component{'s' if len(truncated) > 1 else ''} truncated "
        "at 0 (REML)"
    )


def item_note(test: ClaimTest) -> str:
    """What a seed x item test adds to its claim's note: the components truncated at 0, and the
    exact item test beside the t with both p-values ("" for other tests)."""
    if test.test != ITEM_TEST:
        return ""
    parts = [_truncated_words(test.truncated)] if test.truncated else []
    if not math.isnan(test.exact_p):
        w = test.estimate if test.better == "lower" else -test.estimate
        t_p = _p_values(test.expect, w, test.se, test.df, test.margin)[0]
        decides = "the exact test decides" if test.exact_p > t_p else "the t decides"
        parts.append(
            f"exact item sign-flip p {test.exact_p:.3g} over {test.informative} informative items "
            f"beside the t's {t_p:.3g}: {decides}"
        )
    return "; ".join(parts)


def _fit_welch(a: np.ndarray, b: np.ndarray) -> _Fit:
    estimate = float(a.mean() - b.mean())
    if min(a.size, b.size) < 2:
        return _Fit(
            estimate,
            math.nan,
            0,
            math.nan,
            min(a.size, b.size),
            "Welch t",
            outcome=INCONCLUSIVE,
            note="an unpaired test needs at least 2 values per arm",
        )
    va, vb = a.var(ddof=1), b.var(ddof=1)
    se2 = va / a.size + vb / b.size
    df = (
        se2 * se2 / ((va / a.size) ** 2 / (a.size - 1) + (vb / b.size) ** 2 / (b.size - 1))
        if se2 > 0
        else 0
    )
    fit = _Fit(estimate, math.sqrt(se2), df, math.sqrt(va + vb), min(a.size, b.size), "Welch t")
    if _is_tie(math.sqrt(se2), a, b):
        return replace(
            fit, df=0, outcome=UNTESTABLE, note="both arms have zero spread: no error estimate"
        )
    return fit


def _p_values(expect: str, w: float, se: float, df: float, margin: float) -> tuple[float, float]:
    """(p of the confirming test, p of the contradicting test); w > 0 means a is worse.

    scipy.special.stdtr / stdtrit are the functions scipy.stats.t's cdf and ppf evaluate; called
    directly because the distribution objects add ~0.3 ms of argument handling per call, and the
    simulations make thousands.
    """
    if expect == "better":
        return float(special.stdtr(df, w / se)), float(special.stdtr(df, -w / se))
    upper = (w - margin) / se  # the non-inferiority statistic: significantly below margin confirms
    if expect == "same":
        return float(special.stdtr(df, upper)), float(special.stdtr(df, -upper))
    lower = (w + margin) / se
    return (
        max(float(special.stdtr(df, upper)), float(special.stdtr(df, -lower))),
        min(float(special.stdtr(df, -upper)), float(special.stdtr(df, lower))),
    )


def planning_effect(test: ClaimTest) -> float | None:
    """The effect a t-based claim is planned for and its mde measured against (the module
    doc), or None."""
    if test.expect == "better":
        gain = test.smallest_effect - test.min_effect
        return gain if test.smallest_effect > 0 and gain > 0 else None
    return test.margin


def _plan(test: ClaimTest, level: float) -> tuple[int | None, int | None]:
    """(seeds per arm, items) for PLAN_POWER at `level` at the stated effect (the module doc);
    items is None but for a seed x item claim that more seeds alone cannot decide; (None, None)
    without a plan."""
    effect = planning_effect(test)
    each = 1.0 - (1.0 - PLAN_POWER) / 2.0 if test.expect == "equivalent" else PLAN_POWER
    if test.test == ITEM_TEST and test.components is not None:
        if effect is None or test.against_the_data:
            return None, None
        return plan_design(
            tuple(test.components), test.n, test.items, effect, alpha=level, power=each
        )
    if test.test not in T_TESTS or not (math.isfinite(test.sigma_d) and test.sigma_d > 0):
        # exact tests
        return (test.seeds_needed if test.test not in (ITEM_TEST, OLS_TEST) else None), None
    if effect is None or test.against_the_data:
        return None, None
    return seeds_needed(effect, test.sigma_d, alpha=level, power=each, arms=test.arms), None


def _mde(test: ClaimTest, level: float) -> float:
    """The minimum detectable effect at the test's n and `level` (PLAN_POWER; per
    side for "equivalent")."""
    each = 1.0 - (1.0 - PLAN_POWER) / 2.0 if test.expect == "equivalent" else PLAN_POWER
    if test.test in (ITEM_TEST, OLS_TEST) and math.isfinite(test.se) and test.se > 0:
        return mde_from_se(test.se, test.df, alpha=level, power=each)
    if (
        test.test not in T_TESTS
        or not (math.isfinite(test.sigma_d) and test.sigma_d > 0)
        or test.n < 2
    ):
        return math.nan
    if test.test == "Welch t":
        return mde_from_se(test.se, test.df, alpha=level, power=each)
    return mde(test.sigma_d, test.n, alpha=level, power=each, arms=test.arms)


def _judge(
    test: ClaimTest, p: float, p_contra: float, plan_level: float, **fields: object
) -> ClaimTest:
    """`test` (`fields` replaced) judged from (possibly adjusted) p-values at its alpha;
    planned if inconclusive."""
    w = test.estimate if test.better == "lower" else -test.estimate
    reaches = test.expect != "better" or -w >= test.min_effect
    outcome = decide(p, p_contra, test.alpha, reaches)
    seeds, more_items = _plan(test, plan_level) if outcome == INCONCLUSIVE else (None, None)
    return replace(
        test,
        outcome=outcome,
        seeds_needed=seeds,
        items_needed=more_items,
        mde=_mde(test, plan_level),
        **fields,
    )


def _tests(fit: _Fit, expect: str, better: str, margin: float, alpha: float):
    """(p, p_contra, exact_p, exact_p_contra, 90% CI) of a fit, all nan where the fit already
    decided (`fit.outcome`). Where an exact item test applies, the more conservative of the two
    p-values decides, each direction apart."""
    if fit.outcome:
        return math.nan, math.nan, math.nan, math.nan, (math.nan, math.nan)
    w = fit.estimate if better == "lower" else -fit.estimate
    p, p_contra = _p_values(expect, w, fit.se, fit.df, margin)
    exact_p, exact_contra = _exact_p(fit, expect, better)
    if not math.isnan(exact_p):
        p, p_contra = max(p, exact_p), max(p_contra, exact_contra)
    half = float(special.stdtrit(fit.df, 1.0 - alpha)) * fit.se
    return p, p_contra, exact_p, exact_contra, (fit.estimate - half, fit.estimate + half)


def test_claim(
    a: Sequence[float],
    b: Sequence[float],
    *,
    expect: str,
    better: str,
    margin: float = 0.0,
    min_effect: float = 0.0,
    alpha: float = ALPHA,
    paired: bool = True,
    pooled: Pooled | None = None,
    smallest_effect: float = 0.0,
    items: tuple[object, object] | None = None,
) -> ClaimTest:
    """Judge "a is better than b" / "a is not worse than b by more than margin"
    from per-seed values.

    `a`, `b`: values in seed order (paired by index). `expect`: "better", "same" (non-inferiority)
    or "equivalent" (TOST). `better`: "lower" or "higher" for the metric. `pooled`: a suite's
    residual from `rcbd`, used instead of the pair's own spread. `paired=False`: Welch's unpaired
    t-test (not the lab's design). `smallest_effect`: the gain a "better" claim is planned for
    (metric units; 0: no plan). `items`: per-item outcomes (a's, b's), each seeds x items, for a
    claim scored on a fixed item set. The rule is in the module doc.
    """
    _check_claim(expect, better, margin, min_effect, alpha, smallest_effect)
    a_values, b_values = _values("a", a), _values("b", b)
    if items is not None:
        if not paired:
            raise ValueError(
                "items= needs the paired design (the same items and seeds on both sides)"
            )
        fit = _fit_items(a_values, b_values, items, pooled)
    else:
        fit = _fit(a_values, b_values, paired, pooled)
    p, p_contra, exact_p, exact_contra, ci = _tests(fit, expect, better, margin, alpha)
    test = ClaimTest(
        outcome=fit.outcome,
        p=p,
        ci=ci,
        estimate=fit.estimate,
        df=fit.df,
        seeds_needed=None,
        expect=expect,
        better=better,
        test=fit.test,
        n=fit.n,
        se=fit.se,
        sigma_d=fit.sigma_d,
        arms=fit.arms,
        p_contra=p_contra,
        margin=margin,
        min_effect=min_effect,
        alpha=alpha,
        level=alpha,
        note=fit.note,
        smallest_effect=smallest_effect,
        items=fit.items,
        components=fit.components,
        truncated=fit.truncated,
        exact_p=exact_p,
        exact_p_contra=exact_contra,
        informative=fit.exact[2] if fit.exact and not math.isnan(exact_p) else 0,
    )
    return test if fit.outcome else _judge(test, p, p_contra, alpha)


# a library function named test_*: keep pytest from collecting it where imported
test_claim.__test__ = False


def test_estimate(
    estimate: float,
    se: float,
    df: float,
    *,
    expect: str,
    better: str,
    margin: float = 0.0,
    min_effect: float = 0.0,
    alpha: float = ALPHA,
    smallest_effect: float = 0.0,
    n: int = 0,
    test: str = "OLS t",
    note: str = "",
) -> ClaimTest:
    """The rule of `test_claim` on an estimate (of mean(a - b)) with its standard error and df from
    a model fitted elsewhere (a screening design's least squares: lab/analysis/screening.py). No
    seed plan (the design, not the seeds, sets the SE); the mde is (t_{1-alpha} + t_{0.8}) SE."""
    _check_claim(expect, better, margin, min_effect, alpha, smallest_effect)
    if not (math.isfinite(estimate) and math.isfinite(se) and se > 0 and df > 0):
        raise ValueError(
            "test_estimate needs a finite estimate, se > 0 and df > 0; got "
            f"{estimate!r}, {se!r}, {df!r}"
        )
    w = estimate if better == "lower" else -estimate
    p, p_contra = _p_values(expect, w, se, df, margin)
    half = float(special.stdtrit(df, 1.0 - alpha)) * se
    result = ClaimTest(
        outcome="",
        p=p,
        ci=(estimate - half, estimate + half),
        estimate=estimate,
        df=df,
        seeds_needed=None,
        expect=expect,
        better=better,
        test=test,
        n=n,
        se=se,
        p_contra=p_contra,
        margin=margin,
        min_effect=min_effect,
        alpha=alpha,
        level=alpha,
        note=note,
        smallest_effect=smallest_effect,
    )
    return _judge(result, p, p_contra, alpha)


test_estimate.__test__ = False


def _adjusted(
    tests: Sequence[ClaimTest], family: list[int], method: str
) -> tuple[list[float], list[float]]:
    ps = [tests[i].p for i in family]
    contras = [tests[i].p_contra if not math.isnan(tests[i].p_contra) else 1.0 for i in family]
    if method != "dunnett":
        rule = holm if method == "holm" else benjamini_hochberg
        return rule(ps), rule(contras)
    shapes = {(tests[i].test, tests[i].df, tests[i].n) for i in family}
    if len(shapes) > 1 or next(iter(shapes))[0] != "pooled RCBD t":
        raise ValueError(
            "dunnett needs every claim on one pooled residual with the same seeds; got (test, "
            f"df, n) {sorted(shapes, key=str)}"
        )
    df = next(iter(shapes))[1]
    return dunnett(ps, df), dunnett(contras, df)


def readjusted(
    test: ClaimTest, p_adjusted: float, p_contra_adjusted: float, level: float | None = None
) -> ClaimTest:
    """`test` re-decided at other adjusted p-values (another family's: a comparison two suites
    share gets one verdict, the larger Holm p's), planned and its mde measured at `level`
    (default its own)."""
    level = test.level if level is None else level
    return _judge(
        test,
        p_adjusted,
        p_contra_adjusted,
        level,
        p_adjusted=p_adjusted,
        p_contra_adjusted=p_contra_adjusted,
        level=level,
    )


def adjust(tests: Sequence[ClaimTest], method: str = "holm") -> list[ClaimTest]:
    """Re-derive a family's outcomes at the adjusted level ("holm" within a suite, "bh"
    across the summary).

    "dunnett" (single-step, `dunnett`) replaces Holm for a family of arms each against one shared
    base, all judged on one pooled residual with the same seeds (the caller vouches for the shared
    base; the rest is checked).

    The confirming p-values are adjusted together, and so, separately, are the contradicting ones; a
    claim is then confirmed (contradicted) when its adjusted p (p_contra) is below its alpha, with
    the same min_effect condition. Untestable and by-construction tests (and those without a p) stay
    as they are and do not count in m. Inconclusive t-based claims are re-planned at alpha / m,
    Holm's first step (conservative for the rest).
    """
    if method not in ADJUSTMENTS:
        raise ValueError(f"method must be one of {', '.join(ADJUSTMENTS)}, got {method!r}")
    family = [i for i, t in enumerate(tests) if t.in_family]
    if not family:
        return list(tests)
    p_adj, contra_adj = _adjusted(tests, family, method)
    out = list(tests)
    for i, p, c in zip(family, p_adj, contra_adj, strict=True):
        level = tests[i].alpha / len(family)
        out[i] = _judge(tests[i], p, c, level, p_adjusted=p, p_contra_adjusted=c, level=level)
    return out
