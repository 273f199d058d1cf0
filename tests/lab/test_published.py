"""The published results (docs/results) against the code: every page's verdicts recomputed from
its own files (results.csv, items.csv, timings.csv, suite.yaml, provenance.json) equal its
claims.json, the comparisons pages share have one verdict, and the summary is the one the pages
give (`scripts/publish_results.py --check`)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from archlab.lab.publishing import books, publish
from archlab.lab.publishing.registered import made_on_rejudging
from archlab.lab.publishing.verify import verify_alone
from archlab.lab.spec.claims_index import load_index

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"
PAGES = books.pages(DOCS)


def test_every_page_is_a_built_in_suite_and_the_summary_names_the_unpublished() -> None:
    from archlab.lab.spec.suite_file import list_suites

    suites = {s.name for s in list_suites()}
    assert {p.name for p in PAGES} <= suites and len(PAGES) >= 18
    summary = (DOCS / "README.md").read_text()
    for name in sorted(suites - {p.name for p in PAGES}):
        assert name in summary.split("Built-in suites not published yet:")[1], name


@pytest.fixture(scope="module")
def problems() -> list[str]:
    """`scripts/publish_results.py --check` on the real pages: every claim, registration, hash, page
    and the summary."""
    return publish.check(DOCS)


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_a_pages_verdicts_recompute_from_its_files(page: Path, problems: list[str]) -> None:
    assert verify_alone(page) == []  # on its own: its family's figures, its registration and hashes
    # with every page: its SUITE.md too
    assert [p for p in problems if p.startswith(f"{page.name}: ")] == []
    provenance = json.loads((page / "provenance.json").read_text())
    for key in ("command", "machine", "budget", "seeds", "judged_by", "scale", "training"):
        assert provenance.get(key), (page.name, key)
    assert provenance["judged_by"]["commit"] and "torch" in provenance["judged_by"]
    if "runs" in provenance:  # the runs' own records, gathered (lab/publishing/run_provenance.py)
        assert provenance["runs"]["recorded"] and provenance["runs"]["data"], page.name
    # a page made before the runs recorded theirs says so, and what it knows is marked reconstructed
    else:
        assert provenance.get("data") and (
            provenance["trained_by"].get("commit") or provenance.get("trained_note")
        )
        page_text = (page.parent / f"{page.name}.md").read_text()
        assert "Trained by: provenance not recorded by the runs." in page_text, page.name


def _suite_sha256_at(entry: dict) -> str | None:
    """The sha256 of the built-in suite file at the registration's commit, from git (None where
    that commit does not hold it)."""
    found = subprocess.run(
        ["git", "show", f"{entry['commit']}:src/archlab/lab/suites/{entry['suite']}.yaml"],
        cwd=DOCS.parents[1],
        capture_output=True,
        check=False,
    )
    return hashlib.sha256(found.stdout).hexdigest() if found.returncode == 0 else None


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_a_page_is_registered_and_says_when_its_margins_were_set(page: Path) -> None:
    """Every page has a registration.json whose claims are the ones it judges (verify checks
    it); the pages published before registrations say when their margins and smallest effects
    were set, and those re-judged after their data say "margin set on re-judging, after
    the runs" (scripts/register_published_pages.py)."""
    [entry] = json.loads((page / "registration.json").read_text())["registrations"]
    judged = json.loads((page / "claims.json").read_text())
    assert [c["text"] for c in entry["claims"]] == [row["claim"] for row in judged]
    assert [(c["margin"], c["smallest_effect"]) for c in entry["claims"]] == [
        (row["margin"], row["smallest_effect"]) for row in judged
    ]
    text = (page.parent / f"{page.name}.md").read_text()
    runs = len((page / "results.csv").read_text().splitlines()) - 1
    # re-run after registering, or first published so (a new page): the runs that had trained are
    # named
    if (page / "rejudged.json").is_file() or made_on_rejudging(page) is False:
        runs_record = json.loads((page / "provenance.json").read_text())["runs"]
        # every run recorded its commit; the registration's is among them (linear-attention's
        # hard-VQ runs were retrained after a kernel fix, at a later commit the page lists)
        codes = runs_record["code"]
        assert sum(len(code["runs"]) for code in codes) == runs
        assert entry["commit"] in {code["value"]["commit"] for code in codes}
        before = [
            label for label, at in runs_record["started"].items() if at < entry["registered_at"]
        ]
        assert entry["runs_trained"] == len(before) and entry["before_first_run"] == (not before)
        assert (
            "before the first run" if not before else f"had trained ({', '.join(before)}, "
        ) in text
        assert "effects_set" not in entry and "on re-judging" not in text.split("## Against the")[0]
        committed = "committed before any of its runs trained"
        # its claims came first only where git shows the one commit every run recorded held them;
        # not with no run before the registration, nor with runs at several commits
        if before and len(codes) == 1:
            assert (committed in text) == (entry["suite_sha256"] == _suite_sha256_at(entry)), page
        else:
            assert committed not in text, page
        return
    assert not entry["before_first_run"] and entry["runs_trained"] == runs
    if entry["margins_set"] == "on re-judging, after the runs":
        assert "Registration: margin set on re-judging, after the runs;" in text
        assert "Margins (set on re-judging, after the runs): " in text
    assert "stated before the run" not in text


def test_the_pages_and_the_summary_agree_with_their_files(problems: list[str]) -> None:
    assert problems == []


def test_no_loss_margin_above_003_nats_and_no_bare_as_good_as() -> None:
    for page in PAGES:
        for row in json.loads((page / "claims.json").read_text()):
            if row["expect"] != "better" and row["metric"] in (
                "val_loss",
                "train_loss",
                "loss_at_1x",
            ):
                assert row["margin"] <= 0.03, (page.name, row["claim"])
            low, high = row["ci"]
            worse_side = (
                low > 0
                if row["test"] and row["test"]["better"] == "lower"
                else (high is not None and high < 0)
            )
            if row["outcome"] == "confirmed" and row["expect"] == "same" and worse_side:
                assert ", but worse by" in row["statement"], (page.name, row["claim"])


def _registered(folder: Path, rejudged: bool, **fields: object) -> Path:
    """Give a page folder's registration in force the form of one made on re-judging a page
    published before registrations (it says when margins and effects were set) or of one made for
    its runs (it does not)."""
    record = json.loads((folder / "registration.json").read_text())
    made = {
        k: v
        for k, v in record["registrations"][-1].items()
        if k not in ("effects_set", "margins_set")
    }
    if rejudged:
        made.update(effects_set="on re-judging, after the runs", before_first_run=False)
    record["registrations"] = [{**made, **fields}]
    (folder / "registration.json").write_text(json.dumps(record, indent=1))
    return folder


def test_a_registered_rerun_keeps_the_rejudged_verdicts_it_replaces_and_shows_them(
    tmp_path: Path,
) -> None:
    docs = shutil.copytree(DOCS, tmp_path / "docs")
    for kept in docs.glob("*/rejudged.json"):  # every re-run page as re-judged, before its re-run
        kept.unlink()
        _registered(kept.parent, rejudged=True)
    before = (docs / "norm-type" / "claims.json").read_bytes()
    rerun = _registered(
        shutil.copytree(DOCS / "norm-type", tmp_path / "rerun"),
        rejudged=False,
        runs_trained=0,
        before_first_run=True,
    )
    publish.import_folder(rerun, docs)
    assert (docs / "norm-type" / "rejudged.json").read_bytes() == before
    publish.rebuild(docs)
    text = (docs / "norm-type.md").read_text()
    section = text.split("## Against the re-judged page this re-run replaced")[1].split("\n## ")[0]
    rows = [
        line
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| claim")
    ]
    assert [r.split(" | ")[0][2:] for r in rows] == [c["claim"] for c in json.loads(before)]
    assert all(r.endswith("| no: the same test |") for r in rows)  # the same runs: nothing moved
    assert publish.check(docs) == []  # rejudged.json is part of the hashed record
    summary = (docs / "README.md").read_text()
    release = summary.split("## The release: re-run pages against the re-judged ones")[1].split(
        "\n## "
    )[0]
    pages = sorted(p.parent.name for p in docs.glob("*/claims.json"))
    # a page registered for its runs that replaced nothing is new, not re-run: named as such
    new = [
        n
        for n in pages
        if made_on_rejudging(docs / n) is False and not (docs / n / "rejudged.json").is_file()
    ]
    assert new == ["modern-screening", "modern-screening-semifold", "original-vs-modern-semifold"]
    assert f"1 of {len(pages)} pages were re-run" in release
    assert (
        "after registering their claims ([norm-type](norm-type.md)); [modern-screening]"
        "(modern-screening.md), [modern-screening-semifold](modern-screening-semifold.md), "
        "[original-vs-modern-semifold](original-vs-modern-semifold.md) are new pages, registered "
        "for their runs; the others are the re-judged pages." in release
    )
    then, now = (
        line.split(": ", 1)[1]
        for line in release.splitlines()
        if line.startswith(("- Before", "- Now"))
    )
    # the same runs: the same tally as above
    assert then == now and now in summary.split("## The release")[0]
    claims = [line for line in release.splitlines() if line.startswith("| `")]
    index = [c for c in load_index() if c.primary.suite == "norm-type"]
    assert [line.split("`")[1] for line in claims] == [c.id for c in index] and index
    assert all(line.endswith("| no |") for line in claims)
    (docs / "norm-type" / "claims.json").write_text("[]")
    # a second publication keeps the first replaced page's verdicts
    publish.import_folder(rerun, docs)
    assert (docs / "norm-type" / "rejudged.json").read_bytes() == before
    # a page replaced by another re-judged one keeps no such file: nothing was registered
    # for its runs
    publish.import_folder(
        _registered(shutil.copytree(docs / "ffn", tmp_path / "ffn"), rejudged=True), docs
    )
    assert not (docs / "ffn" / "rejudged.json").exists()
    # a re-run registered after some of its runs had trained (shared with another suite) replaces it
    # all the same
    ffn = (docs / "ffn" / "claims.json").read_bytes()
    rerun = _registered(
        shutil.copytree(DOCS / "ffn", tmp_path / "ffn-rerun"),
        rejudged=False,
        runs_trained=3,
        before_first_run=False,
    )
    publish.import_folder(rerun, docs)
    assert (docs / "ffn" / "rejudged.json").read_bytes() == ffn
