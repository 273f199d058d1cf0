"""The published results (docs/results) against the code: every page's verdicts recomputed from its own files
(results.csv, items.csv, timings.csv, suite.yaml, provenance.json) equal its claims.json, the comparisons pages share
have one verdict, and the summary is the one the pages give (`scripts/publish_results.py --check`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archlab.lab.publishing import publish
from archlab.lab.publishing.record import verify

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"
PAGES = publish.pages(DOCS)


def test_every_page_is_a_built_in_suite_and_the_summary_names_the_unpublished() -> None:
    from archlab.lab.spec.suite_file import list_suites

    suites = {s.name for s in list_suites()}
    assert {p.name for p in PAGES} <= suites and len(PAGES) >= 18
    summary = (DOCS / "README.md").read_text()
    for name in sorted(suites - {p.name for p in PAGES}):
        assert name in summary.split("Built-in suites not published yet:")[1], name


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_a_pages_verdicts_recompute_from_its_files(page: Path) -> None:
    assert verify(page) == []
    provenance = json.loads((page / "provenance.json").read_text())
    for key in ("command", "machine", "budget", "seeds", "data", "judged_by", "scale", "training"):
        assert provenance.get(key), (page.name, key)
    assert provenance["judged_by"]["commit"] and "torch" in provenance["judged_by"]
    assert provenance["trained_by"].get("commit") or provenance.get("trained_note")


def test_the_pages_and_the_summary_agree_with_their_files() -> None:
    assert publish.check(DOCS) == []


def test_no_loss_margin_above_003_nats_and_no_bare_as_good_as() -> None:
    for page in PAGES:
        for row in json.loads((page / "claims.json").read_text()):
            if row["expect"] != "better" and row["metric"] in ("val_loss", "train_loss", "loss_at_1x"):
                assert row["margin"] <= 0.03, (page.name, row["claim"])
            low, high = row["ci"]
            worse_side = low > 0 if row["test"] and row["test"]["better"] == "lower" else (high is not None
                                                                                        and high < 0)
            if row["outcome"] == "confirmed" and row["expect"] == "same" and worse_side:
                assert ", but worse by" in row["statement"], (page.name, row["claim"])
