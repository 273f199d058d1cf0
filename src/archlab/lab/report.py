"""A suite's pages: the claims' outcomes (computed by `archlab.lab.verdicts`), the suite's noise, the tables, files.

Writes into the suite's folder: results.csv (one row per run: arm, seed, run folder, every measure) and
timings.csv (one row per timed pair), results.md (design, claims with estimate, confidence interval, one-sided
and Holm-adjusted p, outcome and seeds needed; the pooled residual and between-arm seed correlation; the
factorial analysis; tables; the rule), one PNG per curve (validation loss, gradient norm, and the largest
embedding row norm where measured) and report.html, one self-contained page with the plots embedded as base64
PNG and every arm's exact config.
"""

from __future__ import annotations

import base64
import csv
import html
import json
import math
import statistics
from pathlib import Path

from archlab.costs import parameter_counts
from archlab.lab import stats
from archlab.lab.ladder import LADDER_SUITE, describe, fit_ladder, ladder_values, stored_ladder
from archlab.lab.measure import MEASURES, max_embed_row_norm_series
from archlab.lab.runner import Plan, RunSpec, measure_timings, run_config, run_wall_s
from archlab.lab.suite import PARAM_TOLERANCE, Claim, param_note
from archlab.lab.verdicts import ClaimResult, factorial_anova, judge, per_seed, suite_spreads
from archlab.nn.config import ModelConfig
from archlab.plots import plot_arms
from archlab.train.hardware import describe_machine
from archlab.train.metrics import read_metrics

RULE = ("Every arm runs the same seeds; a claim compares the arms seed by seed (paired). A loss claim is tested "
        "with the pooled residual of the suite's arm + seed analysis (its regime's arms), or the pair's own paired "
        "differences where the arms' spreads differ by more than 3x. 'Better' claims: one-sided test at the "
        "Holm-adjusted level (Holm 1979) over the suite's empirical claims, confirmed when significant and the "
        "estimate reaches the claim's min_effect, contradicted when the opposite one-sided test is significant. "
        "'As good as' claims: non-inferiority at the stated margin, confirmed when the one-sided upper confidence "
        "bound of (arm - versus), in the claim's bad direction, lies inside the margin (Schuirmann 1987; Lakens "
        "2017), contradicted when the lower bound lies beyond it. Otherwise inconclusive, with the seeds per arm "
        "that would give 80% power. Divergence is a rate (exact paired test), spike counts a count test, losses "
        "of arms with diverged runs a rank test; no events at all is 'untestable by this design'. Speed is timed "
        "on fresh models in interleaved A/B pairs and judged on the log time ratio. Formulas are 'by "
        "construction' and outside the family and the tallies. The rule: docs/lab-statistics.md.")


LOSS_METRICS = ("val_loss", "train_loss", "loss_at_1x")  # metrics in nats, whose margins the ladder prices
SUITE_TIME = "lab-time.json"  # in the suite's folder: training wall time over all sessions, jobs, the machine


def record_suite_time(plan: Plan, wall_s: float, jobs: int) -> float:
    """Add one session's training wall time to the suite's record; returns the total over all sessions."""
    path = plan.out / SUITE_TIME
    old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    record = {"train_wall_s": round(old.get("train_wall_s", 0.0) + wall_s, 1), "jobs": jobs,
              "machine": describe_machine()}
    path.write_text(json.dumps(record, indent=1), encoding="utf-8")
    return record["train_wall_s"]


def compute_summary(plan: Plan) -> str:
    """Where and how long the suite trained: the machine, each run's wall time and the suite's (when recorded)."""
    path = plan.out / SUITE_TIME
    record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    walls = sorted(w for r in plan.runs if (w := run_wall_s(r.run_dir)) > 0)
    parts = [f"Machine: {record.get('machine') or describe_machine()}."]
    if walls:
        parts.append(f"Training: {len(walls)} runs, median {walls[len(walls) // 2]:.0f} s per run "
                     f"(process start to exit), {sum(walls) / 60:.1f} run-minutes in all.")
    if record.get("train_wall_s"):
        parts.append(f"Suite wall time: {record['train_wall_s'] / 60:.1f} min with --jobs {record['jobs']}.")
    return " ".join(parts)


# ------------------------------------------------------------------------------------------ tables
def _fmt(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    return f"{x:.4g}" if abs(x) < 1e5 else f"{x:,.0f}"


def _cell(xs: list[float]) -> str:
    finite = [x for x in xs if not math.isnan(x)]
    if not finite:
        return "n/a"
    std = statistics.stdev(finite) if len(finite) > 1 else 0.0
    return f"{_fmt(statistics.fmean(finite))} ± {_fmt(std)}"


def trained_params(run: RunSpec) -> int:
    """Parameters of the model a run built (a BPE tokenizer may have fewer ids than asked for)."""
    return parameter_counts(ModelConfig.from_dict(run_config(run)["model"]))["total"]


def arm_table(plan: Plan, measured: dict[RunSpec, dict]) -> tuple[list[str], list[list[str]]]:
    """Per arm: seeds, parameters, each measure's mean ± sd over seeds, divergences (a rate), the size note."""
    head = ["arm", "seeds", "parameters", *plan.suite.measures, "diverged", "note"]
    params = {a.name: trained_params(plan.runs_of(a.name)[0]) for a in plan.suite.arms}
    base = params[plan.suite.base_arm.name]
    rows = []
    for a in plan.suite.arms:
        runs = plan.runs_of(a.name)
        diverged = sum(measured[r].get("diverged", 0.0) == 1.0 for r in runs)
        rows.append([a.name, str(len(runs)), f"{params[a.name]:,}",
                     *(_cell(per_seed(plan, measured, a.name, m)) for m in plan.suite.measures),
                     f"{diverged}/{len(runs)}", param_note(plan.suite, a, params[a.name], base)])
    return head, rows


def _metrics(claim: Claim) -> str:
    versus = f" vs {claim.versus_metric}" if claim.versus_metric else ""
    factor = f" [{claim.factor}" + "".join(f", {k}={v}" for k, v in (claim.within or {}).items()) + "]" \
        if claim.factor else ""
    return f"{claim.metric}{versus} ({claim.better} is better){factor}"


def _bound(r: ClaimResult) -> str:
    low, high = r.ci
    return "n/a" if math.isnan(low) else f"[{_fmt(low)}, {_fmt(high)}]"


def needed(result: ClaimResult) -> str:
    """What an inconclusive claim would need: seeds per arm, or timed pairs for a timing claim."""
    if not result.seeds_needed:
        short = result.test is not None and result.test.short_of_min_effect and result.outcome == stats.INCONCLUSIVE
        return "none: the estimate is short of the min effect" if short else "-"
    return f"{result.seeds_needed} {'pairs' if 'interleaved pairs' in result.note else 'seeds per arm'}"


def claim_table(results: list[ClaimResult]) -> tuple[list[str], list[list[str]]]:
    head = ["claim", "metric", "arm vs", "n", "estimate (arm - vs)", "90% CI", "margin / min effect", "test",
            "p (one-sided)", "p (Holm)", "outcome", "needs", "Narang"]
    rows = []
    for r in results:
        c = r.claim
        size = f"margin {_fmt(c.margin)}" if c.expect == "same" and c.margin else (
            f"min {_fmt(c.min_effect)}" if c.min_effect else "-")
        test = r.note if r.test is None else f"{r.test.test}; {r.note}"
        rows.append([c.text, _metrics(c), f"{c.arm} vs {c.versus}", str(len(r.a)), _fmt(r.estimate), _bound(r), size,
                     test, _fmt(r.p), _fmt(r.p_adjusted), r.outcome,
                     needed(r), r.narang])
    return head, rows


def tally(results: list[ClaimResult]) -> str:
    """The outcome counts of the family, and the claims outside it, in one line."""
    family = [r.outcome for r in results if r.in_family]
    outside = [r.outcome for r in results if not r.in_family]
    counts = ", ".join(f"{family.count(o)} {o}" for o in dict.fromkeys(family)) or "none"
    extra = ", ".join(f"{outside.count(o)} {o}" for o in dict.fromkeys(outside))
    return f"{len(family)} tested claims: {counts}." + (f" Outside the family (not tallied): {extra}." if extra else "")


def spread_lines(plan: Plan, measured: dict[RunSpec, dict]) -> list[str]:
    metric = "val_loss" if "val_loss" in plan.suite.measures else plan.suite.measures[0]
    lines = []
    for s in suite_spreads(plan, measured, metric):
        lines.append(f"- {metric}, {s.regime} ({len(s.arms)} arms x {plan.seeds} seeds): a run's spread "
                     f"sigma_run {_fmt(s.sigma_run)}, pooled residual sigma_eps {_fmt(s.sigma_eps)} ({s.df} df), "
                     f"between-arm seed correlation rho {_fmt(s.rho)}"
                     + ("; arms' spreads differ > 3x: claims use their own paired differences" if s.heteroscedastic
                        else ""))
    return lines or [f"- {metric}: too few finished arms to pool"]


def anova_table(plan: Plan, measured: dict[RunSpec, dict]) -> tuple[list[str], list[list[str]]] | None:
    rows = factorial_anova(plan, measured, "val_loss") if "val_loss" in plan.suite.measures else []
    if not rows:
        return None
    return ["term", "df", "F", "p"], [[t, f"{df:g}", _fmt(f), _fmt(pv)] for t, df, f, pv in rows]


def timing_table(plan: Plan, timings: dict[str, dict]) -> tuple[list[str], list[list[str]]] | None:
    if not plan.suite.timings:
        return None
    rows = []
    for t in plan.suite.timings:
        record = timings.get(t.metric)
        if record is None:
            rows.append([t.metric, t.kind, " vs ".join(t.arms), "0", "n/a", "n/a", "n/a"])
            continue
        ratios = sorted(a / b for a, b in zip(record["a"], record["b"]))
        rows.append([t.metric, t.kind, " vs ".join(t.arms), str(len(ratios)),
                     f"{1e3 * statistics.median(record['a']):.4g} / {1e3 * statistics.median(record['b']):.4g}",
                     _fmt(statistics.median(ratios)), json.dumps(t.options) if t.options else "-"])
    return ["timing", "kind", "arms (a vs b)", "pairs", "median ms (a / b)", "median ratio a/b", "options"], rows


def _markdown(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows])


def _html_table(head: list[str], rows: list[list[str]], cls: str) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


# ------------------------------------------------------------------------------------------ plots
def _curve(run: RunSpec, kind: str, key: str) -> tuple[list[int], list[float]]:
    rows = read_metrics(run.run_dir, kind)
    return [int(r["step"]) for r in rows], [float(r[key]) for r in rows]


def plot_suite(plan: Plan) -> list[Path]:
    """Validation loss and gradient norm over steps for every arm (and the embedding row norm if measured)."""
    arms = [a.name for a in plan.suite.arms]
    figures = [
        ({a: [_curve(r, "eval", "loss") for r in plan.runs_of(a)] for a in arms},
         "validation loss", "nats/token", "val_loss.png", False),
        ({a: [_curve(r, "train", "grad_norm") for r in plan.runs_of(a)] for a in arms},
         "gradient norm (before clipping)", "L2 norm", "grad_norm.png", True),
    ]
    if "max_embed_row_norm" in plan.suite.measures:
        series = {a: [tuple(map(list, zip(*max_embed_row_norm_series(r.run_dir)))) for r in plan.runs_of(a)]
                  for a in arms}
        figures.append((series, "largest embedding row norm", "L2 norm", "embed_row_norm.png", False))
    return [plot_arms(curves, f"{plan.suite.name}: {title}", ylabel, plan.out / name, log_y)
            for curves, title, ylabel, name, log_y in figures]


# ------------------------------------------------------------------------------------------ files
def write_csv(plan: Plan, measured: dict[RunSpec, dict], timings: dict[str, dict]) -> Path:
    """results.csv: one row per run (arm, seed, its folder, parameters, factor levels, every measure), and
    timings.csv: one row per timed pair, so anyone can redo the analysis."""
    path = plan.out / "results.csv"
    params = {a.name: trained_params(plan.runs_of(a.name)[0]) for a in plan.suite.arms}
    factors = list(plan.suite.factors)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["arm", "seed", "run", "parameters", *factors, *plan.suite.measures])
        for run in sorted(plan.runs, key=lambda r: ([a.name for a in plan.suite.arms].index(r.arm), r.seed)):
            levels = plan.suite.arm(run.arm).levels
            writer.writerow([run.arm, run.seed, run.run_dir.name, params[run.arm], *(levels[f] for f in factors),
                             *(measured[run][m] for m in plan.suite.measures)])
    if timings:
        with (plan.out / "timings.csv").open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["timing", "pair", "arm_a", "arm_b", "seconds_a", "seconds_b"])
            for metric, record in timings.items():
                for i, (a, b) in enumerate(zip(record["a"], record["b"])):
                    writer.writerow([metric, i, *record["arms"], a, b])
    return path


def _arm_overrides(plan: Plan) -> list[str]:
    return [f"- `{a.name}`: " + (" ".join(f"--{k} {v}" for k, v in a.overrides.items()) or "(the base)")
            for a in plan.suite.arms]


def _margins(plan: Plan) -> str:
    used = {(c.metric, c.margin) for c in plan.suite.claims if c.expect == "same" and c.margin}
    if not used:
        return ""
    parts = [f"{m} {margin:g}" + (" nats" if m in LOSS_METRICS else "") for m, margin in sorted(used)]
    text = "Equivalence margins: " + ", ".join(parts) + "."
    if any(m in LOSS_METRICS and margin == plan.budget.margin for m, margin in used):
        text += f" Budget {plan.budget.name}'s loss margin, {plan.budget.margin:g} nats: {plan.budget.margin_source}."
    loss_margins = sorted(margin for m, margin in used if m in LOSS_METRICS)
    if not loss_margins:
        return text
    fit = stored_ladder(plan.store, plan.budget)
    if fit is None:
        return (text + f" What a loss margin is worth in compute is measured by the compute ladder, not yet run "
                f"in this store: `archlab ablate {LADDER_SUITE} --budget {plan.budget.name} --store {plan.store}`.")
    return text + " " + describe(fit, loss_margins[0])


def ladder_section(plan: Plan, measured: dict[RunSpec, dict]) -> tuple[tuple, list[str]] | None:
    """A compute ladder's rungs (the base at multiples of the steps): a table and the fit, or None."""
    values = ladder_values(plan, measured)
    fit = fit_ladder(values) if len(values) >= 2 and set(values) != {1.0} else None
    if fit is None:
        return None
    steps = {a.steps_scale: plan.runs_of(a.name)[0].steps for a in plan.suite.arms if a.steps_scale in values}
    base = statistics.fmean(values[1.0][:fit.seeds]) if 1.0 in values else math.nan
    rows = [[f"{x:g}x", str(steps[x]), _fmt(m), _fmt(m - base) if x != 1.0 else "0"]
            for x, m in zip(fit.scales, fit.means)]
    budget = plan.budget
    lines = [describe(fit, budget.margin),
             f"The gain of the 1.25x rung is what a \"worth less than 25% more base compute\" margin is at this "
             f"budget. Budget {budget.name}'s default loss margin is {budget.margin:g} nats ({budget.margin_source})."]
    return (["rung", "steps", "val_loss (mean over seeds)", "vs 1x"], rows), lines


def _sections(plan: Plan, measured: dict[RunSpec, dict], results: list[ClaimResult],
              timings: dict[str, dict]) -> list[tuple[str, str, tuple | None, list[str]]]:
    """The page's sections as (title, cls, table or None, paragraphs), shared by results.md and report.html."""
    s = plan.suite
    out = [("Claims", "claims", claim_table(results), [tally(results), _margins(plan)]),
           ("How noisy this suite was", "spread", None, spread_lines(plan, measured))]
    if (ladder := ladder_section(plan, measured)) is not None:
        out.append(("Compute ladder (the base at multiples of the steps)", "ladder", *ladder))
    if (table := anova_table(plan, measured)) is not None:
        out.append(("Factorial analysis (val_loss ~ factors and interactions + seed)", "anova", table, []))
    if (table := timing_table(plan, timings)) is not None:
        out.append(("Timings (fresh models, interleaved pairs)", "timings", table, []))
    out.append(("Arms (mean ± standard deviation over seeds)", "arms", arm_table(plan, measured),
                [f"Parameters (of the models the runs built): an arm more than {PARAM_TOLERANCE:.0%} off the base is "
                 "flagged in the note column.",
                 "Measures: " + "; ".join(f"`{m}` = {MEASURES[m].label}" for m in s.measures) + "."]))
    return out


def write_markdown(plan: Plan, measured: dict[RunSpec, dict], results: list[ClaimResult], command: str,
                   timings: dict[str, dict] | None = None) -> Path:
    s = plan.suite
    parts = [f"# {s.name}: {s.title}", "", f"Source: {s.source}", "", f"Design: {s.design}", "",
             f"Budget `{plan.budget.name}`, seeds 0-{plan.seeds - 1} for every arm (paired). Command: `{command}`. "
             "Per-run values: `results.csv`.", "", compute_summary(plan), ""]
    for title, _, table, paragraphs in _sections(plan, measured, results, timings or {}):
        parts += [f"## {title}", ""] + ([_markdown(*table), ""] if table else []) + [
            line for p in paragraphs if p for line in (p, "")]
    parts += [f"Narang et al. 2021 (arXiv 2102.11972): {s.narang or 'did not measure this switch.'}", "",
              "## Arms' overrides", "", *_arm_overrides(plan), "", "## The verdict rule", "", RULE, "",
              "Plots: " + ", ".join(f"![{p.stem}]({p.name})" for p in sorted(plan.out.glob("*.png"))), ""]
    path = plan.out / "results.md"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


_CLASSES = {stats.CONFIRMED: "confirmed", stats.CONTRADICTED: "contradicted", stats.INCONCLUSIVE: "inconclusive",
            stats.UNTESTABLE: "untestable", stats.BY_CONSTRUCTION: "construction"}
_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;
margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;font-size:14px}th{background:#f3f3f3}
.confirmed{background:#d9f2d9}.contradicted{background:#f6d5d5}.inconclusive{background:#f2f2f2}
.untestable{background:#fff3cd}.construction{background:#e3ecf7}
img{max-width:100%;margin:0.5em 0}pre{background:#f7f7f7;padding:0.8em;overflow:auto;font-size:12px}"""


def write_html(plan: Plan, measured: dict[RunSpec, dict], results: list[ClaimResult], command: str,
               images: list[Path], timings: dict[str, dict] | None = None) -> Path:
    s = plan.suite
    verdicts = "".join(
        f'<li class="{_CLASSES.get(r.outcome, "inconclusive")}"><b class="verdict">{html.escape(r.outcome)}</b>: '
        f"{html.escape(r.claim.text)} ({html.escape(r.narang)})</li>" for r in results)
    sections = "".join(
        f"<h2>{html.escape(title)}</h2>" + (_html_table(*table, cls) if table else "")
        + "".join(f"<p>{html.escape(p.removeprefix('- '))}</p>" for p in paragraphs if p)
        for title, cls, table, paragraphs in _sections(plan, measured, results, timings or {}))
    imgs = "".join(f'<figure><img alt="{p.stem}" src="data:image/png;base64,'
                   f'{base64.b64encode(p.read_bytes()).decode()}"><figcaption>{p.stem}</figcaption></figure>'
                   for p in images)
    configs = "".join(f"<h3>{html.escape(a.name)}</h3><pre>{html.escape(json.dumps(run_config(runs[0]), indent=1))}"
                      "</pre>" for a in s.arms if (runs := plan.runs_of(a.name)))
    page = f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>archlab ablate {html.escape(s.name)}</title>
<style>{_STYLE}</style></head><body>
<h1>{html.escape(s.name)}: {html.escape(s.title)}</h1><p>Source: {html.escape(s.source)}</p>
<p id="design">Design: {html.escape(s.design)}</p>
<p>Command: <code>{html.escape(command)}</code> (budget {plan.budget.name}, seeds 0-{plan.seeds - 1} for every arm)</p>
<p id="compute">{html.escape(compute_summary(plan))}</p>
<h2>Verdicts</h2><ul id="verdicts">{verdicts}</ul>{sections}
<p>Narang et al. 2021 (arXiv 2102.11972): {html.escape(s.narang or 'did not measure this switch.')}</p>
<h2>The verdict rule</h2><p>{html.escape(RULE)}</p><h2>Plots</h2>{imgs}
<h2>Exact configs (seed 0 of each arm)</h2>{configs}</body></html>"""
    path = plan.out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def write_report(plan: Plan, measured: dict[RunSpec, dict], command: str, timings: dict[str, dict] | None = None,
                 results: list[ClaimResult] | None = None) -> list[ClaimResult]:
    """results.csv (+ timings.csv), results.md, the PNG plots and report.html in the suite's folder; returns the
    claims' results (judged here unless given: --sequential judges its looks itself). `timings` defaults to the
    suite's timings, measured now where not yet kept."""
    timings = measure_timings(plan) if timings is None else timings
    results = judge(plan, measured, timings) if results is None else results
    images = plot_suite(plan)
    write_csv(plan, measured, timings)
    write_markdown(plan, measured, results, command, timings)
    write_html(plan, measured, results, command, images, timings)
    return results
