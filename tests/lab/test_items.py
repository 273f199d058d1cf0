"""Seeds and items both random (archlab.lab.analysis.items, stats.test_claim(items=...)): the mean squares against
statsmodels' two-way ANOVA, and the false-positive rates by simulation with known truth.

The simulations are the issue's: no true difference between the arms, but items that favour one arm by chance,
the same on every seed. A seed-only test (the per-seed means' paired t) then confirms far more often than alpha;
the seed x item test stays at alpha. Rates are checked within 3 binomial standard errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from archlab.lab.analysis import stats
from archlab.lab.analysis.items import fit_items, items_for, seeds_for

MC_SIGMAS = 3.0


def _tolerance(rate: float, trials: int) -> float:
    return MC_SIGMAS * math.sqrt(rate * (1.0 - rate) / trials)


def test_mean_squares_and_variance_against_statsmodels_two_way_anova():
    sm = pytest.importorskip("statsmodels.formula.api")
    anova_lm = pytest.importorskip("statsmodels.stats.anova").anova_lm
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    s, i = 4, 30
    d = 0.1 + rng.normal(0, 0.05, (s, 1)) + rng.normal(0, 0.2, (1, i)) + rng.normal(0, 0.1, (s, i))
    frame = pd.DataFrame([{"d": d[a, b], "seed": a, "item": b} for a in range(s) for b in range(i)])
    table = anova_lm(sm.ols("d ~ C(seed) + C(item)", data=frame).fit())
    fit = fit_items(d)
    assert fit.ms_seed == pytest.approx(table.loc["C(seed)", "mean_sq"], rel=1e-10)
    assert fit.ms_item == pytest.approx(table.loc["C(item)", "mean_sq"], rel=1e-10)
    assert fit.ms_resid == pytest.approx(table.loc["Residual", "mean_sq"], rel=1e-10)
    combined = fit.ms_seed + fit.ms_item - fit.ms_resid
    assert not fit.floored and fit.se == pytest.approx(math.sqrt(combined / (s * i)), rel=1e-12)
    satterthwaite = combined ** 2 / (fit.ms_seed ** 2 / (s - 1) + fit.ms_item ** 2 / (i - 1)
                                     + fit.ms_resid ** 2 / ((s - 1) * (i - 1)))
    assert fit.df == pytest.approx(satterthwaite, rel=1e-12)
    assert fit.estimate == pytest.approx(float(d.mean()), abs=1e-15)


def test_the_variance_floor_when_seeds_and_items_add_nothing():
    d = np.array([[0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]])  # seed and item means all equal: only residual
    fit = fit_items(d)
    assert fit.ms_seed == 0 and fit.ms_item == 0 and fit.floored
    assert fit.se == pytest.approx(math.sqrt(fit.ms_resid / 8)) and fit.df == 3


def test_test_claim_with_items_checks_its_inputs():
    items_a, items_b = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]), np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    a, b = items_a.mean(axis=1), items_b.mean(axis=1)
    result = stats.test_claim(a, b, expect="better", better="higher", items=(items_a, items_b))
    assert result.test == "seed x item t" and result.items == 3 and result.n == 2 and result.seeds_needed is None
    assert result.estimate == pytest.approx(float((items_a - items_b).mean()))
    with pytest.raises(ValueError, match="^a must be the per-seed means of its items"):
        stats.test_claim(a + 0.1, b, expect="better", better="higher", items=(items_a, items_b))
    # b's table is checked against b's values too: off by 0.1 on one seed, it names b
    with pytest.raises(ValueError, match=r"^b must be the per-seed means of its items: \[0\.3333"):
        stats.test_claim(a, b + np.array([0.0, 0.1]), expect="better", better="higher", items=(items_a, items_b))
    with pytest.raises(ValueError, match="one shape"):
        stats.test_claim(a, b, expect="better", better="higher", items=(items_a, items_b[:, :2]))
    with pytest.raises(ValueError, match="pair"):
        stats.test_claim(a, b, expect="better", better="higher", items=items_a)
    with pytest.raises(ValueError, match="two error models"):
        stats.test_claim(a, b, expect="better", better="higher", items=(items_a, items_b), pooled=stats.Pooled(1, 2))
    with pytest.raises(ValueError, match=r"items\[1\]\[0, 2\] = nan"):
        stats.test_claim(a, b, expect="better", better="higher", items=(items_a, np.where(items_b == 1, np.nan, 0)))
    tie = stats.test_claim(a, a, expect="better", better="higher", items=(items_a, items_a))
    assert tie.outcome == stats.UNTESTABLE


def _rates(d_items: np.ndarray) -> tuple[float, float]:
    """(seed-only, seed x item) confirmation rates of "a is better" (higher) over trials x seeds x items."""
    seed_only = item_aware = 0
    zeros = np.zeros(d_items.shape[1:])
    for d in d_items:
        means = d.mean(axis=1)
        seed_only += stats.test_claim(means, np.zeros_like(means), expect="better",
                                      better="higher").outcome == stats.CONFIRMED
        item_aware += stats.test_claim(means, np.zeros_like(means), expect="better", better="higher",
                                       items=(d, zeros)).outcome == stats.CONFIRMED
    return seed_only / len(d_items), item_aware / len(d_items)


def test_items_favouring_an_arm_by_chance_inflate_the_seed_only_test_not_the_item_test():
    # continuous per-item outcomes (a window's loss or accuracy): v_i, the item's chance lean to one arm, is the
    # same on every seed (sd 0.05), seeds add a little (0.002), each seed x item a little more (0.01)
    trials, seeds, items = 2000, 3, 200
    rng = np.random.default_rng(11)
    v = rng.normal(0, 0.05, (trials, 1, items))
    u = rng.normal(0, 0.002, (trials, seeds, 1))
    d = v + u + rng.normal(0, 0.01, (trials, seeds, items))
    seed_only, item_aware = _rates(d)
    assert seed_only > 0.15  # measured 0.22: the seeds agree, so the items' chance lean looks like an effect
    assert item_aware <= 0.05 + _tolerance(0.05, trials)  # measured 0.046


def test_binary_items_as_the_vocab_cuts_keep_the_item_tests_rate():
    # 0/1 hits on 200 cuts: each arm's chance of a hit on cut i is drawn independently from one distribution
    # (a few percent on average, as the vocab suite's 2-7 hits of 200), so no arm is better; a trained model hits
    # mostly the same cuts at every seed (each seed re-draws a cut's outcome with probability 0.2)
    trials, seeds, items = 2000, 3, 200
    rng = np.random.default_rng(12)

    def hits(p: np.ndarray) -> np.ndarray:
        base, fresh = rng.random((1, items)) < p, rng.random((seeds, items)) < p
        return np.where(rng.random((seeds, items)) < 0.2, fresh, base).astype(float)

    seed_only = item_aware = 0
    for _ in range(trials):
        a, b = hits(rng.beta(0.3, 8.0, (1, items))), hits(rng.beta(0.3, 8.0, (1, items)))
        ma, mb = a.mean(axis=1), b.mean(axis=1)
        seed_only += stats.test_claim(ma, mb, expect="better", better="higher").outcome == stats.CONFIRMED
        item_aware += stats.test_claim(ma, mb, expect="better", better="higher",
                                       items=(a, b)).outcome == stats.CONFIRMED
    assert seed_only / trials > 0.15  # measured 0.20
    assert item_aware / trials <= 0.05 + _tolerance(0.05, trials)  # measured 0.050


def test_the_item_test_has_power_against_a_real_effect():
    trials, seeds, items = 1000, 3, 200
    rng = np.random.default_rng(13)
    d = 0.02 + rng.normal(0, 0.05, (trials, 1, items)) + rng.normal(0, 0.01, (trials, seeds, items))
    seed_only, item_aware = _rates(d)
    # se ~ 0.05 / sqrt(200) = 0.0035, so 0.02 is ~5.6 se: nearly always confirmed
    assert item_aware > 0.95


def _item_power(components: tuple[float, float, float], seeds: int, items: int, effect: float, trials: int,
                rng: np.random.Generator) -> float:
    """The simulated rate at which the seed x item test confirms a true gain `effect` (one-sided, alpha 0.05)."""
    sd_s, sd_i, sd_e = (math.sqrt(c) for c in components)
    d = (effect + rng.normal(0, sd_s, (trials, seeds, 1)) + rng.normal(0, sd_i, (trials, 1, items))
         + rng.normal(0, sd_e, (trials, seeds, items)))
    zeros = np.zeros((seeds, items))
    return float(np.mean([stats.test_claim(t.mean(axis=1), np.zeros(seeds), expect="better", better="higher",
                                           items=(t, zeros)).outcome == stats.CONFIRMED for t in d]))


def test_the_seed_plan_at_fixed_items_has_its_power_by_simulation():
    # seeds dominate (sd 0.02 per seed against 0.03 / sqrt(32) from the items): more seeds decide it
    components, items, effect = (0.02 ** 2, 0.03 ** 2, 0.05 ** 2), 32, 0.03
    n = seeds_for(components, items, effect, alpha=0.05)
    assert n is not None and 3 < n < 30
    rng = np.random.default_rng(21)
    trials = 1500
    at_plan = _item_power(components, n, items, effect, trials, rng)
    one_fewer = _item_power(components, n - 1, items, effect, trials, rng)
    # the plan's (t + t) * se rule is the usual approximation of the noncentral t: within a few points of 80%
    assert 0.8 - 0.05 - _tolerance(0.8, trials) <= at_plan <= 0.8 + 0.08, (n, at_plan)  # measured 6 seeds: 0.85
    assert one_fewer < at_plan  # 5 seeds: 0.76


def test_no_number_of_seeds_beats_the_items_own_variance():
    # only items vary: V = sigma_i^2 / I with I - 1 df, whatever the seeds; the items needed by explicit search
    from scipy import special

    components, effect, alpha = (0.0, 0.1 ** 2, 0.0), 0.02, 0.05
    assert seeds_for(components, 32, effect, alpha=alpha) is None
    m = items_for(components, 3, effect, alpha=alpha)

    def enough(i: int) -> bool:
        return (special.stdtrit(i - 1, 1 - alpha) + special.stdtrit(i - 1, 0.8)) * 0.1 / math.sqrt(i) <= effect

    assert m is not None and enough(m) and not enough(m - 1)
    assert 150 < m < 170  # ~ ((1.645 + 0.842) * 0.1 / 0.02)^2 = 155 at large df


def test_an_inconclusive_item_claim_carries_its_plan():
    rng = np.random.default_rng(22)
    seeds, items = 3, 32
    d = 0.01 + rng.normal(0, 0.02, (seeds, 1)) + rng.normal(0, 0.03, (1, items)) + rng.normal(0, 0.05,
                                                                                              (seeds, items))
    zeros = np.zeros((seeds, items))
    result = stats.test_claim(d.mean(axis=1), np.zeros(seeds), expect="better", better="higher",
                              smallest_effect=0.03, items=(d, zeros))
    assert result.outcome == stats.INCONCLUSIVE
    fit = fit_items(d)
    assert result.components == pytest.approx(fit.components)
    assert result.seeds_needed == seeds_for(fit.components, items, 0.03, alpha=0.05)
    assert result.items_needed is None
    # the items' term alone too large at the stated effect: the plan is items, not seeds
    wide = d + rng.normal(0, 0.5, (1, items))
    result = stats.test_claim(wide.mean(axis=1), np.zeros(seeds), expect="better", better="higher",
                              smallest_effect=0.03, items=(wide, zeros))
    assert result.outcome == stats.INCONCLUSIVE and result.seeds_needed is None
    assert result.items_needed == items_for(fit_items(wide).components, seeds, 0.03, alpha=0.05) > items


def test_a_claim_neither_seeds_nor_items_decide_alone_plans_both():
    # seeds and items both vary a lot at 3 seeds x 8 items: 3 seeds leave the seeds' term, 8 items the items'
    rng = np.random.default_rng(24)
    seeds, items = 3, 8
    d = rng.normal(0, 0.08, (seeds, 1)) + rng.normal(0, 0.08, (1, items)) + rng.normal(0, 0.01, (seeds, items))
    zeros = np.zeros((seeds, items))
    result = stats.test_claim(d.mean(axis=1), np.zeros(seeds), expect="better", better="higher",
                              smallest_effect=0.03, items=(d, zeros))
    components = fit_items(d).components
    assert result.outcome == stats.INCONCLUSIVE
    assert seeds_for(components, items, 0.03, alpha=0.05) is None
    assert items_for(components, seeds, 0.03, alpha=0.05) is None
    assert result.items_needed in (2 * items, 4 * items, 8 * items, 16 * items, 32 * items)
    assert result.seeds_needed == seeds_for(components, result.items_needed, 0.03, alpha=0.05)
    smaller = result.items_needed // 2
    assert smaller == items or seeds_for(components, smaller, 0.03, alpha=0.05) is None  # the fewest multiple
