"""A screening suite's analysis: every run informs every main effect.

The runs of a 2^(k-p) design (lab/spec/design.py), each at every seed, are fitted by ordinary least squares
(statsmodels) on the coded factors (-1 for a factor's first level, +1 for its second), one column per alias chain
of two-factor interactions that no main effect shares, and the seed as a block:

    y[r, s] = mu + beta_s + sum_j (E_j / 2) x[r, j] + sum_c (E_c / 2) x_c[r] + e[r, s]

so a main effect E_j is the mean of the runs at +1 minus the mean at -1 (twice the coefficient), with standard
error 2 sigma / sqrt(N) for N runs in all and (S - 1)(R - 1) residual df for S seeds of R rows when the model is
saturated (Box, Hunter & Hunter ch. 5-6; Montgomery, *Design and Analysis of Experiments*, ch. 8). A claim on a
factor is that factor's main effect, judged by the lab's rule (`stats.test_estimate`: superiority, non-inferiority
or equivalence at the claim's margin, Holm within the suite); at resolution IV it is clear of two-factor
interactions, and an interaction chain's estimate belongs to every member of the chain. Plots: the half-normal plot
of the effects (Daniel 1959: inert effects fall on a line through 0, active ones off it) and the main effects.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import special

from archlab.lab.analysis import stats
from archlab.lab.analysis.table import Table
from archlab.lab.spec.design import LETTERS, Design
from archlab.lab.spec.suite import Claim, Suite, screening_design


@dataclass(frozen=True)
class Effect:
    """One column of the fit: a main effect or a chain of aliased two-factor interactions."""

    term: str  # a factor's name, or "f x g" for an interaction chain (its first member)
    aliases: str  # the whole chain in factor names ("norm x ffn = bias x tying"), main effects' 2fi aliases
    estimate: float  # mean at +1 minus mean at -1 (twice the coefficient)
    se: float
    p: float  # two-sided, at the fit's residual df
    main: bool
    letters: str = ""  # the chain in the design's letters ("AB = DG = EF"; a main effect: "A")


@dataclass(frozen=True)
class Fit:
    effects: list[Effect]
    sigma: float  # residual sd of one run
    df: float  # residual degrees of freedom
    runs: int  # rows of the design
    seeds: int
    design: Design
    metric: str

    def effect(self, factor: str) -> Effect:
        return next(e for e in self.effects if e.main and e.term == factor)


def coded(suite: Suite, arm: str) -> list[int]:
    """An arm's coded levels, in the factors' order: -1 at a factor's first level, +1 at its second."""
    levels = suite.arm(arm).levels
    return [1 if levels[f] == names[1] else -1 for f, names in suite.factors.items()]


def _names(suite: Suite, word: str) -> str:
    factors = list(suite.factors)
    return " x ".join(factors[LETTERS.index(c)] for c in word)


def fit(table: Table, metric: str) -> Fit | None:
    """The least-squares fit (module doc) over the design's seeds, or None when a run is missing or not finite."""
    import statsmodels.api as sm

    suite = table.suite
    d = screening_design(suite, len(suite.factors))
    seeds = table.seeds
    rows, y, seed_of = [], [], []
    for arm in suite.arms:
        values = table.values(arm.name, metric, seeds)
        if len(values) < seeds or not all(math.isfinite(v) for v in values) or table.diverged([arm.name]):
            return None
        for s, v in enumerate(values):
            rows.append(coded(suite, arm.name))
            y.append(v)
            seed_of.append(s)
    x = np.asarray(rows, dtype=np.float64)
    chains = d.chains(2)
    columns, terms = [x[:, j] for j in range(x.shape[1])], []
    for chain in chains:
        if len(chain[0]) == 1:
            terms.append((list(suite.factors)[LETTERS.index(chain[0])], chain, True))
    for chain in chains:
        if len(chain[0]) == 2:
            a, b = (LETTERS.index(c) for c in chain[0])
            columns.append(x[:, a] * x[:, b])
            terms.append((_names(suite, chain[0]), chain, False))
    blocks = [(np.asarray(seed_of) == s).astype(np.float64) for s in range(1, seeds)]
    matrix = np.column_stack([np.ones(len(y)), *blocks, *columns])
    result = sm.OLS(np.asarray(y), matrix).fit()
    first = 1 + len(blocks)
    df = float(result.df_resid)
    if df < 1:
        return None
    effects = []
    for i, (term, chain, main) in enumerate(terms):
        coef, se = float(result.params[first + i]), float(result.bse[first + i])
        p = float(2 * special.stdtr(df, -abs(coef) / se)) if se > 0 else math.nan
        aliases = " = ".join(_names(suite, w) for w in chain)
        effects.append(Effect(term, aliases, 2 * coef, 2 * se, p, main, " = ".join(w.upper() for w in chain)))
    return Fit(effects, float(np.sqrt(result.scale)), df, d.runs, seeds, d, metric)


def claim_test(fit_: Fit | None, suite: Suite, claim: Claim, alpha: float) -> tuple[stats.ClaimTest | None, str]:
    """A factor claim's test on its main effect: (ClaimTest, note), or (None, why it cannot be tested)."""
    if fit_ is None:
        return None, "a run is missing, diverged or not finite: the least-squares fit needs every run"
    names = suite.factors[claim.factor]
    effect = fit_.effect(claim.factor)
    sign = 1.0 if claim.arm == names[1] else -1.0  # arm - versus: +E when the arm is the +1 level
    note = (f"main effect from all {fit_.runs} runs x {fit_.seeds} seeds (least squares, {fit_.df:g} residual df)"
            + (f"; aliased with {effect.aliases.split(' = ', 1)[1]}" if " = " in effect.aliases else ""))
    test = stats.test_estimate(sign * effect.estimate, effect.se, fit_.df, expect=claim.expect, better=claim.better,
                               margin=claim.margin or 0.0, min_effect=claim.min_effect, alpha=alpha,
                               smallest_effect=claim.smallest_effect or 0.0, n=fit_.runs * fit_.seeds,
                               test=stats.OLS_TEST)
    return test, note


def level_means(table: Table, metric: str) -> dict[str, tuple[float, float]]:
    """Per factor, the mean of `metric` over the runs at its first and at its second level (main effects plot)."""
    suite = table.suite
    out = {}
    for f, names in suite.factors.items():
        sides = [[v for a in suite.arms if a.levels[f] == level for v in table.values(a.name, metric, table.seeds)]
                 for level in names]
        out[f] = (statistics.fmean(sides[0]), statistics.fmean(sides[1]))
    return out


def plot(fit_: Fit, table: Table, folder: Path) -> list[Path]:
    """half_normal.png (|effects| against half-normal quantiles, labelled) and main_effects.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    effects = sorted(fit_.effects, key=lambda e: abs(e.estimate))
    m = len(effects)
    quantiles = [float(special.ndtri(0.5 + 0.5 * (i + 0.5) / m)) for i in range(m)]  # Daniel's plotting positions
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter([abs(e.estimate) for e in effects], quantiles, c=["C0" if e.main else "C1" for e in effects])
    for e, q in zip(effects, quantiles):
        label = e.term if e.main else e.letters  # a chain is all of its members, not its first
        ax.annotate(label, (abs(e.estimate), q), fontsize=8, xytext=(3, 2), textcoords="offset points")
    ax.set_xlabel(f"|effect| on {fit_.metric} (blue: main effects, orange: two-factor interaction chains)")
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
