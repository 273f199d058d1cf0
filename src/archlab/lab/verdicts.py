"""A suite's verdicts: each claim's paired test (the rule is `archlab.lab.stats`), Holm within the suite, and the
suite's own statistics (per-run spread, pooled residual, between-arm seed correlation, the factorial analysis).

How each claim is tested (docs/lab-statistics.md states the rule):
- a claim the suite marks `untestable:` is reported with its estimate and the reason, and never tested;
- a claim on an exact measure (a formula: KV-cache bytes) is "by construction";
- a timing claim: `test_claim(log t_arm, log t_versus, better="lower")` over the interleaved pairs;
- `diverged` (0/1 per seed): the exact paired test; `spikes` (counts): the paired count test; both say
  "untestable by this design" when no run of either arm had an event;
- a loss where some run of either arm diverged: the rank test (a diverged run's loss is censored, not a number);
- every other claim: the paired test on the per-seed values (a factorial claim: per-seed means of the cells at
  each level), with the pooled residual of the arm + seed analysis of its regime (the arms of the claim's
  `regimes:` group, or all other arms) when the arms' spreads agree within 3x, else the pair's own spread.
Claims outside the family (untestable, by construction) never enter Holm's correction nor the tallies.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from archlab.lab import stats
from archlab.lab.measure import MEASURES
from archlab.lab.runner import Plan, RunSpec
from archlab.lab.suite import Claim, Suite, is_exact

COUNT_METRICS = {"diverged": "binary", "spikes": "count"}  # discrete outcomes: exact tests, never a t-test


@dataclass
class ClaimResult:
    claim: Claim
    test: stats.ClaimTest | None  # None: untestable by the suite's statement, or by construction
    outcome: str
    estimate: float  # mean(arm - versus) over the paired seeds (timings: mean log ratio)
    a: list[float] = field(default_factory=list)  # the arm's per-seed values (timings: log seconds per pair)
    b: list[float] = field(default_factory=list)
    narang: str = ""
    note: str = ""  # why untestable, which pooled residual, ...

    @property
    def p(self) -> float:
        return self.test.p if self.test is not None else math.nan

    @property
    def p_adjusted(self) -> float:
        value = None if self.test is None else self.test.p_adjusted
        return math.nan if value is None else value

    @property
    def ci(self) -> tuple[float, float]:
        return self.test.ci if self.test is not None else (math.nan, math.nan)

    @property
    def seeds_needed(self) -> int | None:
        return self.test.seeds_needed if self.test is not None else None

    @property
    def in_family(self) -> bool:
        return self.test is not None and self.test.in_family


@dataclass
class Spread:
    """One regime's statistics on a metric: the arm + seed analysis of its arms whose runs all finished."""

    regime: str
    arms: list[str]
    sigma_run: float  # a single run's spread (arm means removed)
    sigma_eps: float  # the pooled residual (arm x seed interaction)
    df: int
    rho: float  # the between-arm seed correlation, 1 - sigma_eps^2 / sigma_run^2 as rcbd measures it
    heteroscedastic: bool
    seeds: int = 0


# ------------------------------------------------------------------------------------------ values
def per_seed(plan: Plan, measured: dict[RunSpec, dict], arm: str, metric: str) -> list[float]:
    """An arm's values on `metric`, one per seed, in seed order."""
    return [float(measured[r][metric]) for r in sorted(plan.runs_of(arm), key=lambda r: r.seed)]


def _cell_means(plan: Plan, measured: dict[RunSpec, dict], arms: list[str], metric: str) -> list[float]:
    """Per seed, the mean over `arms` (a factorial claim's cells at one level); seeds all the arms ran."""
    columns = [per_seed(plan, measured, a, metric) for a in arms]
    n = min(len(c) for c in columns)
    return [statistics.fmean(c[s] for c in columns) for s in range(n)]


def _diverged(plan: Plan, measured: dict[RunSpec, dict], arms: list[str]) -> bool:
    return any(measured[r].get("diverged", 0.0) == 1.0 for a in arms for r in plan.runs_of(a))


def regime_of(suite: Suite, arms: list[str]) -> str | None:
    """The regime every arm of a claim belongs to ("" = the arms in no regime), or None when they span two."""
    found = {next((name for name, members in suite.regimes.items() if a in members), "") for a in arms}
    return found.pop() if len(found) == 1 else None


def spread(plan: Plan, measured: dict[RunSpec, dict], metric: str, regime: str, n: int | None = None) -> Spread | None:
    """The arm + seed analysis of one regime on `metric` over seeds 0..n-1 (default the plan's seeds); arms with
    fewer seeds, a diverged or a missing run are left out."""
    n = n or plan.seeds
    members = plan.suite.regimes.get(regime) if regime else [
        a.name for a in plan.suite.arms if regime_of(plan.suite, [a.name]) == ""]
    table = {}
    for arm in members or []:
        values = per_seed(plan, measured, arm, metric)[:n]
        if len(values) == n and all(math.isfinite(v) for v in values) and not _diverged(plan, measured,
                                                                                                 [arm]):
            table[arm] = values
    if len(table) < 2:
        return None
    fit = stats.rcbd(table)
    return Spread(regime or "all arms", list(table), fit.sigma_run, fit.pooled.sigma, int(fit.pooled.df), fit.rho,
                  fit.heteroscedastic, n)


# ------------------------------------------------------------------------------------------ judging
def judge(plan: Plan, measured: dict[RunSpec, dict], timings: dict[str, dict] | None = None,
          alpha: float = stats.ALPHA, claims: list[Claim] | None = None) -> list[ClaimResult]:
    """Every claim's outcome (or only `claims`'), Holm-adjusted over the empirical ones at one-sided `alpha`."""
    results = [_judge_one(plan, measured, timings or {}, c, alpha) for c in claims or plan.suite.claims]
    family = [r for r in results if r.in_family]
    for result, adjusted in zip(family, stats.adjust([r.test for r in family], method="holm")):
        result.test, result.outcome = adjusted, adjusted.outcome
    for r in results:
        r.narang = narang_agreement(r.claim, r.outcome)
    return results


def _sides(plan: Plan, measured: dict[RunSpec, dict], claim: Claim) -> tuple[list[float], list[float]]:
    """Per-seed values of both sides; a diverged run's value of a censored measure is NaN (no measurement)."""
    if any(MEASURES[m].censored for m in (claim.metric, claim.versus_metric) if m in MEASURES):
        measured = {r: {**v, **{m: math.nan for m in v if m in MEASURES and MEASURES[m].censored}}
                    if v.get("diverged", 0.0) == 1.0 else v for r, v in measured.items()}
    a_arms, b_arms = plan.suite.cells(claim, claim.arm), plan.suite.cells(claim, claim.versus)
    a = _cell_means(plan, measured, a_arms, claim.metric)
    b = _cell_means(plan, measured, b_arms, claim.versus_metric or claim.metric)
    n = min(len(a), len(b))
    return a[:n], b[:n]


def _judge_one(plan: Plan, measured: dict[RunSpec, dict], timings: dict[str, dict], claim: Claim,
               alpha: float) -> ClaimResult:
    timing = plan.suite.timing(claim)
    if timing is not None:
        return _judge_timing(claim, timings.get(claim.metric), alpha)
    a, b = _sides(plan, measured, claim)
    finite = [(x, y) for x, y in zip(a, b) if math.isfinite(x) and math.isfinite(y)]
    estimate = statistics.fmean(x - y for x, y in finite) if finite else math.nan
    if claim.untestable:
        return ClaimResult(claim, None, stats.UNTESTABLE, estimate, a, b, note=claim.untestable)
    if is_exact(claim.metric):
        return ClaimResult(claim, None, stats.BY_CONSTRUCTION, estimate, a, b, note="arithmetic (a formula)")
    if claim.expect == "same" and claim.margin is None:
        raise ValueError(f"claim {claim.text!r} has no margin: plan the suite at a budget (runner.plan_suite)")
    kw = {"expect": claim.expect, "better": claim.better, "margin": claim.margin or 0.0,
          "min_effect": claim.min_effect, "alpha": alpha}
    kind = COUNT_METRICS.get(claim.metric)
    arms = plan.suite.cells(claim, claim.arm) + plan.suite.cells(claim, claim.versus)
    if kind == "binary":
        test, note = stats.paired_binary_test(a, b, better=claim.better, alpha=alpha), "exact paired (McNemar) test"
    elif kind == "count":
        test, note = stats.paired_count_test(a, b, better=claim.better, alpha=alpha), "paired count test"
    elif MEASURES[claim.metric].censored and _diverged(plan, measured, arms):
        test, note = stats.rank_test(a, b, better=claim.better, alpha=alpha), "rank test: some runs diverged"
    elif len(finite) < len(a):
        return ClaimResult(claim, None, stats.UNTESTABLE, estimate, a, b, note="the measure is n/a for some runs")
    else:
        pooled, note = _pooled(plan, measured, claim, arms, len(a))
        test = stats.test_claim(a, b, pooled=pooled, **kw)
    return ClaimResult(claim, test, test.outcome, estimate, a, b, note=note)


def _pooled(plan: Plan, measured: dict[RunSpec, dict], claim: Claim, arms: list[str], n: int) -> tuple[object, str]:
    """The pooled residual for a claim (scaled for cell means), or None with the reason for the pair's own."""
    if claim.versus_metric or claim.arm == claim.versus:
        return None, "the pair's own differences (two metrics of one arm)"
    regime = regime_of(plan.suite, arms)
    fit = spread(plan, measured, claim.metric, regime, n) if regime is not None else None
    if fit is None:
        return None, "the pair's own differences (the arms span regimes, or too few arms to pool)"
    if fit.heteroscedastic:
        return None, f"the pair's own differences (spreads in {fit.regime} differ > 3x)"
    if not set(arms) <= set(fit.arms):
        return None, "the pair's own differences (an arm left the pooled analysis)"
    k_a, k_b = len(plan.suite.cells(claim, claim.arm)), len(plan.suite.cells(claim, claim.versus))
    scale = math.sqrt((1 / k_a + 1 / k_b) / 2)  # a mean of k cells per seed has 1/k of one cell's variance
    return stats.Pooled(fit.sigma_eps * scale, fit.df), f"pooled residual of {fit.regime} ({fit.df} df)"


def _judge_timing(claim: Claim, record: dict | None, alpha: float) -> ClaimResult:
    if record is None:
        return ClaimResult(claim, None, stats.INCONCLUSIVE, math.nan, note="not timed yet")
    first = record["arms"][0] == claim.arm
    t_arm, t_versus = (record["a"], record["b"]) if first else (record["b"], record["a"])
    a, b = [math.log(t) for t in t_arm], [math.log(t) for t in t_versus]
    test = stats.test_claim(a, b, expect=claim.expect, better="lower", margin=claim.margin or 0.0,
                            min_effect=claim.min_effect, alpha=alpha)
    return ClaimResult(claim, test, test.outcome, test.estimate, a, b,
                       note=f"{len(a)} interleaved pairs on fresh models, log time ratio")


def narang_agreement(claim: Claim, outcome: str) -> str:
    """Our outcome against Narang et al.'s finding for the claimed arm; an undecided outcome agrees with nothing
    (the absence of evidence is not evidence of "same")."""
    if claim.narang is None:
        return "not measured by Narang et al."
    theirs = f"Narang et al.: {claim.narang}"
    if outcome not in (stats.CONFIRMED, stats.CONTRADICTED):
        return f"{theirs}; not decided here ({outcome})"
    if outcome == stats.CONTRADICTED:
        return f"{theirs}; we {'agree' if claim.narang == 'worse' else 'disagree'}"
    ours = {"better"} if claim.expect == "better" else {"better", "same"}  # "as good as" covers better too
    return f"{theirs}; we {'agree' if claim.narang in ours else 'disagree'}"


def suite_spreads(plan: Plan, measured: dict[RunSpec, dict], metric: str) -> list[Spread]:
    """Every regime's statistics on `metric` (the page's "how noisy was this suite")."""
    regimes = ([""] if any(regime_of(plan.suite, [a.name]) == "" for a in plan.suite.arms) else []) + list(
        plan.suite.regimes)
    return [s for r in regimes if (s := spread(plan, measured, metric, r)) is not None]


def factorial_anova(plan: Plan, measured: dict[RunSpec, dict], metric: str) -> list[tuple[str, float, float, float]]:
    """The factorial analysis of a `factors:` suite on `metric`: OLS of the value on every factor, all their
    interactions and the seed (a block), with statsmodels' type-II analysis of variance; rows (term, df, F, p),
    the residual last (F and p NaN). Empty when a run diverged (its loss is censored) or a value is missing."""
    import pandas as pd
    from statsmodels.formula.api import ols
    from statsmodels.stats.anova import anova_lm

    runs = [r for r in plan.runs if r.seed < plan.seeds]
    values = [float(measured[r][metric]) for r in runs]
    if not plan.suite.factors or not all(math.isfinite(v) for v in values) or _diverged(
            plan, measured, [a.name for a in plan.suite.arms]):
        return []
    frame = pd.DataFrame([{"y": v, "seed": r.seed, **{f"f_{k}": lv for k, lv in plan.suite.arm(r.arm).levels.items()}}
                          for r, v in zip(runs, values)])
    terms = " * ".join(f"C(f_{name})" for name in plan.suite.factors)
    table = anova_lm(ols(f"y ~ {terms} + C(seed)", data=frame).fit(), typ=2)
    rows = []
    for term, row in table.iterrows():
        name = "residual" if term == "Residual" else ":".join(
            part.removeprefix("C(f_").removeprefix("C(").rstrip(")") for part in str(term).split(":"))
        rows.append((name, float(row["df"]), float(row["F"]), float(row["PR(>F)"])))
    return rows
