"""A suite's runs as a randomized complete block design: arms are treatments, training
seeds are blocks.

Model: y[a, s] = mu_a + beta_s + e[a, s], with e ~ N(0, sigma_eps^2) independent (Montgomery, Design
and Analysis of Experiments, ch. 4). Every arm runs the same seeds 0..n-1, so beta_s (the batch
order, evaluation windows and init the arms share at seed s) cancels from every contrast, and the
residual variance is pooled over all K arms:

- sigma_eps^2 = SS_residual / ((K - 1)(n - 1)), the residual after removing the arm and
  the seed means;
- a contrast mu_A - mu_B has SE sigma_eps * sqrt(2 / n) with (K - 1)(n - 1) df (`Pooled`, passed to
  `stats.test_claim`), instead of the n - 1 df of the pair's own differences;
- the seed variance component tau^2 = (MS_seed - MS_residual) / K (the ANOVA estimator), the per-run
  spread sigma_run = sqrt(max(tau^2, 0) + sigma_eps^2) and the between-arm seed correlation rho
  = tau^2 / (tau^2 + sigma_eps^2) (the intraclass correlation of the seeds; negative when arms
  disagree more than seeds vary).

Pooling assumes the arms share sigma_eps. `arm_spreads` estimates each arm's residual sd (Shukla's
stability variance, Heredity 29:237, 1972), and `heteroscedastic` flags a spread ratio above
`HETEROSCEDASTIC_RATIO` that Bartlett's test of equal variances (on the residual rows) also finds
significant at 5%; callers then judge such pairs on their own differences (`test_claim` without
`pooled`) or pool within declared regimes. With 2 arms the residuals of the two arms are equal and
opposite, so the flag cannot fire, and the pooled test equals the paired t-test. With 3 seeds each
arm's spread rests on ~2 df: a 3x ratio alone occurs by chance in most homoscedastic suites, and the
test rarely detects a real 4x arm (docs/lab-statistics.md gives both rates), so regimes known in
advance (high learning rates) are better declared in the suite than detected.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

# largest / smallest arm residual sd above which pooling is not trusted ...
HETEROSCEDASTIC_RATIO = 3.0
# ... when Bartlett's test also rejects equal spreads (a 3x ratio alone is chance at n = 3)
HOMOGENEITY_ALPHA = 0.05


@dataclass(frozen=True)
class Pooled:
    """A pooled residual: sigma_eps (sd of one run's residual) and its degrees of freedom."""

    sigma: float
    df: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise ValueError(f"Pooled.sigma must be a finite number >= 0, got {self.sigma!r}")
        if not (math.isfinite(self.df) and self.df >= 1):
            raise ValueError(f"Pooled.df must be >= 1, got {self.df!r}")


@dataclass(frozen=True)
class Rcbd:
    """The arm + seed analysis of one suite (the module doc has the formulas)."""

    arms: tuple[str, ...]
    n: int  # seeds per arm
    arm_means: dict[str, float]
    seed_means: tuple[float, ...]
    residuals: dict[str, tuple[float, ...]]
    pooled: Pooled
    tau: float  # sd of the seed (block) effect; 0 when the ANOVA estimate is negative
    sigma_run: float
    rho: float
    arm_spreads: dict[str, float]
    spread_ratio: float
    # Bartlett's test of equal residual variances over the arms (NaN with 2 arms)
    homogeneity_p: float
    heteroscedastic: bool


def _table(table: Mapping[str, Sequence[float]]) -> tuple[tuple[str, ...], np.ndarray]:
    if len(table) < 2:
        raise ValueError(f"rcbd needs at least 2 arms, got {len(table)}: {list(table)}")
    lengths = {arm: len(v) for arm, v in table.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"rcbd needs every arm on the same seeds; seeds per arm: {lengths}")
    y = np.array([list(map(float, v)) for v in table.values()], dtype=np.float64)
    if y.shape[1] < 2:
        raise ValueError(f"rcbd needs at least 2 seeds per arm, got {y.shape[1]}")
    bad = [
        (arm, s)
        for arm, row in zip(table, y, strict=True)
        for s, v in enumerate(row)
        if not math.isfinite(v)
    ]
    if bad:
        raise ValueError(
            f"rcbd got non-finite values at (arm, seed) {bad}: judge diverged runs with rank_test"
        )
    return tuple(table), y


def _arm_spreads(e: np.ndarray, ms_residual: float) -> np.ndarray:
    """Each arm's residual sd: Shukla's (1972) stability variance, unbiased when only that
    arm's sigma differs.

    A residual mixes every arm's noise through the seed mean, so the arm's own mean square
    understates a noisy arm and overstates a quiet one; sigma_a^2 = K / ((K - 2)(n - 1)) * sum_s
    e[a, s]^2 - SS_e / ((K - 1)(K - 2) (n - 1)) undoes that (clipped at 0). With 2 arms the two
    cannot be told apart: both get the pooled sigma.
    """
    k, n = e.shape
    if k == 2:
        return np.full(k, math.sqrt(ms_residual))
    ss_arm = np.sum(e * e, axis=1)
    var = k / ((k - 2) * (n - 1)) * ss_arm - float(ss_arm.sum()) / ((k - 1) * (k - 2) * (n - 1))
    return np.sqrt(np.maximum(var, 0.0))


def _bartlett(e: np.ndarray) -> float:
    """Bartlett's (1937) test of equal variances over the arms' residual rows, as
    scipy.stats.bartlett computes it.

    Written out (equal row lengths) because rcbd runs inside simulations; approximate here, as the
    rows share the seed means. NaN with 2 arms (mirror rows) or a row without spread.
    """
    k, n = e.shape
    var = e.var(axis=1, ddof=1)
    if k == 2 or np.any(var == 0):
        return math.nan
    pooled = float(var.mean())
    statistic = (n - 1) * (k * math.log(pooled) - float(np.sum(np.log(var))))
    correction = 1.0 + (k / (n - 1) - 1.0 / (k * (n - 1))) / (3.0 * (k - 1))
    return float(special.chdtrc(k - 1, statistic / correction))


def rcbd(table: Mapping[str, Sequence[float]]) -> Rcbd:
    """Fit y[a, s] = mu_a + beta_s + e from `{arm: values in seed order}` (every arm on
    the same seeds)."""
    arms, y = _table(table)
    k, n = y.shape
    grand = y.mean()
    arm_means, seed_means = y.mean(axis=1), y.mean(axis=0)
    e = y - arm_means[:, None] - seed_means[None, :] + grand
    df = (k - 1) * (n - 1)
    ms_residual = float(np.sum(e * e)) / df
    ms_seed = k * float(np.sum((seed_means - grand) ** 2)) / (n - 1)
    tau2 = (ms_seed - ms_residual) / k
    total = tau2 + ms_residual
    rho = tau2 / total if total > 0 else math.nan
    spreads = _arm_spreads(e, ms_residual)
    low, high = float(spreads.min()), float(spreads.max())
    ratio = high / low if low > 0 else (math.inf if high > 0 else 1.0)
    homogeneity = _bartlett(e)
    return Rcbd(
        arms=arms,
        n=n,
        arm_means=dict(zip(arms, map(float, arm_means), strict=True)),
        seed_means=tuple(map(float, seed_means)),
        residuals={a: tuple(map(float, row)) for a, row in zip(arms, e, strict=True)},
        pooled=Pooled(math.sqrt(ms_residual), df),
        tau=math.sqrt(max(tau2, 0.0)),
        sigma_run=math.sqrt(max(tau2, 0.0) + ms_residual),
        rho=rho,
        arm_spreads=dict(zip(arms, map(float, spreads), strict=True)),
        spread_ratio=ratio,
        homogeneity_p=homogeneity,
        heteroscedastic=ratio > HETEROSCEDASTIC_RATIO and homogeneity < HOMOGENEITY_ALPHA,
    )
