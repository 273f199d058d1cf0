"""The lab's budgets: how much compute a suite's run gets at `tiny`, `small` and `medium`, and each
budget's loss margin (what 7% more base compute buys on its compute ladder, lab/analysis/ladder.py)
with where that figure comes from.

Every budget uses the byte tokenizer on the Python standard library sources, AdamW, cosine decay and
a warmup of ~10% of the steps; a suite's `base:` and `budget_keys:` sit above these keys, its arms
above them (lab/spec/arms.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# log time ratio: a 5% speed difference (ln 1.05), the smallest a timing plans for
TIMING_SMALLEST_EFFECT = 0.0488
# the loss margin's worth in base compute: what 7% more steps buy on the budget's ladder
MARGIN_COMPUTE = 1.07
# Metrics in nats whose `same` claims take the budget's loss margin when neither the claim nor the
# suite states one.
MARGIN_METRICS = ("val_loss", "train_loss", "loss_at_1x")


@dataclass(frozen=True)
class Budget:
    """How much compute a suite gets: the train keys below the suite's base, seeds, and
    the data slice.

    Every arm, the base included, runs seeds 0..seeds-1: the seed is a block shared by all arms
    (batch order, evaluation set, init where shapes agree), so every comparison is paired."""

    name: str
    keys: dict[str, object]  # dotted train / model keys, below the suite's base
    seeds: int  # seeds per arm, every arm alike
    # files of the corpus tokenized (the stdlib corpus sorted by path); None = all
    max_files: int | None
    # the lab's loss measures read this many 4x-context windows of validation text
    measure_windows: int
    # wall seconds per run (one process of --jobs 2 on 2 cores) for --plan's cost; see the comment
    run_s: float
    # planning residual spread of val_loss (nats) when no earlier run of the suite is stored
    sigma: float
    # nats: the default margin and smallest effect of MARGIN_METRICS (MARGIN_COMPUTE x compute)
    margin: float
    # where `margin` comes from (the compute ladder's measurement, or why it is not measured)
    margin_source: str


# warmup is ~10% of the steps in every budget, so "no warmup" arms (schedule.warmup_steps: 0)
# mean the same
_SHARED = {
    "data.source": "stdlib",
    "data.tokenizer": "byte",
    "optimizer.lr": 3e-3,
    "schedule.name": "cosine",
}
BUDGETS: dict[str, Budget] = {
    # seconds per run on a laptop: tests and a first look. run_s: an estimate for a quiet machine
    # (measured: median 88 s with --jobs 1 while the 2-core machine ran ~10 other processes). sigma:
    # not measured here; `small`'s
    "tiny": Budget(
        "tiny",
        {
            **_SHARED,
            "size": "tiny",
            "steps": 24,
            "schedule.warmup_steps": 3,
            "data.batch_size": 8,
            "data.block_size": 64,
            "logging.eval_every": 12,
            "logging.eval_batches": 4,
            "logging.log_every": 2,
        },
        seeds=2,
        max_files=40,
        measure_windows=8,
        run_s=15.0,
        sigma=0.015,
        margin=0.036,
        margin_source="the compute-ladder suite at tiny (2 seeds, 2026-12-02): 25% more steps "
        "bought 0.120 nats (95% CI 0.084 to 0.156), so 7% more buy 0.120 x ln 1.07 / ln "
        "1.25 = 0.036",
    ),
    # ~2 CPU-minutes per run (measured: 0.4 s per step on one core; the published runs' medians
    # were 93-136 s with --jobs 2 on the quiet 2-core machine, so run_s 120). sigma: the residual
    # spread (arm x seed interaction) of val_loss, 0.015 nats, fitted to the 2-seed spreads
    # of the 25 normal-lr Llama arms of the first published results (docs/results, before the
    # fixed evaluation set)
    "small": Budget(
        "small",
        {
            **_SHARED,
            "size": "tiny",
            "model.d_model": 128,
            "model.n_layers": 4,
            "model.n_heads": 4,
            "steps": 300,
            "schedule.warmup_steps": 30,
            "data.batch_size": 16,
            "data.block_size": 128,
            "logging.eval_every": 50,
            "logging.eval_batches": 10,
            "logging.log_every": 5,
        },
        seeds=3,
        max_files=400,
        measure_windows=32,
        run_s=120.0,
        sigma=0.015,
        margin=0.03,
        margin_source="1.074x the base's compute on the compute ladder at small (0.4198 nats per "
        "e-fold of steps, 3 seeds, 2026-12-02), below the 0.03-0.05-nat effects the lab studies "
        "(SwiGLU 0.031, GeGLU 0.049)",
    ),
    # the `small` size (width 256, 6 layers): ~5e14 training FLOPs per run, hours per run on one CPU
    # core (estimated from FLOPs, not measured); meant for a GPU (runs take cuda when available)
    "medium": Budget(
        "medium",
        {
            **_SHARED,
            "size": "small",
            "steps": 2000,
            "schedule.warmup_steps": 200,
            "data.batch_size": 32,
            "data.block_size": 256,
            "optimizer.lr": 1e-3,
            "logging.eval_every": 200,
            "logging.eval_batches": 20,
            "logging.log_every": 10,
        },
        seeds=3,
        max_files=None,
        measure_windows=64,
        run_s=4 * 3600.0,
        sigma=0.015,
        margin=0.02,
        margin_source="not measured: the first lab's figure; `archlab ablate compute-ladder "
        "--budget medium` measures what 25% more compute buys at this budget",
    ),
}

# A margin must be smaller than the effects a suite can see, or "as good as" holds whatever
# the runs show (`margin: 3` meant as 3% would call any two models alike). Per unit of measure
# (Measure.scale in lab/measures/measure.py):
# - a loss in nats: below what doubling the base's compute buys, at the budget where it buys
#   most. A budget's margin is what 7% more buys (b ln 1.07 for b nats per e-fold), so doubling
#   buys margin x ln 2 / ln 1.07: 0.37 nats at tiny, 0.31 at small; the lab's effects are
#   0.03-0.07 nats (docs/lab.md);
# - a share from 0 to 1 (an accuracy, a rate, a time share): below half its range;
# - a timing's log time ratio: below ln 2, a 2x speed difference (the smallest effect planned for
#   is ln 1.05).
_WIDEST = max(BUDGETS.values(), key=lambda b: b.margin)
MARGIN_LIMITS = {
    "nats": _WIDEST.margin * math.log(2) / math.log(MARGIN_COMPUTE),
    "share": 0.5,
    "log time ratio": math.log(2),
}
MARGIN_LIMIT_WHY = {
    "nats": f"what doubling the base's compute buys at the {_WIDEST.name} budget; the budgets' own "
    f"margins are {min(b.margin for b in BUDGETS.values())} to {_WIDEST.margin}",
    "share": "half the share's range",
    "log time ratio": "ln 2, a 2x speed difference; 5% is 0.049",
}

# The budget the lab judges and publishes its suites at (docs/results; `archlab ablate`'s default):
# below it, or with fewer seeds than a suite is judged at there, a suite's runs are a smoke
# test of the suite (that it runs, what the tables look like), not evidence for or against its
# claims. `tiny`'s 24 steps are "for tests and a first look" (docs/lab.md), yet its verdicts print
# like any other's.
EVIDENCE_BUDGET = "small"


def evidence_caveat(budget: str, seeds: int, suite_seeds: int | None = None) -> str:
    """'' for runs at EVIDENCE_BUDGET or above with the seeds the suite is judged at there (its
    `seeds:`, else that budget's); otherwise the caveat every verdict from them carries on its line,
    in the terminal and on the page."""
    wanted = suite_seeds or BUDGETS[EVIDENCE_BUDGET].seeds
    order = list(BUDGETS)
    if order.index(budget) < order.index(EVIDENCE_BUDGET):
        return f"({seeds} seeds, budget {budget}: a smoke test, not evidence)"
    if seeds < wanted:
        return (
            f"({seeds} seeds, below the {wanted} the suite is judged at: a first "
            "look, not evidence)"
        )
    return ""


def evidence_note(budget: str, seeds: int, suite_seeds: int | None = None) -> str:
    """'' or one sentence that says why the verdicts carry `evidence_caveat`."""
    if not evidence_caveat(budget, seeds, suite_seeds):
        return ""
    wanted = suite_seeds or BUDGETS[EVIDENCE_BUDGET].seeds
    what = (
        "A smoke test"
        if list(BUDGETS).index(budget) < list(BUDGETS).index(EVIDENCE_BUDGET)
        else "A first look"
    )
    return (
        f"{what}, not evidence: {seeds} seeds at budget {budget}, below the budget "
        f"{EVIDENCE_BUDGET} (or above) at {wanted} seeds that this suite's claims are judged "
        "and published at; read these verdicts as a check that the suite runs, not as outcomes "
        "of its claims."
    )
