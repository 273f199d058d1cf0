"""A page beside its earlier verdicts (lab/publishing/history.py): what moved a claim's verdict,
each move named alone, and nothing named where nothing moved."""

from __future__ import annotations

import dataclasses
import math

from archlab.lab.analysis import stats
from archlab.lab.analysis.verdicts import ClaimResult
from archlab.lab.publishing.history import why_changed
from archlab.lab.spec.suite import Claim

TEXT = "x is as good as y"


def _result(test: stats.ClaimTest) -> ClaimResult:
    claim = Claim(TEXT, "val_loss", "x", "y", expect="same", margin=0.03)
    return ClaimResult(claim, test, test.outcome, test.estimate)


def _now() -> ClaimResult:
    return _result(
        stats.test_claim(
            [1.00, 1.02, 1.01, 1.03],
            [1.00, 1.00, 1.00, 1.01],
            expect="same",
            better="lower",
            margin=0.03,
        )
    )


def _then(now: ClaimResult, **test: object) -> dict:
    """now's claims.json row as an earlier page would have kept it, `test` fields replaced."""
    fields = {"margin": now.test.margin, "test": now.test.test, "se": now.test.se, **test}
    return {"claim": TEXT, "estimate": now.estimate, "test": fields}


def test_each_move_is_named_alone_and_an_unmoved_claim_says_so() -> None:
    now = _now()
    se = now.test.se
    assert now.test.test == "paired t" and now.test.margin == 0.03 and se > 0
    assert why_changed(_then(now), now) == "the same test"
    assert why_changed(_then(now, margin=0.09), now) == "margin 0.09 -> 0.03"
    assert why_changed(_then(now, test="pooled RCBD t"), now) == "pooled RCBD t -> paired t"
    assert why_changed(_then(now, se=2 * se), now) == f"standard error {2 * se:.3g} -> {se:.3g}"
    # within the tolerance (1e-6 relative) a standard error has not moved
    assert why_changed(_then(now, se=se * (1 + 1e-8)), now) == "the same test"
    assert why_changed({**_then(now), "claim": "x as good as y"}, now) == "claim restated"
    moved = {**_then(now), "estimate": now.estimate + 0.01}
    assert why_changed(moved, now).startswith("estimate ")
    assert why_changed(_then(now, margin=0.09, se=2 * se), now) == (
        f"margin 0.09 -> 0.03; standard error {2 * se:.3g} -> {se:.3g}"
    )


def test_a_standard_error_neither_test_has_is_not_a_change() -> None:
    """A count test (spikes, divergence) has no standard error: nan on both sides is no move, nan
    on one side is."""
    now = _now()
    countless = _result(dataclasses.replace(now.test, se=math.nan))
    assert why_changed(_then(countless, se=math.nan), countless) == "the same test"
    assert why_changed(_then(countless, se=0.5), countless) == "standard error 0.5 -> nan"
