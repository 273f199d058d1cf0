"""Screening suites (archlab.lab.analysis.screening): the least-squares effects against hand-computed contrasts, and by
simulation with known truth: main effects and an interaction recovered within their intervals at the nominal rate,
a null effect confirmed at most alpha of the time, and the standard error half the one-switch-at-a-time one."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sp

from archlab.lab.analysis import stats
from archlab.lab.analysis.screening import coded, fit
from archlab.lab.analysis.table import Run, Table
from archlab.lab.analysis.verdicts import judge
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite import SuiteError, at_budget
from archlab.lab.spec.suite_file import load_suite

SUITE = """
name: screen
base: {preset: llama}
design: {kind: fractional, resolution: IV, text: six switches in 16 runs}
factors:
  norm: {layernorm: {model.norm: layernorm}, rmsnorm: {}}
  ffn: {mlp: {model.ffn: mlp}, swiglu: {}}
  pos: {sinusoidal: {model.position: sinusoidal}, rope: {}}
  bias: {biases: {model.bias: true}, none: {}}
  drop: {dropout: {model.dropout: 0.1}, nodrop: {}}
  tie: {tied: {model.tie_embeddings: true}, untied: {}}
measure: [val_loss]
claims:
  - {text: RMSNorm is as good as LayerNorm, metric: val_loss, factor: norm, arm: rmsnorm, versus: layernorm,
     expect: same}
  - {text: SwiGLU beats an MLP, metric: val_loss, factor: ffn, arm: swiglu, versus: mlp}
  - {text: biases do not help, metric: val_loss, factor: bias, arm: none, versus: biases, expect: same}
"""
EFFECTS = {"norm": 0.0, "ffn": -0.04, "pos": -0.3, "bias": 0.005, "drop": -0.06, "tie": -0.02}  # +1 minus -1


def _suite(tmp_path: Path, text: str = SUITE):
    (tmp_path / "s.yaml").write_text(text)
    return at_budget(load_suite(tmp_path / "s.yaml"), BUDGETS["small"])


def _table(suite, rng: np.random.Generator, seeds: int = 2, sigma: float = 0.01, interaction: float = 0.0):
    """Runs with the EFFECTS (half of each above the mean, half below), a seed block, one ffn x pos interaction."""
    runs = {}
    block = rng.normal(0, 0.03, seeds)
    for arm in suite.arms:
        x = dict(zip(suite.factors, coded(suite, arm.name)))
        mean = 3.0 + sum(EFFECTS[f] / 2 * x[f] for f in EFFECTS) + interaction / 2 * x["ffn"] * x["pos"]
        runs[arm.name] = [Run(arm.name, s, f"{arm.name}-{s}", {"val_loss": mean + block[s] + rng.normal(0, sigma)})
                          for s in range(seeds)]
    return Table(suite, seeds, runs)


def test_a_screening_suite_runs_its_designs_rows(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    assert len(suite.arms) == 16 and suite.screening == {"kind": "fractional", "resolution": "IV",
                                                          "fold_over": False}
    x = np.array([coded(suite, a.name) for a in suite.arms])
    assert np.array_equal(x.T @ x, 16 * np.eye(6, dtype=int))  # balanced and orthogonal
    assert suite.design == "six switches in 16 runs"
    folded = load_suite(tmp_path / "s.yaml", fold_over=True)
    assert len(folded.arms) == 32 and folded.screening["fold_over"]
    with pytest.raises(SuiteError, match="within: is not allowed in a screening suite"):
        _suite(tmp_path, SUITE + "  - {text: x, metric: val_loss, factor: ffn, arm: swiglu, versus: mlp, "
                                 "within: {norm: rmsnorm}}\n")
    with pytest.raises(SuiteError, match="exactly two levels each"):
        _suite(tmp_path, SUITE.replace("rope: {}}", "rope: {}, alibi: {model.position: alibi}}"))


def test_effects_are_the_hand_computed_contrasts(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    table = _table(suite, np.random.default_rng(0), seeds=3)
    result = fit(table, "val_loss")
    y = {a.name: np.array(table.values(a.name, "val_loss")) for a in suite.arms}
    for j, factor in enumerate(suite.factors):
        high = np.mean([y[a.name] for a in suite.arms if coded(suite, a.name)[j] == 1])
        low = np.mean([y[a.name] for a in suite.arms if coded(suite, a.name)[j] == -1])
        assert result.effect(factor).estimate == pytest.approx(high - low, abs=1e-12)
        assert result.effect(factor).se == pytest.approx(2 * result.sigma / math.sqrt(48), rel=1e-9)
    chains = [e for e in result.effects if not e.main]
    # res IV, I = ABEF = ACDF = BCDE: the 15 two-factor interactions fall in 7 chains (ab = ef, ..., af = be = cd);
    # the 2 remaining columns of the 16 rows alias only higher orders and join the residual
    assert len(chains) == 7 and sum(e.aliases.count(" = ") + 1 for e in chains) == 15
    assert result.df == 48 - 3 - 6 - 7  # runs - seeds - main effects - chains
    results = judge(table)
    swiglu = next(r for r in results if r.claim.factor == "ffn")
    assert swiglu.test.test == "OLS t" and swiglu.estimate == pytest.approx(result.effect("ffn").estimate)  # swiglu: +1


def test_effects_are_recovered_at_the_nominal_rate_and_nulls_stay_at_alpha(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    rng = np.random.default_rng(1)
    trials, covered, null_confirmed, interaction_covered = 600, {f: 0 for f in EFFECTS}, 0, 0
    for _ in range(trials):
        table = _table(suite, rng, seeds=2, sigma=0.02, interaction=0.05)
        result = fit(table, "val_loss")
        t = sp.t.ppf(0.95, result.df)
        for f, true in EFFECTS.items():
            e = result.effect(f)
            covered[f] += abs(e.estimate - true) <= t * e.se
        chain = next(e for e in result.effects if not e.main and "ffn x pos" in e.aliases)
        interaction_covered += abs(chain.estimate - 0.05) <= t * chain.se
        # norm's true effect is 0: "RMSNorm beats LayerNorm" (higher is worse) confirmed only by chance
        e = result.effect("norm")
        null_confirmed += stats.test_estimate(e.estimate, e.se, result.df, expect="better",
                                              better="lower").outcome == stats.CONFIRMED
    tolerance = 3 * math.sqrt(0.9 * 0.1 / trials)
    for f, hits in covered.items():  # each 90% interval covers its true effect 90% of the time
        assert abs(hits / trials - 0.9) <= tolerance, (f, hits / trials)
    assert abs(interaction_covered / trials - 0.9) <= tolerance  # the ffn x pos chain carries the interaction
    assert null_confirmed / trials <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / trials)


def test_the_standard_error_against_one_switch_at_a_time_at_equal_runs(tmp_path: Path) -> None:
    # 16 rows x 2 seeds = 32 runs; one switch at a time with the same 32 runs is 6 arms + a base at ~4.6 seeds:
    # its SE, sqrt(2) sigma / sqrt(32 / 7), against 2 sigma / sqrt(32): the ratio sqrt(2 / 7) = 0.53
    suite = _suite(tmp_path)
    result = fit(_table(suite, np.random.default_rng(2), seeds=2, sigma=0.01), "val_loss")
    one_at_a_time = math.sqrt(2) * result.sigma / math.sqrt(32 / 7)
    assert result.effect("ffn").se / one_at_a_time == pytest.approx(math.sqrt(2 / 7), rel=1e-9)


def test_effect_p_values_are_two_sided_as_the_page_labels_them(tmp_path: Path) -> None:
    """Each effect's p is the two-sided t test of effect = 0 at the fit's residual df: against scipy, on the hand
    contrast and a residual from numpy's least squares over every main effect and every two-factor product (the
    space the fit's chains span); the page's effects table calls it two-sided and shows it."""
    from archlab.lab.publishing.page import fmt, screening_section
    from archlab.lab.publishing.record import Record

    suite = _suite(tmp_path)
    table = _table(suite, np.random.default_rng(4), seeds=3, sigma=0.02)
    result = fit(table, "val_loss")
    x = np.array([coded(suite, a.name) for a in suite.arms for _ in range(3)], dtype=np.float64)
    y = np.array([v for a in suite.arms for v in table.values(a.name, "val_loss")])
    seed = np.array([s for _ in suite.arms for s in range(3)])
    products = [x[:, i] * x[:, j] for i in range(6) for j in range(i + 1, 6)]
    m = np.column_stack([np.ones(48), seed == 1, seed == 2, x, *products]).astype(np.float64)
    coef, _, rank, _ = np.linalg.lstsq(m, y, rcond=None)
    df = 48 - rank
    sigma = math.sqrt(float(np.sum((y - m @ coef) ** 2)) / df)
    assert df == result.df == 32
    ps = []
    for j, factor in enumerate(suite.factors):
        effect = y[x[:, j] == 1].mean() - y[x[:, j] == -1].mean()
        p = 2 * sp.t.sf(abs(effect) / (2 * sigma / math.sqrt(48)), df)
        assert result.effect(factor).p == pytest.approx(p, rel=1e-9), factor
        ps.append(p)
    assert min(ps) < 0.01 and max(ps) > 0.5  # a large effect (pos) and a null one (norm): both tails of p
    record = Record(table, BUDGETS["small"], tmp_path, {}, {})
    (head, rows), _ = screening_section(record)
    assert head[-1] == "p (two-sided)"
    shown = {row[0]: row[-1] for row in rows}
    assert all(shown[f] == fmt(result.effect(f).p) for f in suite.factors)
