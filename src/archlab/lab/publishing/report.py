"""A finished suite's report: its record (lab/publishing/record.py) built from the run folders, the
verdicts (lab/analysis/verdicts.py), the plots, and the pages (lab/publishing/page.py).

Writes into the suite's folder: results.csv, items.csv, timings.csv, suite.yaml, configs.yaml,
provenance.json, claims.json (lab/publishing/record.py), results.md and report.html
(lab/publishing/page.py), and one PNG per curve (validation loss, gradient norm, and the largest
embedding row norm where measured).
"""

from __future__ import annotations

from pathlib import Path

from archlab.costs import parameter_counts
from archlab.lab.analysis.ladder import LADDER_SUITE, describe, fit_ladder, ladder_values
from archlab.lab.analysis.outcomes import BY_CONSTRUCTION
from archlab.lab.analysis.table import Table
from archlab.lab.analysis.verdicts import ClaimResult
from archlab.lab.measures.embed_measures import max_embed_row_norm_series
from archlab.lab.measures.measure import MEASURES
from archlab.lab.measures.timing_load import load_note, load_warning
from archlab.lab.publishing import page, tables
from archlab.lab.publishing.record import (
    Record,
    config_hash,
    portable_config,
    scale,
    stamp,
)
from archlab.lab.publishing.record import write_record as write_files
from archlab.lab.publishing.run_provenance import RUNS, gather
from archlab.lab.runs.collect import read_timings, run_config, stored_ladder, table_of
from archlab.lab.runs.plan import Plan, RunSpec
from archlab.lab.runs.runner import run_wall_s
from archlab.lab.runs.suite_time import by_machine, read_suite_time
from archlab.lab.spec import registration
from archlab.lab.spec.budgets import evidence_caveat, evidence_note
from archlab.lab.spec.registration import REGISTRATION
from archlab.nn.config import ModelConfig
from archlab.plots import plot_arms
from archlab.train.hardware import describe_machine
from archlab.train.metrics import read_metrics


def trained_params(run: RunSpec) -> int:
    """Parameters of the model a run built (a BPE tokenizer may have fewer ids than asked for)."""
    return parameter_counts(ModelConfig.from_dict(run_config(run)["model"]))["total"]


# --------------------------------------------------------------------------------------- the record
def _training(plan: Plan, timing: dict) -> dict:
    walls = sorted(w for r in plan.runs if (w := run_wall_s(r.run_dir)) > 0)
    out: dict = {}
    if walls:
        out.update(
            runs=len(walls),
            median_run_s=walls[len(walls) // 2],
            run_minutes=round(sum(walls) / 60, 1),
        )
    if timing.get("train_wall_s"):
        out.update(suite_wall_s=timing["train_wall_s"], jobs=timing.get("jobs", 1))
        machines = by_machine(timing)
        if len(machines) > 1:  # sittings on several machines: each one's share of the wall time
            out.update(machines=machines)
    return out


def margin_pricing(plan: Plan, table: Table) -> str:
    """What the loss margins in use are worth in compute: on the suite's own rungs where it has
    them, else on the budget's compute ladder in the store (or how to measure it)."""
    margins = sorted(
        {
            c.margin
            for c in plan.suite.claims
            if c.expect != "better" and c.margin and c.metric in tables.LOSS_METRICS
        }
    )
    budget = plan.budget
    text = (
        f"Budget {budget.name}'s default loss margin and smallest effect, "
        f"{budget.margin:g} nats: {budget.margin_source}."
    )
    if not margins:
        return text
    values = ladder_values(table)
    own = fit_ladder(values) if len(values) >= 2 and set(values) != {1.0} else None
    if own is not None:
        return text + " On this suite's own base: " + describe(own, margins[0])
    fit = stored_ladder(plan.store, budget)
    if fit is None:
        return (
            text + " What a loss margin is worth in compute is measured by the compute "
            f"ladder, not yet run in this store: `archlab ablate {LADDER_SUITE} --budget "
            f"{budget.name} --store {plan.store}`."
        )
    return text + " " + describe(fit, margins[0])


def record_of(
    plan: Plan, measured: dict[RunSpec, dict], timings: dict[str, dict], command: str
) -> Record:
    """The plan's record: its table with each arm's parameters and config hash, the configs
    and the provenance."""
    configs = {
        a.name: portable_config(run_config(runs[0]))
        for a in plan.suite.arms
        if (runs := sorted(plan.runs_of(a.name), key=lambda r: r.seed))
    }
    params = {
        a.name: trained_params(min(plan.runs_of(a.name), key=lambda r: r.seed))
        for a in plan.suite.arms
    }
    table = table_of(
        plan, measured, timings, params, {a: config_hash(c) for a, c in configs.items()}
    )
    timing = read_suite_time(plan.out)
    order = {a.name: i for i, a in enumerate(plan.suite.arms)}
    runs = sorted(plan.runs, key=lambda r: (order.get(r.arm, len(order)), r.seed))
    provenance = stamp(
        {
            "suite": plan.suite.name,
            "budget": plan.budget.name,
            "seeds": plan.seeds,
            "extra": plan.extra,
            "command": command,
            "machine": timing.get("machine") or describe_machine(),
            RUNS: gather(
                [(f"{r.arm}/seed{r.seed}", r.run_dir) for r in runs]
            ),  # each run's own record
            "training": _training(plan, timing),
            "scale": scale(table, configs),
            "arms": {
                a.name: {"overrides": a.overrides, "matched": a.matched, "params": params[a.name]}
                for a in plan.suite.arms
            },
            "rung_steps": {
                f"{a.steps_scale:g}": plan.runs_of(a.name)[0].steps
                for a in plan.suite.arms
                if plan.runs_of(a.name)
            },
            "measure_versions": {m: MEASURES[m].version for m in plan.suite.measures},
        }
    )
    provenance["margins"] = margin_pricing(plan, table)
    return Record(
        table,
        plan.budget,
        plan.out,
        provenance,
        configs,
        registration.read(plan.out / REGISTRATION),
    )


# ------------------------------------------------------------------------------------------ plots
def _curve(run: RunSpec, kind: str, key: str) -> tuple[list[int], list[float]]:
    rows = read_metrics(run.run_dir, kind)
    return [int(r["step"]) for r in rows], [float(r[key]) for r in rows]


def plot_suite(plan: Plan, folder: Path | None = None) -> list[Path]:
    """Validation loss and gradient norm over steps for every arm (and the embedding row norm if
    measured), as PNGs in `folder` (default the suite's)."""
    folder = plan.out if folder is None else Path(folder)
    arms = [a.name for a in plan.suite.arms]
    figures = [
        (
            {a: [_curve(r, "eval", "loss") for r in plan.runs_of(a)] for a in arms},
            "validation loss",
            "nats/token",
            "val_loss.png",
            False,
        ),
        (
            {a: [_curve(r, "train", "grad_norm") for r in plan.runs_of(a)] for a in arms},
            "gradient norm (before clipping)",
            "L2 norm",
            "grad_norm.png",
            True,
        ),
    ]
    if "max_embed_row_norm" in plan.suite.measures:
        series = {
            a: [
                tuple(map(list, zip(*max_embed_row_norm_series(r.run_dir))))
                for r in plan.runs_of(a)
            ]
            for a in arms
        }
        figures.append(
            (series, "largest embedding row norm", "L2 norm", "embed_row_norm.png", False)
        )
    folder.mkdir(parents=True, exist_ok=True)
    return [
        plot_arms(curves, f"{plan.suite.name}: {title}", ylabel, folder / name, log_y)
        for curves, title, ylabel, name, log_y in figures
    ]


def write_report(plan: Plan, record: Record, results: list[ClaimResult]) -> list[Path]:
    """Write the record's files, results.md, the PNG plots and report.html into `record.folder`:
    writing only (the measures, the record and the verdicts come from lab/experiment.py);
    returns the images."""
    images = plot_suite(plan, record.folder)
    if plan.suite.screening:
        from archlab.lab.analysis import screening

        metric = "val_loss" if "val_loss" in plan.suite.measures else plan.suite.measures[0]
        if (fitted := screening.fit(record.table, metric)) is not None:
            images += screening.plot(fitted, record.table, record.folder)
    # by name, as `archlab ablate --verify` finds them again (lab/publishing/verify.py)
    images = sorted(images)
    write_files(record, results)
    page.write_markdown(record, results, [p.name for p in images])
    page.write_html(record, results, images)
    return images


def verdict_lines(plan: Plan, results: list[ClaimResult]) -> list[str]:
    """What `archlab ablate` prints of the verdicts: one line per claim (its outcome, what an
    inconclusive one needs, a timing's load, and the caveat of runs below the budget and seeds the
    suite is judged at), then why the caveat, and a warning per timing run on a loaded machine
    (lab/measures/timing_load.py), as the page words them."""
    caveat = evidence_caveat(plan.budget.name, plan.seeds, plan.suite.seeds)
    timings = read_timings(plan)
    lines = []
    for result in results:
        needed = f" (needs {tables.needed(result)})" if result.seeds_needed else ""
        smoke = f" {caveat}" if caveat and result.outcome != BY_CONSTRUCTION else ""
        timed = timings.get(result.claim.metric) if plan.suite.timing(result.claim) else None
        load = f" [{note}]" if timed and (note := load_note(timed)) else ""
        lines.append(f"{result.outcome:26s} {result.claim.text}{needed}{load}{smoke}")
    if note := evidence_note(plan.budget.name, plan.seeds, plan.suite.seeds):
        lines.append(note)
    for metric, timed in timings.items():
        if warning := load_warning(metric, timed):
            lines.append(warning)
    return lines
