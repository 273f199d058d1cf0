"""The caveat verdicts carry below the budget and seeds a suite is judged at (lab/spec/budgets.py):
both sides of each boundary, a suite's own seeds, and the sentence that says why."""

from __future__ import annotations

import pytest

from archlab.lab.spec.budgets import BUDGETS, EVIDENCE_BUDGET, evidence_caveat, evidence_note


@pytest.mark.parametrize(
    ("budget", "seeds", "suite_seeds", "caveat"),
    [
        ("tiny", 2, None, "(2 seeds, budget tiny: a smoke test, not evidence)"),
        # more seeds do not make 24 steps more
        ("tiny", 8, None, "(8 seeds, budget tiny: a smoke test, not evidence)"),
        (
            "small",
            2,
            None,
            "(2 seeds, below the 3 the suite is judged at: a first look, not evidence)",
        ),
        ("small", 3, None, ""),  # the published pages' budget and seeds
        ("small", 2, 2, ""),  # a suite that runs 2 seeds per cell of its factorial
        (
            "small",
            1,
            2,
            "(1 seeds, below the 2 the suite is judged at: a first look, not evidence)",
        ),
        ("medium", 3, None, ""),
        (
            "medium",
            2,
            None,
            "(2 seeds, below the 3 the suite is judged at: a first look, not evidence)",
        ),
    ],
)
def test_the_caveat_marks_runs_below_the_judged_budget_or_seeds(
    budget: str, seeds: int, suite_seeds: int | None, caveat: str
) -> None:
    assert EVIDENCE_BUDGET == "small" and BUDGETS["small"].seeds == 3
    assert evidence_caveat(budget, seeds, suite_seeds) == caveat
    note = evidence_note(budget, seeds, suite_seeds)
    assert bool(note) == bool(caveat)
    if caveat:
        assert note.startswith(
            ("A smoke test" if budget == "tiny" else "A first look") + f", not evidence: {seeds} "
            f"seeds at budget {budget}, below the budget small (or above) at {suite_seeds or 3}"
        )
