"""A suite's verdicts: each claim's test (the rule is `archlab.lab.analysis.stats`), Holm within
the suite, and the suite's own statistics (per-run spread, pooled residual, between-arm seed
correlation, the factorial analysis), computed from a `Table` (lab/analysis/table.py) so that a
page's files alone reproduce them.

How each claim is tested (docs/lab-statistics.md states the rule):
- a claim the suite marks `untestable:` is reported with its estimate and the reason,
  and never tested;
- a claim on an exact measure (a formula: KV-cache bytes) is "by construction";
- a claim naming a grid is judged at the grid's best arm; a best arm at either end of its grid did
  not bracket the optimum: "untestable by this design" at this budget, with the reason;
- a timing claim: `test_claim(log t_arm, log t_versus, better="lower")` over the interleaved pairs;
- `diverged` (0/1 per seed): the exact paired test; `spikes` (counts): the paired count test; both
  say "untestable by this design" when no run of either arm had an event;
- a loss where some run of either arm diverged: the rank test (a diverged run's loss is censored,
  not a number);
- a measure scored on a fixed item set (per-item outcomes in the table): the seed x item test, so
  that the verdict generalises to items, not to these items (lab/analysis/items.py);
- every other claim: the paired test on the pair's own per-seed differences (a factorial claim:
  per-seed means of the cells at each level). Only arms the suite declares `alike:` (built alike,
  sharing their init) may pool the residual of their group's arm + seed analysis, and only when the
  group's spreads agree (Bartlett, rcbd) and an F test does not separate the pair's own variance
  from the pooled one (two-sided, 5%).
Claims outside the family (untestable, by construction) never enter Holm's correction
nor the tallies.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace

from scipy import special

from archlab.lab.analysis import stats
from archlab.lab.analysis.outcomes import statement
from archlab.lab.analysis.table import Table
from archlab.lab.measures.measure import MEASURES
from archlab.lab.measures.timing_load import load_note
from archlab.lab.spec.suite import Claim, Suite, is_exact

# discrete outcomes: exact tests, never a t-test
COUNT_METRICS = {"diverged": "binary", "spikes": "count"}
# two-sided level of the F test that keeps a pair off its alike group's pooled residual
POOL_F_ALPHA = 0.05


@dataclass
class ClaimResult:
    claim: Claim
    test: stats.ClaimTest | None  # None: untestable by the suite's statement, or by construction
    outcome: str
    estimate: float  # mean(arm - versus) over the paired seeds (timings: mean log ratio)
    # the arm's per-seed values (timings: log seconds per pair)
    a: list[float] = field(default_factory=list)
    b: list[float] = field(default_factory=list)
    narang: str = ""
    note: str = ""  # why untestable, which error model, which grid arms, ...
    # the arms compared (a grid's best arm; factorial: the claim's levels)
    arms: tuple[str, str] = ("", "")
    calibration: bool = False  # a calibration suite's claim: tested, never in the lecture's tallies

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
    def mde(self) -> float:
        return self.test.mde if self.test is not None else math.nan

    @property
    def in_family(self) -> bool:
        return self.test is not None and self.test.in_family

    @property
    def statement(self) -> str:
        """What the test showed, in words that follow it (outcomes.statement); the reason
        when not tested."""
        if self.test is None:
            return f"{self.outcome}: {self.note}" if self.note else self.outcome
        versus = self.arms[1] or self.claim.versus
        if self.claim.versus_metric:
            versus = f"{versus}'s {self.claim.versus_metric}"
        # a timing: a log time ratio, also said as a share of time
        if "interleaved pairs" in self.note:
            text = statement(self.test, versus, "in log time")
            ratio = math.exp(self.test.estimate)
            return f"{text}; {abs(1 - ratio):.0%} {'less' if ratio < 1 else 'more'} time"
        return statement(self.test, versus)


@dataclass
class Spread:
    """One regime's statistics on a metric: the arm + seed analysis of its arms whose
    runs all finished."""

    regime: str
    arms: list[str]
    sigma_run: float  # a single run's spread (arm means removed)
    sigma_eps: float  # the pooled residual (arm x seed interaction)
    df: int
    # the between-arm seed correlation, 1 - sigma_eps^2 / sigma_run^2 as rcbd measures it
    rho: float
    heteroscedastic: bool
    seeds: int = 0


# ------------------------------------------------------------------------------------------ values
def regime_of(suite: Suite, arms: list[str]) -> str | None:
    """The regime every arm of a claim belongs to ("" = the arms in no regime), or None when
    they span two."""
    found = {
        next((name for name, members in suite.regimes.items() if a in members), "") for a in arms
    }
    return found.pop() if len(found) == 1 else None


def spread(
    table: Table, metric: str, members: list[str], label: str, n: int | None = None
) -> Spread | None:
    """The arm + seed analysis of `members` on `metric` over seeds 0..n-1 (default the design's
    seeds); arms with fewer seeds, a diverged or a missing run are left out."""
    n = n or table.seeds
    rows = {}
    for arm in members:
        values = table.values(arm, metric, n)
        if len(values) == n and all(math.isfinite(v) for v in values) and not table.diverged([arm]):
            rows[arm] = values
    if len(rows) < 2 or n < 2:
        return None
    fit = stats.rcbd(rows)
    return Spread(
        label,
        list(rows),
        fit.sigma_run,
        fit.pooled.sigma,
        int(fit.pooled.df),
        fit.rho,
        fit.heteroscedastic,
        n,
    )


def regime_spread(table: Table, metric: str, regime: str, n: int | None = None) -> Spread | None:
    """`spread` over one regime's arms ("" = the arms in no regime)."""
    suite = table.suite
    members = (
        suite.regimes.get(regime)
        if regime
        else [a.name for a in suite.arms if regime_of(suite, [a.name]) == ""]
    )
    return spread(table, metric, list(members or []), regime or "all arms", n)


# ------------------------------------------------------------------------------------------ judging
def judge(
    table: Table, alpha: float = stats.ALPHA, claims: list[Claim] | None = None
) -> list[ClaimResult]:
    """Every claim's outcome (or only `claims`'), Holm-adjusted over the empirical ones
    at one-sided `alpha`."""
    # a screening suite's least-squares fit per metric, shared by its claims
    fits: dict[str, object] = {}
    results = [_judge_one(table, c, alpha, fits) for c in claims or table.suite.claims]
    family = [r for r in results if r.in_family]
    for result, adjusted in zip(family, stats.adjust([r.test for r in family], method="holm")):
        result.test, result.outcome = adjusted, adjusted.outcome
    for r in results:
        r.narang = narang_agreement(r.claim, r.outcome, r.test)
        r.calibration = table.suite.purpose == "calibration"
    return results


def best_of_grid(table: Table, grid: str, metric: str, better: str) -> tuple[str, str]:
    """(the grid's best arm by its mean over the design's seeds, "" or why it does not
    bracket its optimum)."""
    arms = table.suite.grids[grid]
    means = {
        a: statistics.fmean(v)
        if (v := table.values(a, metric, table.seeds)) and all(map(math.isfinite, v))
        else (math.inf if better == "lower" else -math.inf)
        for a in arms
    }
    best = (min if better == "lower" else max)(arms, key=lambda a: means[a])
    if best in (arms[0], arms[-1]):
        edge = "lowest" if best == arms[0] else "highest"
        return best, (
            f"grid {grid} is best at its {edge} point ({best}): its optimum is not bracketed, so "
            "the comparison would be decided by where the grid stops; add a point beyond it"
        )
    return best, ""


def _sides(
    table: Table, claim: Claim, a_arms: list[str], b_arms: list[str]
) -> tuple[list[float], list[float]]:
    """Per-seed values of both sides; a diverged run's value of a censored measure is
    NaN (no measurement)."""

    def column(arms: list[str], metric: str) -> list[float]:
        columns = []
        for arm in arms:
            values = table.values(arm, metric)
            if metric in MEASURES and MEASURES[metric].censored:
                values = [
                    math.nan if r.values.get("diverged", 0.0) == 1.0 else v
                    for r, v in zip(table.runs[arm], values, strict=True)
                ]
            columns.append(values)
        n = min(len(c) for c in columns)
        return [statistics.fmean(c[s] for c in columns) for s in range(n)]

    a = column(a_arms, claim.metric)
    b = column(b_arms, claim.versus_metric or claim.metric)
    n = min(len(a), len(b))
    return a[:n], b[:n]


def claim_arms(table: Table, claim: Claim) -> tuple[list[str], list[str], str]:
    """The cells of each side (a grid: its best arm), and why the design cannot judge it (""
    when it can)."""
    suite, why = table.suite, []
    sides = []
    for level in (claim.arm, claim.versus):
        if claim.factor is None and level in suite.grids:
            best, edge = best_of_grid(table, level, claim.metric, claim.better)
            sides.append([best])
            why += [edge] if edge else []
        else:
            sides.append(suite.cells(claim, level))
    return sides[0], sides[1], "; ".join(why)


def _judge_one(table: Table, claim: Claim, alpha: float, fits: dict | None = None) -> ClaimResult:
    if table.suite.timing(claim) is not None:
        return _judge_timing(claim, table.timings.get(claim.metric), alpha)
    if table.suite.screening and not claim.untestable and not is_exact(claim.metric):
        return _judge_screening(table, claim, alpha, {} if fits is None else fits)
    a_arms, b_arms, edge = claim_arms(table, claim)
    a, b = _sides(table, claim, a_arms, b_arms)
    pair = (
        (" + ".join(a_arms), " + ".join(b_arms))
        if claim.factor is None
        else (claim.arm, claim.versus)
    )
    finite = [(x, y) for x, y in zip(a, b) if math.isfinite(x) and math.isfinite(y)]
    estimate = statistics.fmean(x - y for x, y in finite) if finite else math.nan
    done = {"a": a, "b": b, "arms": pair}
    if claim.untestable or edge:
        return ClaimResult(
            claim, None, stats.UNTESTABLE, estimate, note=claim.untestable or edge, **done
        )
    if is_exact(claim.metric):
        return ClaimResult(
            claim, None, stats.BY_CONSTRUCTION, estimate, note="arithmetic (a formula)", **done
        )
    if claim.expect != "better" and claim.margin is None:
        raise ValueError(
            f"claim {claim.text!r} has no margin: plan the suite at a budget (plan.plan_suite)"
        )
    kw = {
        "expect": claim.expect,
        "better": claim.better,
        "margin": claim.margin or 0.0,
        "min_effect": claim.min_effect,
        "alpha": alpha,
    }
    kind = COUNT_METRICS.get(claim.metric)
    if kind == "binary":
        test, note = (
            stats.paired_binary_test(a, b, better=claim.better, alpha=alpha),
            "exact paired (McNemar) test",
        )
    elif kind == "count":
        test, note = (
            stats.paired_count_test(a, b, better=claim.better, alpha=alpha),
            "paired count test",
        )
    elif MEASURES[claim.metric].censored and table.diverged(a_arms + b_arms):
        test, note = (
            stats.rank_test(a, b, better=claim.better, alpha=alpha),
            "rank test: some runs diverged",
        )
    elif len(finite) < len(a):
        return ClaimResult(
            claim, None, stats.UNTESTABLE, estimate, note="the measure is n/a for some runs", **done
        )
    else:
        kw["smallest_effect"] = claim.smallest_effect or 0.0
        items = item_tables(table, claim, a_arms, b_arms, len(a))
        if items is not None:
            test = stats.test_claim(a, b, items=items, **kw)
            extra = stats.item_note(test)
            note = f"seeds and items both random ({len(items[0][0])} items)" + (
                f"; {extra}" if extra else ""
            )
        else:
            pooled, note = _pooled(table, claim, a_arms + b_arms, len(a))
            test = stats.test_claim(a, b, pooled=pooled, **kw)
    return ClaimResult(claim, test, test.outcome, estimate, note=note, **done)


def _judge_screening(table: Table, claim: Claim, alpha: float, fits: dict) -> ClaimResult:
    """A screening suite's claim: its factor's main effect from the least-squares fit
    of every run."""
    from archlab.lab.analysis import screening

    if claim.metric not in fits:
        fits[claim.metric] = screening.fit(table, claim.metric)
    a_arms, b_arms = table.suite.cells(claim, claim.arm), table.suite.cells(claim, claim.versus)
    a, b = _sides(table, claim, a_arms, b_arms)
    test, note = screening.claim_test(fits[claim.metric], table.suite, claim, alpha)
    done = {"a": a, "b": b, "arms": (claim.arm, claim.versus)}
    if test is None:
        estimate = statistics.fmean(x - y for x, y in zip(a, b)) if a else math.nan
        return ClaimResult(claim, None, stats.UNTESTABLE, estimate, note=note, **done)
    return ClaimResult(claim, test, test.outcome, test.estimate, note=note, **done)


def item_tables(
    table: Table, claim: Claim, a_arms: list[str], b_arms: list[str], n: int
) -> tuple[list[list[float]], list[list[float]]] | None:
    """Both sides' per-item outcomes (cell means, seeds x items) when the claim's measures have
    them, else None."""
    ia = _mean_items(table, a_arms, claim.metric, n)
    ib = _mean_items(table, b_arms, claim.versus_metric or claim.metric, n)
    if ia is None or ib is None or len(ia[0]) != len(ib[0]):
        return None
    return ia, ib


def _mean_items(table: Table, arms: list[str], metric: str, n: int) -> list[list[float]] | None:
    tables = [table.items(a, metric, n) for a in arms]
    if any(t is None or len(t) != n for t in tables):
        return None
    widths = {len(row) for t in tables for row in t}  # type: ignore[union-attr]
    if len(widths) != 1:
        return None
    width = widths.pop()
    return [[statistics.fmean(t[s][i] for t in tables) for i in range(width)] for s in range(n)]  # type: ignore[index]


def alike_group(suite: Suite, arms: list[str]) -> list[str] | None:
    """The `alike:` group holding every arm of a claim, or None."""
    return next((g for g in suite.alike if set(arms) <= set(g)), None)


def _pooled(table: Table, claim: Claim, arms: list[str], n: int) -> tuple[stats.Pooled | None, str]:
    """The pooled residual of the claim's alike group (scaled for cell means), or None with why
    the pair's own."""
    own = "the pair's own paired differences"
    if claim.versus_metric or claim.arm == claim.versus:
        return None, f"{own} (two metrics of one arm)"
    group = alike_group(table.suite, arms)
    if group is None or len(group) < 3:
        return None, own  # two alike arms: the pooled residual is the pair's own
    fit = spread(table, claim.metric, group, "alike arms " + ", ".join(group), n)
    if fit is None or not set(arms) <= set(fit.arms):
        return None, f"{own} (an arm of its alike group did not finish)"
    if fit.heteroscedastic:
        return None, f"{own} (the alike group's spreads differ > 3x)"
    k_a, k_b = len(table.suite.cells(claim, claim.arm)), len(table.suite.cells(claim, claim.versus))
    # a mean of k cells per seed has 1/k of one cell's variance
    scale = math.sqrt((1 / k_a + 1 / k_b) / 2)
    a, b = _sides(
        table, claim, table.suite.cells(claim, claim.arm), table.suite.cells(claim, claim.versus)
    )
    d = [x - y for x, y in zip(a, b)]
    pooled_var = 2.0 * (fit.sigma_eps * scale) ** 2
    if len(d) > 1 and pooled_var > 0:
        ratio = statistics.variance(d) / pooled_var
        tail = float(special.fdtr(len(d) - 1, fit.df, ratio))
        if 2.0 * min(tail, 1.0 - tail) < POOL_F_ALPHA:
            return (
                None,
                f"{own} (its variance differs from the alike group's pooled residual: "
                f"F = {ratio:.3g})",
            )
    return stats.Pooled(
        fit.sigma_eps * scale, fit.df
    ), f"pooled residual of {fit.regime} ({fit.df} df)"


def _judge_timing(claim: Claim, record: dict | None, alpha: float) -> ClaimResult:
    if record is None:
        return ClaimResult(
            claim,
            None,
            stats.INCONCLUSIVE,
            math.nan,
            note="not timed yet",
            arms=(claim.arm, claim.versus),
        )
    first = record["arms"][0] == claim.arm
    t_arm, t_versus = (record["a"], record["b"]) if first else (record["b"], record["a"])
    a, b = [math.log(t) for t in t_arm], [math.log(t) for t in t_versus]
    test = stats.test_claim(
        a,
        b,
        expect=claim.expect,
        better="lower",
        margin=claim.margin or 0.0,
        min_effect=claim.min_effect,
        alpha=alpha,
        smallest_effect=claim.smallest_effect or 0.0,
    )
    load = load_note(record)
    return ClaimResult(
        claim,
        test,
        test.outcome,
        test.estimate,
        a,
        b,
        note=f"{len(a)} interleaved pairs on fresh models, log time ratio"
        + (f"; {load}" if load else ""),
        arms=(claim.arm, claim.versus),
    )


def narang_agreement(claim: Claim, outcome: str, test: stats.ClaimTest | None = None) -> str:
    """Our outcome against Narang et al.'s finding for the claimed arm; an undecided outcome agrees
    with nothing (the absence of evidence is not evidence of "same"). A confirmed "not worse than"
    agrees with their "same", and with their "better" only when its interval also excludes 0 on the
    better side (`test`); otherwise it is consistent with "better" without showing it."""
    if claim.narang is None:
        return "not measured by Narang et al."
    theirs = f"Narang et al.: {claim.narang}"
    if outcome not in (stats.CONFIRMED, stats.CONTRADICTED):
        return f"{theirs}; not decided here ({outcome})"
    if outcome == stats.CONTRADICTED:
        return f"{theirs}; we {'agree' if claim.narang == 'worse' else 'disagree'}"
    if claim.expect == "better":
        return f"{theirs}; we {'agree' if claim.narang == 'better' else 'disagree'}"
    if claim.narang == "worse":
        return f"{theirs}; we disagree"
    shown_better = test is not None and (
        test.ci[1] < 0 if test.better == "lower" else test.ci[0] > 0
    )
    if claim.narang == "better" and not shown_better:
        return f"{theirs}; consistent (we show not worse by more than the margin, not better)"
    return f"{theirs}; we agree"


def with_outcome(result: ClaimResult, test: stats.ClaimTest, note: str) -> ClaimResult:
    """`result` re-decided by `test` (another family's adjustment), with `note` added."""
    return replace(
        result,
        test=test,
        outcome=test.outcome,
        note=f"{result.note}; {note}".lstrip("; "),
        narang=narang_agreement(result.claim, test.outcome, test),
    )


def suite_spreads(table: Table, metric: str) -> list[Spread]:
    """Every regime's statistics on `metric` (the page's "how noisy was this suite")."""
    suite = table.suite
    regimes = ([""] if any(regime_of(suite, [a.name]) == "" for a in suite.arms) else []) + list(
        suite.regimes
    )
    return [s for r in regimes if (s := regime_spread(table, metric, r)) is not None]


def factorial_anova(table: Table, metric: str) -> list[tuple[str, float, float, float]]:
    """The factorial analysis of a `factors:` suite on `metric`: OLS of the value on every factor,
    all their interactions and the seed (a block), with statsmodels' type-II analysis of variance;
    rows (term, df, F, p), the residual last (F and p NaN). Empty when a run diverged (its loss is
    censored) or a value is missing."""
    import pandas as pd
    from statsmodels.formula.api import ols
    from statsmodels.stats.anova import anova_lm

    suite = table.suite
    runs = [r for arm in suite.arms for r in table.runs.get(arm.name, [])[: table.seeds]]
    values = [r.values.get(metric, math.nan) for r in runs]
    if (
        not suite.factors
        or not runs
        or not all(math.isfinite(v) for v in values)
        or table.diverged([a.name for a in suite.arms])
    ):
        return []
    frame = pd.DataFrame(
        [
            {"y": v, "seed": r.seed, **{f"f_{k}": lv for k, lv in suite.arm(r.arm).levels.items()}}
            for r, v in zip(runs, values)
        ]
    )
    terms = " * ".join(f"C(f_{name})" for name in suite.factors)
    result = anova_lm(ols(f"y ~ {terms} + C(seed)", data=frame).fit(), typ=2)
    rows = []
    for term, row in result.iterrows():
        name = (
            "residual"
            if term == "Residual"
            else ":".join(
                part.removeprefix("C(f_").removeprefix("C(").rstrip(")")
                for part in str(term).split(":")
            )
        )
        rows.append((name, float(row["df"]), float(row["F"]), float(row["PR(>F)"])))
    return rows
