"""`--plan` for a claim scored on a fixed item set: the seeds (and items) come from the seed x item components of
the published page's per-item outcomes, the verdicts' own error model, not from the per-seed means alone."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from archlab.lab import stats
from archlab.lab.budgets import BUDGETS
from archlab.lab.items import plan_design
from archlab.lab.plan import plan_suite
from archlab.lab.planning import family_size, format_plan, power_plan
from archlab.lab.suite_file import load_suite

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"
CLAIM = "token healing recovers continuation accuracy for BPE 32k (bytes gain nothing by construction)"
METRIC = "continuation_healing_gain"


def _per_item(arm: str) -> np.ndarray:
    """seeds x items of the claim's metric for `arm`, read from the page's items.csv by hand."""
    rows = [r for r in csv.DictReader((DOCS / "vocab" / "items.csv").open()) if r["arm"] == arm
            and r["metric"] == METRIC]
    seeds, items = 1 + max(int(r["seed"]) for r in rows), 1 + max(int(r["item"]) for r in rows)
    table = np.full((seeds, items), np.nan)
    for r in rows:
        table[int(r["seed"]), int(r["item"])] = float(r["value"])
    assert not np.isnan(table).any()
    return table


def _components(d: np.ndarray) -> tuple[float, float, float]:
    """The two-way ANOVA's variance components of d (seeds x items), written out."""
    s, i = d.shape
    grand, by_seed, by_item = d.mean(), d.mean(axis=1), d.mean(axis=0)
    ms_seed = i * ((by_seed - grand) ** 2).sum() / (s - 1)
    ms_item = s * ((by_item - grand) ** 2).sum() / (i - 1)
    resid = d - by_seed[:, None] - by_item[None, :] + grand
    ms_resid = (resid ** 2).sum() / ((s - 1) * (i - 1))
    return max(ms_seed - ms_resid, 0) / i, max(ms_item - ms_resid, 0) / s, ms_resid


def test_an_item_claim_is_planned_on_its_seed_x_item_components(tmp_path: Path) -> None:
    plan = plan_suite(load_suite("vocab"), BUDGETS["small"], tmp_path / "out", store=tmp_path / "store")
    row = {r.claim.text: r for r in power_plan(plan, DOCS)}[CLAIM]
    d = _per_item("bpe32k") - _per_item("bytes")
    alpha = stats.ALPHA / family_size(plan)
    seeds, items = plan_design(_components(d), d.shape[0], d.shape[1], row.claim.smallest_effect, alpha=alpha)
    assert (row.seeds, row.items) == (seeds, items) and seeds is not None
    assert "seed x item components" in row.why and f"({d.shape[0]} seeds x {d.shape[1]} items)" in row.why
    # the seed-only plan on the per-seed means promises fewer: it misses the items' variance (5 against 15)
    means = d.mean(axis=1)
    seed_only = stats.seeds_needed(row.claim.smallest_effect, float(np.std(means, ddof=1)), alpha=alpha)
    assert seed_only < seeds
    assert any(f"{seeds:3d} seeds  {CLAIM}" in line for line in format_plan(plan, [row], jobs=2, docs=DOCS))
