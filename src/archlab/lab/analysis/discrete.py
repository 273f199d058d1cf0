"""Claims on outcomes a t-test must not judge: divergence (0/1 per seed), event counts, losses
of diverged runs.

Each test is paired by seed, exact where small samples need it, and returns a `ClaimTest` of "a is
better than b" (`better="lower"`: fewer divergences, fewer spikes, lower loss). `p` is the one-sided
p-value of "a is better", `p_contra` of "a is worse"; confirmed when p < alpha, contradicted when
p_contra < alpha, else inconclusive.

- `paired_binary_test`: the exact McNemar test. Only discordant seeds (one arm diverged, the
  other not) carry information; under "no difference" the number where a is the worse one is
  Binomial(discordant, 1/2) (scipy's `binomtest`). The estimate is the difference of rates, mean(a -
  b); its interval is the Clopper-Pearson interval of the discordant split, scaled by the discordant
  share (conditional on the number of discordant seeds).
- `paired_count_test`: paired Poisson counts. If seed s has rates lambda_s * theta_a and lambda_s
  * theta_b, then given all events, a's total is Binomial(total, theta_a / (theta_a + theta_b))
  whatever the lambda_s, so the conditional binomial test of 1/2 is exact for "same rate". The
  estimate is mean(a - b).
- `rank_test`: the Wilcoxon signed-rank test (scipy's `wilcoxon`) of the paired differences, with a
  diverged run (NaN or +-inf) ranked worse than every finite value; two diverged runs at one seed
  tie. The estimate is the median difference, its interval the distribution-free order-statistic
  interval of the median (coverage at least 1 - 2 alpha).

No events in any run (nothing diverged, no spikes) gives "untestable by this design": the design
cannot separate the arms, and more seeds of the same design would not either. Inconclusive binary
and count tests carry the seeds per arm at which the exact test reaches 80% power at the observed
rates (optimistic, as any observed effect is); the rank test carries the fewest seeds at which its
exact p can reach alpha at all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
from scipy import special, stats

from archlab.lab.analysis.outcomes import BETTERS, INCONCLUSIVE, UNTESTABLE, ClaimTest, decide

PLAN_POWER = 0.8
EXACT_PLAN_SEEDS = 60  # plans beyond this many seeds use the normal approximation alone
# beyond this an exact-test plan is reported as None (not decidable in practice)
MAX_PLANNED_SEEDS = 1000


def _check(better: str, alpha: float) -> None:
    if better not in BETTERS:
        raise ValueError(f"better must be one of {', '.join(BETTERS)}, got {better!r}")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must lie in (0, 0.5), got {alpha!r}")


def _counts(name: str, values: Sequence[float], binary: bool) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    allowed = "0 or 1" if binary else "a count (integer >= 0)"
    ok = np.isin(x, (0.0, 1.0)) if binary else (np.isfinite(x) & (x >= 0) & (x == np.round(x)))
    if x.size == 0 or not ok.all():
        if x.size == 0:
            raise ValueError(f"{name} has no values: each seed needs one ({allowed})")
        where = int(np.nonzero(~ok)[0][0])
        raise ValueError(f"{name}[{where}] = {float(x[where])!r}: each value must be {allowed}")
    return x


def _pair(a: np.ndarray, b: np.ndarray) -> None:
    if a.size != b.size:
        raise ValueError(
            f"paired values need one value per seed on both sides: len(a) = {a.size}, "
            f"len(b) = {b.size}"
        )


def _critical_counts(t: np.ndarray, alpha: float) -> np.ndarray:
    """The largest a-worse count k with P(X <= k | t, 1/2) < alpha, per number of events
    t (-1: none).

    From the normal approximation, corrected step by step with the exact
    binomial CDF (scipy.special.bdtr).
    """
    z = special.ndtri(alpha)
    t = t.astype(np.int64)  # scipy.special.bdtr takes integer counts
    k = np.clip(np.floor(0.5 * t + 0.5 * z * np.sqrt(t)), -1, t).astype(np.int64)
    while True:
        up = (k + 1 <= t) & (special.bdtr(k + 1, t, 0.5) < alpha)
        down = (k >= 0) & (special.bdtr(np.maximum(k, 0), t, 0.5) >= alpha)
        if not (up.any() or down.any()):
            return k
        k = k + up - down


def _exact_power(
    total_pmf: Callable[[np.ndarray, int], np.ndarray],
    window: tuple[int, int],
    n: int,
    q_worse: float,
    alpha: float,
) -> float:
    """P(reject) at n seeds: sum over t events of P(t) * P(a-worse count <= the critical count
    | t, q_worse)."""
    t = np.arange(window[0], window[1] + 1, dtype=np.int64)
    crit = _critical_counts(t, alpha)
    reject_given_t = np.where(crit >= 0, special.bdtr(np.maximum(crit, 0), t, q_worse), 0.0)
    return float(np.sum(total_pmf(t, n) * reject_given_t))


def _exact_plan(
    total_pmf: Callable[[np.ndarray, int], np.ndarray],
    spread: Callable[[int], float],
    events_per_seed: float,
    q_worse: float,
    alpha: float,
    most: Callable[[int], float],
) -> int | None:
    """Seeds for PLAN_POWER of the exact conditional test: t events ~ total_pmf(t, n), a-worse
    ~ Bin(t, q_worse).

    `spread(n)` is the sd of the events at n seeds and `most(n)` their largest possible number.
    Starts from the normal approximation of the events needed (Connor 1987, Biometrics 43:207) and,
    up to EXACT_PLAN_SEEDS, bisects on the exact power. The exact power saw-tooths in n by a point
    or two, so the n found reaches PLAN_POWER but a neighbour may too: a plan, not a boundary.
    """

    def reaches(n: int) -> bool:
        mean, sd = n * events_per_seed, spread(n)  # the events' law is negligible beyond 8 sd
        window = (max(0, math.floor(mean - 8 * sd - 5)), math.ceil(min(most(n), mean + 8 * sd + 5)))
        return _exact_power(total_pmf, window, n, q_worse, alpha) >= PLAN_POWER

    z_a, z_b = stats.norm.ppf(1 - alpha), stats.norm.ppf(PLAN_POWER)
    events = ((0.5 * z_a + z_b * math.sqrt(q_worse * (1 - q_worse))) / (0.5 - q_worse)) ** 2
    guess = max(2, math.ceil(events / events_per_seed))
    if guess > MAX_PLANNED_SEEDS:
        return None
    if guess > EXACT_PLAN_SEEDS:
        # many events: the normal approximation is accurate, and the exact sums get costly
        return guess
    low, high = 2, guess
    if not reaches(high):
        low, high = high, min(2 * high, MAX_PLANNED_SEEDS)
        while not reaches(high):
            if high == MAX_PLANNED_SEEDS:
                return None
            low, high = high, min(2 * high, MAX_PLANNED_SEEDS)
    elif reaches(low):
        return low
    while high - low > 1:  # not reaches(low), reaches(high)
        mid = (low + high) // 2
        low, high = (low, mid) if reaches(mid) else (mid, high)
    return high


def _rate_ci(
    worse: int, total: int, n: int, alpha: float, a_minus_b_per_worse: float
) -> tuple[float, float]:
    """Interval of mean(a - b) = total / n * (2 pi - 1) * sign, pi the Clopper-Pearson split
    of a-worse events."""
    # Clopper-Pearson (1934)
    low = special.betaincinv(worse, total - worse + 1, alpha) if worse > 0 else 0.0
    high = special.betaincinv(worse + 1, total - worse, 1 - alpha) if worse < total else 1.0
    ends = sorted(a_minus_b_per_worse * total / n * (2 * v - 1) for v in (low, high))
    return float(ends[0]), float(ends[1])


def _binomial_pmf(t: np.ndarray, n: int, p: float) -> np.ndarray:
    """Binomial(n, p) probabilities at t = 0..n (scipy.special: the stats objects cost ~1
    ms a call)."""
    return np.exp(
        special.gammaln(n + 1)
        - special.gammaln(t + 1)
        - special.gammaln(n - t + 1)
        + special.xlogy(t, p)
        + special.xlog1py(n - t, -p)
    )


def _poisson_pmf(t: np.ndarray, mean: float) -> np.ndarray:
    return np.exp(special.xlogy(t, mean) - mean - special.gammaln(t + 1))


def _conditional(
    worse: int,
    total: int,
    n: int,
    estimate: float,
    better: str,
    alpha: float,
    test: str,
    a_minus_b_per_worse: float,
) -> ClaimTest:
    p = float(stats.binomtest(worse, total, 0.5, alternative="less").pvalue)
    p_contra = float(stats.binomtest(worse, total, 0.5, alternative="greater").pvalue)
    return ClaimTest(
        outcome=decide(p, p_contra, alpha),
        p=p,
        p_contra=p_contra,
        estimate=estimate,
        ci=_rate_ci(worse, total, n, alpha, a_minus_b_per_worse),
        df=math.nan,
        seeds_needed=None,
        expect="better",
        better=better,
        test=test,
        n=n,
        alpha=alpha,
        level=alpha,
    )


def paired_binary_test(
    x_a: Sequence[float], x_b: Sequence[float], *, better: str = "lower", alpha: float = 0.05
) -> ClaimTest:
    """Exact McNemar test of "a has a lower (better="higher": higher) rate than b" on 0/1
    outcomes per seed."""
    _check(better, alpha)
    a, b = _counts("x_a", x_a, True), _counts("x_b", x_b, True)
    _pair(a, b)
    n, sign = a.size, (1.0 if better == "lower" else -1.0)
    worse, wins = int(np.sum(sign * (a - b) > 0)), int(np.sum(sign * (a - b) < 0))
    estimate = float(np.mean(a - b))
    if not (a.any() or b.any()) or (a.all() and b.all()):
        return _untestable(
            estimate,
            better,
            alpha,
            n,
            "exact binomial",
            "no seed differs: every run had the same "
            "outcome, so this design cannot compare the rates",
        )
    if worse + wins == 0:
        test = _untestable(estimate, better, alpha, n, "exact binomial", "no discordant seed yet")
        return replace(test, outcome=INCONCLUSIVE)
    test = _conditional(worse, worse + wins, n, estimate, better, alpha, "exact binomial", sign)
    if test.outcome == INCONCLUSIVE and wins > worse:
        share, q = (worse + wins) / n, worse / (worse + wins)
        plan = _exact_plan(
            lambda t, m: _binomial_pmf(t, m, share),
            lambda m: math.sqrt(m * share * (1 - share)),
            share,
            q,
            alpha,
            lambda m: m,
        )
        test = replace(test, seeds_needed=plan)
    return test


def paired_count_test(
    c_a: Sequence[float], c_b: Sequence[float], *, better: str = "lower", alpha: float = 0.05
) -> ClaimTest:
    """Conditional binomial test of "a has fewer (better="higher": more) events than b"
    on per-seed counts."""
    _check(better, alpha)
    a, b = _counts("c_a", c_a, False), _counts("c_b", c_b, False)
    _pair(a, b)
    n, sign = a.size, (1.0 if better == "lower" else -1.0)
    total = int(a.sum() + b.sum())
    estimate = float(np.mean(a - b))
    if total == 0:
        return _untestable(
            estimate, better, alpha, n, "conditional binomial", "no events in any run"
        )
    worse = int(a.sum()) if better == "lower" else int(b.sum())
    test = _conditional(worse, total, n, estimate, better, alpha, "conditional binomial", sign)
    if test.outcome == INCONCLUSIVE and 2 * worse < total:
        rate, q = total / n, worse / total
        plan = _exact_plan(
            lambda t, m: _poisson_pmf(t, m * rate),
            lambda m: math.sqrt(m * rate),
            rate,
            q,
            alpha,
            lambda m: math.inf,
        )
        test = replace(test, seeds_needed=plan)
    return test


def _diverged_worst(x: np.ndarray, worst: float) -> np.ndarray:
    return np.where(np.isfinite(x), x, worst)


def rank_test(
    a: Sequence[float], b: Sequence[float], *, better: str, alpha: float = 0.05
) -> ClaimTest:
    """Wilcoxon signed-rank test of "a is better than b", a diverged run (NaN, inf) ranked
    worst (module doc)."""
    _check(better, alpha)
    xa, xb = (np.asarray(v, dtype=np.float64).reshape(-1) for v in (a, b))
    _pair(xa, xb)
    if xa.size == 0:
        raise ValueError("rank_test needs at least one seed")
    finite = np.concatenate([xa[np.isfinite(xa)], xb[np.isfinite(xb)]])
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    # beyond every finite value by more than the finite range: a diverged run's |d| outranks
    # every finite |d|
    worst = high + 2 * (high - low) + 1 if better == "lower" else low - 2 * (high - low) - 1
    d = _diverged_worst(xa, worst) - _diverged_worst(xb, worst)
    n = int(d.size)
    d_inf = np.where(
        np.isfinite(xa) & np.isfinite(xb), d, np.where(d == 0, 0.0, np.copysign(np.inf, d))
    )
    estimate = float(np.median(d_inf))
    n_min = math.floor(math.log2(1 / alpha)) + 1  # an exact signed-rank p is at least 2^-n
    if not np.any(d != 0):
        return _untestable(estimate, better, alpha, n, "Wilcoxon signed-rank", "every seed ties")
    method = (
        "exact"
        if len(set(np.abs(d[d != 0]))) == np.count_nonzero(d)
        else stats.PermutationMethod(
            # ties: sign flips, exhaustive for up to 12 seeds
            n_resamples=4096,
            rng=np.random.default_rng(0),
        )
    )
    toward_a = "less" if better == "lower" else "greater"
    away = "greater" if better == "lower" else "less"
    p = float(stats.wilcoxon(d, alternative=toward_a, method=method).pvalue)
    p_contra = float(stats.wilcoxon(d, alternative=away, method=method).pvalue)
    outcome = decide(p, p_contra, alpha)
    return ClaimTest(
        outcome=outcome,
        p=p,
        p_contra=p_contra,
        estimate=estimate,
        ci=_median_ci(d_inf, alpha),
        df=math.nan,
        seeds_needed=n_min if outcome == INCONCLUSIVE and n < n_min else None,
        expect="better",
        better=better,
        test="Wilcoxon signed-rank",
        n=n,
        alpha=alpha,
        level=alpha,
        note=""
        if n >= n_min or outcome != INCONCLUSIVE
        else f"the exact test cannot reach p < {alpha} below {n_min} seeds",
    )


def _median_ci(d: np.ndarray, alpha: float) -> tuple[float, float]:
    """Order statistics (d_(k), d_(n+1-k)) with P(Bin(n, 1/2) <= k - 1) <= alpha: coverage >= 1
    - 2 alpha."""
    s, n = np.sort(d), d.size
    k = int(stats.binom.ppf(alpha, n, 0.5))  # smallest k with cdf(k) >= alpha; cdf(k - 1) < alpha
    if k < 1:
        return (-math.inf, math.inf)
    return float(s[k - 1]), float(s[n - k])


def _untestable(
    estimate: float, better: str, alpha: float, n: int, test: str, note: str
) -> ClaimTest:
    return ClaimTest(
        outcome=UNTESTABLE,
        p=math.nan,
        ci=(math.nan, math.nan),
        estimate=estimate,
        df=math.nan,
        seeds_needed=None,
        expect="better",
        better=better,
        test=test,
        n=n,
        alpha=alpha,
        level=alpha,
        note=note,
    )
