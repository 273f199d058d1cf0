"""A suite page's tables and the paragraphs beside them, from its record and verdicts: the claims
(what each test showed, the minimum detectable effect, the seeds a stated effect needs), the tally,
the margins and what they are worth on the compute ladder, the suite's noise, the factorial
analysis, the timings and the arms. lab/publishing/page.py lays them out as results.md and
report.html."""

from __future__ import annotations

import json
import math
import statistics

from archlab.lab.analysis import stats
from archlab.lab.analysis.ladder import describe, fit_ladder, ladder_values
from archlab.lab.analysis.verdicts import ClaimResult, factorial_anova, suite_spreads
from archlab.lab.measures.timing_load import load_warning, other_work, peak_load
from archlab.lab.publishing import registered
from archlab.lab.publishing.record import Record
from archlab.lab.spec.arms import PARAM_TOLERANCE
from archlab.lab.spec.suite import Claim

# metrics in nats, whose margins the ladder prices
LOSS_METRICS = ("val_loss", "train_loss", "loss_at_1x")


def fmt(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.4g}" if abs(x) < 1e5 else f"{x:,.0f}"


def _cell(xs: list[float]) -> str:
    finite = [x for x in xs if not math.isnan(x)]
    if not finite:
        return "n/a"
    std = statistics.stdev(finite) if len(finite) > 1 else 0.0
    return f"{fmt(statistics.fmean(finite))} ± {fmt(std)}"


def _metrics(claim: Claim) -> str:
    versus = f" vs {claim.versus_metric}" if claim.versus_metric else ""
    factor = (
        f" [{claim.factor}" + "".join(f", {k}={v}" for k, v in (claim.within or {}).items()) + "]"
        if claim.factor
        else ""
    )
    return f"{claim.metric}{versus} ({claim.better} is better){factor}"


def _bound(r: ClaimResult) -> str:
    low, high = r.ci
    return "n/a" if math.isnan(low) else f"[{fmt(low)}, {fmt(high)}]"


def needed(result: ClaimResult) -> str:
    """What an inconclusive claim would need at its stated effect: seeds per arm (and items, for a
    claim scored on a fixed item set), or timed pairs for a timing."""
    if result.outcome != stats.INCONCLUSIVE or result.test is None:
        return "-"
    test = result.test
    if not result.seeds_needed:
        if test.against_the_data:
            return "none: the data point the other way (the interval excludes 0 against the claim)"
        if test.items_needed:
            return (
                f"{test.items_needed} items at {len(result.a)} seeds per arm (no number of "
                f"seeds decides it at {test.items} items: the items' own variance does not "
                "shrink with seeds)"
            )
        if test.test == stats.ITEM_TEST and stats.planning_effect(test) is not None:
            return f"out of reach: more than 32 times the {test.items} items and a million seeds"
        return "none planned: no smallest effect stated" if test.test in stats.T_TESTS else "-"
    unit = "pairs" if "interleaved pairs" in result.note else "seeds per arm"
    if test.test == stats.ITEM_TEST:
        unit = f"seeds per arm at {test.items_needed or test.items} items" + (
            f" (more seeds alone cannot decide it at {test.items} items, nor more items "
            f"at {len(result.a)} seeds)"
            if test.items_needed
            else ""
        )
    had = (
        f" (it had {len(result.a)}: the estimate, not the n, leaves it open)"
        if result.seeds_needed <= len(result.a) and not test.items_needed
        else ""
    )
    # what _plan in lab/analysis/stats.py plans for
    at = {
        "better": f" at a true gain of {fmt(test.smallest_effect)}",
        "same": " at a true difference of 0",
        "equivalent": f" for equivalence within +-{fmt(test.margin)} at a true difference of 0 "
        "(90% power per side)",
    }[test.expect]
    # an exact test on events plans at the observed rates
    if test.test not in (*stats.T_TESTS, stats.ITEM_TEST):
        at = " at the observed rates"
    return f"{result.seeds_needed} {unit}{at}{had}"


def claim_table(results: list[ClaimResult], caveat: str = "") -> tuple[list[str], list[list[str]]]:
    """The claims, one row each; `caveat` (budgets.evidence_caveat) follows each tested outcome."""
    head = [
        "claim",
        "metric",
        "arm vs",
        "n",
        "estimate (arm - vs)",
        "90% CI",
        "margin / smallest effect",
        "test",
        "p (one-sided)",
        "p (Holm)",
        "outcome",
        "what the test showed",
        "mde",
        "needs",
        "Narang",
    ]
    rows = []
    for r in results:
        c = r.claim
        size = (
            f"margin {fmt(c.margin)}"
            if c.expect != "better" and c.margin
            else f"smallest {fmt(c.smallest_effect)}"
            if c.smallest_effect
            else "-"
        )
        if c.min_effect:
            size += f"; min {fmt(c.min_effect)}"
        test = r.note if r.test is None else f"{r.test.test}; {r.note}"
        # a design: its runs
        n = r.test.n if r.test is not None and r.test.test == stats.OLS_TEST else len(r.a)
        outcome = (
            f"{r.outcome} {caveat}" if caveat and r.outcome != stats.BY_CONSTRUCTION else r.outcome
        )
        rows.append(
            [
                c.text,
                _metrics(c),
                f"{r.arms[0]} vs {r.arms[1]}",
                str(n),
                fmt(r.estimate),
                _bound(r),
                size,
                test,
                fmt(r.p),
                fmt(r.p_adjusted),
                outcome,
                r.statement,
                fmt(r.mde),
                needed(r),
                r.narang,
            ]
        )
    return head, rows


def tally(results: list[ClaimResult]) -> str:
    """The outcome counts of the family, and the claims outside it, in one line."""
    family = [r.outcome for r in results if r.in_family]
    outside = [r.outcome for r in results if not r.in_family]
    counts = ", ".join(f"{family.count(o)} {o}" for o in dict.fromkeys(family)) or "none"
    extra = ", ".join(f"{outside.count(o)} {o}" for o in dict.fromkeys(outside))
    calibration = (
        " These are calibration claims (the lab's yardstick), outside the lecture's tallies."
        if any(r.calibration for r in results)
        else ""
    )
    return (
        f"{len(family)} tested claims: {counts}."
        + (f" Outside the family (not tallied): {extra}." if extra else "")
        + calibration
    )


def spread_lines(record: Record) -> list[str]:
    s = record.suite
    metric = "val_loss" if "val_loss" in s.measures else s.measures[0]
    lines = []
    for sp in suite_spreads(record.table, metric):
        lines.append(
            f"- {metric}, {sp.regime} ({len(sp.arms)} arms x {sp.seeds} seeds): a run's spread "
            f"sigma_run {fmt(sp.sigma_run)}, residual sigma_eps {fmt(sp.sigma_eps)} ({sp.df} df), "
            f"between-arm seed correlation rho {fmt(sp.rho)}"
        )
    return (lines or [f"- {metric}: too few finished arms to analyse"]) + [
        "- The claims use each pair's own paired differences (their own standard error, n - 1 df) "
        "unless the test column says otherwise; these suite-wide figures describe the noise, they "
        "do not judge claims."
    ]


def anova_table(record: Record) -> tuple[list[str], list[list[str]]] | None:
    # a fraction cannot fit every interaction: its effects table replaces the ANOVA
    if record.suite.screening:
        return None
    rows = factorial_anova(record.table, "val_loss") if "val_loss" in record.suite.measures else []
    if not rows:
        return None
    return ["term", "df", "F", "p"], [[t, f"{df:g}", fmt(f), fmt(pv)] for t, df, f, pv in rows]


def timing_table(record: Record) -> tuple[list[str], list[list[str]]] | None:
    if not record.suite.timings:
        return None
    rows = []
    for t in record.suite.timings:
        timed = record.table.timings.get(t.metric)
        if timed is None:
            rows.append([t.metric, t.kind, " vs ".join(t.arms), "0", "n/a", "n/a", "n/a", "n/a"])
            continue
        ratios = sorted(a / b for a, b in zip(timed["a"], timed["b"]))
        peak, others = peak_load(timed), other_work(timed)
        load = "not recorded" if peak is None else f"{peak:.1f} on {timed.get('cpus') or '?'} CPUs"
        load += "" if others is None else f"; {others:.2f} CPUs of other work"
        rows.append(
            [
                t.metric,
                t.kind,
                " vs ".join(timed["arms"]),
                str(len(ratios)),
                f"{1e3 * statistics.median(timed['a']):.4g} / "
                f"{1e3 * statistics.median(timed['b']):.4g}",
                fmt(statistics.median(ratios)),
                load,
                json.dumps(t.options) if t.options else "-",
            ]
        )
    return [
        "timing",
        "kind",
        "arms (a vs b)",
        "pairs",
        "median ms (a / b)",
        "median ratio a/b",
        "load (1-min, highest)"
        + (
            "; other work (mean over the pairs)"
            if any("CPUs of other" in r[6] for r in rows)
            else ""
        ),
        "options",
    ], rows


def timing_warnings(record: Record) -> list[str]:
    """One line per timing run while the machine's load exceeded
    its CPUs (lab/measures/timing_load.py)."""
    return [
        w for metric, timed in record.table.timings.items() if (w := load_warning(metric, timed))
    ]


def param_note(record: Record, arm: str, params: int | None, base: int | None) -> str:
    meta = record.provenance.get("arms", {}).get(arm, {})
    parts = [meta["matched"]] if meta.get("matched") else []
    if params and base and abs(params - base) > PARAM_TOLERANCE * base:
        why = (
            "by design"
            if arm in record.suite.unmatched or record.suite.match_params == "none"
            else "not matched"
        )
        parts.insert(0, f"{(params - base) / base:+.1%} parameters vs the base ({why})")
    return "; ".join(parts)


def arm_table(record: Record) -> tuple[list[str], list[list[str]]]:
    """Per arm: seeds, parameters, each measure's mean ± sd over seeds, divergences (a rate),
    the size note."""
    s, table = record.suite, record.table
    head = ["arm", "seeds", "parameters", *s.measures, "diverged", "note"]
    params = {
        a.name: next((r.parameters for r in table.runs.get(a.name, []) if r.parameters), None)
        for a in s.arms
    }
    base = params[s.base_arm.name]
    rows = []
    for a in s.arms:
        runs = table.runs.get(a.name, [])
        diverged = sum(r.values.get("diverged", 0.0) == 1.0 for r in runs)
        rows.append(
            [
                a.name,
                str(len(runs)),
                f"{params[a.name]:,}" if params[a.name] else "n/a",
                *(_cell(table.values(a.name, m)) for m in s.measures),
                f"{diverged}/{len(runs)}",
                param_note(record, a.name, params[a.name], base),
            ]
        )
    return head, rows


def margin_text(record: Record) -> str:
    """The margins and smallest effects in use, and what the loss margin is worth
    in compute (provenance)."""
    used = sorted(
        {(c.metric, c.margin) for c in record.suite.claims if c.expect != "better" and c.margin}
    )
    parts = [f"{m} {margin:g}" + (" nats" if m in LOSS_METRICS else "") for m, margin in used]
    text = (
        (f"Margins ({registered.margins_when(record.registration)}): " + ", ".join(parts) + ".")
        if parts
        else ""
    )
    pricing = record.provenance.get("margins", "")
    return f"{text} {pricing}".strip()


def ladder_section(record: Record) -> tuple[tuple, list[str]] | None:
    """A suite's own rungs (its base at multiples of the steps): a table and the fit, or None."""
    values = ladder_values(record.table)
    fit = fit_ladder(values) if len(values) >= 2 and set(values) != {1.0} else None
    if fit is None:
        return None
    steps = record.provenance.get("rung_steps", {})
    base = statistics.fmean(values[1.0][: fit.seeds]) if 1.0 in values else math.nan
    rows = [
        [f"{x:g}x", str(steps.get(f"{x:g}", "")), fmt(m), fmt(m - base) if x != 1.0 else "0"]
        for x, m in zip(fit.scales, fit.means)
    ]
    margin = record.budget.margin
    return (["rung", "steps", "val_loss (mean over seeds)", "vs 1x"], rows), [describe(fit, margin)]
