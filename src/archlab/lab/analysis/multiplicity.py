"""Adjusted p-values for a family of tests: Holm's step-down (within a suite),
Benjamini-Hochberg's false discovery rate (across the published summary, secondary), Dunnett's
many-to-one (every arm against one base on one pooled residual). Pure functions of p-values;
`archlab.lab.analysis.stats.adjust` re-derives outcomes from them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import special

# Gauss-Hermite x Gauss-Laguerre nodes: agrees with scipy.stats.dunnett to ~1e-5 (its QMC)
_DUNNETT_NODES = 64


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values, in the input order; NaN stays NaN and
    is not counted.

    Sorted ascending, the i-th of m p-values (from 0) is multiplied by m - i, capped at 1, then made
    non-decreasing. Rejecting where adjusted p < alpha keeps the family-wise error rate at alpha
    under any dependence.
    """
    p = np.asarray(p_values, dtype=np.float64)
    keep = np.nonzero(~np.isnan(p))[0]
    order = keep[np.argsort(p[keep], kind="stable")]
    m = order.size
    steps = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.full(p.shape, np.nan)
    adjusted[order] = np.maximum.accumulate(steps) if m else steps
    return adjusted.tolist()


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini & Hochberg's (1995) step-up adjusted p-values ("q-values"), in the input order;
    NaN stays NaN.

    Sorted ascending, the i-th of m (from 1) is p * m / i, then the running minimum from the largest
    down, capped at 1. Rejecting where adjusted p < q keeps the false discovery rate at q for
    independent or positively dependent tests.
    """
    p = np.asarray(p_values, dtype=np.float64)
    keep = np.nonzero(~np.isnan(p))[0]
    order = keep[np.argsort(p[keep], kind="stable")]
    m = order.size
    scaled = p[order] * m / np.arange(1, m + 1)
    adjusted = np.full(p.shape, np.nan)
    adjusted[order] = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1]) if m else scaled
    return adjusted.tolist()


def dunnett(p_values: Sequence[float], df: float) -> list[float]:
    """Dunnett's (1955) single-step one-sided adjusted p-values for m contrasts of arms against
    one shared base.

    Each p is turned back into its t statistic at `df`; the adjusted p is P(max_j T_j >= t) for
    m contrasts with correlation 1/2 (equal seeds per arm, one pooled residual): with Z_0 the
    base's standardised mean and S^2 ~ chi^2_df / df, P(all T_j < c) = E[Phi(Z_0 + sqrt(2) c S)^m],
    integrated by Gauss-Hermite in Z_0 and Gauss-Laguerre in S. More powerful than Holm when every
    claim is an arm against the same base.
    """
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    x, wx = np.polynomial.hermite_e.hermegauss(_DUNNETT_NODES)
    u, wu = special.roots_genlaguerre(_DUNNETT_NODES, df / 2.0 - 1.0)
    s_values = np.sqrt(2.0 * u / df)
    weights = np.outer(wu / special.gamma(df / 2.0), wx / math.sqrt(2.0 * math.pi))
    t = special.stdtrit(df, 1.0 - p)
    inside = [
        float(
            np.sum(weights * special.ndtr(x[None, :] + math.sqrt(2.0) * c * s_values[:, None]) ** m)
        )
        for c in t
    ]
    return np.clip(1.0 - np.array(inside), p, 1.0).tolist()
