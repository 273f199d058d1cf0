"""A published page beside its earlier verdicts: the re-judged page a registered re-run replaced
(rejudged.json), the previous rule's verdicts (previous-rule.json) and the first lab's
(first-rule.json), each claim then and now, with what moved a changed outcome."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from archlab.lab.analysis.verdicts import ClaimResult
from archlab.lab.publishing import registered, run_provenance
from archlab.lab.publishing.record import FIRST_RULE, PREVIOUS_RULE, REJUDGED, Record
from archlab.lab.publishing.tables import fmt


def sections(folder: Path, record: Record, results: list[ClaimResult]) -> str:
    """The page's sections against its earlier verdicts, newest first; those whose files the
    page's folder lacks are left out."""
    return (
        rejudged_section(folder, record, results)
        + previous_section(folder, results)
        + first_section(folder, results)
    )


def fmt_ci(ci: list | tuple) -> str:
    """A 90% CI as the pages print it, '[low, high]', or 'n/a' where there is none."""
    low, high = ci
    return "n/a" if low is None or math.isnan(low) else f"[{fmt(low)}, {fmt(high)}]"


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
    se_old, se_new = t_old.get("se"), new.test.se
    # a count test has no standard error (nan) on either side: nothing moved
    if se_old and se_new and not (math.isnan(se_old) and math.isnan(se_new)):
        if not math.isclose(se_old, se_new, rel_tol=1e-6):
            reasons.append(f"standard error {se_old:.3g} -> {se_new:.3g}")
    if old.get("claim") != new.claim.text:
        reasons.append("claim restated")
    before = old.get("estimate")
    if (
        before is not None
        and math.isfinite(before)
        and not math.isclose(before, new.estimate, rel_tol=1e-6, abs_tol=1e-12)
    ):
        reasons.append(
            f"estimate {fmt(before)} -> {fmt(new.estimate)} (new runs or a redefined measure)"
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
            f"{fmt(old.get('estimate'))} {fmt_ci(old.get('ci', [math.nan, math.nan]))}, "
            f"{t_old.get('test', '-')}, {old['outcome']}"
        )
        if new is None:
            lines.append(f"| {old['claim']} | {before} | (dropped) | - |")
            continue
        aliases.pop(new.claim.text, None)
        after = (
            f"{fmt(new.estimate)} {fmt_ci(new.ci)}, "
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
                f"| (new) {text} | - | {fmt(r.estimate)} {fmt_ci(r.ci)}, {r.outcome} | new claim |"
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
        before = f"{fmt(old.get('difference'))}, {old['verdict']}"
        after = (
            "(no claim of this text now: dropped or reworded)"
            if new is None
            else f"{fmt(new.estimate)} {fmt_ci(new.ci)}, {new.outcome}"
        )
        lines.append(f"| {old['claim']} | {before} | {after} |")
    return "\n".join(lines) + "\n"
