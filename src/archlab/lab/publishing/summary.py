"""docs/results/README.md, the summary of the published pages: each lecture claim once by its
primary test (lab/publishing/lecture_claims.py), what the release changed, every published
comparison once with its verdict, each page's reading and the hashes of the published records.

A claim's headline verdict is its page's (Holm within the suite, one verdict per comparison:
lab/publishing/books.py). Benjamini-Hochberg's q across every published comparison is shown as
secondary information, labelled, and never changes an outcome. Calibration suites (the compute
ladder) are listed apart from the lecture's tallies.
"""

from __future__ import annotations

import json
from pathlib import Path

from archlab.lab.analysis import stats
from archlab.lab.publishing import lecture_claims
from archlab.lab.publishing.books import Books, rows_of
from archlab.lab.publishing.history import fmt_ci
from archlab.lab.publishing.record import HASHES, READING, REJUDGED, record_digest
from archlab.lab.publishing.registered import made_on_rejudging
from archlab.lab.publishing.tables import fmt
from archlab.lab.spec.claims_index import load_index

SUMMARY = "README.md"  # the summary's name in docs/results


INTRO = (
    "Each suite below was run with `archlab ablate SUITE --budget small --jobs 2` on a 2-core "
    "CPU; every arm runs the same seeds (paired). Each page has the design (why it can show its "
    "claims), where its numbers came from (the code's commit, versions, machine, a hash of the "
    "data, the exact command, the scale and the cost), the claims with estimate, confidence "
    "interval, p-values, outcome, what the test showed in words, the minimum detectable effect "
    "and the seeds a stated effect would need, the suite's noise, the tables, the plots, and "
    "the files every verdict is recomputed from (`archlab ablate --verify docs/results/SUITE`; "
    "`python scripts/publish_results.py --check` does every page and this summary, and CI runs "
    "it). Outcomes come from the rule in docs/lab-statistics.md, never by hand: each comparison "
    "on its own paired differences (arms declared alike may pool), items as a second source "
    "of variance where a fixed item set is scored, Holm's correction within a suite, margins "
    "registered before the first run (each page says when its were set: on most pages published "
    "before registrations, on re-judging, after the runs) and smaller than the effects under study "
    "(0.03 nats for a loss at `small`, 1.07x the base's compute; a page with another model prices "
    "its margin on its own base). The verdict of a claim is its page's; a comparison two pages "
    "share has one verdict on both (the larger Holm p). Benjamini-Hochberg's q across all rows is "
    "secondary information and "
    'never changes an outcome. "By construction" (arithmetic) and "untestable by this '
    'design" are outside '
    "the families and the counts; the compute ladder's claims calibrate the lab and are "
    "not the lecture's."
)


def _needs(row: dict) -> str:
    """The summary's 'needs' cell: seeds per arm, or items where no number of seeds decides a seed
    x item claim."""
    more = (row["test"] or {}).get("items_needed")
    if row["seeds_needed"]:
        return f"{row['seeds_needed']} at {more} items" if more else str(row["seeds_needed"])
    return f"{more} items" if more else "-"


def text(docs: Path, books: Books) -> str:
    """docs/results/README.md: each lecture claim once by its primary test, what the release
    changed, every published comparison once with its verdict, each page's reading, and the hashes
    of the published records."""
    pages = rows_of(books)
    unique = _distinct_comparisons(pages)
    index = load_index()
    # the pages as re-judged: a re-run page's rejudged.json, the others as now; a page first
    # published after registrations began (registered for its runs, nothing it replaced) is new
    before = {
        name: json.loads((docs / name / REJUDGED).read_text(encoding="utf-8"))
        if (docs / name / REJUDGED).is_file()
        else rows
        for name, rows in pages.items()
        if (docs / name / REJUDGED).is_file() or made_on_rejudging(docs / name) is not False
    }
    lines = ["# Lab results: the lecture's claims, measured", "", INTRO, ""]
    lines += lecture_claims.section(index, pages)  # each lecture claim once, by its primary test
    lines += lecture_claims.release_section(index, pages, before)
    lines += _comparison_table(unique)
    lines += _comparison_tally(unique, books)
    lines += _readings_section(docs, books)
    lines += _records_section(docs, books)
    return "\n".join(lines) + "\n"


def _tested(row: dict) -> bool:
    """Whether a comparison had a test that can decide (not untestable, not by construction)."""
    return row["test"] is not None and row["outcome"] not in (
        stats.UNTESTABLE,
        stats.BY_CONSTRUCTION,
    )


def _distinct_comparisons(pages: dict[str, list[dict]]) -> list[dict]:
    """Every published comparison once: the first page's row of each key (pages sharing runs
    publish the same comparison)."""
    first: dict[str, dict] = {}
    for rows in pages.values():
        for row in rows:
            first.setdefault(row["key"], row)
    return list(first.values())


def _bh_across_pages(unique: list[dict]) -> dict[int, float]:
    """Benjamini-Hochberg q across every tested comparison of every page (a secondary column),
    keyed by the row's id."""
    family = [r for r in unique if _tested(r)]
    tests = [
        stats.ClaimTest(
            **{
                **r["test"],
                "ci": tuple(r["test"]["ci"]),
                "p_adjusted": None,
                "p_contra_adjusted": None,
                "level": r["test"]["alpha"],
            }
        )
        for r in family
    ]
    return {id(row): t.p_adjusted for row, t in zip(family, stats.adjust(tests, method="bh"))}


def _comparison_table(unique: list[dict]) -> list[str]:
    """The "Every comparison" table: one row per distinct comparison."""
    q = _bh_across_pages(unique)
    lines = [
        "## Every comparison",
        "",
        "Every published comparison once (two pages sharing runs have one row), counted "
        "per comparison: a lecture claim tested on several pages counts on each, "
        "whatever its estimand.",
        "",
        "| suite | claim | metric | arms | estimate | 90% CI | margin / smallest effect | p "
        "(Holm) | outcome | what the test showed | mde | needs | Narang et al. | q (BH across "
        "pages; secondary) |",
        "|---" * 14 + "|",
    ]
    for r in unique:
        also = f" (also in {', '.join(r['shared_with'])})" if r["shared_with"] else ""
        size = (
            f"margin {fmt(r['margin'])}"
            if r["expect"] != "better" and r["margin"]
            else f"smallest {fmt(r['smallest_effect'])}"
            if r["smallest_effect"]
            else "-"
        )
        kind = " (calibration)" if r["calibration"] else ""
        lines.append(
            f"| [{r['suite']}]({r['suite']}.md){kind} | {r['claim']}{also} | {r['metric']} "
            f"| {r['arms']} | {fmt(r['estimate'])} | {fmt_ci(r['ci'])} | {size} | "
            f"{fmt(r['p_holm'])} | {r['outcome']} | {r['statement']} | {fmt(r['mde'])} | "
            f"{_needs(r)} | {r['narang']} | {fmt(q.get(id(r)))} |"
        )
    return lines


def _count_words(outcomes: list[str]) -> str:
    """ "3 confirmed, 2 inconclusive": each outcome with its count, in first-seen order."""
    return ", ".join(f"{outcomes.count(v)} {v}" for v in dict.fromkeys(outcomes))


def _comparison_tally(unique: list[dict], books: Books) -> list[str]:
    """The per-comparison tally under the table, and the built-in suites not published yet."""
    lecture = [r for r in unique if not r["calibration"]]
    tested = [r["outcome"] for r in lecture if _tested(r)]
    outside = [
        r["outcome"] for r in lecture if r["outcome"] in (stats.UNTESTABLE, stats.BY_CONSTRUCTION)
    ]
    calibration = [r["outcome"] for r in unique if r["calibration"]]
    n_rows = sum(len(results) for _, results in books.values())
    tally = (
        f"{n_rows} claims from {len(books)} suites, {len(unique)} distinct comparisons. Per "
        f"comparison (not per lecture claim): {len(tested)} tested: "
        f"{_count_words(tested) or 'none'}."
    )
    if outside:
        tally += f" Outside the family: {_count_words(outside)}."
    if calibration:
        tally += (
            f" Calibration (not tallied): {len(calibration)} claims, {_count_words(calibration)}."
        )
    lines = ["", tally, ""]
    from archlab.lab.spec.suite_file import list_suites

    missing = sorted({s.name for s in list_suites()} - set(books))
    if missing:
        lines += [f"Built-in suites not published yet: {', '.join(missing)}.", ""]
    return lines


def _readings_section(docs: Path, books: Books) -> list[str]:
    """ "Reading the numbers": each published page's reading, by page name."""
    readings = [
        (p.parent.name, p.read_text(encoding="utf-8").strip())
        for p in sorted(docs.glob(f"*/{READING}"))
        if p.parent.name in books
    ]
    if not readings:
        return []
    return ["## Reading the numbers", ""] + [
        f"**[{name}]({name}.md).** {text}\n" for name, text in readings
    ]


def _records_section(docs: Path, books: Books) -> list[str]:
    """ "Published records": the sha256 that names each page's hashed record."""
    lines = [
        "## Published records",
        "",
        "Each page's record (its data, suite, configs, provenance, claims, registration, reading "
        f"and plots) is hashed file by file in its `{HASHES}`; the sha256 of that file names "
        "the whole record. `python scripts/publish_results.py --check` recomputes every hash, "
        "verdict, statement and page.",
        "",
        "| page | record | sha256 of the record |",
        "|---|---|---|",
    ]
    return lines + [
        f"| [{name}]({name}.md) | [`{HASHES}`]({name}/{HASHES}) "
        f"| {record_digest(docs / name) or 'not hashed'} |"
        for name in books
    ]
