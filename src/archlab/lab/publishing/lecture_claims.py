"""The summary's tally of lecture claims: each claim of the claims index (lab/spec/claims_index.py)
counted once, by the published verdict of its primary test, with its secondary evidence beside it.

A lecture claim's outcome is its primary test's, read from the pages' claims.json rows by (suite,
claim text): confirmed, contradicted or inconclusive; or "not tested", with why: its primary is
untestable by this design, true by construction (arithmetic), or on a page not published yet. The
secondary tests of the same claim (other estimands: another page's base, the screening's main effect
over the 2017 levels, a narrower model) are listed with their estimand and outcome and never change
the count. A claim tested on three pages counts once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from archlab.lab.analysis import stats
from archlab.lab.publishing.tables import fmt
from archlab.lab.spec.claims_index import Evidence, LectureClaim, Source

NOT_TESTED = "not tested"
TESTED = (stats.CONFIRMED, stats.CONTRADICTED, stats.INCONCLUSIVE)
UNPUBLISHED = "not published yet"
# from docs/results/README.md
INDEX_LINK = "[`claims-index.yaml`](../../src/archlab/lab/claims-index.yaml)"
RULE_LINK = "[docs/lab-statistics.md](../lab-statistics.md#one-verdict-per-lecture-claim)"


@dataclass(frozen=True)
class Verdict:
    """A lecture claim's one verdict: its primary test's published outcome."""

    claim: LectureClaim
    outcome: str  # TESTED, or NOT_TESTED
    # for NOT_TESTED: the primary's outcome (untestable, by construction) or UNPUBLISHED; else ""
    why: str
    row: dict | None  # the primary's claims.json row (None: its page is not published)


def by_test(pages: dict[str, list[dict]]) -> dict[tuple[str, str], dict]:
    """Every published claims.json row by (suite, claim text)."""
    return {(row["suite"], row["claim"]): row for rows in pages.values() for row in rows}


def verdict(claim: LectureClaim, rows: dict[tuple[str, str], dict]) -> Verdict:
    row = rows.get((claim.primary.suite, claim.primary.claim))
    if row is None:
        return Verdict(claim, NOT_TESTED, UNPUBLISHED, None)
    if row["outcome"] in TESTED:
        return Verdict(claim, row["outcome"], "", row)
    return Verdict(claim, NOT_TESTED, row["outcome"], row)


def tally(verdicts: list[Verdict]) -> str:
    """The tally: lecture claims once each, tested ones by outcome with the decided share, the
    rest by why."""
    outcomes = [v.outcome for v in verdicts]
    tested = sum(outcomes.count(o) for o in TESTED)
    decided = outcomes.count(stats.CONFIRMED) + outcomes.count(stats.CONTRADICTED)
    share = f"{decided} of {tested}, {100 * decided / tested:.1f}%" if tested else "none tested"
    whys = [v.why for v in verdicts if v.outcome == NOT_TESTED]
    not_tested = ", ".join(f"{whys.count(w)} {w}" for w in dict.fromkeys(whys))
    return (
        f"{len(verdicts)} lecture claims, each counted once by its primary test: {tested} tested: "
        + ", ".join(f"{outcomes.count(o)} {o}" for o in TESTED)
        + f" (decided: {share}); "
        + f"{len(whys)} not tested"
        + (f": {not_tested}" if whys else "")
        + "."
    )


def _estimate(row: dict | None) -> str:
    if row is None or row["test"] is None or row["outcome"] not in TESTED:
        return "-"
    low, high = row["ci"]
    ci = "" if low is None or math.isnan(low) else f" [{fmt(low)}, {fmt(high)}]"
    return fmt(row["estimate"]) + ci


def _test_cell(test: Evidence, published: bool = True) -> str:
    """A test as the table names it: its page linked (a page not published yet has no file to link:
    its suite named), its claim and its estimand."""
    page = f"[{test.suite}]({test.suite}.md)" if published else f"`{test.suite}`"
    return f"{page}: {test.claim} — *{test.estimand}*"


def _secondary(test: Evidence, rows: dict[tuple[str, str], dict]) -> str:
    row = rows.get((test.suite, test.claim))
    outcome = UNPUBLISHED if row is None else row["outcome"]
    estimate = _estimate(row)
    cell = _test_cell(test, row is not None)
    return f"{cell}: **{outcome}**" + (f", {estimate}" if estimate != "-" else "")


def section(index: list[LectureClaim], pages: dict[str, list[dict]]) -> list[str]:
    """The summary's section on the lecture's claims: the rule, the tally, one row per claim, and
    the published claims that test none of the index's."""
    rows = by_test(pages)
    verdicts = [verdict(c, rows) for c in index]
    lines = [
        "## The lecture's claims: one verdict each",
        "",
        "Each claim of the lecture (Stanford CS336, lecture 3) and of Su Jianlin's posts that "
        f"a suite tests is listed once, as its source states it (the index, {INDEX_LINK}, keeps "
        "the original sentence beside the English), with the verdict of its one primary test: "
        "the test whose estimand is the claim, the switch alone at the modern base where the "
        f"claim is about the modern model (the rule: {RULE_LINK}). Other tests of the same claim, "
        "on any page, are its secondary evidence, each with its estimand (the screening's main "
        "effects average each switch over the 2017 levels of the other six); they never change "
        "the verdict. The primaries of the pages published before registrations were chosen after "
        "their verdicts were known; a re-run registers them before its runs.",
        "",
        f"**{tally(verdicts)}**",
        "",
        "| lecture claim | source | primary test — *its estimand* | outcome | estimate [90% CI] "
        "| secondary evidence — *estimand*: outcome, estimate [90% CI] |",
        "|---" * 6 + "|",
    ]
    for v in verdicts:
        c = v.claim
        outcome = f"{v.outcome} ({v.why})" if v.outcome == NOT_TESTED else v.outcome
        secondary = "<br>".join(_secondary(t, rows) for t in c.secondary) or "-"
        lines.append(
            f"| `{c.id}`: {c.text} | [{_short(c.source)}]({c.source.url}) | "
            f"{_test_cell(c.primary, v.row is not None)} | **{outcome}** | {_estimate(v.row)} | "
            f"{secondary} |"
        )
    indexed = {(t.suite, t.claim) for c in index for t in c.tests}
    others = [
        r for r in rows.values() if (r["suite"], r["claim"]) not in indexed and not r["calibration"]
    ]
    if others:
        lines += [
            "",
            f"{len(others)} published claims test no claim of the index (the lab's own questions, "
            "or readings the sources do not state): "
            + "; ".join(
                f"[{r['suite']}]({r['suite']}.md): {r['claim']} ({r['outcome']})" for r in others
            )
            + ".",
        ]
    return lines + [""]


def _mde(row: dict | None) -> str:
    return "-" if row is None or row.get("mde") is None else fmt(row["mde"])


def release_section(
    index: list[LectureClaim], pages: dict[str, list[dict]], before: dict[str, list[dict]]
) -> list[str]:
    """The lecture tally before and after a release, and each lecture claim whose primary page was
    re-run: its outcome and minimum detectable effect on the re-judged page and on the re-run.
    `before`: the pages as they were (each re-run page's rejudged.json rows, the others as now);
    a page it lacks is new since the re-judging. Empty when no page was re-run."""
    rerun = sorted(name for name in before if before[name] is not pages[name])
    new = sorted(set(pages) - set(before))
    if not rerun:
        return []
    one = len(new) == 1
    added = (
        f"{', '.join(f'[{n}]({n}.md)' for n in new)} {'is a new page' if one else 'are new pages'}"
        f", registered for {'its' if one else 'their'} runs; "
        if new
        else ""
    )
    now_rows, old_rows = by_test(pages), by_test(before)
    now = [verdict(c, now_rows) for c in index]
    old = [verdict(c, old_rows) for c in index]
    lines = [
        "## The release: re-run pages against the re-judged ones",
        "",
        f"{len(rerun)} of {len(pages)} pages were re-run at their registered seeds after "
        f"registering their claims ({', '.join(f'[{n}]({n}.md)' for n in rerun)}); {added}the "
        "others are the re-judged pages. Each re-run page shows its own claims then and now.",
        "",
        f"- Before the re-runs: {tally(old)}",
        f"- Now: {tally(now)}",
        "",
        "| lecture claim | primary test | re-judged: outcome, mde | re-run: outcome, mde "
        "| changed |",
        "|---" * 5 + "|",
    ]
    for was, is_ in zip(old, now):
        if is_.claim.primary.suite not in rerun:
            continue
        changed = "**yes**" if was.outcome != is_.outcome else "no"
        lines.append(
            f"| `{is_.claim.id}` | [{is_.claim.primary.suite}]({is_.claim.primary.suite}.md): "
            f"{is_.claim.primary.claim} | {was.outcome}, {_mde(was.row)} | {is_.outcome}, "
            f"{_mde(is_.row)} | {changed} |"
        )
    return lines + [""]


def _short(source: Source) -> str:
    """A source's short name for the table: "Su 9728" for a kexue.fm post, else its title up to
    the first colon."""
    if "kexue.fm/archives/" in source.url:
        return "Su " + source.url.rstrip("/").rsplit("/", 1)[1]
    return source.title.split(":")[0]
