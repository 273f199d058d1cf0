"""The verdicts of a suite (archlab.lab.analysis.verdicts) from tables built here: each comparison
on its own differences (the pooled rule's false-positive rate by simulation, beside the own rule's),
grids that must bracket their optimum, items as a second source of variance, and one verdict for a
comparison judged in two families."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as sp

from archlab.lab.analysis import stats
from archlab.lab.analysis.table import Run, Table
from archlab.lab.analysis.verdicts import best_of_grid, judge
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite import at_budget
from archlab.lab.spec.suite_file import load_suite

MC_SIGMAS = 3.0


def _tolerance(rate: float, trials: int) -> float:
    return MC_SIGMAS * math.sqrt(rate * (1.0 - rate) / trials)


def _suite(tmp_path: Path, text: str):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return at_budget(load_suite(path), BUDGETS["small"])


def _table(
    suite,
    values: dict[str, list[float]],
    items: dict[str, list[list[float]]] | None = None,
    metric: str = "val_loss",
) -> Table:
    runs = {
        arm: [
            Run(arm, s, f"{arm}-{s}", {metric: v}, {metric: items[arm][s]} if items else {})
            for s, v in enumerate(vals)
        ]
        for arm, vals in values.items()
    }
    return Table(suite, len(next(iter(values.values()))), runs)


def test_one_pooled_residual_inflates_the_noisy_contrast_and_own_differences_do_not():
    # a suite of 4 arms sharing a seed effect (sd 0.03): three quiet (residual sd 0.002), one 10x
    # noisier (0.02); no arm differs from the base. The previous rule pooled one residual over all
    # arms unless Bartlett's test and a 3x spread ratio flagged them; each comparison on its own
    # paired differences keeps its rate
    trials, n = 4000, 3
    rng = np.random.default_rng(21)
    rates = {"pooled_noisy": 0, "pooled_quiet": 0, "own_noisy": 0, "own_quiet": 0}
    for _ in range(trials):
        seed = rng.normal(0, 0.03, n)
        base, quiet, quiet2 = (3 + seed + rng.normal(0, 0.002, n) for _ in range(3))
        noisy = 3 + seed + rng.normal(0, 0.02, n)
        fit = stats.rcbd({"base": base, "quiet": quiet, "quiet2": quiet2, "noisy": noisy})
        pooled = None if fit.heteroscedastic else fit.pooled
        for name, arm in (("noisy", noisy), ("quiet", quiet)):
            rates[f"pooled_{name}"] += (
                stats.test_claim(arm, base, expect="better", better="lower", pooled=pooled).outcome
                == stats.CONFIRMED
            )
            rates[f"own_{name}"] += (
                stats.test_claim(arm, base, expect="better", better="lower").outcome
                == stats.CONFIRMED
            )
    rates = {k: v / trials for k, v in rates.items()}
    # measured 0.138: the pool fails
    assert rates["pooled_noisy"] > 0.05 + 2 * _tolerance(0.05, trials)
    for name in ("own_noisy", "own_quiet"):  # measured 0.049 and 0.052
        assert rates[name] <= 0.05 + _tolerance(0.05, trials), (name, rates[name])


def test_non_inferiority_at_003_confirms_a_true_deficit_of_twice_the_margin_rarely():
    trials, margin, n = 4000, 0.03, 3
    rng = np.random.default_rng(22)
    seed = rng.normal(0, 0.03, (trials, n))
    a = 3 + 2 * margin + seed + rng.normal(0, 0.015, (trials, n))
    b = 3 + seed + rng.normal(0, 0.015, (trials, n))
    confirmed = sum(
        stats.test_claim(x, y, expect="same", better="lower", margin=margin).outcome
        == stats.CONFIRMED
        for x, y in zip(a, b, strict=True)
    )
    assert confirmed / trials <= 0.05 + _tolerance(0.05, trials)


GRID = """
name: grid
base: {preset: llama}
arms:
  a-1: {optimizer.lr: 0.001}
  a-2: {optimizer.lr: 0.003}
  a-3: {optimizer.lr: 0.01}
  b-1: {optimizer.name: lion, optimizer.lr: 0.0001}
  b-2: {optimizer.name: lion, optimizer.lr: 0.0003}
  b-3: {optimizer.name: lion, optimizer.lr: 0.001}
grids: {a: [a-1, a-2, a-3], b: [b-1, b-2, b-3]}
measure: [val_loss]
claims:
  - {text: b as good as a at their best rates, metric: val_loss, arm: b, versus: a, expect: same}
"""


def test_a_grid_claim_is_judged_at_each_grids_best_arm_and_untestable_at_an_edge(
    tmp_path: Path,
) -> None:
    suite = _suite(tmp_path, GRID)
    seeds = [0.0, 0.02, -0.01]
    interior = {"a-1": 3.2, "a-2": 3.0, "a-3": 3.1, "b-1": 3.3, "b-2": 3.01, "b-3": 3.15}
    noise = {"a-2": [0.001, -0.002, 0.001], "b-2": [0.002, 0.0, -0.002]}
    values = {
        arm: [mu + s + noise.get(arm, [0, 0, 0])[i] for i, s in enumerate(seeds)]
        for arm, mu in interior.items()
    }
    (result,) = judge(_table(suite, values))
    assert result.arms == ("b-2", "a-2")
    d = np.array(values["b-2"]) - np.array(values["a-2"])
    assert result.estimate == pytest.approx(d.mean()) and result.test.df == 2
    assert result.test.p == pytest.approx(
        sp.t.cdf((d.mean() - 0.03) / (d.std(ddof=1) / math.sqrt(3)), 2)
    )
    # the a grid best at its highest rate: its optimum is not bracketed, so the claim
    # is untestable here
    edge = dict(values, **{"a-3": [v - 0.2 for v in values["a-3"]]})
    (result,) = judge(_table(suite, edge))
    assert result.outcome == stats.UNTESTABLE and result.test is None and not result.in_family
    assert "grid a is best at its highest point (a-3)" in result.note
    assert best_of_grid(_table(suite, edge), "b", "val_loss", "lower") == ("b-2", "")


ITEMS = """
name: items
base: {preset: llama}
arms: {a: {}, b: {model.norm: layernorm}}
measure: [continuation_acc]
margins: {continuation_acc: 0.02}
claims:
  - {text: a continues better than b, metric: continuation_acc, arm: a, versus: b}
"""


def test_a_measure_with_items_is_judged_with_seeds_and_items_random(tmp_path: Path) -> None:
    suite = _suite(tmp_path, ITEMS)
    # the vocab suite's pattern: the same few items hit on every seed, a on 7 of 200 and b on
    # 2 of 200
    hits_a = [[1.0 if i < 7 else 0.0 for i in range(200)] for _ in range(3)]
    hits_b = [[1.0 if 10 <= i < 12 else 0.0 for i in range(200)] for _ in range(3)]
    values = {"a": [0.035] * 3, "b": [0.01] * 3}
    (result,) = judge(_table(suite, values, {"a": hits_a, "b": hits_b}, "continuation_acc"))
    assert result.test.test == "seed x item t" and result.test.items == 200
    assert "seeds and items both random (200 items)" in result.note
    # seeds agree exactly: the test is the items' t-test
    d = np.array(hits_a[0]) - np.array(hits_b[0])
    t = d.mean() / (d.std(ddof=1) / math.sqrt(200))
    # hits: the exact item sign-flip test stands beside the t (p 0.048 on 199 df) and the larger p
    # decides: 9 informative cuts, 7 for a and 2 for b, each on all 3 seeds, have P(at least 7 of 9
    # signs +) = 46 / 512
    assert result.test.exact_p == (36 + 9 + 1) / 512 and result.test.informative == 9
    assert sp.t.sf(t, 199) < result.test.exact_p
    assert result.p == result.test.exact_p and result.outcome == stats.INCONCLUSIVE
    assert (
        "exact item sign-flip p 0.0898 over 9 informative items beside the t's 0.0478"
        in result.note
    )
    # without items the identical seeds would tie exactly: untestable, never a p of 1e-7
    # from others' residual
    (seeds_only,) = judge(_table(suite, values))
    assert seeds_only.outcome == stats.UNTESTABLE


ALIKE = """
name: alike
base: {preset: llama}
arms: {a: {}, b: {model.norm: layernorm}, c: {optimizer.lr: 0.002}, d: {optimizer.lr: 0.004},
       e: {optimizer.lr: 0.006}, f: {optimizer.lr: 0.008}, g: {optimizer.lr: 0.01}, h: {optimizer.lr: 0.012}}
alike: [a, b, c, d, e, f, g, h]
measure: [val_loss]
claims:
  - {text: b beats a, metric: val_loss, arm: b, versus: a}
"""  # noqa: E501
K, N = 8, 4  # 8 alike arms x 4 seeds: the pair's own 3 df against the group's 7 x 3 = 21


def _f_gate_p(y: np.ndarray) -> tuple[float, float, float]:
    """(F, two-sided p, sigma_eps) of the pair's variance against the group's: var(b - a) over 2
    sigma_eps^2, with sigma_eps^2 the arm + seed residual (Montgomery ch. 4), on F(n - 1, (K - 1)(n
    - 1)) from scipy.stats.f."""
    e = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + y.mean()
    df = (K - 1) * (N - 1)
    sigma2 = (e**2).sum() / df
    f = np.var(y[1] - y[0], ddof=1) / (2 * sigma2)
    return (
        float(f),
        float(2 * min(sp.f.cdf(f, N - 1, df), sp.f.sf(f, N - 1, df))),
        math.sqrt(sigma2),
    )


def _pair_at(p: float, side: str) -> np.ndarray:
    """Arms x seeds whose pair (a, b) has the two-sided F p `p` against the group, its variance
    above the group's ("high": a and b drift apart along one seed pattern) or below it ("low": b
    follows a closely)."""
    rng = np.random.default_rng(3)
    seed, noise, w = rng.normal(0, 0.03, N), rng.normal(0, 0.01, (K, N)), rng.normal(0, 0.01, N)

    def table(t: float) -> np.ndarray:
        y = 3 + seed + noise
        if side == "high":
            y[0], y[1] = y[0] - t * w, y[1] - 0.01 + t * w
        else:
            y[1] = y[0] - 0.01 + t * w
        return y

    df = (K - 1) * (N - 1)
    target = sp.f.isf(p / 2, N - 1, df) if side == "high" else sp.f.ppf(p / 2, N - 1, df)
    t = optimize.brentq(lambda t: _f_gate_p(table(t))[0] - target, 0.0, 50.0, xtol=1e-14)
    y = table(t)
    assert _f_gate_p(y)[1] == pytest.approx(p, rel=1e-9)
    return y


@pytest.mark.parametrize("side", ["high", "low"])
def test_the_f_gate_pools_an_alike_pair_at_f_p_006_and_not_at_004(
    tmp_path: Path, side: str
) -> None:
    """Alike arms pool their group's residual unless a two-sided 5% F test of var(b - a) against 2
    sigma_eps^2 on (n - 1, (K - 1)(n - 1)) df separates the pair: on both tails, p 0.06 pools and p
    0.04 does not."""
    suite = _suite(tmp_path, ALIKE)
    arms = [a.name for a in suite.arms]
    for p, pooled in ((0.06, True), (0.04, False)):
        y = _pair_at(p, side)
        # Bartlett's test does not decide it: the F gate
        assert not stats.rcbd(dict(zip(arms, y))).heteroscedastic
        (result,) = judge(_table(suite, {arm: list(row) for arm, row in zip(arms, y)}))
        d = y[1] - y[0]
        if pooled:
            assert result.note == f"pooled residual of alike arms {', '.join(arms)} (21 df)", (
                side,
                p,
            )
            assert result.test.df == 21
            assert result.test.se == pytest.approx(_f_gate_p(y)[2] * math.sqrt(2 / N), rel=1e-12)
        else:
            f = _f_gate_p(y)[0]
            assert result.note == (
                "the pair's own paired differences (its variance differs from the alike group's "
                f"pooled residual: F = {f:.3g})"
            ), (side, p)
            assert result.test.df == N - 1
            assert result.test.se == pytest.approx(np.std(d, ddof=1) / math.sqrt(N), rel=1e-12)
