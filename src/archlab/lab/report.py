"""A suite's results: per-arm tables (mean and spread over seeds), the claims' computed verdicts, the files.

Writes into the suite's folder: results.csv (one row per run), results.md (claims, verdicts, tables, the
rule), one PNG per curve (validation loss, gradient norm, and the largest embedding row norm where measured)
and report.html, one self-contained page with the plots embedded as base64 PNG and every arm's exact config.
"""

from __future__ import annotations

import base64
import csv
import html
import json
import math
from dataclasses import dataclass
from pathlib import Path

from archlab.costs import parameter_counts
from archlab.lab import stats
from archlab.lab.measure import MEASURES, max_embed_row_norm_series
from archlab.lab.runner import Plan, RunSpec, run_config, run_wall_s
from archlab.lab.suite import PARAM_TOLERANCE, Claim, param_note
from archlab.nn.config import ModelConfig
from archlab.plots import plot_arms
from archlab.train.hardware import describe_machine
from archlab.train.metrics import read_metrics

RULE = ("Welch's t-test on the seeds both arms ran (two-sided; the base arm's extra seeds serve the noise floor "
        "only, so a claim never compares means over different seeds), p-values adjusted over all claims of the suite "
        f"with Holm's method; a claim is confirmed when the adjusted p < {stats.ALPHA} and the mean moves the "
        "claimed way by more than the noise floor (the standard deviation of the base arm over its seeds), "
        "contradicted when the same holds the other way, otherwise not visible at this scale. An 'as good as' "
        "claim is contradicted when the arm is significantly worse by more than the noise floor, and confirmed "
        "when it is worse by no more than the noise floor.")


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


@dataclass
class ClaimResult:
    claim: Claim
    diff: float  # mean(arm) - mean(versus), both over the seeds the two arms share
    p: float  # Welch, two-sided
    p_holm: float
    noise_floor: float
    verdict: str
    narang: str  # whether we agree with Narang et al. 2021 on this comparison


def values(plan: Plan, measured: dict[RunSpec, dict], arm: str, metric: str,
           seeds: set[int] | None = None) -> list[float]:
    """An arm's results on `metric`, one per seed (only `seeds`, when given), in seed order."""
    return [float(measured[r][metric]) for r in plan.runs_of(arm) if seeds is None or r.seed in seeds]


def shared_seeds(plan: Plan, arm: str, versus: str) -> set[int]:
    """The seeds both arms ran. A seed fixes the data order (and the init where shapes agree), and the base arm
    has extra seeds: comparing its mean over seeds 0-3 with an arm's over seeds 0-1 would put the difference
    between seeds into the difference between arms."""
    return {r.seed for r in plan.runs_of(arm)} & {r.seed for r in plan.runs_of(versus)}


def narang_agreement(claim: Claim, verdict: str) -> str:
    """Our verdict against Narang et al.'s finding for the claimed arm (better / same / worse than the other)."""
    if claim.narang is None:
        return "not measured by Narang et al."
    theirs = f"Narang et al.: {claim.narang}"
    if verdict == stats.NOT_VISIBLE:
        return f"{theirs}; no visible difference here" + (" (consistent)" if claim.narang == "same" else "")
    if verdict == stats.CONTRADICTED:
        return f"{theirs}; we {'agree' if claim.narang == 'worse' else 'disagree'}"
    ours = {"better"} if claim.expect == "better" else {"better", "same"}  # "as good as" covers better too
    return f"{theirs}; we {'agree' if claim.narang in ours else 'disagree'}"


def judge(plan: Plan, measured: dict[RunSpec, dict]) -> list[ClaimResult]:
    """Every claim's test, Holm-adjusted over the suite, and its verdict (the rule in archlab.lab.stats)."""
    base = plan.suite.base_arm.name
    tests = []
    for c in plan.suite.claims:
        seeds = shared_seeds(plan, c.arm, c.versus)
        tests.append(stats.welch_test(values(plan, measured, c.arm, c.metric, seeds),
                                      values(plan, measured, c.versus, c.versus_metric or c.metric, seeds)))
    adjusted = stats.holm([t.p for t in tests])
    out = []
    for claim, test, p_holm in zip(plan.suite.claims, tests, adjusted):
        floor = stats.mean_std(values(plan, measured, base, claim.metric))[1]
        floor = 0.0 if math.isnan(floor) else floor
        direction = claim.direction or MEASURES[claim.metric].better
        verdict = stats.verdict(test.diff, p_holm, floor, direction, claim.expect)
        out.append(ClaimResult(claim, test.diff, test.p, p_holm, floor, verdict, narang_agreement(claim, verdict)))
    return out


# ------------------------------------------------------------------------------------------ tables
def _fmt(x: float) -> str:
    if math.isnan(x):
        return "n/a"
    return f"{x:.4g}" if abs(x) < 1e5 else f"{x:,.0f}"


def _cell(xs: list[float]) -> str:
    finite = [x for x in xs if not math.isnan(x)]
    if not finite:
        return "n/a"
    mean, std = stats.mean_std(finite)
    return f"{_fmt(mean)} ± {_fmt(std)}"


def trained_params(run: RunSpec) -> int:
    """Parameters of the model a run built (a BPE tokenizer may have fewer ids than asked for)."""
    return parameter_counts(ModelConfig.from_dict(run_config(run)["model"]))["total"]


def arm_table(plan: Plan, measured: dict[RunSpec, dict]) -> tuple[list[str], list[list[str]]]:
    head = ["arm", "seeds", "parameters", *plan.suite.measures, "note"]
    params = {a.name: trained_params(plan.runs_of(a.name)[0]) for a in plan.suite.arms}
    base = params[plan.suite.base_arm.name]
    rows = [[a.name, str(len(plan.runs_of(a.name))), f"{params[a.name]:,}",
             *(_cell(values(plan, measured, a.name, m)) for m in plan.suite.measures),
             param_note(plan.suite, a, params[a.name], base)] for a in plan.suite.arms]
    b = plan.suite.base_arm.name
    common = {r.seed for r in plan.runs if r.arm != b}
    if common and common < {r.seed for r in plan.runs_of(b)}:  # the base's extra seeds: what claims compare with
        rows.insert(1, [f"{b}, seeds {', '.join(map(str, sorted(common)))}", str(len(common)), f"{base:,}",
                        *(_cell(values(plan, measured, b, m, common)) for m in plan.suite.measures),
                        "the base on the other arms' seeds: what the claims compare with"])
    return head, rows


def _metrics(claim: Claim) -> str:
    direction = claim.direction or MEASURES[claim.metric].better
    versus = f" vs {claim.versus_metric}" if claim.versus_metric else ""
    return f"{claim.metric}{versus} ({direction} claimed)" if claim.direction else f"{claim.metric}{versus}"


def claim_table(results: list[ClaimResult]) -> tuple[list[str], list[list[str]]]:
    head = ["claim", "metric", "arm vs", "difference", "p (Welch)", "p (Holm)", "noise floor", "verdict", "Narang"]
    rows = [[r.claim.text, _metrics(r.claim), f"{r.claim.arm} vs {r.claim.versus}", _fmt(r.diff), _fmt(r.p),
             _fmt(r.p_holm), _fmt(r.noise_floor), r.verdict, r.narang] for r in results]
    return head, rows


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
def write_csv(plan: Plan, measured: dict[RunSpec, dict]) -> Path:
    path = plan.out / "results.csv"
    params = {a.name: trained_params(plan.runs_of(a.name)[0]) for a in plan.suite.arms}
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["arm", "seed", "parameters", *plan.suite.measures])
        for run in plan.runs:
            writer.writerow([run.arm, run.seed, params[run.arm], *(measured[run][m] for m in plan.suite.measures)])
    return path


def _arm_overrides(plan: Plan) -> list[str]:
    return [f"- `{a.name}`: " + (" ".join(f"--{k} {v}" for k, v in a.overrides.items()) or "(the base)")
            for a in plan.suite.arms]


def write_markdown(plan: Plan, measured: dict[RunSpec, dict], results: list[ClaimResult], command: str) -> Path:
    s = plan.suite
    parts = [f"# {s.name}: {s.title}", "", f"Source: {s.source}", "",
             f"Budget `{plan.budget.name}`, {plan.seeds} seeds per arm ({len(plan.runs_of(s.base_arm.name))} for "
             f"the base arm `{s.base_arm.name}`, whose spread is the noise floor). Command: `{command}`", "",
             compute_summary(plan), "",
             "## Claims", "", _markdown(*claim_table(results)), "",
             f"Narang et al. 2021 (arXiv 2102.11972): {s.narang or 'did not measure this switch.'}", "",
             "## Arms (mean ± standard deviation over seeds)", "", _markdown(*arm_table(plan, measured)), "",
             f"Parameters (of the models the runs built): an arm more than {PARAM_TOLERANCE:.0%} off the base is "
             "flagged in the note column.", "",
             "Measures: " + "; ".join(f"`{m}` = {MEASURES[m].label}" for m in s.measures) + ".", "",
             "## Arms' overrides", "", *_arm_overrides(plan), "",
             "## The verdict rule", "", RULE, "",
             "Plots: " + ", ".join(f"![{p.stem}]({p.name})" for p in sorted(plan.out.glob("*.png"))), ""]
    path = plan.out / "results.md"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


_CLASSES = {stats.CONFIRMED: "confirmed", stats.CONTRADICTED: "contradicted", stats.NOT_VISIBLE: "notvisible"}
_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;
margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;font-size:14px}th{background:#f3f3f3}
.confirmed{background:#d9f2d9}.contradicted{background:#f6d5d5}.notvisible{background:#f2f2f2}
img{max-width:100%;margin:0.5em 0}pre{background:#f7f7f7;padding:0.8em;overflow:auto;font-size:12px}"""


def write_html(plan: Plan, measured: dict[RunSpec, dict], results: list[ClaimResult], command: str,
               images: list[Path]) -> Path:
    s = plan.suite
    verdicts = "".join(
        f'<li class="{_CLASSES[r.verdict]}"><b class="verdict">'
        f"{html.escape(r.verdict)}</b>: {html.escape(r.claim.text)} ({html.escape(r.narang)})</li>" for r in results)
    imgs = "".join(f'<figure><img alt="{p.stem}" src="data:image/png;base64,'
                   f'{base64.b64encode(p.read_bytes()).decode()}"><figcaption>{p.stem}</figcaption></figure>'
                   for p in images)
    configs = "".join(f"<h3>{html.escape(a.name)}</h3><pre>{html.escape(json.dumps(run_config(runs[0]), indent=1))}"
                      "</pre>" for a in s.arms if (runs := plan.runs_of(a.name)))
    page = f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>archlab ablate {html.escape(s.name)}</title>
<style>{_STYLE}</style></head><body>
<h1>{html.escape(s.name)}: {html.escape(s.title)}</h1><p>Source: {html.escape(s.source)}</p>
<p>Command: <code>{html.escape(command)}</code> (budget {plan.budget.name}, {plan.seeds} seeds per arm)</p>
<p id="compute">{html.escape(compute_summary(plan))}</p>
<h2>Verdicts</h2><ul id="verdicts">{verdicts}</ul>
{_html_table(*claim_table(results), "claims")}
<p>Narang et al. 2021 (arXiv 2102.11972): {html.escape(s.narang or 'did not measure this switch.')}</p>
<h2>Arms (mean ± standard deviation over seeds)</h2>{_html_table(*arm_table(plan, measured), "arms")}
<p>{html.escape("; ".join(f"{m} = {MEASURES[m].label}" for m in s.measures))}</p>
<h2>The verdict rule</h2><p>{html.escape(RULE)}</p><h2>Plots</h2>{imgs}
<h2>Exact configs (seed 0 of each arm)</h2>{configs}</body></html>"""
    path = plan.out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def write_report(plan: Plan, measured: dict[RunSpec, dict], command: str) -> list[ClaimResult]:
    """results.csv, results.md, the PNG plots and report.html in the suite's folder; returns the verdicts."""
    results = judge(plan, measured)
    images = plot_suite(plan)
    write_csv(plan, measured)
    write_markdown(plan, measured, results, command)
    write_html(plan, measured, results, command, images)
    return results
