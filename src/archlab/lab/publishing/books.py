"""Every published page re-judged from its files, with one verdict per comparison that two pages
share.

A page is a folder of docs/results holding a lab record (lab/publishing/record.py). Two pages share
a comparison when they compare the same metric on the same run folders; such a comparison shows
one verdict on both: the larger of its pages' Holm p-values, the more conservative family.
"""

from __future__ import annotations

from pathlib import Path

from archlab.lab.analysis import stats
from archlab.lab.analysis.verdicts import ClaimResult, judge, with_outcome
from archlab.lab.publishing.record import Record, claim_rows, read_record

Books = dict[str, tuple[Record, list[ClaimResult]]]  # page name -> its record and verdicts


def pages(docs: Path) -> list[Path]:
    """Every page folder under docs (one holding a lab record), by name."""
    return sorted(p.parent for p in docs.glob("*/provenance.json"))


def judged(docs: Path) -> Books:
    """Every page re-judged from its files, with the comparisons pages share made one
    verdict (module doc)."""
    out = {}
    for folder in pages(docs):
        record = read_record(folder)
        out[folder.name] = (record, judge(record.table))
    return unify(out)


def unify(books: Books) -> Books:
    """One verdict per comparison: a claim two pages share takes the larger Holm p (and so the
    outcome of the more conservative family) on both, with a note naming the other pages."""
    keyed: dict[str, list[tuple[str, int]]] = {}
    for name, (record, results) in books.items():
        for i, row in enumerate(claim_rows(record.table, results)):
            if results[i].in_family:
                keyed.setdefault(row["key"], []).append((name, i))
    for places in keyed.values():
        if len(places) < 2:
            continue
        tests = [books[n][1][i].test for n, i in places]
        p = max(t.p_adjusted for t in tests)
        p_contra = max(t.p_contra_adjusted for t in tests)
        # one plan and mde too: at the larger family's first step
        level = min(t.level for t in tests)
        for name, i in places:
            results = books[name][1]
            others = ", ".join(n for n, _ in places if n != name)
            test = stats.readjusted(results[i].test, p, p_contra, level)
            results[i] = with_outcome(
                results[i], test, f"also judged in {others}: one verdict, the larger Holm p"
            )
    return books


def rows_of(books: Books) -> dict[str, list[dict]]:
    """claims.json rows per page, with the headline (unified) Holm p and the pages each comparison
    is shared with."""
    out = {}
    counts: dict[str, list[str]] = {}
    for name, (record, results) in books.items():
        for row in claim_rows(record.table, results):
            counts.setdefault(row["key"], []).append(name)
    for name, (record, results) in books.items():
        rows = claim_rows(record.table, results)
        suite_only = {r.claim.text: r for r in judge(record.table)}
        for row in rows:
            alone = suite_only[row["claim"]]
            row["p_holm_suite"] = alone.p_adjusted
            row["shared_with"] = [n for n in counts[row["key"]] if n != name]
            # the page's own family's plan, beside the one verdict's (verify reads these)
            if row["shared_with"]:
                row["seeds_needed_suite"], row["mde_suite"] = alone.seeds_needed, alone.mde
        out[name] = rows
    return out
