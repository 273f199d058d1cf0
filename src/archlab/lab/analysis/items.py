"""Seeds and items both random: the paired difference of two arms scored on a fixed item set.

A claim scored on items (the vocab suite's continuation cuts, the long-context windows, the
evaluation windows of a loss) sees two samples, not one: the training seeds and the items. With the
same items on every seed and arm, the per-item paired differences d[s, i] = a[s, i] - b[s, i] follow
the crossed two-way random model (Cornfield & Tukey 1956; Clark 1973, "The language-as-fixed-effect
fallacy", J. Verbal Learning and Verbal Behavior 12:335)

    d[s, i] = delta + u_s + v_i + e[s, i],
    u ~ N(0, sigma_s^2),   v ~ N(0, sigma_i^2),   e ~ N(0, sigma_e^2)

where v_i is how much item i happens to favour one arm (the same on every seed) and u_s how much
seed s does. The estimate is the grand mean of d, whose variance is V = sigma_s^2 / S + sigma_i^2 /
I + sigma_e^2 / (S I). The S x I table's mean squares have expectations

    theta_s = E[MS_seed] = sigma_e^2 + I sigma_s^2,
    theta_i = E[MS_item] = sigma_e^2 + S sigma_i^2,
    theta_e = E[MS_resid] = sigma_e^2,

and are independent, each theta_k chi^2_{df_k} / df_k, so V = (theta_s + theta_i - theta_e) / (S I).

The components are the REML estimates (restricted maximum likelihood, as statsmodels' MixedLM
and lme4 fit them). For a balanced table the REML likelihood is the product of the three mean
squares' scaled chi^2 densities, and its maximum over sigma^2 >= 0 (theta_e <= theta_s and theta_e
<= theta_i) is theta_k = MS_k, except that a mean square below the residual's is pooled with it
(sums of squares and df added), the smaller first, while one is below the pooled value: Thompson
(1962), "The problem of negative estimates of variance components", Ann. Math. Statist. 33:273;
the order-restricted maximum for this simple tree order (Robertson, Wright & Dykstra 1988, Order
Restricted Statistical Inference). A component the moment (ANOVA) estimator puts below 0 is so
truncated at 0 and sigma_e^2 re-estimated, never kept negative: a negative seed component subtracts
variance from V that the seeds cannot have removed.

The test uses V at the REML components with the Satterthwaite (1946) df of the combination theta_s
+ theta_i - theta_e at those components, df = (theta_s + theta_i - theta_e)^2 / (theta_s^2 / (S-1)
+ theta_i^2 / (I-1) + theta_e^2 / ((S-1)(I-1))): `expected_se`, the function the plan evaluates at
other S and I, so the test and its plan agree on the df. With every component positive this is the
ANOVA's V and df exactly. With one truncated, the truncated mean square's (S - 1) or (I - 1) df stay
in the sum: vocab's mid-token claim, whose seed component the moment estimator put at -3.4e-5, gets
63.6 df, not the 143 the negative term gave.

An exact item-level test (`sign_flip`) stands beside the t for a "better" claim on hits (`is_hits`:
every per-item outcome 0 or 1, or a difference of two, as token healing's gain). With the arms
exchangeable on every item (no true difference), each item's summed difference x_i = sum_s d[s, i]
is as likely to have either sign, so the 2^k sign patterns of the k informative items (x_i != 0)
are equally likely, and the p of sum_i x_i is their exact share at or beyond it (on the integers'
lattice the distribution is a convolution: exact at any k). It needs no normal theory, which a
handful of informative 0/1 items does not support, but it ignores the seed term the t carries; the
larger of the two p-values decides, each direction apart (stats.test_claim). With k informative
items its smallest p is 2^-k: 6 items cannot go below 0.0156.

Planning (`seeds_for`, `items_for`): a design of S' seeds and I' items has V' = sigma_s^2 / S'
+ sigma_i^2 / I' + sigma_e^2 / (S' I') and the Satterthwaite df of its expected mean squares;
it detects an effect delta with the requested power when (t_{1-alpha} + t_{power}) sqrt(V') <=
delta. More seeds cannot push V' below sigma_i^2 / I': when that term alone is too large, only
more items help.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from archlab.lab.analysis.power import mde_from_se

SEEDS, ITEMS = "seed", "item"  # the components a fit can truncate


@dataclass(frozen=True)
class ItemFit:
    """The crossed seed x item analysis of a table of paired differences."""

    estimate: float  # grand mean of d
    se: float  # sqrt(V) at the REML components
    df: float  # Satterthwaite's df of V at those components (expected_se)
    seeds: int  # S
    items: int  # I
    ms_seed: float
    ms_item: float
    ms_resid: float
    components: tuple[float, float, float]  # REML (sigma_s^2, sigma_i^2, sigma_e^2), each >= 0
    # SEEDS / ITEMS: components the moment estimator put below 0, set to 0
    truncated: tuple[str, ...] = ()

    @property
    def item_share(self) -> float:
        """The items' share of the estimate's variance (sigma_i^2 / I over V)."""
        total = self.se * self.se
        return self.components[1] / self.items / total if total > 0 else math.nan


def as_table(name: str, values: object) -> np.ndarray:
    """`values` as a finite float64 seeds x items array (a one-row input is one seed)."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.size == 0:
        raise ValueError(
            f"{name} must be a seeds x items table of per-item outcomes, got shape {x.shape}"
        )
    if not np.isfinite(x).all():
        s, i = (int(v[0]) for v in np.nonzero(~np.isfinite(x)))
        raise ValueError(f"{name}[{s}, {i}] = {float(x[s, i])!r}: per-item outcomes must be finite")
    return x


def reml_components(
    ms: tuple[float, float, float], seeds: int, items: int
) -> tuple[tuple[float, float, float], tuple[str, ...]]:
    """(sigma_s^2, sigma_i^2, sigma_e^2) maximizing the REML likelihood of a balanced table with
    mean squares `ms` = (MS_seed, MS_item, MS_resid), and the components truncated at 0 (Thompson's
    pooling, the module doc)."""
    df = {SEEDS: seeds - 1, ITEMS: items - 1}
    mean_square = {SEEDS: ms[0], ITEMS: ms[1]}
    pooled_ss, pooled_df = ms[2] * (seeds - 1) * (items - 1), (seeds - 1) * (items - 1)
    truncated = []
    # the smaller mean square joins the residual first
    for name in sorted(df, key=lambda k: mean_square[k]):
        if mean_square[name] < pooled_ss / pooled_df:
            pooled_ss, pooled_df = pooled_ss + mean_square[name] * df[name], pooled_df + df[name]
            truncated.append(name)
    var_e = pooled_ss / pooled_df
    theta = {k: var_e if k in truncated else mean_square[k] for k in df}
    return ((theta[SEEDS] - var_e) / items, (theta[ITEMS] - var_e) / seeds, var_e), tuple(
        k for k in (SEEDS, ITEMS) if k in truncated
    )


def mean_squares(d: np.ndarray) -> tuple[float, float, float]:
    """(MS_seed, MS_item, MS_resid) of the two-way table d (seeds x items) without replication."""
    s, i = d.shape
    grand = float(d.mean())
    seed_means, item_means = d.mean(axis=1), d.mean(axis=0)
    resid = d - seed_means[:, None] - item_means[None, :] + grand
    return (
        i * float(np.sum((seed_means - grand) ** 2)) / (s - 1),
        s * float(np.sum((item_means - grand) ** 2)) / (i - 1),
        float(np.sum(resid * resid)) / ((s - 1) * (i - 1)),
    )


def fit_items(d: np.ndarray) -> ItemFit:
    """The crossed analysis (module doc) of d, seeds x items, with at least 2 seeds and 2 items."""
    s, i = d.shape
    if s < 2 or i < 2:
        raise ValueError(
            f"the seed x item analysis needs at least 2 seeds and 2 items, got {s} x {i}"
        )
    ms = mean_squares(d)
    components, truncated = reml_components(ms, s, i)
    se, df = expected_se(components, s, i)
    return ItemFit(float(d.mean()), se, df, s, i, *ms, components, truncated)


def is_hits(*tables: np.ndarray) -> bool:
    """Whether every per-item outcome of every table is -1, 0 or 1: a hit (0/1) or a difference of
    two hits (token healing's gain), the outcomes the exact item test (`sign_flip`) is for."""
    return all(bool(np.isin(t, (-1.0, 0.0, 1.0)).all()) for t in tables)


def sign_flip(d: np.ndarray) -> tuple[float, float, int]:
    """The exact item-level sign-flip test (module doc) of an integer-valued table d (seeds x
    items, differences of 0/1 outcomes): (P(T >= t), P(T <= t), k) for T = sum_i eps_i x_i over the
    2^k equally likely sign patterns of the k informative items (x_i = sum_s d[s, i] != 0), t the
    observed sum. Exact (integer counts)."""
    x = np.rint(d.sum(axis=0)).astype(np.int64)
    if not np.array_equal(x, d.sum(axis=0)):
        raise ValueError("sign_flip needs integer item sums (differences of 0/1 outcomes)")
    sizes = [int(abs(v)) for v in x if v != 0]
    reach = sum(sizes)
    counts = [0] * (2 * reach + 1)  # counts[j]: sign patterns whose sum is j - reach
    counts[reach] = 1
    for size in sizes:  # each item adds +size or -size
        counts = [
            (counts[j - size] if j >= size else 0)
            + (counts[j + size] if j + size <= 2 * reach else 0)
            for j in range(2 * reach + 1)
        ]
    observed, total = int(x.sum()) + reach, 2 ** len(sizes)
    return sum(counts[observed:]) / total, sum(counts[: observed + 1]) / total, len(sizes)


_MOST = 1_000_000  # a plan beyond this many seeds or items is reported as out of reach


def expected_se(
    components: tuple[float, float, float], seeds: int, items: int
) -> tuple[float, float]:
    """(SE, Satterthwaite df) of a `seeds` x `items` design at these components (the module doc)."""
    var_s, var_i, var_e = components
    ms_seed, ms_item, ms_resid = var_e + items * var_s, var_e + seeds * var_i, var_e
    combined = ms_seed + ms_item - ms_resid  # = seeds * items * V'
    if combined <= 0:
        return 0.0, math.inf
    df_resid = (seeds - 1) * (items - 1)
    denominator = ms_seed**2 / (seeds - 1) + ms_item**2 / (items - 1) + ms_resid**2 / df_resid
    return math.sqrt(combined / (seeds * items)), (
        combined * combined / denominator if denominator > 0 else math.inf
    )


def detects(
    components: tuple[float, float, float],
    seeds: int,
    items: int,
    effect: float,
    *,
    alpha: float,
    power: float = 0.8,
) -> bool:
    """Whether `seeds` x `items` detect a true `effect` with `power` at one-sided `alpha`
    (the module doc)."""
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


def seeds_for(
    components: tuple[float, float, float],
    items: int,
    effect: float,
    *,
    alpha: float,
    power: float = 0.8,
) -> int | None:
    """The fewest seeds (>= 2) that detect `effect` with these `items`, or None when the items' term
    alone is too large (then only more items help: `items_for`)."""
    return _fewest(lambda n: detects(components, n, items, effect, alpha=alpha, power=power), 2)


def items_for(
    components: tuple[float, float, float],
    seeds: int,
    effect: float,
    *,
    alpha: float,
    power: float = 0.8,
) -> int | None:
    """The fewest items (>= 2) that detect `effect` at `seeds` seeds, or None out of reach."""
    return _fewest(lambda i: detects(components, seeds, i, effect, alpha=alpha, power=power), 2)


def plan_design(
    components: tuple[float, float, float],
    seeds: int,
    items: int,
    effect: float,
    *,
    alpha: float,
    power: float = 0.8,
) -> tuple[int | None, int | None]:
    """(seeds per arm, items) that detect `effect`: (n, None) when n seeds suffice at these items;
    (None, m) when only more items do, m at these seeds; else (n, k * items) at the fewest k in 2,
    4, ... 32; (None, None) beyond."""
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
