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

Planning (`seeds_for`, `items_for`): with the components estimated from the mean squares (sigma_s^2 = (MS_seed -
MS_resid) / I, sigma_i^2 = (MS_item - MS_resid) / S, sigma_e^2 = MS_resid, each floored at 0), a design of S' seeds
and I' items has V' = sigma_s^2 / S' + sigma_i^2 / I' + sigma_e^2 / (S' I') and the Satterthwaite df of the expected
mean squares; it detects an effect delta with the requested power when (t_{1-alpha} + t_{power}) sqrt(V') <= delta.
More seeds cannot push V' below sigma_i^2 / I': when that term alone is too large, only more items help.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from archlab.lab.analysis.power import mde_from_se


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
    def components(self) -> tuple[float, float, float]:
        """(sigma_s^2, sigma_i^2, sigma_e^2) at the ANOVA estimates, each floored at 0 (the module doc)."""
        return (max(self.ms_seed - self.ms_resid, 0.0) / self.items,
                max(self.ms_item - self.ms_resid, 0.0) / self.seeds, max(self.ms_resid, 0.0))

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


_MOST = 1_000_000  # a plan beyond this many seeds or items is reported as out of reach


def expected_se(components: tuple[float, float, float], seeds: int, items: int) -> tuple[float, float]:
    """(SE, Satterthwaite df) of a `seeds` x `items` design at these components (the module doc)."""
    var_s, var_i, var_e = components
    ms_seed, ms_item, ms_resid = var_e + items * var_s, var_e + seeds * var_i, var_e
    combined = ms_seed + ms_item - ms_resid  # = seeds * items * V'
    if combined <= 0:
        return 0.0, math.inf
    df_resid = (seeds - 1) * (items - 1)
    denominator = ms_seed ** 2 / (seeds - 1) + ms_item ** 2 / (items - 1) + ms_resid ** 2 / df_resid
    return math.sqrt(combined / (seeds * items)), (combined * combined / denominator if denominator > 0 else math.inf)


def detects(components: tuple[float, float, float], seeds: int, items: int, effect: float, *, alpha: float,
            power: float = 0.8) -> bool:
    """Whether `seeds` x `items` detect a true `effect` with `power` at one-sided `alpha` (the module doc)."""
    se, df = expected_se(components, seeds, items)
    return se == 0 or mde_from_se(se, df, alpha=alpha, power=power) <= effect


def _fewest(reaches, start: int) -> int | None:
    """The smallest n >= start with reaches(n) (monotone in n), or None below _MOST."""
    if reaches(start):
        return start
    low, high = start, start * 2
    while not reaches(high):
        if high >= _MOST:
            return None
        low, high = high, min(high * 2, _MOST)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if reaches(mid) else (mid, high)
    return high


def seeds_for(components: tuple[float, float, float], items: int, effect: float, *, alpha: float,
              power: float = 0.8) -> int | None:
    """The fewest seeds (>= 2) that detect `effect` with these `items`, or None when the items' term alone is too
    large (then only more items help: `items_for`)."""
    return _fewest(lambda n: detects(components, n, items, effect, alpha=alpha, power=power), 2)


def items_for(components: tuple[float, float, float], seeds: int, effect: float, *, alpha: float,
              power: float = 0.8) -> int | None:
    """The fewest items (>= 2) that detect `effect` at `seeds` seeds, or None out of reach."""
    return _fewest(lambda i: detects(components, seeds, i, effect, alpha=alpha, power=power), 2)


def plan_design(components: tuple[float, float, float], seeds: int, items: int, effect: float, *, alpha: float,
                power: float = 0.8) -> tuple[int | None, int | None]:
    """(seeds per arm, items) that detect `effect`: (n, None) when n seeds suffice at these items; (None, m) when
    only more items do, m at these seeds; else (n, k * items) at the fewest k in 2, 4, ... 32; (None, None) beyond."""
    enough = seeds_for(components, items, effect, alpha=alpha, power=power)
    if enough is not None:
        return enough, None
    more = items_for(components, seeds, effect, alpha=alpha, power=power)
    if more is not None:
        return None, more
    for times in (2, 4, 8, 16, 32):
        enough = seeds_for(components, times * items, effect, alpha=alpha, power=power)
        if enough is not None:
            return enough, times * items
    return None, None
