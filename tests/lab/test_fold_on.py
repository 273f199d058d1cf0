"""A screening design folded on one factor (lab/spec/design.py `fold_on`) and its semifold: the
defining relation read off the rows by brute force, the folded factor's two-factor interactions
out of their chains, the semifold's effect variances against a simulation of least squares, and,
through a suite with known truth, an interaction that shared a chain in the fraction recovered
alone at the nominal rate. The suite file's refusals, and the plan's SE from the semifold's
correlated columns."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sp

from archlab.lab.analysis import stats
from archlab.lab.analysis.screening import coded, fit
from archlab.lab.runs.plan import plan_suite
from archlab.lab.runs.planning import POWER, family_size, power_plan, screening_lines
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.design import (
    LETTERS,
    design,
    effect_columns,
    estimable,
    fold_on,
    main_effect_variances,
)
from archlab.lab.spec.suite import SuiteError
from tests.lab.test_screening import SUITE, _suite, _table

SEMIFOLD = SUITE.replace(
    "design: {kind: fractional, resolution: IV, text: six switches in 16 runs}",
    "design: {kind: fractional, resolution: IV, fold_on: pos, keep: rope, text: semifold}",
)


def _constant_words(x: np.ndarray) -> set[str]:
    """Every product of at least two columns that is constant over the rows: the defining
    relation, found by brute force over all subsets."""
    k = x.shape[1]
    return {
        "".join(LETTERS[j] for j in subset)
        for r in range(2, k + 1)
        for subset in itertools.combinations(range(k), r)
        if len(set(np.prod(x[:, list(subset)], axis=1))) == 1
    }


def test_a_fold_on_one_factor_drops_its_words_and_frees_its_interactions() -> None:
    d = design(7, "IV")
    assert _constant_words(d.matrix) == set(d.words)  # the reader of words, checked alone
    folded = fold_on(d, 3)
    assert folded.runs == 32 and np.array_equal(folded.matrix[:16], d.matrix)
    assert np.array_equal(folded.matrix[16:, 3], -d.matrix[:, 3])
    assert np.array_equal(np.delete(folded.matrix[16:], 3, 1), np.delete(d.matrix, 3, 1))
    # the words without d survive, and nothing else is constant over the 32 rows
    assert set(folded.words) == _constant_words(folded.matrix) == {"abef", "aceg", "bcfg"}
    assert folded.regular and folded.resolution == 4
    x = folded.matrix
    for a, b, c, e in itertools.combinations(range(7), 4):
        pairs = [(a, b), (a, c), (a, e), (b, c), (b, e), (c, e)]
        for p, q in itertools.combinations(pairs, 2):
            if 3 in p and set(p) != set(q):  # d's interactions: orthogonal to every other one
                assert x[:, p[0]] * x[:, p[1]] @ (x[:, q[0]] * x[:, q[1]]) == 0
    chains = {c for c in folded.chains(2) if len(c[0]) == 2}
    # in the fraction d g = a b = e f share one column; folded on d, d g stands alone
    assert ("ab", "dg", "ef") in d.chains(2) and ("dg",) in chains and ("ab", "ef") in chains
    assert "folded on D" in folded.describe()[0]
    with pytest.raises(ValueError, match="not folded yet"):
        fold_on(folded, 2)
    with pytest.raises(ValueError, match="keep=0"):
        fold_on(d, 3, 0)


@pytest.mark.parametrize("keep", [-1, 1])
def test_a_semifold_keeps_half_the_new_rows_and_its_variances_are_least_squares(keep: int) -> None:
    d = design(7, "IV")
    semi = fold_on(d, 3, keep)
    assert semi.runs == 24 and not semi.regular and estimable(semi)
    assert np.array_equal(semi.matrix[:16], d.matrix) and set(semi.matrix[16:, 3]) == {keep}
    assert semi.words == fold_on(d, 3).words  # the full fold's model
    assert "semifolded on D" in semi.describe()[0] and "(of the full fold)" in semi.describe()[2]
    # the variance of each main effect (twice a coefficient) of least squares on the fold's
    # columns, over 4,000 simulated responses of sd 1, against 4 [(X'X)^-1]_jj
    rng = np.random.default_rng(0)
    x = np.column_stack([np.ones(24), *effect_columns(semi, semi.matrix.astype(float))])
    beta = rng.normal(0, 0.1, x.shape[1])
    draws = np.stack(
        [
            2 * np.linalg.lstsq(x, x @ beta + rng.normal(0, 1, 24), rcond=None)[0][1:8]
            for _ in range(4000)
        ]
    )
    want = main_effect_variances(semi)
    # a variance over 4,000 normal draws: relative SE sqrt(2 / 3999) = 2.2%
    assert np.allclose(draws.var(axis=0, ddof=1), want, rtol=4 * math.sqrt(2 / 3999))
    assert np.mean(draws, axis=0) == pytest.approx(2 * beta[1:8], abs=0.06)
    # the folded factor's main effect gains precision; the others stay at the fraction's 1/4
    assert want[3] < want[0] and want[0] == pytest.approx(4 / 16)
    assert np.allclose(main_effect_variances(d), 4 / 16) and np.allclose(
        main_effect_variances(fold_on(d, 3)), 4 / 32
    )


def test_a_semifold_suite_separates_an_interaction_from_its_chain(tmp_path: Path) -> None:
    """Six factors, I = ABEF = ACDF = BCDE: ffn x pos (b c) shares a column with bias x drop (d e).
    Folded on pos and kept at rope, the 24-row suite estimates each alone; a true ffn x pos of
    0.05 with bias x drop 0 is covered by each 90% interval at the nominal rate, and the main
    effects stay unbiased."""
    fraction, semi = _suite(tmp_path), _suite(tmp_path, SEMIFOLD)
    assert len(semi.arms) == 24 and semi.screening["fold_on"] == "pos"
    assert {a.name for a in fraction.arms} < {a.name for a in semi.arms}
    assert all(a.levels["pos"] == "rope" for a in semi.arms[16:])
    shared = fit(_table(fraction, np.random.default_rng(3), seeds=2), "val_loss")
    assert any(e.aliases == "ffn x pos = bias x drop" for e in shared.effects)
    rng = np.random.default_rng(4)
    trials, hits = 400, {"ffn x pos": 0, "bias x drop": 0, "ffn": 0}
    truth = {"ffn x pos": 0.05, "bias x drop": 0.0, "ffn": -0.04}
    for _ in range(trials):
        result = fit(_table(semi, rng, seeds=2, sigma=0.02, interaction=0.05), "val_loss")
        t = sp.t.ppf(0.95, result.df)
        effects = {e.aliases: e for e in result.effects}
        for name, true in truth.items():
            e = effects[name]
            hits[name] += abs(e.estimate - true) <= t * e.se
    tolerance = 3 * math.sqrt(0.9 * 0.1 / trials)
    for name, n in hits.items():
        assert abs(n / trials - 0.9) <= tolerance, (name, n / trials)


def test_a_semifold_suite_refuses_what_it_cannot_fold(tmp_path: Path) -> None:
    design_line = "design: {kind: fractional, resolution: IV, text: six switches in 16 runs}"
    for spec, message in [
        ("keep: rope", "design keep='rope' needs fold_on"),
        ("fold_on: norm2", "design fold_on='norm2'; one of norm, ffn, pos"),
        ("fold_on: pos, keep: alibi", "design keep='alibi'; one of pos's levels sinusoidal, rope"),
        ("fold_on: pos, fold_over: true", "design fold_on (one factor's mirror) and fold_over"),
    ]:
        text = SUITE.replace(design_line, design_line.replace("IV,", f"IV, {spec},"))
        with pytest.raises(SuiteError, match=message.replace("(", r"\(").replace(")", r"\)")):
            _suite(tmp_path, text)
    full = _suite(tmp_path, SEMIFOLD.replace(", keep: rope", ""))
    assert len(full.arms) == 32 and "keep" not in full.screening
    assert "fold_on" not in _suite(tmp_path).screening  # a plain fraction's spec as it was
    # three factors at resolution III (C = AB, 4 rows), folded on A: the full fold (8 rows) fits its
    # 6 effects and the mean; the semifold's 6 rows cannot, and the file is refused in one line
    three = (
        "name: three\nbase: {preset: llama}\n"
        "design: {kind: fractional, resolution: III, fold_on: norm, keep: rmsnorm, text: t}\n"
        "factors:\n"
        "  norm: {layernorm: {model.norm: layernorm}, rmsnorm: {}}\n"
        "  ffn: {mlp: {model.ffn: mlp}, swiglu: {}}\n"
        "  bias: {biases: {model.bias: true}, none: {}}\n"
        "measure: [val_loss]\n"
        "claims: [{text: t, metric: val_loss, factor: ffn, arm: swiglu, versus: mlp}]\n"
    )
    with pytest.raises(SuiteError, match="the semifold's rows cannot estimate every main effect"):
        _suite(tmp_path, three)
    assert len(_suite(tmp_path, three.replace(", keep: rmsnorm", "")).arms) == 8


def test_a_semifold_with_fewer_rows_than_columns_is_not_estimable() -> None:
    """Three factors at resolution III (C = AB), folded on A: the fold's model is the mean, 3 main
    effects and 3 interactions, 7 columns; the full fold's 8 distinct rows estimate them, a
    semifold's 6 rows cannot (at either level kept)."""
    iii = design(3, "III")
    for d, fits in [
        (fold_on(iii, 0), True),
        (fold_on(iii, 0, 1), False),
        (fold_on(iii, 0, -1), False),
    ]:
        columns = effect_columns(d, d.matrix.astype(float))
        assert len(columns) == 6 and d.runs == (8 if fits else 6)
        assert len({tuple(row) for row in d.matrix}) == d.runs  # no row repeated
        assert estimable(d) is fits
    assert all(estimable(fold_on(design(7, "IV"), j, keep)) for j in range(7) for keep in (-1, 1))


def test_the_plan_prices_each_claim_at_the_semifolds_own_variance(tmp_path: Path) -> None:
    """A claim on a factor the semifold left correlated needs its own (larger) SE: 4 [(X'X)^-1]_jj
    sigma^2 / seeds, where the fraction's 2 sigma / sqrt(N) would understate it."""
    plan = plan_suite(_suite(tmp_path, SEMIFOLD), BUDGETS["small"], tmp_path / "out", seeds=3)
    variances = main_effect_variances(fold_on(design(6, "IV"), 2, 1))
    factors = list(plan.suite.factors)
    rows = {row.claim.factor: row for row in power_plan(plan)}
    sigma = BUDGETS["small"].sigma
    for factor, row in rows.items():
        se = sigma * math.sqrt(variances[factors.index(factor)] / 3)
        assert row.mde == pytest.approx(_mde(se, 2 * 23, plan, row), rel=1e-9), factor
    assert variances[factors.index("ffn")] > 4 / 24  # correlated: above the regular 4 / N
    lines = screening_lines(plan)
    worst = sigma * math.sqrt(max(variances) / 3)
    assert any(f"SEs reach {worst:.3g}" in line for line in lines)
    # I = ABEF = ACDF = BCDE folded on c leaves I = ABEF: every pair of letters not both in it is
    # clear of the other interactions (c's five among them)
    clear = [
        f"{p}{q}".upper()
        for p, q in itertools.combinations("abcdef", 2)
        if not any({p, q} <= set(w) for w in _constant_words(fold_on(design(6, "IV"), 2).matrix))
    ]
    assert {"AC", "BC", "CD", "CE", "CF"} <= set(clear) and len(clear) == 15 - 6
    assert "  two-factor interactions clear of every other: " + ", ".join(clear) in lines
    assert [coded(plan.suite, a.name)[2] for a in plan.suite.arms[16:]] == [1] * 8


def _mde(se: float, df: int, plan, row) -> float:  # noqa: ANN001
    power = 0.9 if row.claim.expect == "equivalent" else POWER
    return stats.mde_from_se(se, df, alpha=stats.ALPHA / family_size(plan), power=power)
