"""A compute ladder: the base recipe at several multiples of the budget's steps, and what it
says about margins.

The `compute-ladder` suite trains the base at 0.8x / 1x / 1.25x / 1.5x the budget's steps (warmup
scaled alike, the same seeds). Around 1x the final validation loss is close to linear in the log
of the compute (a power law in compute, Kaplan et al. 2020, arXiv 2001.08361, seen over a narrow
range), so with seeds as blocks

    L[s, x] = a_s - b * ln(x) + e[s, x]

and b, the nats one e-fold of compute buys, is an ordinary least-squares slope with seed fixed
effects (n(R - 1) - 1 residual degrees of freedom for n seeds and R rungs). A loss difference d is
then worth the compute multiplier exp(d / b): the base would need exp(d / b) times its steps to gain
d. Two figures calibrate the lab's equivalence margin ("as good as" = worse by less than what 25%
more base compute buys):

- the measured gain of the 1.25x rung over 1x, paired by seed, with its t interval, and
- the margin in use expressed as a multiplier, with the interval that b's interval gives.

Compute here is training steps at a fixed model and batch (training FLOPs are proportional to them).
The rungs differ in tokens seen, not in model size: this is the "more steps for the same model"
kind of compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from archlab.lab.analysis.table import Table

LADDER_SUITE = "compute-ladder"
CONFIDENCE = 0.95


@dataclass(frozen=True)
class LadderFit:
    """The fitted ladder: per rung the mean loss, the slope b (nats per e-fold of steps) and
    the 1.25x gain."""

    scales: tuple[float, ...]  # the rungs' multiples of the budget's steps, ascending
    means: tuple[float, ...]  # mean loss per rung over the seeds
    seeds: int  # seeds every rung ran (the blocks)
    slope: float  # b: the loss falls by b per e-fold of steps (> 0 when more compute helps)
    slope_ci: tuple[float, float]  # two-sided 95% interval of b
    df: int  # residual degrees of freedom of the fit
    gain_125: float | None  # mean over seeds of L(1x) - L(1.25x), when both rungs ran
    gain_125_ci: tuple[float, float] | None  # its two-sided 95% paired t interval

    def multiplier(self, d: float) -> float:
        """The compute multiple the base needs to gain `d` nats: exp(d / b) (inf when b <= 0)."""
        return math.exp(d / self.slope) if self.slope > 0 else math.inf

    def multiplier_ci(self, d: float) -> tuple[float, float]:
        """exp(d / b) at b's interval ends (a larger slope makes d cheaper); inf where the bound
        is <= 0."""
        low_b, high_b = self.slope_ci
        return (
            math.exp(d / high_b) if high_b > 0 else math.inf,
            math.exp(d / low_b) if low_b > 0 else math.inf,
        )


def fit_ladder(values: dict[float, list[float]]) -> LadderFit | None:
    """Fit L[s, x] = a_s - b ln x from {scale: per-seed losses in seed order}; None with fewer than
    two rungs or two seeds, or a non-finite loss (a diverged rung says nothing about the slope)."""
    scales = sorted(values)
    n = min((len(v) for v in values.values()), default=0)
    if len(scales) < 2 or n < 2:
        return None
    # seeds x rungs
    y = np.array([[values[x][s] for x in scales] for s in range(n)], dtype=np.float64)
    if not np.isfinite(y).all():
        return None
    logx = np.log(np.array(scales, dtype=np.float64))
    # the seed effects drop out of the slope by centring within each seed (the within
    # estimator of OLS)
    yc = y - y.mean(axis=1, keepdims=True)
    xc = logx - logx.mean()
    sxx = n * float(xc @ xc)
    slope = -float((yc @ xc).sum()) / sxx
    resid = yc + slope * xc[None, :]
    df = n * (len(scales) - 1) - 1
    half = math.inf
    if df > 0:
        s2 = float((resid**2).sum()) / df
        half = float(sps.t.ppf(0.5 + CONFIDENCE / 2, df)) * math.sqrt(s2 / sxx)
    gain = gain_ci = None
    if 1.0 in values and 1.25 in values:
        d = np.array(values[1.0][:n]) - np.array(values[1.25][:n])
        gain = float(d.mean())
        h = float(sps.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * float(d.std(ddof=1)) / math.sqrt(n)
        gain_ci = (gain - h, gain + h)
    return LadderFit(
        tuple(scales),
        tuple(float(m) for m in y.mean(axis=0)),
        n,
        slope,
        (slope - half, slope + half),
        df,
        gain,
        gain_ci,
    )


def ladder_values(table: Table, metric: str = "val_loss") -> dict[float, list[float]]:
    """{steps_scale: per-seed values} of a suite's arms that differ from its base only in
    steps_scale (a suite's own rungs: the compute-ladder suite, or a suite that prices its margin on
    its own base)."""
    suite = table.suite
    base = {k: v for k, v in suite.base_arm.overrides.items() if k != "model.d_ff"}
    rungs = [
        a for a in suite.arms if {k: v for k, v in a.overrides.items() if k != "model.d_ff"} == base
    ]
    if len({a.steps_scale for a in rungs}) != len(rungs):
        return {}
    return {a.steps_scale: table.values(a.name, metric, table.seeds) for a in rungs}


def describe(fit: LadderFit, margin: float | None = None) -> str:
    """The ladder in a sentence or two: the 1.25x gain, the slope and, given one, a margin
    as a multiplier."""
    parts = [
        f"On this budget's compute ladder ({', '.join(f'{x:g}x' for x in fit.scales)} the steps, "
        f"{fit.seeds} seeds), the loss falls {fit.slope:.4f} nats per e-fold of steps "
        f"(95% CI [{fit.slope_ci[0]:.4f}, {fit.slope_ci[1]:.4f}])"
    ]
    if fit.gain_125 is not None:
        low, high = fit.gain_125_ci
        parts.append(
            f"25% more steps buy {fit.gain_125:.4f} nats ([{low:.4f}, {high:.4f}], paired by seed)"
        )
    text = "; ".join(parts) + "."
    if margin is not None:
        low, high = fit.multiplier_ci(margin)
        text += (
            f" A margin of {margin:g} nats is worth {_times(fit.multiplier(margin))} the base's "
            f"compute (95% CI {_times(low)} to {_times(high)})."
        )
    return text


def _times(m: float) -> str:
    return "unbounded" if math.isinf(m) else f"{m:.2f}x"
