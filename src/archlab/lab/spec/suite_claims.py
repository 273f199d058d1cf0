"""A suite file's claims (`claims:`), each read and checked in parts, one line naming the claim and
the value: its sides (arms, grids, or a factor's levels), its metrics, its words, its sizes, and its
margin resolved in its metric's units (also the suite's own `margins:`). lab/spec/suite_file.py
reads the rest of the file."""

from __future__ import annotations

import dataclasses
import math

from archlab.lab.spec.budgets import MARGIN_LIMIT_WHY, MARGIN_LIMITS, MARGIN_METRICS
from archlab.lab.spec.suite import (
    EXPECTS,
    NARANG_FINDINGS,
    ROLES,
    Claim,
    Suite,
    SuiteError,
    is_exact,
    is_positive,
    require,
    require_fields,
)


def read_claim(raw: dict, where: str, suite: Suite) -> Claim:
    """One claim of `claims:`, checked key by key (one line naming the claim and the value), its
    margin resolved in its metric's units."""
    require_fields(raw, Claim, where, "claim")
    try:
        claim = Claim(**raw)
    except TypeError as err:
        raise SuiteError(f"{where}: claim {raw!r}: {err}") from None
    what = f"claim {claim.text!r}"
    timed = {t.metric for t in suite.timings}
    _check_sides(claim, where, suite)
    _check_claim_metrics(claim, where, what, suite, timed)
    _check_claim_words(claim, where, what)
    _check_claim_sizes(claim, where, what)
    return _with_margin(claim, where, what, suite, timed)


def _check_claim_metrics(claim: Claim, where: str, what: str, suite: Suite, timed: set) -> None:
    """`metric:` and `versus_metric:` are measured (or timed, with a timing of these two arms)."""
    for key in ("metric", "versus_metric"):
        value = getattr(claim, key)
        require(
            value is None or value in suite.measures or value in timed,
            where,
            f"{what}: {key} {value!r} is not measured (measure: or timings:)",
        )
    require(
        claim.metric not in timed or suite.timing(claim) is not None,
        where,
        f"{what}: no timing of {claim.metric} compares {claim.arm} with {claim.versus}",
    )


def _check_claim_words(claim: Claim, where: str, what: str) -> None:
    """`direction:`, `expect:`, `narang:`, `role:` and `tests:` take one of their words."""
    require(
        claim.direction in (None, "higher", "lower"),
        where,
        f"{what}: direction={claim.direction!r}; higher, lower or absent",
    )
    require(claim.expect in EXPECTS, where, f"{what}: expect={claim.expect!r}; one of {EXPECTS}")
    require(
        claim.narang in (None, *NARANG_FINDINGS),
        where,
        f"{what}: narang={claim.narang!r}; one of {NARANG_FINDINGS} or absent",
    )
    require(
        claim.role in (None, *ROLES),
        where,
        f"{what}: role={claim.role!r}; one of {ROLES} or absent",
    )
    require(
        claim.tests is None or (isinstance(claim.tests, str) and claim.tests.strip() != ""),
        where,
        f"{what}: tests={claim.tests!r}; the lecture claim's id (a non-empty string) or absent",
    )


def _check_claim_sizes(claim: Claim, where: str, what: str) -> None:
    """`min_effect:` >= 0, `smallest_effect:` > 0 and finite, and no margin on a better claim."""
    require(
        isinstance(claim.min_effect, (int, float)) and claim.min_effect >= 0,
        where,
        f"{what}: min_effect={claim.min_effect!r}; a number >= 0 (metric units)",
    )
    require(
        claim.smallest_effect is None
        or (
            isinstance(claim.smallest_effect, (int, float)) and 0 < claim.smallest_effect < math.inf
        ),
        where,
        f"{what}: smallest_effect={claim.smallest_effect!r}; a number > 0 (metric units)",
    )
    require(
        claim.expect != "better" or claim.margin is None,
        where,
        f"{what}: margin applies to expect same or equivalent; a better claim takes "
        "min_effect / smallest_effect",
    )


def _with_margin(claim: Claim, where: str, what: str, suite: Suite, timed: set) -> Claim:
    """A same / equivalent claim with its margin (its own, else the suite's for its metric) checked
    in its metric's units; a loss metric without one keeps None (the budget's margin, resolved
    when the suite is planned at a budget)."""
    if claim.expect == "better" or is_exact(claim.metric):
        return claim
    margin = claim.margin if claim.margin is not None else suite.margins.get(claim.metric)
    if margin is None:
        require(
            claim.metric in MARGIN_METRICS,
            where,
            f"{what}: expect: {claim.expect} needs margin: (how much worse still "
            f"counts, in {claim.metric} units); only {', '.join(MARGIN_METRICS)} take "
            "the budget's default",
        )
        return claim
    return dataclasses.replace(
        claim, margin=margin_of(margin, claim.metric, timed, where, f"{what}: margin")
    )


def margin_of(value: object, metric: str, timed: set[str], where: str, name: str) -> float:
    """A margin (`name`: the claim's or the suite's key) in `metric`'s units, > 0, and below the
    limit of its unit where the lab knows it (lab/spec/budgets.py MARGIN_LIMITS: a margin as large
    as the effects a suite can see calls anything "as good as")."""
    from archlab.lab.measures.measure import MEASURES

    scale = "log time ratio" if metric in timed else getattr(MEASURES.get(metric), "scale", None)
    units = {"nats": "nats per token", "share": "a share from 0 to 1", None: f"{metric} units"}.get(
        scale, scale
    )
    require(
        is_positive(value),
        where,
        f"{name}={value!r}; a number > 0 ({units})",
    )
    limit = MARGIN_LIMITS.get(scale)
    if limit is not None and value >= limit:
        unit = " nats" if scale == "nats" else ""
        raise SuiteError(
            f"{where}: {name}={value!r} is not allowed: {metric} is in {units}, not percent, and a "
            f"margin must be below {limit:.2f}{unit} ({MARGIN_LIMIT_WHY[scale]}), or any two arms "
            "would count as alike"
        )
    return float(value)


def _check_sides(claim: Claim, where: str, suite: Suite) -> None:
    """`arm` / `versus` name arms, or with `factor:` levels of that factor (and `within`
    other factors' levels)."""
    what = f"claim {claim.text!r}"
    if claim.factor is None:
        arms = [a.name for a in suite.arms]
        require(
            not suite.screening,
            where,
            f"{what}: a screening suite's claims name a factor (factor: and two of its levels)",
        )
        require(claim.within is None, where, f"{what}: within: needs factor:")
        for key in ("arm", "versus"):
            require(
                getattr(claim, key) in arms or getattr(claim, key) in suite.grids,
                where,
                f"{what}: {key}={getattr(claim, key)!r} is not an arm ({', '.join(sorted(arms))})"
                + (f" or a grid ({', '.join(suite.grids)})" if suite.grids else ""),
            )
        return
    require(
        claim.factor in suite.factors,
        where,
        f"{what}: factor={claim.factor!r}; one of "
        f"{', '.join(suite.factors) or '(the suite has no factors)'}",
    )
    require(
        not suite.screening or claim.within is None,
        where,
        f"{what}: within: is not allowed in a screening suite (a main effect is estimated from "
        "every run; its cells at one level of another factor are not balanced)",
    )
    levels = suite.factors[claim.factor]
    for key in ("arm", "versus"):
        require(
            getattr(claim, key) in levels,
            where,
            f"{what}: {key}={getattr(claim, key)!r} is not a level of "
            f"{claim.factor} ({', '.join(levels)})",
        )
    for factor, level in (claim.within or {}).items():
        require(
            factor in suite.factors and factor != claim.factor and level in suite.factors[factor],
            where,
            f"{what}: within {factor}={level!r} is not a level of another factor",
        )
