"""A suite's page from its record (lab/publishing/record.py) and verdicts:
results.md and report.html.

The page says what each test showed in words that follow it (outcomes.statement), the minimum
detectable effect at its n, the seeds a stated effect needs, the suite's noise, the tables,
and where the numbers came from (the commit, versions, machine, data hash, command, scale
and cost). Nothing here needs the run folders, so a published page is rebuilt from its files
(`scripts/publish_results.py`), and plots are passed in as files.
"""

from __future__ import annotations

import base64
import html
import json
import math
import statistics
from pathlib import Path

from scipy import special

from archlab.lab.analysis import stats
from archlab.lab.analysis.ladder import describe, fit_ladder, ladder_values
from archlab.lab.analysis.verdicts import ClaimResult, factorial_anova, suite_spreads
from archlab.lab.measures.measure import MEASURES
from archlab.lab.measures.timing_load import load_warning, other_work, peak_load
from archlab.lab.publishing import registered, run_provenance
from archlab.lab.publishing.record import Record
from archlab.lab.spec.arms import PARAM_TOLERANCE
from archlab.lab.spec.budgets import evidence_caveat, evidence_note
from archlab.lab.spec.suite import Claim

RULE = (
    "Every arm runs the same seeds; a claim compares the arms seed by seed (paired), on the pair's "
    "own paired differences (arms the suite declares alike may pool their group's residual when "
    "a variance test does not separate them). A measure scored on a fixed item set (continuation "
    "cuts, accuracy windows) is tested with seeds and items both random (REML components, a "
    "negative one truncated at 0), so the verdict generalises to other items; a 'better' claim on "
    "hits also gets an exact item sign-flip test, and the larger p decides. 'Better': a one-sided "
    "test at the Holm-adjusted level (Holm 1979) over the suite's tested claims, confirmed when "
    "significant (and the estimate reaches min_effect), contradicted when the opposite test is "
    "significant. 'Not worse than': non-inferiority at a margin registered before the run (each "
    "page says when its margins were set), confirmed when the one-sided upper bound of the deficit "
    "lies inside it (Schuirmann 1987; Lakens 2017), contradicted when the lower bound lies "
    "beyond it; when the interval also excludes 0 on the worse side the page says 'but worse by "
    "X'. 'As good as within +-m': equivalence, both bounds inside. Otherwise inconclusive, with "
    "the minimum detectable effect at this n and the seeds per arm for 80% power at the stated "
    "smallest effect (a 'not worse than' claim: at a true difference of 0). A grid claim is judged "
    "at each grid's best arm, and is untestable where a grid's best arm is at its edge. Divergence "
    "is a rate (exact paired test), spike counts a count test, losses of arms with diverged runs "
    "a rank test; no events at all is 'untestable by this design'. Speed is timed on fresh models "
    "in interleaved A/B pairs and judged on the log time ratio. Formulas are 'by construction' and "
    "outside the family and the tallies; a calibration suite's claims are tested but never tallied "
    "as the lecture's. The rule: docs/lab-statistics.md."
)
# metrics in nats, whose margins the ladder prices
LOSS_METRICS = ("val_loss", "train_loss", "loss_at_1x")


# ------------------------------------------------------------------------------------------ tables
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


def header_lines(record: Record) -> list[str]:
    """Where the numbers came from, in a few lines a reader can weigh."""
    p = record.provenance
    lines = [
        f"Budget `{record.budget.name}`, seeds 0-{record.table.seeds - 1} for every arm (paired). "
        f"Command: `{p.get('command', 'n/a')}`. Per-run values: `results.csv`"
        + (
            ", per-item outcomes: `items.csv`"
            if any(r.items for a in record.table.runs.values() for r in a)
            else ""
        )
        + "; configs: `configs.yaml`; provenance: `provenance.json`; recompute every verdict: "
        "`archlab ablate --verify DIR` on this page's folder."
    ]
    lines += registered.lines(
        record.registration,
        sum(len(runs) for runs in record.table.runs.values()),
        p.get(run_provenance.RUNS),
    )
    lines += run_provenance.lines(p.get(run_provenance.RUNS), run_provenance.reconstructed(p))
    judged = p.get("judged_by", {})
    if judged.get("commit"):
        lines.append(
            "Measured (what the run folders had not cached, at each measure's version) and judged "
            f"at commit {judged['commit'][:12]}"
            + (" (with local changes)" if judged.get("dirty") is True else "")
            + (
                f"; torch {judged['torch']}, numpy {judged.get('numpy')}, "
                f"scipy {judged.get('scipy')}, statsmodels "
                f"{judged.get('statsmodels')}, Python {judged.get('python')}"
                if judged.get("torch")
                else ""
            )
            + "."
        )
    # pages made before the runs recorded theirs: the folders hashed when judged
    data = p.get("data", {})
    if data:
        lines.append(
            "Data: "
            + "; ".join(f"{name} sha256 {h[:16]}" for name, h in data.items())
            + (f" ({p['data_note']})" if p.get("data_note") else "")
            + "."
        )
    if p.get("scale", {}).get("text"):
        lines.append(f"Scale: {p['scale']['text']}.")
    lines.append(cost_line(p))
    if note := evidence_note(record.budget.name, record.table.seeds, record.suite.seeds):
        lines.insert(0, note)
    return lines


def cost_line(p: dict) -> str:
    t = p.get("training", {})
    parts = [f"Machine: {p.get('machine', 'not recorded')}."]
    if t.get("runs"):
        parts.append(
            f"Training: {t['runs']} runs, median {t['median_run_s']:.0f} s per run (process start "
            f"to exit), {t['run_minutes']:.1f} run-minutes in all."
        )
    if t.get("suite_wall_s"):
        parts.append(
            f"Suite wall time: {t['suite_wall_s'] / 60:.1f} min with --jobs {t.get('jobs', 1)}."
        )
    if t.get("note"):
        parts.append(t["note"])
    return " ".join(parts)


def markdown(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(
        lines + ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    )


def _html_table(head: list[str], rows: list[list[str]], cls: str) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def screening_section(record: Record) -> tuple[tuple | None, list[str]] | None:
    """A screening suite's design (generators, defining relation, alias chains) and
    its effects table."""
    from archlab.lab.analysis.screening import fit
    from archlab.lab.spec.suite import screening_design

    s = record.suite
    if not s.screening:
        return None
    d = screening_design(s, len(s.factors))
    factors = list(s.factors)
    lines = d.describe() + [
        "factors (letter: -1 level / +1 level): "
        + "; ".join(
            f"{chr(65 + j)} = {f} ({names[0]} / {names[1]})"
            for j, (f, names) in enumerate(s.factors.items())
        ),
        "alias chains up to two-factor interactions: "
        + "; ".join(
            " = ".join(" x ".join(factors[ord(c) - 97] for c in w) for w in chain)
            for chain in d.chains(2)
            if len(chain) > 1
        )
        + ".",
    ]
    metric = "val_loss" if "val_loss" in s.measures else s.measures[0]
    result = fit(record.table, metric)
    if result is None:
        return None, lines + [f"No least-squares fit of {metric}: a run is missing or diverged."]
    rows = []
    for e in sorted(result.effects, key=lambda e: -abs(e.estimate)):
        t = float(special.stdtrit(e.df, 0.95))
        rows.append(
            [
                e.term,
                e.aliases,
                fmt(e.estimate),
                fmt(e.se),
                f"[{fmt(e.estimate - t * e.se)}, {fmt(e.estimate + t * e.se)}]",
                f"{e.df:.3g}",
                fmt(e.p),
            ]
        )
    lines += row_check_lines(result)
    return (
        [
            "effect",
            "aliases",
            "estimate (+1 minus -1)",
            "SE",
            "90% interval",
            "df",
            "p (two-sided)",
        ],
        rows,
    ), lines


def row_check_lines(result) -> list[str]:  # result: archlab.lab.analysis.screening.Fit
    """What the rows' variance check found (Cochran's C) and how the fit's sigma and SEs
    follow from it."""
    from archlab.lab.analysis.screening import COCHRAN_ALPHA

    n = result.runs * result.seeds
    check = result.rows
    if check is None:
        return [
            f"{result.metric}: a run's residual sd {fmt(result.sigma)} on {result.df:g} df (one "
            "seed: no row's variance can be checked); each effect is the mean at +1 minus "
            f"the mean at -1 over {result.runs} rows x {result.seeds} seeds, SE 2 sigma / "
            f"sqrt(N) = {fmt(2 * result.sigma / math.sqrt(n))}."
        ]
    test = (
        f"Rows' variances before pooling (each row's seeds, the seed block removed, {check.df} "
        f"df): Cochran's C {fmt(check.c)} against {fmt(check.critical)} at {COCHRAN_ALPHA:g} "
        "(C_crit = 1 / (1 + (k - 1) / F(alpha / k; df, (k - 1) df)), Cochran 1941)"
    )
    if not check.unstable:
        return [
            test + ": no row stands out, so one sigma is pooled.",
            f"{result.metric}: a run's residual sd {fmt(result.sigma)} on {result.df:g} df; "
            f"each effect is the mean at +1 minus the mean at -1 over {result.runs} rows x "
            f"{result.seeds} seeds, SE 2 sigma / sqrt(N) = {fmt(2 * result.sigma / math.sqrt(n))}; "
            "the interval is +-t SE at the residual df.",
        ]
    rows = "; ".join(
        f"{name} (sd {fmt(math.sqrt(v))} over its seeds, {v / check.variance:.0f}x "
        "the others' variance)"
        for name, v in check.unstable.items()
    )
    return [
        test
        + f": unstable, {rows}, holding {check.share:.0%} of the rows' residual sum of squares.",
        f"{result.metric}: the stable rows' residual sd {fmt(result.sigma)} on "
        f"{check.pooled_df} df. An unstable row keeps its runs at its own variance: the "
        "effects are weighted least squares (weights 1 / variance), each SE from both "
        "variances, its df Satterthwaite's; the interval is +-t SE at those df. Pooled, "
        f"the residual sd would be {fmt(result.pooled_sigma)} on {result.pooled_df:g} "
        f"df, SE {fmt(2 * result.pooled_sigma / math.sqrt(n))}.",
    ]


def sections(
    record: Record, results: list[ClaimResult]
) -> list[tuple[str, str, tuple | None, list[str]]]:
    """The page's sections as (title, cls, table or None, paragraphs), shared by
    results.md and report.html."""
    s = record.suite
    caveat = evidence_caveat(record.budget.name, record.table.seeds, s.seeds)
    out = [
        ("Claims", "claims", claim_table(results, caveat), [tally(results), margin_text(record)])
    ]
    if (screen := screening_section(record)) is not None:
        out.append(("Screening design and effects", "effects", *screen))
    out.append(("How noisy this suite was", "spread", None, spread_lines(record)))
    if (ladder := ladder_section(record)) is not None:
        out.append(("Compute ladder (the base at multiples of the steps)", "ladder", *ladder))
    if (table := anova_table(record)) is not None:
        out.append(
            ("Factorial analysis (val_loss ~ factors and interactions + seed)", "anova", table, [])
        )
    if (table := timing_table(record)) is not None:
        out.append(
            ("Timings (fresh models, interleaved pairs)", "timings", table, timing_warnings(record))
        )
    out.append(
        (
            "Arms (mean ± standard deviation over seeds)",
            "arms",
            arm_table(record),
            [
                "Parameters (of the models the runs built): an arm more than "
                f"{PARAM_TOLERANCE:.0%} off the base is flagged in the note column.",
                "Measures: " + "; ".join(f"`{m}` = {MEASURES[m].label}" for m in s.measures) + ".",
            ],
        )
    )
    return out


def _overrides(record: Record) -> list[str]:
    arms = record.provenance.get("arms", {})
    return [
        f"- `{a.name}`: "
        + (
            " ".join(
                f"--{k} {v}" for k, v in arms.get(a.name, {}).get("overrides", a.overrides).items()
            )
            or "(the base)"
        )
        for a in record.suite.arms
    ]


def write_markdown(
    record: Record, results: list[ClaimResult], plots: list[str], extra: str = ""
) -> Path:
    """results.md in the record's folder (`markdown_text`)."""
    path = record.folder / "results.md"
    path.write_text(markdown_text(record, results, plots, extra), encoding="utf-8")
    return path


def markdown_text(
    record: Record,
    results: list[ClaimResult],
    plots: list[str],
    extra: str = "",
    header: list[str] | None = None,
) -> str:
    """The record's page in Markdown; `plots`: image paths relative to the page; `extra`: a closing
    section; `header`: lines after the header's budget line (a published page's record hash)."""
    s = record.suite
    head = header_lines(record)
    at = next((i + 1 for i, line in enumerate(head) if line.startswith("Budget `")), len(head))
    head[at:at] = header or []
    parts = [
        f"# {s.name}: {s.title}",
        "",
        f"Source: {s.source}",
        "",
        f"Design: {s.design}",
        "",
        *[line for text in head for line in (text, "")],
    ]
    for title, _, table, paragraphs in sections(record, results):
        parts += (
            [f"## {title}", ""]
            + ([markdown(*table), ""] if table else [])
            + [line for p in paragraphs if p for line in (p, "")]
        )
    parts += [
        f"Narang et al. 2021 (arXiv 2102.11972): {s.narang or 'did not measure this switch.'}",
        "",
        "## Arms' overrides",
        "",
        *_overrides(record),
        "",
        "## The verdict rule",
        "",
        RULE,
        "",
    ]
    if plots:
        parts += ["Plots: " + ", ".join(f"![{Path(p).stem}]({p})" for p in plots), ""]
    return "\n".join(parts) + extra


_CLASSES = {
    stats.CONFIRMED: "confirmed",
    stats.CONTRADICTED: "contradicted",
    stats.INCONCLUSIVE: "inconclusive",
    stats.UNTESTABLE: "untestable",
    stats.BY_CONSTRUCTION: "construction",
}
_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;
margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;font-size:14px}th{background:#f3f3f3}
.confirmed{background:#d9f2d9}.contradicted{background:#f6d5d5}.inconclusive{background:#f2f2f2}
.untestable{background:#fff3cd}.construction{background:#e3ecf7}
img{max-width:100%;margin:0.5em 0}pre{background:#f7f7f7;padding:0.8em;overflow:auto;font-size:12px}"""  # noqa: E501


def verdict_caveat(record: Record, result: ClaimResult) -> str:
    """The caveat a verdict carries on its line (`budgets.evidence_caveat`): none for a formula,
    which holds at any budget."""
    if result.outcome == stats.BY_CONSTRUCTION:
        return ""
    return evidence_caveat(record.budget.name, record.table.seeds, record.suite.seeds)


def write_html(record: Record, results: list[ClaimResult], images: list[Path]) -> Path:
    """report.html in the record's folder (`html_text`)."""
    path = record.folder / "report.html"
    path.write_text(html_text(record, results, images), encoding="utf-8")
    return path


def config_of(config: dict) -> dict:
    """An arm's resolved config as the page shows it: without the hash configs.yaml keeps beside it,
    so a page from a plan and one from its files read alike."""
    return {k: v for k, v in config.items() if k != "config"}


def html_text(record: Record, results: list[ClaimResult], images: list[Path]) -> str:
    """The record's page as one self-contained HTML file, `images` embedded."""
    s = record.suite
    verdicts = "".join(
        f'<li class="{_CLASSES.get(r.outcome, "inconclusive")}"><b '
        f'class="verdict">{html.escape(r.outcome)}</b>: '
        f"{html.escape(r.claim.text)}: {html.escape(r.statement)} ({html.escape(r.narang)})"
        + (f" {html.escape(c)}" if (c := verdict_caveat(record, r)) else "")
        + "</li>"
        for r in results
    )
    body = "".join(
        f"<h2>{html.escape(title)}</h2>"
        + (_html_table(*table, cls) if table else "")
        + "".join(f"<p>{html.escape(p.removeprefix('- '))}</p>" for p in paragraphs if p)
        for title, cls, table, paragraphs in sections(record, results)
    )
    imgs = "".join(
        f'<figure><img alt="{p.stem}" src="data:image/png;base64,'
        f'{base64.b64encode(p.read_bytes()).decode()}"><figcaption>{p.stem}</figcaption></figure>'
        for p in images
    )
    configs = "".join(
        f"<h3>{html.escape(arm)}</h3><pre>{html.escape(json.dumps(config_of(c), indent=1))}</pre>"
        for arm, c in record.configs.items()
    )
    header = "".join(f"<p>{html.escape(line)}</p>" for line in header_lines(record))
    page = f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>archlab ablate {html.escape(s.name)}</title>
<style>{_STYLE}</style></head><body>
<h1>{html.escape(s.name)}: {html.escape(s.title)}</h1><p>Source: {html.escape(s.source)}</p>
<p id="design">Design: {html.escape(s.design)}</p><div id="compute">{header}</div>
<h2>Verdicts</h2><ul id="verdicts">{verdicts}</ul>{body}
<p>Narang et al. 2021 (arXiv 2102.11972): {html.escape(s.narang or "did not measure this switch.")}</p>
<h2>The verdict rule</h2><p>{html.escape(RULE)}</p><h2>Plots</h2>{imgs}
<h2>Exact configs (seed 0 of each arm)</h2>{configs}</body></html>"""  # noqa: E501
    return page
