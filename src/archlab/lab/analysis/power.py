"""Power before compute: the seeds a paired t-test needs (noncentral t),
and group-sequential levels.

- `power(effect, sigma_d, n, alpha=...)`: the exact power of the one-sided (or two-sided) paired
  t-test of n seed pairs whose differences have sd `sigma_d`, at a true effect `effect`: P(T' >
  t_{1-alpha, df}) for T' noncentral t with df = n - 1 and noncentrality effect * sqrt(n) / sigma_d.
  With `arms=K` the df are those of a pooled randomized complete block analysis, (K - 1)(n - 1), and
  sigma_d = sigma_eps * sqrt(2).
- `seeds_needed(...)`: the smallest n >= 2 with at least the requested power. A non-inferiority
  bound at true difference 0 and margin m has exactly the power of the superiority test at effect m,
  so it plans both.
- `mde(sigma_d, n, ...)`: the minimum detectable effect, the true effect at which n seeds have the
  requested power (the inverse of `power` in the effect; for a t-test on a standard error `se` with
  `df` degrees of freedom that is not a seed count, e.g. the seed x item analysis, `mde_from_se`
  uses (t_{1-alpha} + t_{power}) * se).
- `sequential_levels(kind, looks, alpha)`: the nominal two-sided level of each of `looks` equally
  spaced analyses such that the overall two-sided level is alpha: Pocock (1977, Biometrika 64:191)
  uses one constant boundary, O'Brien & Fleming (1979, Biometrics 35:549) a boundary c * sqrt(K /
  k). Computed from the joint normal law of the cumulative z-statistics (corr(Z_i, Z_j) = sqrt(i
  / j) for i <= j) by recursive integration, so any number of looks works; two looks give Pocock
  0.0294 / 0.0294 and O'Brien-Fleming 0.0052 / 0.0480 at alpha 0.05 (Jennison & Turnbull 2000,
  tables 2.1 and 2.3). The levels are exact for z-tests and the usual approximation for t-tests.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from archlab.lab.spec.variants import SEQUENTIAL_KINDS

# Gauss-Legendre nodes per look: 48 already agree with 256 to 1e-12 at 5 and 10 looks
_QUADRATURE_NODES = 64


def _check_plan(effect: float, sigma_d: float, alpha: float, power: float = 0.5) -> None:
    if not (math.isfinite(effect) and effect > 0):
        raise ValueError(
            f"effect must be a finite number > 0 (the difference to detect), got {effect!r}"
        )
    if not (math.isfinite(sigma_d) and sigma_d > 0):
        raise ValueError(
            f"sigma_d must be a finite number > 0 (sd of one paired difference), got {sigma_d!r}"
        )
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must lie in (0, 0.5), got {alpha!r}")
    if not 0 < power < 1:
        raise ValueError(f"power must lie in (0, 1), got {power!r}")


def _power(
    effect: float, sigma_d: float, n: int, alpha: float, one_sided: bool, arms: int | None
) -> float:
    df = (n - 1.0) * (arms - 1 if arms else 1)
    ncp = effect * math.sqrt(n) / sigma_d
    crit = special.stdtrit(df, 1.0 - (alpha if one_sided else alpha / 2.0))
    upper = 1.0 - special.nctdtr(df, ncp, crit)
    return float(upper if one_sided else upper + special.nctdtr(df, ncp, -crit))


def power(
    effect: float,
    sigma_d: float,
    n: int,
    *,
    alpha: float,
    one_sided: bool = True,
    arms: int | None = None,
) -> float:
    """The power of the paired (or pooled, with `arms`) t-test at a true effect (see
    the module doc)."""
    _check_plan(effect, sigma_d, alpha)
    if n < 2:
        raise ValueError(f"n must be at least 2 seeds, got {n}")
    return _power(effect, sigma_d, n, alpha, one_sided, arms)


def seeds_needed(
    effect: float,
    sigma_d: float,
    *,
    alpha: float,
    power: float = 0.8,
    one_sided: bool = True,
    arms: int | None = None,
) -> int:
    """The fewest seeds per arm (>= 2) for the requested power at a true `effect` (see
    the module doc).

    `arms=K` plans the pooled randomized-complete-block contrast ((K - 1)(n - 1) df; pass sigma_d =
    sigma_eps * sqrt(2)); without it, a paired t-test on the pair's own differences (n - 1 df).
    """
    _check_plan(effect, sigma_d, alpha, power)
    if arms is not None and arms < 2:
        raise ValueError(f"arms must be at least 2 for a pooled plan, got {arms}")

    def reaches(n: int) -> bool:
        return _power(effect, sigma_d, n, alpha, one_sided, arms) >= power

    # bracket the answer from the z-test's n (the t-test needs the same or a few more), then bisect;
    # the power grows with n. Bisection keeps a near-zero effect (n ~ 1e30) as cheap as a large one.
    z = special.ndtri(1.0 - (alpha if one_sided else alpha / 2.0)) + special.ndtri(power)
    n = max(2, math.ceil((z * sigma_d / effect) ** 2))
    if reaches(n):
        if n == 2 or reaches(2):
            return 2
        low, high = 2, n
    else:
        step = 1
        while not reaches(n + step):  # doubling steps
            n, step = n + step, step * 2
        low, high = n, n + step
    # not reaches(low), reaches(high)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if reaches(mid) else (mid, high)
    return high


def mde(
    sigma_d: float,
    n: int,
    *,
    alpha: float,
    power: float = 0.8,
    one_sided: bool = True,
    arms: int | None = None,
) -> float:
    """The true effect at which n seeds give the paired (or pooled, `arms`) t-test
    `power` (noncentral t)."""
    _check_plan(1.0, sigma_d, alpha, power)
    if n < 2:
        raise ValueError(f"n must be at least 2 seeds, got {n}")
    z = special.ndtri(1.0 - (alpha if one_sided else alpha / 2.0)) + special.ndtri(power)
    high = 2.0 * z * sigma_d / math.sqrt(n)
    # few df: the t-test needs more than z's
    while _power(high, sigma_d, n, alpha, one_sided, arms) < power:
        high *= 2.0
    return float(
        optimize.brentq(
            lambda e: _power(e, sigma_d, n, alpha, one_sided, arms) - power,
            1e-12 * high,
            high,
            xtol=1e-12 * high,
        )
    )


def mde_from_se(se: float, df: float, *, alpha: float, power: float = 0.8) -> float:
    """(t_{1-alpha, df} + t_{power, df}) * se: the usual minimum detectable effect of
    a one-sided t-test."""
    if not (math.isfinite(se) and se > 0):
        raise ValueError(f"se must be a finite number > 0, got {se!r}")
    df = min(df, 1e9)
    return float((special.stdtrit(df, 1.0 - alpha) + special.stdtrit(df, power)) * se)


def _crossing(bounds: np.ndarray, times: np.ndarray | None = None) -> float:
    """P(|Z_k| >= bounds[k] at some look k) for the cumulative z-statistics at information times
    `times` (default 1, 2, ..., K: equal spacing).

    The recursive integration of Armitage, McPherson & Rowe (1969, JRSS A 132:235): with S_k =
    Z_k * sqrt(t_k) a sum of independent normal increments of variance t_k - t_{k-1}, the density
    of S_k on the paths that have not crossed yet is f_k(s) = integral of f_{k-1}(u) phi_{t_k -
    t_{k-1}}(s - u) du over |u| < bounds[k-1] * sqrt(t_{k-1}). Each f_k is smooth on its interval,
    so Gauss-Legendre quadrature is accurate to ~1e-12 (scipy's multivariate_normal.cdf agrees at 2
    looks and takes minutes at 5).
    """
    times = (
        np.arange(1.0, len(bounds) + 1.0) if times is None else np.asarray(times, dtype=np.float64)
    )
    nodes, weights = np.polynomial.legendre.leggauss(_QUADRATURE_NODES)
    x_prev = w_prev = f_prev = None
    t_prev = 0.0
    for b, t in zip(bounds, times):
        half, var = b * math.sqrt(t), t - t_prev
        x, w = nodes * half, weights * half
        if f_prev is None:
            f = np.exp(-0.5 * x * x / var) / math.sqrt(2.0 * math.pi * var)
        else:
            kernel = np.exp(-0.5 * (x[None, :] - x_prev[:, None]) ** 2 / var) / math.sqrt(
                2.0 * math.pi * var
            )
            f = (w_prev * f_prev) @ kernel
        x_prev, w_prev, f_prev, t_prev = x, w, f, t
    return float(1.0 - np.sum(w_prev * f_prev))


def sequential_levels(
    kind: str, looks: int, alpha: float = 0.05, times: list[float] | None = None
) -> list[float]:
    """Nominal two-sided levels, one per look, with overall two-sided level `alpha` (see
    the module doc).

    `times`: the looks' information (seeds per arm at each look, increasing; default equally
    spaced). Pocock's boundary is constant in z, O'Brien & Fleming's c * sqrt(t_K / t_k). For the
    lab's one-sided claims at level a per direction, call it with alpha = 2a and judge look k with
    `test_claim(..., alpha=level_k / 2)`.
    """
    if kind not in SEQUENTIAL_KINDS:
        raise ValueError(f"kind must be one of {', '.join(SEQUENTIAL_KINDS)}, got {kind!r}")
    if not (isinstance(looks, int) and looks >= 1):
        raise ValueError(f"looks must be an integer >= 1, got {looks!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    t = np.arange(1.0, looks + 1.0) if times is None else np.asarray(times, dtype=np.float64)
    if t.shape != (looks,) or not (np.all(np.diff(t) > 0) and t[0] > 0):
        raise ValueError(
            f"times must be {looks} increasing positive numbers (the looks' seeds), got {times!r}"
        )
    shape = np.ones(looks) if kind == "pocock" else np.sqrt(t[-1] / t)
    c = optimize.brentq(lambda c: _crossing(c * shape, t) - alpha, 0.5, 10.0, xtol=1e-10)
    return [float(2.0 * special.ndtr(-b)) for b in c * shape]
