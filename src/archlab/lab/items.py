"""Seeds and items both random: the paired difference of two arms scored on a fixed item set.

A claim scored on items (the vocab suite's 200 continuation cuts, the long-context windows, the evaluation
windows of a loss) sees two samples, not one: the training seeds and the items. With the same items on every seed
and arm, the per-item paired differences d[s, i] = a[s, i] - b[s, i] follow the crossed two-way random model
(Cornfield & Tukey 1956; Clark 1973, "The language-as-fixed-effect fallacy", J. Verbal Learning and Verbal
Behavior 12:335)

    d[s, i] = delta + u_s + v_i + e[s, i],   u ~ N(0, sigma_s^2), v ~ N(0, sigma_i^2), e ~ N(0, sigma_e^2)

where v_i is how much item i happens to favour one arm (the same on every seed) and u_s how much seed s does. The
estimate is the grand mean of d, whose variance is sigma_s^2 / S + sigma_i^2 / I + sigma_e^2 / (S I). With the
mean squares of the S x I table,

    E[MS_seed] = sigma_e^2 + I sigma_s^2,   E[MS_item] = sigma_e^2 + S sigma_i^2,   E[MS_resid] = sigma_e^2,

its unbiased estimate is V = (MS_seed + MS_item - MS_resid) / (S I), with Satterthwaite's (1946) degrees of
freedom for the combination. When V falls below MS_resid / (S I) (the variance if seeds and items added nothing,
possible by chance) that floor is used, with (S - 1)(I - 1) df. A seed-only test (the per-seed means' paired t)
estimates sigma_s^2 + sigma_e^2 / I and misses sigma_i^2 / I: with items that favour an arm by chance, the same on
every seed, it confirms false claims far more often than alpha; this test does not (tests/lab/test_items.py
simulates both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ItemFit:
    """The crossed seed x item analysis of a table of paired differences."""

    estimate: float  # grand mean of d
    se: float  # sqrt(V)
    df: float  # Satterthwaite's df of V
    seeds: int  # S
    items: int  # I
    ms_seed: float
    ms_item: float
    ms_resid: float
    floored: bool  # V was raised to MS_resid / (S I)

    @property
    def item_share(self) -> float:
        """The items' share of the estimate's variance (sigma_i^2 / I over V, at the ANOVA estimates)."""
        var_item = max(self.ms_item - self.ms_resid, 0.0) / (self.seeds * self.items)
        total = self.se * self.se
        return var_item / total if total > 0 else math.nan


def as_table(name: str, values: object) -> np.ndarray:
    """`values` as a finite float64 seeds x items array (a one-row input is one seed)."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.size == 0:
        raise ValueError(f"{name} must be a seeds x items table of per-item outcomes, got shape {x.shape}")
    if not np.isfinite(x).all():
        s, i = (int(v[0]) for v in np.nonzero(~np.isfinite(x)))
        raise ValueError(f"{name}[{s}, {i}] = {float(x[s, i])!r}: per-item outcomes must be finite")
    return x


def fit_items(d: np.ndarray) -> ItemFit:
    """The crossed analysis (module doc) of d, seeds x items, with at least 2 seeds and 2 items."""
    s, i = d.shape
    if s < 2 or i < 2:
        raise ValueError(f"the seed x item analysis needs at least 2 seeds and 2 items, got {s} x {i}")
    grand = float(d.mean())
    seed_means, item_means = d.mean(axis=1), d.mean(axis=0)
    resid = d - seed_means[:, None] - item_means[None, :] + grand
    ms_seed = i * float(np.sum((seed_means - grand) ** 2)) / (s - 1)
    ms_item = s * float(np.sum((item_means - grand) ** 2)) / (i - 1)
    df_resid = (s - 1) * (i - 1)
    ms_resid = float(np.sum(resid * resid)) / df_resid
    combined = ms_seed + ms_item - ms_resid
    if combined > ms_resid:
        denominator = ms_seed ** 2 / (s - 1) + ms_item ** 2 / (i - 1) + ms_resid ** 2 / df_resid
        df = combined * combined / denominator if denominator > 0 else math.inf
        return ItemFit(grand, math.sqrt(combined / (s * i)), df, s, i, ms_seed, ms_item, ms_resid, False)
    return ItemFit(grand, math.sqrt(max(ms_resid, 0.0) / (s * i)), float(df_resid), s, i, ms_seed, ms_item, ms_resid,
                   True)
