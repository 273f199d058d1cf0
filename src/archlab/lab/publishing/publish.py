"""docs/results: the published pages, each rebuilt from its own files, one verdict per comparison,
and the summary.

A page is a folder docs/results/SUITE/ holding a lab record (lab/publishing/record.py: results.csv,
items.csv, timings.csv, suite.yaml, configs.yaml, provenance.json, claims.json), its plots
and a person's reading (reading.md), plus the page docs/results/SUITE.md rendered from them
(lab/publishing/page.py). `rebuild` re-judges every page from its files, makes each comparison
that two pages share (the same metric and run folders on both sides) show one verdict (the larger
of its pages' Holm p-values: the more conservative family), and writes claims.json, SUITE.md and
the summary README.md; `check` does the same without writing and lists every difference from
what is published.

The summary's headline verdict of a claim is its page's (Holm within the suite, one verdict per
comparison). Benjamini-Hochberg's q across every published comparison is shown as secondary
information, labelled, and never changes an outcome. Calibration suites (the compute ladder) are
listed apart from the lecture's tallies.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import shutil
from pathlib import Path

from archlab.lab.analysis import stats
from archlab.lab.analysis.verdicts import ClaimResult, judge, with_outcome
from archlab.lab.publishing import lecture_claims, page, registered, run_provenance, simple_effects
from archlab.lab.publishing.record import (
    CLAIMS,
    FIRST_RULE,
    HASHES,
    PREVIOUS_RULE,
    READING,
    REJUDGED,
    Record,
    claim_rows,
    differences,
    hash_differences,
    read_record,
    record_digest,
    registered_differences,
    write_hashes,
)
from archlab.lab.spec.claims_index import ClaimsIndexError, load_index
from archlab.lab.spec.registration import REGISTRATION

PLOTS = (
    "val_loss.png",
    "grad_norm.png",
    "embed_row_norm.png",
    "half_normal.png",
    "main_effects.png",
)
SUMMARY = "README.md"


def pages(docs: Path) -> list[Path]:
    """Every page folder under docs (one holding a lab record), by name."""
    return sorted(p.parent for p in docs.glob("*/provenance.json"))


def judged(docs: Path) -> dict[str, tuple[Record, list[ClaimResult]]]:
    """Every page re-judged from its files, with the comparisons pages share made one
    verdict (module doc)."""
    out = {}
    for folder in pages(docs):
        record = read_record(folder)
        out[folder.name] = (record, judge(record.table))
    return unify(out)


def unify(
    books: dict[str, tuple[Record, list[ClaimResult]]],
) -> dict[str, tuple[Record, list[ClaimResult]]]:
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


def rows_of(books: dict[str, tuple[Record, list[ClaimResult]]]) -> dict[str, list[dict]]:
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


def check(docs: Path, only: str | None = None) -> list[str]:
    """Every difference between what is published and what the pages' files give, each naming the
    page and what differs; [] when everything agrees. Per page (`only`: that page alone, its shared
    verdicts still judged with every page): claims.json against its verdicts recomputed (numbers,
    outcomes, statements, every field); the claims it judges against its registration; each record
    file against record.sha256; SUITE.md against the page rendered again from the files. Then the
    summary README.md against the one the pages give."""
    problems = []
    books = judged(docs)
    for name, rows in rows_of(books).items():
        if only is not None and name != only:
            continue
        path = docs / name / CLAIMS
        found = claims_differences(
            json.loads(path.read_text(encoding="utf-8")) if path.is_file() else [], rows
        )
        record, results = books[name]
        if record.registration is None:
            found.append("registration.json does not exist: its claims were never registered")
        found += registered_differences(record) + hash_differences(docs / name)
        found += text_differences(
            f"{name}.md", docs / f"{name}.md", page_text(docs, record, results)
        )
        problems += [f"{name}: {line}" for line in found]
    if only is None:
        try:
            summary = summary_text(docs, books)
        # the summary's lecture tally needs the index: its problems, one line each
        except ClaimsIndexError as err:
            return problems + [f"claims index {line}" for line in str(err).splitlines()]
        problems += text_differences(SUMMARY, docs / SUMMARY, summary)
    return problems


def claims_differences(published: list[dict], rows: list[dict]) -> list[str]:
    """A page's claims.json against its rows recomputed with every page (`rows_of`): every field,
    the headline Holm p of a shared comparison included."""
    return differences(published, rows, alone=False)


def text_differences(label: str, path: Path, regenerated: str, limit: int = 3) -> list[str]:
    """Where the published text at `path` differs from `regenerated`, line by line (difflib), the
    first `limit` changes quoted."""
    if not path.is_file():
        return [f"{label}: does not exist (rebuild it)"]
    published = path.read_text(encoding="utf-8")
    if published == regenerated:
        return []
    old, new = published.splitlines(), regenerated.splitlines()
    changes = [
        op
        for op in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes()
        if op[0] != "equal"
    ]
    out = [
        f"{label} line {i1 + 1}{_begins(old[i1:i2], new[j1:j2])}: "
        + " published, the files give ".join(_changed(old[i1:i2], new[j1:j2]))
        for _, i1, i2, j1, j2 in changes[:limit]
    ]
    return out + ([f"{label}: {len(changes) - limit} more changes"] if len(changes) > limit else [])


CONTEXT = 60  # characters quoted either side of a change within a line


def _begins(old: list[str], new: list[str]) -> str:
    """Where a change within one long line lies, for the reader: how the line begins (a table
    row: its claim)."""
    if (
        len(old) == len(new) == 1
        and old[0][:CONTEXT] == new[0][:CONTEXT]
        and len(old[0]) > 2 * CONTEXT
    ):
        return f", which begins {old[0][:CONTEXT]!r}"
    return ""


def _changed(old: list[str], new: list[str]) -> tuple[str, str]:
    """The two sides of a change, quoted: within one line, the part that differs with some context
    either side; whole lines otherwise (cut at 200 characters)."""
    a, b = " / ".join(old), " / ".join(new)
    if len(old) == len(new) == 1:
        # common head
        start = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        end = 0  # common tail, not overlapping the head
        while end < min(len(a), len(b)) - start and a[len(a) - 1 - end] == b[len(b) - 1 - end]:
            end += 1
        lo = max(0, start - CONTEXT)

        def part(s: str) -> str:
            hi = min(len(s), len(s) - end + CONTEXT)
            return ("..." if lo else "") + s[lo:hi] + ("..." if hi < len(s) else "")

        a, b = part(a), part(b)
    return tuple(repr(s[:200] + "..." if len(s) > 200 else s) if s else "(nothing)" for s in (a, b))


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-300)


def rebuild(docs: Path) -> list[str]:
    """Re-judge every page from its files and write claims.json, record.sha256, SUITE.md and the
    summary; returns the pages."""
    books = judged(docs)
    load_index()  # first: a claims index that does not check stops the rebuild before any write
    for name, rows in rows_of(books).items():
        path = docs / name / CLAIMS
        if not path.is_file() or claims_differences(
            json.loads(path.read_text(encoding="utf-8")), rows
        ):
            # equal rows stay (their last bits too)
            path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
        write_hashes(docs / name)
        record, results = books[name]
        (docs / f"{name}.md").write_text(page_text(docs, record, results), encoding="utf-8")
    # after the pages: it lists their hashes
    (docs / SUMMARY).write_text(summary_text(docs, books), encoding="utf-8")
    return list(books)


# ------------------------------------------------------------------------------------------ pages
def page_text(docs: Path, record: Record, results: list[ClaimResult]) -> str:
    """docs/SUITE.md from the page's record: the lab's page with links into SUITE/, a screening's
    switches at the modern base from other pages' runs (lab/publishing/simple_effects.py), and the
    comparisons with the verdicts of earlier rules."""
    name = record.suite.name
    folder = docs / name
    plots = [f"{name}/{p}" for p in PLOTS if (folder / p).is_file()]
    extra = (
        rejudged_section(folder, record, results)
        + previous_section(folder, results)
        + first_section(folder, results)
    )
    digest = record_digest(folder)
    record_line = (
        [
            f"Record: `{HASHES}` holds the sha256 of each of its files and plots; its own sha256 "
            f"is {digest[:16]}, so one hash names every byte these numbers come from."
        ]
        if digest
        else []
    )
    text = page.markdown_text(record, results, plots, extra, record_line)
    if record.suite.screening:  # each switch at the modern base, after the screening's own effects
        metric = "val_loss" if "val_loss" in record.suite.measures else record.suite.measures[0]
        at_base, noise = (
            simple_effects.section(docs, record, metric),
            "\n## How noisy this suite was",
        )
        text = (
            text.replace(noise, at_base.rstrip("\n") + "\n" + noise, 1)
            if noise in text
            else text + at_base
        )
    for file in (
        "results.csv",
        "items.csv",
        "timings.csv",
        "configs.yaml",
        "provenance.json",
        "claims.json",
        "suite.yaml",
        "registration.json",
        HASHES,
    ):
        text = text.replace(f"`{file}`", f"[`{file}`]({name}/{file})")
    return text.replace(
        "this page's folder", f"this page's folder (`archlab ablate --verify docs/results/{name}`)"
    )


def _fmt_ci(ci: list | tuple) -> str:
    low, high = ci
    return "n/a" if low is None or math.isnan(low) else f"[{page.fmt(low)}, {page.fmt(high)}]"


def why_changed(old: dict, new: ClaimResult) -> str:
    """What moved a claim's verdict between the previous rule and this one, from the two tests."""
    reasons = []
    t_old = old.get("test") or {}
    if new.test is None:
        return f"not tested now: {new.note}" if new.note else new.outcome
    if (
        t_old.get("margin")
        and new.test.margin
        and not math.isclose(t_old["margin"], new.test.margin)
    ):
        reasons.append(f"margin {t_old['margin']:g} -> {new.test.margin:g}")
    if t_old.get("test") and t_old["test"] != new.test.test:
        reasons.append(f"{t_old['test']} -> {new.test.test}")
    if t_old.get("se") and new.test.se and not math.isclose(t_old["se"], new.test.se, rel_tol=1e-6):
        reasons.append(f"standard error {t_old['se']:.3g} -> {new.test.se:.3g}")
    if old.get("claim") != new.claim.text:
        reasons.append("claim restated")
    before = old.get("estimate")
    if (
        before is not None
        and math.isfinite(before)
        and not math.isclose(before, new.estimate, rel_tol=1e-6, abs_tol=1e-12)
    ):
        reasons.append(
            f"estimate {page.fmt(before)} -> {page.fmt(new.estimate)} (new runs or "
            "a redefined measure)"
        )
    return "; ".join(reasons) or "the same test"


def _then_and_now(old_rows: list[dict], results: list[ClaimResult]) -> list[str]:
    """One table row per claim of `old_rows` beside its verdict in `results` (a changed outcome in
    bold, with what moved it), then the claims `results` adds."""
    lines = []
    now = {r.claim.text: r for r in results}
    renamed = {r["claim"]: r for r in old_rows}
    aliases = {r.claim.text: r.claim.text for r in results}
    for old in old_rows:
        new = now.get(old["claim"]) or next(
            (r for r in results if _restated(old["claim"], r)), None
        )
        t_old = old.get("test") or {}
        before = (
            f"{page.fmt(old.get('estimate'))} {_fmt_ci(old.get('ci', [math.nan, math.nan]))}, "
            f"{t_old.get('test', '-')}, {old['outcome']}"
        )
        if new is None:
            lines.append(f"| {old['claim']} | {before} | (dropped) | - |")
            continue
        aliases.pop(new.claim.text, None)
        after = (
            f"{page.fmt(new.estimate)} {_fmt_ci(new.ci)}, "
            f"{new.test.test if new.test else '-'}, {new.outcome}"
        )
        changed = old["outcome"] != new.outcome
        text = (
            old["claim"]
            if new.claim.text == old["claim"]
            else f"{old['claim']} (now: {new.claim.text})"
        )
        lines.append(
            f"| {text} | {before} | {'**' + after + '**' if changed else after} | "
            f"{('**yes**: ' if changed else 'no: ') + why_changed(old, new)} |"
        )
    for text in aliases:
        if text not in renamed:
            r = now[text]
            lines.append(
                f"| (new) {text} | - | {page.fmt(r.estimate)} {_fmt_ci(r.ci)}, {r.outcome} | "
                "new claim |"
            )
    return lines


def rejudged_section(folder: Path, record: Record, results: list[ClaimResult]) -> str:
    """Each claim of the page this re-run replaced (re-judged after its runs, at margins set
    then) beside now."""
    path = folder / REJUDGED
    if not path.is_file():
        return ""
    lines = [
        "",
        "## Against the re-judged page this re-run replaced",
        "",
        "Before this re-run the page judged runs made before registrations existed, at margins and "
        "smallest effects set on re-judging, after the runs (docs/lab-statistics.md). "
        f"{_registered_since(record)} Each claim then and now (a changed outcome in bold, with "
        "what moved it):",
        "",
        "| claim | re-judged: estimate [90% CI], test, outcome | re-run: estimate [90% CI], test, "
        "outcome | changed: why |",
        "|---|---|---|---|",
    ]
    return (
        "\n".join(lines + _then_and_now(json.loads(path.read_text(encoding="utf-8")), results))
        + "\n"
    )


def _registered_since(record: Record) -> str:
    """How the re-run's claims stand against its runs, as its registration line says above."""
    entry = ((record.registration or {}).get("registrations") or [None])[-1]
    if entry is None:
        return "This re-run's claims were not registered."
    if entry.get("before_first_run"):
        return "This page's runs were trained after its claims were registered."
    if registered.committed_before_runs(entry, record.provenance.get(run_provenance.RUNS)):
        return (
            "This page's claims were committed before any of its runs trained, and registered "
            "after the runs named above."
        )
    return "This page's claims were registered after the runs named above had trained."


def previous_section(folder: Path, results: list[ClaimResult]) -> str:
    """Each claim under the previous rule (one pooled residual per regime, a 0.09-nat
    margin) beside now."""
    path = folder / PREVIOUS_RULE
    if not path.is_file():
        return ""
    old_rows = json.loads(path.read_text(encoding="utf-8"))
    lines = [
        "",
        "## Against the previous rule",
        "",
        "Until 3 December 2026 the lab judged claims on one pooled residual per suite (or regime) "
        'and "as good as" at a 0.09-nat margin (what 1.25x compute buys at `small`), with no '
        "item-level variance. Each claim "
        "then and now (a changed outcome in bold, with what moved it):",
        "",
        "| claim | then: estimate [90% CI], test, outcome | now: estimate [90% CI], test, outcome "
        "| changed: why |",
        "|---|---|---|---|",
    ]
    return "\n".join(lines + _then_and_now(old_rows, results)) + "\n"


def _restated(old_text: str, result: ClaimResult) -> bool:
    """Whether a claim of this rule restates an older claim: its text starts with the old text, a
    closing parenthesis of the old text aside ("... (each at its middle rate)" -> "... (each at the
    best rate ...)")."""

    def words(t: str) -> str:
        return " ".join(re.sub(r"[^a-z0-9 ]", " ", t.lower()).split())

    core = words(re.sub(r"\s*\([^()]*\)\s*$", "", old_text))
    return bool(core) and words(result.claim.text).startswith(core)


def first_section(folder: Path, results: list[ClaimResult]) -> str:
    """The first lab's verdicts (Welch's test, a noise floor) beside the outcome now, kept
    from earlier pages."""
    path = folder / FIRST_RULE
    if not path.is_file():
        return ""
    first = json.loads(path.read_text(encoding="utf-8"))
    now = {r.claim.text: r for r in results}
    lines = [
        "",
        "## Against the first published page",
        "",
        "The first lab judged this suite with Welch's unpaired test on 2 seeds per arm and a "
        "noise floor (the "
        "base arm's spread over 4 seeds) on top of the p-value, and confirmed \"as good "
        'as" whenever the '
        "difference was under that floor. Each of its claims beside the outcome now:",
        "",
        "| claim | first page: difference, verdict | now: estimate [90% CI], outcome |",
        "|---|---|---|",
    ]
    for old in first:
        new = now.get(old["claim"])
        before = f"{page.fmt(old.get('difference'))}, {old['verdict']}"
        after = (
            "(no claim of this text now: dropped or reworded)"
            if new is None
            else f"{page.fmt(new.estimate)} {_fmt_ci(new.ci)}, {new.outcome}"
        )
        lines.append(f"| {old['claim']} | {before} | {after} |")
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------- the summary
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


def summary_text(docs: Path, books: dict[str, tuple[Record, list[ClaimResult]]]) -> str:
    """docs/results/README.md: each lecture claim once by its primary test, what the release
    changed, every published comparison once with its verdict, each page's reading, and the hashes
    of the published records."""
    pages = rows_of(books)
    unique = _distinct_comparisons(pages)
    index = load_index()
    before = {
        name: json.loads((docs / name / REJUDGED).read_text(encoding="utf-8"))
        if (docs / name / REJUDGED).is_file()
        else rows
        for name, rows in pages.items()
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
            f"margin {page.fmt(r['margin'])}"
            if r["expect"] != "better" and r["margin"]
            else f"smallest {page.fmt(r['smallest_effect'])}"
            if r["smallest_effect"]
            else "-"
        )
        kind = " (calibration)" if r["calibration"] else ""
        lines.append(
            f"| [{r['suite']}]({r['suite']}.md){kind} | {r['claim']}{also} | {r['metric']} "
            f"| {r['arms']} | {page.fmt(r['estimate'])} | {_fmt_ci(r['ci'])} | {size} | "
            f"{page.fmt(r['p_holm'])} | {r['outcome']} | {r['statement']} | {page.fmt(r['mde'])} | "
            f"{_needs(r)} | {r['narang']} | {page.fmt(q.get(id(r)))} |"
        )
    return lines


def _count_words(outcomes: list[str]) -> str:
    """ "3 confirmed, 2 inconclusive": each outcome with its count, in first-seen order."""
    return ", ".join(f"{outcomes.count(v)} {v}" for v in dict.fromkeys(outcomes))


def _comparison_tally(unique: list[dict], books: dict) -> list[str]:
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


def _readings_section(docs: Path, books: dict) -> list[str]:
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


def _records_section(docs: Path, books: dict) -> list[str]:
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


def _rejudged(folder: Path) -> bool | None:
    """Whether the registration in force in `folder` is one made on re-judging a page published
    before registrations existed (lab/publishing/registered.py: it says when margins and effects
    were set); None: no registration."""
    path = folder / REGISTRATION
    if not path.is_file():
        return None
    registrations = json.loads(path.read_text(encoding="utf-8"))["registrations"]
    return bool(registrations and "effects_set" in registrations[-1])


def import_folder(suite_dir: Path, docs: Path) -> Path:
    """Copy a finished suite folder's record and plots into docs/SUITE/ (its reading and earlier
    rules' verdicts kept; the claims.json it replaces kept as previous-rule.json when it came from
    the previous rule, and as rejudged.json when a suite registered for its runs replaces a page
    registered on re-judging)."""
    record = read_record(suite_dir)
    folder = docs / record.suite.name
    folder.mkdir(parents=True, exist_ok=True)
    old = folder / CLAIMS
    if old.is_file() and not (folder / PREVIOUS_RULE).is_file():
        rows = json.loads(old.read_text(encoding="utf-8"))
        # written by the previous rule
        if rows and "p_holm_suite" not in rows[0] and "key" in rows[0]:
            shutil.copyfile(old, folder / PREVIOUS_RULE)
    if (
        old.is_file()
        and not (folder / REJUDGED).is_file()
        and _rejudged(folder)
        and _rejudged(suite_dir) is False
    ):
        # a registered re-run replaces a page registered on re-judging
        shutil.copyfile(old, folder / REJUDGED)
    for name in (
        "results.csv",
        "items.csv",
        "timings.csv",
        "suite.yaml",
        "configs.yaml",
        "provenance.json",
        "claims.json",
        "registration.json",
        *PLOTS,
    ):
        if (suite_dir / name).is_file():
            shutil.copyfile(suite_dir / name, folder / name)
        elif name in ("items.csv", "timings.csv") and (folder / name).is_file():
            (folder / name).unlink()
    return folder
