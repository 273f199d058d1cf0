"""Power before compute (`archlab ablate SUITE --plan`) and sequential seeds (`--sequential`).

The plan: for each claim, the seeds per arm that give 80% power to confirm it, at Holm's first-step
level (one-sided alpha / m over the suite's m empirical claims, a slightly conservative plan for
the others), at the effect the suite states before the run: a "better" claim's smallest effect of
interest (`smallest_effect`, else the metric's default: the budget's loss margin for losses, the
suite's `margins:` entry, 5% for a timing; with min_effect, the gain beyond it), a "same" claim's
margin at a true difference of 0 (the non-inferiority bound then has the power of the superiority
test at effect margin), an "equivalent" claim's margin with 90% per side. Never the estimate of
an earlier run: the winner's curse inflates it, and its sign may point away from the claim. The
spread is the pair's own sd of the paired differences in an earlier run of the suite in the same
folder (the verdicts' default error model), else on the suite's published page in the checkout
(docs/results/SUITE, the same budget), else the budget's planning figure (sigma_eps * sqrt(2) of the
first published `small` runs), with its source printed; a claim on a factorial contrast of k cells
per side has 1/k of it. A claim scored on a fixed item set is planned on the seed x item variance
components of that run's per-item outcomes (lab/analysis/items.py `plan_design`: seeds at its items,
else more items), as its page plans it. Each line also prints the minimum detectable effect at the
default seeds. Seeds are turned into wall time with a run's seconds measured at the plan's budget,
or scaled to it by training FLOPs from a measurement at another budget (lab/runs/run_cost.py), and
the printout says which.

Sequential seeds: look at the budget's n, then, for the claims still inconclusive, add n more seeds
to their arms and look again at 2n, at the nominal levels of a two-look group-sequential design
(Pocock 1977 or O'Brien & Fleming 1979) whose overall one-sided level is the suite's alpha; claims
decided at the first look keep that outcome, and a claim still inconclusive at 2n is reported as
"inconclusive at n = 2n".
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from archlab.lab.analysis import stats
from archlab.lab.analysis.items import expected_se, fit_items, plan_design
from archlab.lab.analysis.table import Table
from archlab.lab.analysis.verdicts import COUNT_METRICS, ClaimResult, claim_arms, item_tables
from archlab.lab.measures.measure import read_measured
from archlab.lab.runs.collect import table_of
from archlab.lab.runs.plan import Plan, read_plan
from archlab.lab.runs.run_cost import run_cost
from archlab.lab.runs.runner import is_done
from archlab.lab.spec.budgets import MARGIN_METRICS
from archlab.lab.spec.suite import Claim, is_exact

POWER = 0.8
# in the suite's folder: the design's levels and each claim's outcome per look
SEQUENTIAL = "sequential.json"


@dataclass
class PlanRow:
    claim: Claim
    seeds: int | None  # seeds per arm for 80% power; None when a t-plan does not apply
    effect: float | None  # the effect planned for (metric units)
    sigma: float | None  # the sd of one paired difference used
    why: str  # where sigma and the effect come from, or why there is no plan
    mde: float | None = None  # the minimum detectable effect at the plan's default seeds
    # a claim scored on items: the items the plan assumes (more than scored: needs more)
    items: int | None = None


def _stored(plan: Plan) -> Table | None:
    """The earlier run's table when every run of the suite at these seeds is already
    measured, else None."""
    if not read_plan(plan.out) or not all(is_done(r) for r in plan.runs):
        return None
    measured = {r: read_measured(r.run_dir) for r in plan.runs}
    return (
        table_of(plan, measured)
        if all(set(plan.suite.measures) <= set(v) for v in measured.values())
        else None
    )


def family_size(plan: Plan) -> int:
    """The claims Holm's correction counts: all but the untestable and the by-construction ones."""
    return max(1, sum(1 for c in plan.suite.claims if not c.untestable and not is_exact(c.metric)))


# a source checkout's published pages
PUBLISHED = Path(__file__).resolve().parents[4] / "docs" / "results"


def _published(plan: Plan, docs: Path = PUBLISHED) -> Table | None:
    """The published page's table of this suite at this budget (a pilot's spreads), when a
    checkout has one."""
    folder = docs / plan.suite.name
    if not (folder / "results.csv").is_file() or not (folder / "provenance.json").is_file():
        return None
    if (
        json.loads((folder / "provenance.json").read_text(encoding="utf-8")).get("budget")
        != plan.budget.name
    ):
        return None
    return Table.read(folder, plan.suite)


def screening_lines(plan: Plan, sigma: float | None = None) -> list[str]:
    """A screening suite's --plan preamble: the design, its alias chains, and each main effect's
    expected SE and mde from a run's residual sd (the budget's planning figure unless given), at
    the plan's seeds."""
    from archlab.lab.spec.design import main_effect_variances
    from archlab.lab.spec.suite import screening_design

    s = plan.suite
    if not s.screening:
        return []
    d = screening_design(s, s.factors)
    factors = list(s.factors)
    sigma = plan.budget.sigma if sigma is None else sigma
    n = d.runs * plan.seeds
    df = max(1, (plan.seeds - 1) * (d.runs - 1))
    se = 2 * sigma / math.sqrt(n)
    alpha = stats.ALPHA / family_size(plan)
    lines = [f"Screening design of {s.name}: " + "; ".join(d.describe()) + "."]
    lines += ["  letters: " + ", ".join(f"{chr(65 + j)} = {f}" for j, f in enumerate(factors))]
    lines += [
        "  alias chains (main effects and two-factor interactions): "
        + "; ".join(" = ".join(w.upper() for w in chain) for chain in d.chains(2) if len(chain) > 1)
    ]
    alone = d.clear_interactions()
    if alone:  # a fold on one factor: its interactions left their chains
        lines += ["  two-factor interactions clear of every other: " + ", ".join(alone).upper()]
    lines.append(
        f"  {d.runs} rows x {plan.seeds} seeds = {n} runs: each main effect's "
        f"SE 2 sigma / sqrt({n}) = {se:.3g} nats at sigma {sigma:g} (budget "
        f"{plan.budget.name}'s planning figure; the page reports the fitted one), "
        f"{df} residual df at least; mde {stats.mde_from_se(se, df, alpha=alpha):.3g} "
        f"at one-sided alpha {alpha:.3g}. One switch at a time with the same "
        f"runs: SE {math.sqrt(2) * sigma / math.sqrt(n / (len(factors) + 1)):.3g}."
    )
    if not d.regular:
        # a semifold's correlated columns: its least precise main effect's SE at this sigma
        worst = sigma * math.sqrt(max(main_effect_variances(d)) / plan.seeds)
        lines.append(
            f"  A semifold's effect columns are correlated: its main effects' SEs reach "
            f"{worst:.3g} (4 [(X'X)^-1]_jj sigma^2 / seeds), mde "
            f"{stats.mde_from_se(worst, df, alpha=alpha):.3g}."
        )
    return lines


def power_plan(plan: Plan, docs: Path = PUBLISHED) -> list[PlanRow]:
    """Each claim's seeds for 80% power (see the module doc)."""
    alpha = stats.ALPHA / family_size(plan)
    if plan.suite.screening:
        return [_screening_row(plan, c, alpha) for c in plan.suite.claims]
    stored, source = _stored(plan), f"in {plan.out}"
    if stored is None and (stored := _published(plan, docs)) is not None:
        source = f"on the published page {docs / plan.suite.name}"
    rows = []
    for claim in plan.suite.claims:
        if claim.untestable:
            rows.append(PlanRow(claim, None, None, None, f"untestable here: {claim.untestable}"))
        elif is_exact(claim.metric):
            rows.append(
                PlanRow(claim, None, None, None, "by construction (a formula): no seeds needed")
            )
        elif (timing := plan.suite.timing(claim)) is not None:
            rows.append(
                PlanRow(
                    claim,
                    None,
                    None,
                    None,
                    f"timed on fresh models: {timing.pairs} interleaved pairs, no training seeds",
                )
            )
        elif claim.metric in COUNT_METRICS:
            rows.append(
                PlanRow(
                    claim,
                    None,
                    None,
                    None,
                    "an exact test on events: no t-plan (it needs runs with "
                    "events; see the first look)",
                )
            )
        else:
            rows.append(_row(plan, claim, alpha, stored, source))
    return rows


def _row(plan: Plan, claim: Claim, alpha: float, stored: Table | None, where: str = "") -> PlanRow:
    gain = (claim.smallest_effect or 0.0) - claim.min_effect
    effect = (
        claim.margin
        if claim.expect != "better"
        else (gain if claim.smallest_effect and gain > 0 else None)
    )
    if not effect:
        return PlanRow(
            claim,
            None,
            None,
            None,
            f"no smallest effect of interest for {claim.metric} (beyond "
            f"min_effect {claim.min_effect:g}): state smallest_effect: in the "
            "suite to plan it",
        )
    sigma_d = source = None
    power = 0.9 if claim.expect == "equivalent" else POWER
    if (
        stored is not None
        and (row := _item_row(plan, claim, alpha, stored, where, effect, power)) is not None
    ):
        return row
    if stored is not None:
        a_arms, b_arms, _ = claim_arms(stored, claim)
        a = [statistics.fmean(v) for v in zip(*(stored.values(x, claim.metric) for x in a_arms))]
        b = [
            statistics.fmean(v)
            for v in zip(*(stored.values(x, claim.versus_metric or claim.metric) for x in b_arms))
        ]
        d = [x - y for x, y in zip(a, b) if math.isfinite(x - y)]
        if len(d) > 1 and statistics.stdev(d) > 0:
            sigma_d, source = (
                statistics.stdev(d),
                f"the pair's own sd of the paired differences {where} ({len(d)} seeds)",
            )
    if sigma_d is None and claim.metric in MARGIN_METRICS:
        cells = 1 if claim.arm in plan.suite.grids else len(plan.suite.cells(claim, claim.arm))
        sigma_d = plan.budget.sigma * math.sqrt(2) / math.sqrt(cells)
        source = (
            f"planning sd {sigma_d:.3g} of budget {plan.budget.name} (sigma_eps "
            f"{plan.budget.sigma:g} x sqrt 2 of the first published `small` runs; no stored runs "
            f"of this suite in {plan.out})"
        )
    if sigma_d is None:
        return PlanRow(
            claim,
            None,
            effect,
            None,
            f"no planning spread for {claim.metric}: run the suite once "
            "(a pilot at the budget's seeds), then --plan again",
        )
    n = stats.seeds_needed(effect, sigma_d, alpha=alpha, power=power)
    what = {
        "better": "smallest effect"
        + (f" beyond min_effect {claim.min_effect:g}" if claim.min_effect else ""),
        "same": "margin, at a true difference of 0",
        "equivalent": "margin, 90% per side",
    }[claim.expect]
    mde = stats.mde(sigma_d, plan.seeds, alpha=alpha, power=power)
    return PlanRow(claim, n, effect, sigma_d, f"effect {effect:g} ({what}); {source}", mde)


def _item_row(
    plan: Plan, claim: Claim, alpha: float, stored: Table, where: str, effect: float, power: float
) -> PlanRow | None:
    """A claim scored on a fixed item set, planned on the stored run's seed x item variance
    components (the verdicts' error model, lab/analysis/items.py): seeds at its items, else more
    items; None without per-item outcomes."""
    a_arms, b_arms, _ = claim_arms(stored, claim)
    n = min(
        len(stored.values(x, m))
        for x, m in [(a, claim.metric) for a in a_arms]
        + [(b, claim.versus_metric or claim.metric) for b in b_arms]
    )
    pair = item_tables(stored, claim, a_arms, b_arms, n) if n > 1 else None
    if pair is None or len(pair[0][0]) < 2:
        return None
    fit = fit_items(np.asarray(pair[0], dtype=np.float64) - np.asarray(pair[1], dtype=np.float64))
    seeds, items = plan_design(
        fit.components, fit.seeds, fit.items, effect, alpha=alpha, power=power
    )
    se, df = expected_se(fit.components, plan.seeds, fit.items)
    mde = stats.mde_from_se(se, df, alpha=alpha, power=power) if se > 0 else 0.0
    what = {
        "better": "smallest effect"
        + (f" beyond min_effect {claim.min_effect:g}" if claim.min_effect else ""),
        "same": "margin, at a true difference of 0",
        "equivalent": "margin, 90% per side",
    }[claim.expect]
    at = (
        f"{seeds} seeds at {items} items"
        if seeds and items
        else f"{items} items at {fit.seeds} seeds"
        if items
        else f"{seeds} seeds at its {fit.items} items"
        if seeds
        else "out of reach at 32x the items"
    )
    return PlanRow(
        claim,
        seeds,
        effect,
        None,
        f"effect {effect:g} ({what}); seeds and items both random: the seed x item components of "
        f"the paired differences {where} ({fit.seeds} seeds x {fit.items} items): {at}",
        mde,
        items,
    )


def _screening_row(plan: Plan, claim: Claim, alpha: float) -> PlanRow:
    """A screening claim's replicates (seeds of every row) for 80% power at its stated effect."""
    from archlab.lab.spec.design import main_effect_variances
    from archlab.lab.spec.suite import screening_design

    if claim.untestable:
        return PlanRow(claim, None, None, None, f"untestable here: {claim.untestable}")
    effect = claim.margin if claim.expect != "better" else claim.smallest_effect
    if not effect:
        return PlanRow(claim, None, None, None, "no smallest effect of interest stated")
    d = screening_design(plan.suite, plan.suite.factors)
    rows, sigma = d.runs, plan.budget.sigma
    # the claim's main effect's variance per sigma^2 over one pass of the rows (4 / rows in a
    # regular fraction)
    variance = float(main_effect_variances(d)[list(plan.suite.factors).index(claim.factor)])
    power = 0.9 if claim.expect == "equivalent" else POWER

    def reaches(seeds: int) -> bool:
        se, df = sigma * math.sqrt(variance / seeds), (seeds - 1) * (rows - 1)
        return stats.mde_from_se(se, df, alpha=alpha, power=power) <= effect

    seeds = next((n for n in range(2, 200) if reaches(n)), None)
    mde = stats.mde_from_se(
        sigma * math.sqrt(variance / plan.seeds),
        max(1, (plan.seeds - 1) * (rows - 1)),
        alpha=alpha,
        power=power,
    )
    return PlanRow(
        claim,
        seeds,
        effect,
        sigma,
        f"effect {effect:g}; seeds of all {rows} rows at sigma {sigma:g} "
        f"(budget {plan.budget.name}'s planning figure)",
        mde,
    )


def format_plan(plan: Plan, rows: list[PlanRow], jobs: int, docs: Path = PUBLISHED) -> list[str]:
    """The --plan printout: one line per claim, then the runs and wall time of the largest n."""
    lines = [
        f"Power plan for {plan.suite.name} at budget {plan.budget.name}: seeds per arm for "
        f"{POWER:.0%} power, one-sided alpha {stats.ALPHA}/{family_size(plan)} (Holm's first step "
        "over the suite's tested claims) per claim."
    ]
    for r in rows:
        seeds = (
            f"{r.seeds:3d} seeds"
            if r.seeds is not None
            else f"{r.items:3d} items"
            if r.items
            else "    -    "
        )
        mde = f"; mde at {plan.seeds} seeds {r.mde:.3g}" if r.mde is not None else ""
        lines.append(f"  {seeds}  {r.claim.text}  [{r.why}{mde}]")
    planned = [r.seeds for r in rows if r.seeds is not None]
    n = max(planned) if planned else plan.seeds
    cost = run_cost(plan, docs)
    run_s, source = cost.seconds, cost.source
    runs, default = len(plan.suite.arms) * n, len(plan.suite.arms) * plan.seeds
    more = (
        "; a claim planned at more items also scores more of them"
        if any(r.items for r in rows)
        else ""
    )
    lines.append(
        f"Every claim at its n: {n} seeds x {len(plan.suite.arms)} arms = {runs} runs, about "
        f"{_duration(runs * run_s / max(1, jobs))} wall with --jobs {jobs} ({run_s:.0f} s per run, "
        f"{source}; an estimate{more}). The default, {plan.seeds} seeds: {default} runs, about "
        f"{_duration(default * run_s / max(1, jobs))}."
    )
    return lines


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


# --------------------------------------------------------------------------------------- sequential
def look_levels(
    kind: str, alpha: float = stats.ALPHA, seeds: tuple[int, int] | None = None
) -> list[float]:
    """One-sided nominal levels of the two looks (at `seeds` per arm, default equally spaced) whose
    overall one-sided level is `alpha`."""
    times = list(seeds) if seeds is not None else None
    return [level / 2 for level in stats.sequential_levels(kind, 2, alpha=2 * alpha, times=times)]


def extra_seeds(plan: Plan, results: list[ClaimResult], cap: int | None = None) -> dict[str, int]:
    """The arms of the first look's inconclusive claims, each given seeds up to `cap` per
    arm (default 2n)."""
    more = (cap if cap is not None else 2 * plan.seeds) - plan.seeds
    arms: dict[str, int] = {}
    for r in results:
        if (
            r.outcome == stats.INCONCLUSIVE
            and r.test is not None
            and plan.suite.timing(r.claim) is None
        ):
            for arm in plan.suite.cells(r.claim, r.claim.arm) + plan.suite.cells(
                r.claim, r.claim.versus
            ):
                arms[arm] = more
    return arms


def record_look(
    out: Path, kind: str, levels: list[float], look: int, results: list[ClaimResult]
) -> dict:
    """Keep each claim's outcome at this look in SUITE/sequential.json; returns the whole record."""
    path = out / SEQUENTIAL
    record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    record.update(kind=kind, levels=levels)
    record[f"look{look}"] = {r.claim.text: {"outcome": r.outcome, "n": len(r.a)} for r in results}
    path.write_text(json.dumps(record, indent=1), encoding="utf-8")
    return record


def sequential_results(
    first: list[ClaimResult], second: list[ClaimResult], levels: list[float]
) -> list[ClaimResult]:
    """The outcome of each claim: the first look's where it decided, else the second look's
    (on 2n seeds)."""
    later = {r.claim.text: r for r in second}
    out = []
    for r in first:
        if r.claim.text in later:
            r = later[r.claim.text]
            r.note = (
                f"{r.note}; second look at n = {len(r.a)}, one-sided level {levels[1]:.4g}".lstrip(
                    "; "
                )
            )
            if r.outcome == stats.INCONCLUSIVE:
                r.note += f"; inconclusive at n = {len(r.a)}, the cap"
        elif r.test is not None:
            r.note = (
                f"{r.note}; decided at the first look (n = {len(r.a)}, "
                f"one-sided level {levels[0]:.4g})"
            )
        out.append(r)
    return out
