"""Each switch of the screening page at the modern base (archlab.lab.publishing.simple_effects):
the runs are found by config among the published pages, and each simple effect equals the paired
difference written out from that page's results.csv; a switch whose runs differ in anything more
than its level's keys (and d_ff) is not matched.

The screening and one-at-a-time pages as published before the release re-ran original-vs-modern
(at a later commit, whose configs hash differently until the screening is re-run too) are a
fixture, tests/fixtures/screening-3-seeds/: the pair whose configs match."""

from __future__ import annotations

import csv
import math
import shutil
from pathlib import Path

import pytest
import yaml
from scipy import stats as sp

from archlab.lab.analysis.verdicts import judge
from archlab.lab.publishing import publish
from archlab.lab.publishing.record import read_record
from archlab.lab.publishing.simple_effects import (
    base_row,
    level_keys,
    section,
    shared_runs,
    simple_effects,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"
PAIR = Path(__file__).resolve().parents[1] / "fixtures" / "screening-3-seeds"
SCREEN = "original-vs-modern-screening"
SWITCHES = {
    "norm_position": "modern+post-norm",
    "norm": "modern+layernorm",
    "ffn": "modern+relu-mlp",
    "position": "modern+sinusoidal",
    "bias": "modern+biases",
    "dropout": "modern+dropout",
    "tying": "modern+tied",
}


def _values(page: str, arm: str) -> dict[int, float]:
    with (PAIR / page / "results.csv").open(encoding="utf-8") as f:
        return {int(r["seed"]): float(r["val_loss"]) for r in csv.DictReader(f) if r["arm"] == arm}


def test_each_switch_at_the_base_is_the_one_at_a_time_pages_paired_difference():
    record = read_record(PAIR / SCREEN)
    base = base_row(record)
    assert base == "pre-rmsnorm-swiglu-rope-no-bias-no-dropout-untied"
    oat = yaml.safe_load((PAIR / "original-vs-modern" / "configs.yaml").read_text(encoding="utf-8"))
    # the same base config on both pages
    assert oat["modern"]["config"] == record.configs[base]["config"]
    found = simple_effects(PAIR, record, "val_loss")
    assert set(found) == set(SWITCHES)
    modern = _values("original-vs-modern", "modern")
    for factor, arm in SWITCHES.items():
        switched = _values("original-vs-modern", arm)
        d = [modern[s] - switched[s] for s in sorted(modern)]
        mean, se = (
            sum(d) / len(d),
            math.sqrt(sum((x - sum(d) / len(d)) ** 2 for x in d) / (len(d) - 1) / len(d)),
        )
        e = found[factor]
        assert (e.page, e.arms, e.n) == ("original-vs-modern", ("modern", arm), 3)
        assert e.estimate == pytest.approx(mean, abs=1e-12) and e.se == pytest.approx(se, rel=1e-12)
        half = sp.t.ppf(0.95, 2) * se
        assert e.ci == pytest.approx((mean - half, mean + half), rel=1e-12)
    # untied - tied at the base, nats
    assert found["tying"].estimate == pytest.approx(-0.0222, abs=5e-5)
    # the keys a level decides are read from the screening's own rows, derived ones included
    keys = level_keys(record)
    assert keys["norm_position"] == {"model.norm_position": "post", "model.final_norm": False}
    assert keys["bias"] == {"model.bias": True, "model.attn_bias": True, "model.mlp_bias": True}


def test_the_base_rows_runs_are_named_with_every_page_that_holds_them():
    """On the live pages: the base row's runs are the vocab page's bytes runs and, since the release
    re-ran pages in one store, each re-run page's base arm: every (page, arm) whose rows name one of
    them."""
    record = read_record(DOCS / SCREEN)
    base = base_row(record)
    base_ids = {r.run_id for r in record.table.runs[base]}
    holding = sorted(
        (page.name, row["arm"])
        for page in DOCS.iterdir()
        if page.name != SCREEN and (page / "results.csv").is_file()
        for row in csv.DictReader((page / "results.csv").open(encoding="utf-8"))
        if row["run"] in base_ids
    )
    assert shared_runs(DOCS, record, base) == sorted(set(holding))
    # every seed of the row on each
    assert ("vocab", "bytes") in holding and len(holding) == len(base_ids) * len(set(holding))


def test_a_switch_with_another_difference_is_not_matched_and_the_page_says_so(tmp_path: Path):
    docs = tmp_path / "results"
    for page in (SCREEN, "original-vs-modern"):
        shutil.copytree(PAIR / page, docs / page)
    path = docs / "original-vs-modern" / "configs.yaml"
    configs = yaml.safe_load(path.read_text(encoding="utf-8"))
    # tied, and another learning rate: not the switch
    configs["modern+tied"]["train"]["optimizer"]["lr"] = 0.001
    path.write_text(yaml.safe_dump(configs, sort_keys=False), encoding="utf-8")
    record = read_record(docs / SCREEN)
    found = simple_effects(docs, record, "val_loss")
    assert set(found) == set(SWITCHES) - {"tying"}
    text = section(docs, record, "val_loss")
    row = next(line for line in text.splitlines() if line.startswith("| tying:"))
    assert "not published" in row and "needs the base with tying = tied" in row
    assert "| norm: rmsnorm vs layernorm |" in text and "original-vs-modern's `modern`" in text
    page = publish.page_text(docs, record, judge(record.table))
    # the page shows it
    assert "## Each switch at the modern base (from published runs)" in page and row in page
    shutil.rmtree(docs / "original-vs-modern")
    assert simple_effects(docs, record, "val_loss") == {}
