"""A screening suite's analysis: every run informs every main effect.

The runs of a 2^(k-p) design (lab/spec/design.py), each at every seed, are fitted by least squares
(statsmodels) on the coded factors (-1 for a factor's first level, +1 for its second), one column
per alias chain of two-factor interactions that no main effect shares, and the seed as a block:

    y[r, s] = mu + beta_s + sum_j (E_j / 2) x[r, j] + sum_c (E_c / 2) x_c[r] + e[r, s]

so a main effect E_j is the mean of the runs at +1 minus the mean at -1 (twice the coefficient),
with standard error 2 sigma / sqrt(N) for N runs in all and (S - 1)(R - 1) residual df for S seeds
of R rows when the model is saturated, plus one df per column that aliases only three-factor
or higher interactions (Box, Hunter & Hunter ch. 5-6; Montgomery, *Design and Analysis of
Experiments*, ch. 8). A claim on a factor is that factor's main effect, judged by the lab's rule
(`stats.test_estimate`: superiority, non-inferiority or equivalence at the claim's margin, Holm
within the suite); at resolution IV it is clear of two-factor interactions, and an interaction
chain's estimate belongs to every member of the chain. Plots: the half-normal plot of the effects
(Daniel 1959: inert effects fall on a line through 0, active ones off it) and the main effects.

One sigma for every run is an assumption, checked before pooling (`check_rows`): each row's variance
over its seeds, the seed block removed (the rows x seeds table's residual sum of squares in that
row, S - 1 df), is tested by Cochran's C, the largest row variance over their sum (Cochran 1941,
"The distribution of the largest of a set of estimated variances as a fraction of their total", Ann.
Eugenics 11:47), at COCHRAN_ALPHA against

    C_crit = 1 / (1 + (k - 1) / F_{alpha / k}(S - 1, (k - 1)(S - 1)))

for k rows, F_q the upper-q point of F: the form whose values are the published tables (the 1% table
reproduced at faculty.washington.edu/heagerty/Books/Biostatistics/TABLES/Cochran/, to its 4 digits;
tests). A row above it is flagged and the test repeated on the rest (ISO 5725-2's iteration) until
none is. A flagged row keeps its runs but gets its own variance: the fit becomes weighted least
squares with weights 1 / variance (the stable rows' pooled variance, (R_u - 1)(S - 1) df, and each
flagged row's own, S - 1 df, the stable rows' seed effects removed). Each effect's variance is sum_i
A[j, i]^2 v_i for A = (X' W X)^-1 X' W, a sum over the variance groups, with Satterthwaite's (1946)
df. Pooling instead spreads one row's variance over every row and claims the df of all of them; the
flagged row's own variance alone (its runs at equal weight) would keep its noise in every estimate
and leave about 1 df. Weighting keeps the row and gives it the little weight its spread earns.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import special
from scipy import stats as sp

from archlab.lab.analysis import stats
from archlab.lab.analysis.table import Table
from archlab.lab.spec.design import LETTERS, Design, effect_columns
from archlab.lab.spec.suite import Claim, Suite, screening_design

# a flagged row re-weights the whole fit: test at 1% so that chance flags are rare
COCHRAN_ALPHA = 0.01


@dataclass(frozen=True)
class RowCheck:
    """Cochran's C test of the design rows' variances (module doc), repeated on the rest after
    each flagged row."""

    c: float  # the first test's C over every row (largest row variance over their sum)
    critical: float  # its critical value at COCHRAN_ALPHA
    df: int  # each row's df (S - 1)
    variance: float  # the stable rows' pooled variance
    pooled_df: int  # its df
    unstable: dict[str, float]  # flagged rows -> their own variance, in the order found
    # the first flagged row's share of the rows' residual sum of squares: C (0 without one)
    share: float


@dataclass(frozen=True)
class Effect:
    """One column of the fit: a main effect or a chain of aliased two-factor interactions."""

    term: str  # a factor's name, or "f x g" for an interaction chain (its first member)
    # the whole chain in factor names ("norm x ffn = bias x tying"), main effects' 2fi aliases
    aliases: str
    estimate: float  # mean at +1 minus mean at -1 (twice the coefficient)
    se: float
    p: float  # two-sided, at the fit's residual df
    main: bool
    letters: str = ""  # the chain in the design's letters ("AB = DG = EF"; a main effect: "A")
    # the test's df (the fit's residual df; Satterthwaite's when rows are weighted)
    df: float = math.nan


@dataclass(frozen=True)
class Fit:
    effects: list[Effect]
    sigma: float  # residual sd of one run
    df: float  # residual degrees of freedom
    runs: int  # rows of the design
    seeds: int
    design: Design
    metric: str
    # the rows' variance check (None with one seed: no row has a variance)
    rows: RowCheck | None = None
    pooled_sigma: float = math.nan  # the ordinary least squares fit's residual sd, every row pooled
    pooled_df: float = math.nan  # its df

    def effect(self, factor: str) -> Effect:
        return next(e for e in self.effects if e.main and e.term == factor)


def coded(suite: Suite, arm: str) -> list[int]:
    """An arm's coded levels, in the factors' order: -1 at a factor's first level, +1
    at its second."""
    levels = suite.arm(arm).levels
    return [1 if levels[f] == names[1] else -1 for f, names in suite.factors.items()]


def _names(suite: Suite, word: str) -> str:
    factors = list(suite.factors)
    return " x ".join(factors[LETTERS.index(c)] for c in word)


def cochran_critical(k: int, df: int, alpha: float = COCHRAN_ALPHA) -> float:
    """Cochran's C critical value for k variances of df degrees of freedom each at level
    alpha (module doc)."""
    return 1.0 / (1.0 + (k - 1) / float(sp.f.isf(alpha / k, df, (k - 1) * df)))


def _row_ss(y: np.ndarray) -> np.ndarray:
    """Each row's residual sum of squares in the rows x seeds table y (row and
    seed means removed)."""
    resid = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + y.mean()
    return (resid * resid).sum(axis=1)


def check_rows(names: list[str], y: np.ndarray, alpha: float = COCHRAN_ALPHA) -> RowCheck:
    """Cochran's C on the rows of y (rows x seeds, at least 2 seeds), flagging the largest in
    turn (module doc)."""
    rows, seeds = y.shape
    stable, unstable, tests = list(range(rows)), [], []
    # C of k = 2 rows is 1/2 or more by construction: nothing left to compare
    while len(stable) >= 3:
        ss = _row_ss(y[stable])
        c = float(ss.max() / ss.sum()) if ss.sum() > 0 else 0.0
        tests.append((c, cochran_critical(len(stable), seeds - 1, alpha)))
        if c <= tests[-1][1]:
            break
        unstable.append(stable.pop(int(ss.argmax())))
    rest = y[stable]
    pooled_df = (len(stable) - 1) * (seeds - 1)
    # the stable rows' seed block, removed from a flagged row too
    seed_effect = rest.mean(axis=0) - rest.mean()
    own = {}
    for r in unstable:
        resid = y[r] - y[r].mean() - seed_effect
        own[names[r]] = float(resid @ resid) / (seeds - 1)
    c, critical = tests[0] if tests else (0.0, 1.0)
    return RowCheck(
        c,
        critical,
        seeds - 1,
        float(_row_ss(rest).sum()) / pooled_df,
        pooled_df,
        own,
        c if unstable else 0.0,
    )


def _weighted(
    matrix: np.ndarray,
    y: np.ndarray,
    variances: np.ndarray,
    groups: np.ndarray,
    dfs: dict[int, float],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted least squares at known run variances: (coefficients, their SEs, Satterthwaite
    df of each), the variance of coefficient j being sum_g a_gj v_g over the variance
    groups (module doc)."""
    weights = 1.0 / variances
    inverse = np.linalg.inv(matrix.T @ (weights[:, None] * matrix))
    a = inverse @ (matrix.T * weights)  # coefficients = a @ y
    parts = np.stack(
        [(a[:, groups == g] ** 2).sum(axis=1) * variances[groups == g][0] for g in dfs]
    )
    var = parts.sum(axis=0)
    df = var**2 / sum(parts[i] ** 2 / dfs[g] for i, g in enumerate(dfs))
    return a @ y, np.sqrt(var), df


def fit(table: Table, metric: str) -> Fit | None:
    """The least-squares fit (module doc) over the design's seeds, or None when a run is missing or
    not finite; weighted when the rows' variance check flags a row."""
    import statsmodels.api as sm

    suite = table.suite
    d = screening_design(suite, suite.factors)
    seeds = table.seeds
    observed = _responses(table, metric)
    if observed is None:
        return None
    x, y, seed_of, by_row = observed
    matrix, terms = _model_matrix(suite, d, x, seed_of, seeds)
    result = sm.OLS(y, matrix).fit()
    first = seeds  # the intercept and seeds - 1 block columns come before the effects
    df = float(result.df_resid)
    if df < 1:
        return None
    names = [a.name for a in suite.arms]
    check = check_rows(names, by_row) if seeds >= 2 else None
    coefs, ses, dfs = (
        np.asarray(result.params),
        np.asarray(result.bse),
        np.full(matrix.shape[1], df),
    )
    sigma = float(np.sqrt(result.scale))
    if check is not None and check.unstable:
        # the flagged rows keep their own variance; the others share the pooled one
        row_of = np.repeat(np.arange(len(names)), seeds)
        group = {names.index(n): i + 1 for i, n in enumerate(check.unstable)}
        groups = np.asarray([group.get(int(r), 0) for r in row_of])
        own = [check.variance] + list(check.unstable.values())
        coefs, ses, dfs = _weighted(
            matrix,
            y,
            np.asarray([own[g] for g in groups]),
            groups,
            {0: float(check.pooled_df), **{g: float(seeds - 1) for g in group.values()}},
        )
        sigma, df = math.sqrt(check.variance), float(check.pooled_df)
    effects = [
        _effect(suite, term, chain, main, coefs[first + i], ses[first + i], dfs[first + i])
        for i, (term, chain, main) in enumerate(terms)
    ]
    return Fit(
        effects,
        sigma,
        df,
        d.runs,
        seeds,
        d,
        metric,
        check,
        float(np.sqrt(result.scale)),
        float(result.df_resid),
    )


def _responses(
    table: Table, metric: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The coded design rows (one per run), the responses, each run's seed and the responses by row
    (rows x seeds); None when a run is missing, not finite or diverged."""
    suite, seeds = table.suite, table.seeds
    rows, y, seed_of, by_row = [], [], [], []
    for arm in suite.arms:
        values = table.values(arm.name, metric, seeds)
        if (
            len(values) < seeds
            or not all(math.isfinite(v) for v in values)
            or table.diverged([arm.name])
        ):
            return None
        by_row.append(values[:seeds])
        for s, v in enumerate(values):
            rows.append(coded(suite, arm.name))
            y.append(v)
            seed_of.append(s)
    return (
        np.asarray(rows, dtype=np.float64),
        np.asarray(y),
        np.asarray(seed_of),
        np.asarray(by_row, dtype=np.float64),
    )


def _model_matrix(
    suite: Suite, d: Design, x: np.ndarray, seed_of: np.ndarray, seeds: int
) -> tuple[np.ndarray, list[tuple[str, list[str], bool]]]:
    """The model matrix (intercept, a block column per seed after the first, the main effects, then
    one column per two-factor alias chain) and each effect column's (term, alias chain, is main)."""
    # the chains of main effects come first, each named by its factor
    terms = [(_names(suite, chain[0]), chain, len(chain[0]) == 1) for chain in d.chains(2)]
    columns = effect_columns(d, x)
    blocks = [(seed_of == s).astype(np.float64) for s in range(1, seeds)]
    return np.column_stack([np.ones(len(seed_of)), *blocks, *columns]), terms


def _effect(
    suite: Suite, term: str, chain: list[str], main: bool, coef: float, se: float, df: float
) -> Effect:
    """One effect (twice its coefficient, high minus low) with its two-sided t-test."""
    coef, se, df = float(coef), float(se), float(df)
    p = float(2 * special.stdtr(df, -abs(coef) / se)) if se > 0 else math.nan
    aliases = " = ".join(_names(suite, w) for w in chain)
    return Effect(
        term, aliases, 2 * coef, 2 * se, p, main, " = ".join(w.upper() for w in chain), df
    )


def claim_test(
    fit_: Fit | None, suite: Suite, claim: Claim, alpha: float
) -> tuple[stats.ClaimTest | None, str]:
    """A factor claim's test on its main effect: (ClaimTest, note), or (None, why it
    cannot be tested)."""
    if fit_ is None:
        return (
            None,
            "a run is missing, diverged or not finite: the least-squares fit needs every run",
        )
    names = suite.factors[claim.factor]
    effect = fit_.effect(claim.factor)
    sign = 1.0 if claim.arm == names[1] else -1.0  # arm - versus: +E when the arm is the +1 level
    how = (
        f"weighted least squares, {len(fit_.rows.unstable)} unstable row at its own "
        f"variance, {effect.df:.3g} df"
        if fit_.rows is not None and fit_.rows.unstable
        else f"least squares, {fit_.df:g} residual df"
    )
    note = f"main effect from all {fit_.runs} runs x {fit_.seeds} seeds ({how})" + (
        f"; aliased with {effect.aliases.split(' = ', 1)[1]}" if " = " in effect.aliases else ""
    )
    test = stats.test_estimate(
        sign * effect.estimate,
        effect.se,
        effect.df,
        expect=claim.expect,
        better=claim.better,
        margin=claim.margin or 0.0,
        min_effect=claim.min_effect,
        alpha=alpha,
        smallest_effect=claim.smallest_effect or 0.0,
        n=fit_.runs * fit_.seeds,
        test=stats.OLS_TEST,
    )
    return test, note


def level_means(table: Table, metric: str) -> dict[str, tuple[float, float]]:
    """Per factor, the mean of `metric` over the runs at its first and at its second level
    (main effects plot)."""
    suite = table.suite
    out = {}
    for f, names in suite.factors.items():
        sides = [
            [
                v
                for a in suite.arms
                if a.levels[f] == level
                for v in table.values(a.name, metric, table.seeds)
            ]
            for level in names
        ]
        out[f] = (statistics.fmean(sides[0]), statistics.fmean(sides[1]))
    return out


def plot(fit_: Fit, table: Table, folder: Path) -> list[Path]:
    """half_normal.png (|effects| against half-normal quantiles, labelled) and main_effects.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    effects = sorted(fit_.effects, key=lambda e: abs(e.estimate))
    m = len(effects)
    # Daniel's plotting positions
    quantiles = [float(special.ndtri(0.5 + 0.5 * (i + 0.5) / m)) for i in range(m)]
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter(
        [abs(e.estimate) for e in effects], quantiles, c=["C0" if e.main else "C1" for e in effects]
    )
    for e, q in zip(effects, quantiles):
        label = e.term if e.main else e.letters  # a chain is all of its members, not its first
        ax.annotate(
            label, (abs(e.estimate), q), fontsize=8, xytext=(3, 2), textcoords="offset points"
        )
    ax.set_xlabel(
        f"|effect| on {fit_.metric} (blue: main effects, orange: two-factor interaction chains)"
    )
    key = ", ".join(f"{chr(65 + j)} = {f}" for j, f in enumerate(table.suite.factors))
    fig.text(0.01, 0.005, key, fontsize=6)
    ax.set_ylabel("half-normal quantile")
    ax.set_title(f"{table.suite.name}: half-normal plot of the effects")
    paths = [folder / "half_normal.png"]
    fig.tight_layout()
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)
    means = level_means(table, fit_.metric)
    fig, axes = plt.subplots(1, len(means), figsize=(2.2 * len(means), 3.2), sharey=True)
    for ax, (f, (low, high)) in zip(np.atleast_1d(axes), means.items()):
        ax.plot([0, 1], [low, high], marker="o")
        ax.set_xticks([0, 1], table.suite.factors[f], fontsize=7, rotation=20)
        ax.set_title(f, fontsize=8)
    np.atleast_1d(axes)[0].set_ylabel(fit_.metric)
    fig.suptitle(f"{table.suite.name}: main effects (mean over the runs at each level)", fontsize=9)
    fig.tight_layout()
    paths.append(folder / "main_effects.png")
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)
    return paths
