"""The summary's tally of lecture claims (lab/publishing/lecture_claims.py): each claim counted
once, by its primary test's published verdict, its secondary evidence shown with its estimand; the
README regenerated from the files (the index and the pages' claims.json) equals the committed one,
and its tally equals a recount from the claims.json files alone; `check` turns an index that does
not check into lines, not a crash."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from archlab.lab.analysis import stats
from archlab.lab.publishing import books, lecture_claims, publish, summary
from archlab.lab.spec.claims_index import (
    ClaimsIndexError,
    Evidence,
    LectureClaim,
    Source,
    load_index,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"
CS336 = Source(
    "Stanford CS336 lecture 3: Architectures & Hyperparameters", "https://stanford-cs336.github.io/"
)


def claim(ident: str, primary: tuple[str, str], *secondary: tuple[str, str]) -> LectureClaim:
    return LectureClaim(
        ident,
        f"the claim {ident}",
        "原文",
        CS336,
        "",
        Evidence(*primary, "primary", "at the base"),
        tuple(Evidence(*s, "secondary", f"estimand of {s[0]}") for s in secondary),
    )


def row(suite: str, text: str, outcome: str, estimate: float = 0.1) -> dict:
    tested = outcome in lecture_claims.TESTED
    return {
        "suite": suite,
        "claim": text,
        "outcome": outcome,
        "estimate": estimate if tested else float("nan"),
        "ci": [estimate - 0.05, estimate + 0.05] if tested else [None, None],
        "test": {"test": "paired t"} if tested else None,
        "calibration": False,
    }


PAGES = {
    "ovm": [
        row("ovm", "SwiGLU beats ReLU", stats.INCONCLUSIVE, -0.024),
        row("ovm", "tied", stats.INCONCLUSIVE),
    ],
    "ffn": [
        row("ffn", "SwiGLU beats ReLU at equal parameters", stats.CONFIRMED, -0.031),
        row("ffn", "GeLU beats ReLU", stats.INCONCLUSIVE),
    ],
    "screen": [row("screen", "SwiGLU beats a ReLU MLP", stats.CONTRADICTED, 0.093)],
    "heads": [
        row("heads", "GQA cuts the KV cache", stats.BY_CONSTRUCTION),
        row("heads", "at depth", stats.UNTESTABLE),
    ],
}
INDEX = [
    claim(
        "swiglu",
        ("ffn", "SwiGLU beats ReLU at equal parameters"),
        ("ovm", "SwiGLU beats ReLU"),
        ("screen", "SwiGLU beats a ReLU MLP"),
    ),
    claim("tying", ("ovm", "tied"), ("semi", "tied apart")),
    claim("kv", ("heads", "GQA cuts the KV cache")),
    claim("depth", ("heads", "at depth")),
    claim("unpublished", ("stability", "QK-norm removes loss spikes")),
]


def test_a_claim_tested_on_three_pages_counts_once_by_its_primary() -> None:
    rows = lecture_claims.by_test(PAGES)
    verdicts = [lecture_claims.verdict(c, rows) for c in INDEX]
    assert [(v.outcome, v.why) for v in verdicts] == [
        (stats.CONFIRMED, ""),
        (stats.INCONCLUSIVE, ""),
        ("not tested", stats.BY_CONSTRUCTION),
        ("not tested", stats.UNTESTABLE),
        ("not tested", "not published yet"),
    ]
    # swiglu: confirmed on ffn (its primary), inconclusive and contradicted elsewhere: one
    # claim, one confirmation
    assert lecture_claims.tally(verdicts) == (
        "5 lecture claims, each counted once by its primary test: 2 tested: 1 confirmed, 0 "
        "contradicted, 1 inconclusive (decided: 1 of 2, 50.0%); 3 not tested: 1 by construction, 1 "
        "untestable by this design, 1 not published yet."
    )
    lines = lecture_claims.section(INDEX, PAGES)
    table = [line for line in lines if line.startswith("| `")]
    assert [re.match(r"\| `([a-z-]+)`", line)[1] for line in table] == [c.id for c in INDEX]
    swiglu = table[0].split(" | ")
    assert swiglu[3] == "**confirmed**" and swiglu[4] == "-0.031 [-0.081, 0.019]"
    assert (
        "[ovm](ovm.md): SwiGLU beats ReLU — *estimand of ovm*: **inconclusive**, -0.024"
        in swiglu[5]
    )
    assert (
        "[screen](screen.md): SwiGLU beats a ReLU MLP — *estimand of "
        "screen*: **contradicted**, 0.093" in swiglu[5]
    )
    # a page not published yet is named, not linked: it has no file to link to
    assert table[4].split(" | ")[2] == "`stability`: QK-norm removes loss spikes — *at the base*"
    assert (
        table[1].split(" | ")[5]
        == "`semi`: tied apart — *estimand of semi*: **not published yet** |"
    )
    assert "stability.md" not in table[4] and "semi.md" not in table[1]
    # the published claims that test none of the index's are named, each once
    assert (
        lines[-2]
        == "1 published claims test no claim of the index (the lab's own questions, or readings "
        "the sources do not state): [ffn](ffn.md): GeLU beats ReLU (inconclusive)."
    )


def test_the_release_section_names_re_run_pages_and_new_ones_apart() -> None:
    """`before` holds a re-run page's re-judged rows (another list), an untouched page's own rows,
    and lacks a page first published after registrations: that one is new, not re-run."""
    rejudged_ffn = [row("ffn", "SwiGLU beats ReLU at equal parameters", stats.INCONCLUSIVE)]
    before = {"ffn": rejudged_ffn, "ovm": PAGES["ovm"]}
    lines = lecture_claims.release_section(INDEX, PAGES, before)
    assert lines[2] == (
        "1 of 4 pages were re-run at their registered seeds after registering their claims "
        "([ffn](ffn.md)); [heads](heads.md), [screen](screen.md) are new pages, registered for "
        "their runs; the others are the re-judged pages. Each re-run page shows its own claims "
        "then and now."
    )
    one_new = lecture_claims.release_section(INDEX, PAGES, {**before, "heads": PAGES["heads"]})
    assert "); [screen](screen.md) is a new page, registered for its runs; the others" in one_new[2]
    assert lecture_claims.release_section(INDEX, PAGES, dict(PAGES)) == []  # nothing re-run


def test_the_readme_rebuilt_from_the_files_is_the_committed_one_and_its_tally_recounts() -> None:
    readme = (DOCS / summary.SUMMARY).read_text(encoding="utf-8")
    assert summary.text(DOCS, books.judged(DOCS)) == readme
    # an independent recount: the pages' published claims.json and the index, nothing
    # the summary computed
    published = {
        (r["suite"], r["claim"]): r["outcome"]
        for p in books.pages(DOCS)
        for r in json.loads((p / "claims.json").read_text(encoding="utf-8"))
    }
    index = load_index()
    primaries = [published.get((c.primary.suite, c.primary.claim)) for c in index]
    counts = {o: primaries.count(o) for o in ("confirmed", "contradicted", "inconclusive")}
    tested = sum(counts.values())
    line = next(
        x
        for x in readme.splitlines()
        if x.startswith(f"**{len(index)} lecture claims, each counted once")
    )
    assert (
        f"{tested} tested: {counts['confirmed']} confirmed, {counts['contradicted']} "
        f"contradicted, {counts['inconclusive']} inconclusive (decided: "
        f"{counts['confirmed'] + counts['contradicted']} of {tested}"
    ) in line
    assert f"; {len(index) - tested} not tested" in line
    claims, release = readme.split("## The release")
    rows = [x for x in claims.splitlines() if x.startswith("| `")]
    assert sorted(re.match(r"\| `([a-z0-9-]+)`", x)[1] for x in rows) == sorted(c.id for c in index)
    rerun = {c.id for c in index if (DOCS / c.primary.suite / "rejudged.json").is_file()}
    shown = [x for x in release.split("\n## ")[0].splitlines() if x.startswith("| `")]
    assert sorted(re.match(r"\| `([a-z0-9-]+)`", x)[1] for x in shown) == sorted(rerun)
    # the release's "before" recounted from the re-judged rows each re-run page keeps, and each
    # shown claim's "changed" from the two outcomes
    rejudged = {
        (p.name, r["claim"]): r["outcome"]
        for p in books.pages(DOCS)
        if (p / "rejudged.json").is_file()
        for r in json.loads((p / "rejudged.json").read_text(encoding="utf-8"))
    }
    was = [
        rejudged.get((c.primary.suite, c.primary.claim), now) for c, now in zip(index, primaries)
    ]
    old = {o: was.count(o) for o in ("confirmed", "contradicted", "inconclusive")}
    before = next(x for x in release.splitlines() if x.startswith("- Before the re-runs: "))
    assert (
        f"{sum(old.values())} tested: {old['confirmed']} confirmed, {old['contradicted']} "
        f"contradicted, {old['inconclusive']} inconclusive"
    ) in before
    outcomes = dict(zip((c.id for c in index), zip(was, primaries)))
    for row in shown:
        then, now = outcomes[re.match(r"\| `([a-z0-9-]+)`", row)[1]]
        assert row.endswith("| **yes** |" if then != now else "| no |"), row


def test_check_lists_an_index_that_does_not_check_instead_of_failing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> list[LectureClaim]:
        raise ClaimsIndexError(
            Path("claims-index.yaml"), ["'x': no primary test", "'y': the id is given twice"]
        )

    # the summary reads the index, and rebuild reads it first, before any write
    monkeypatch.setattr(summary, "load_index", broken)
    monkeypatch.setattr(publish, "load_index", broken)
    assert publish.check(tmp_path) == [
        "claims index claims-index.yaml: 'x': no primary test",
        "claims index claims-index.yaml: 'y': the id is given twice",
    ]
    with pytest.raises(ClaimsIndexError):  # rebuild stops before it writes anything
        publish.rebuild(tmp_path)
    assert list(tmp_path.iterdir()) == []
