"""The verdict rule: the t tail against float64 references, Welch's statistic, Holm on a known example, outcomes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from archlab.lab.stats import (
    CONFIRMED,
    CONTRADICTED,
    NOT_VISIBLE,
    holm,
    incomplete_beta,
    t_two_sided_p,
    verdict,
    welch_test,
)


def _t_tail_by_quadrature(t: float, df: float) -> float:
    """2 * integral_{|t|}^inf of the Student-t density, float64, by the trapezoid rule after x = |t| + u/(1-u)."""
    u = np.linspace(0.0, 1.0, 400_001)[:-1]
    x = abs(t) + u / (1.0 - u)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    density = np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df)) / (1.0 - u) ** 2
    return float(2.0 * np.trapezoid(density, u))


@pytest.mark.parametrize("t", [0.0, 0.3, 1.0, 2.0, 4.5, 12.0])
def test_t_tail_closed_forms(t: float) -> None:
    # df = 1 is the Cauchy distribution, df = 2 has a closed form too
    assert t_two_sided_p(t, 1.0) == pytest.approx(1.0 - 2.0 / math.pi * math.atan(abs(t)), abs=1e-12)
    assert t_two_sided_p(t, 2.0) == pytest.approx(1.0 - abs(t) / math.sqrt(2.0 + t * t), abs=1e-12)


@pytest.mark.parametrize(("t", "df"), [(0.5, 1.7), (2.1, 3.3), (-3.0, 5.0), (2.5, 11.2), (1.96, 200.0)])
def test_t_tail_against_quadrature(t: float, df: float) -> None:
    assert t_two_sided_p(t, df) == pytest.approx(_t_tail_by_quadrature(t, df), rel=1e-6, abs=1e-10)


def test_t_tail_large_df_is_normal() -> None:
    assert t_two_sided_p(1.959963984540054, 1e7) == pytest.approx(0.05, abs=1e-6)


def test_incomplete_beta_symmetry_and_uniform() -> None:
    assert incomplete_beta(1.0, 1.0, 0.37) == pytest.approx(0.37, abs=1e-14)  # Beta(1, 1) is uniform
    assert incomplete_beta(2.5, 0.7, 0.8) == pytest.approx(1.0 - incomplete_beta(0.7, 2.5, 0.2), abs=1e-14)


def test_welch_against_float64_formula() -> None:
    a, b = [3.11, 3.05, 3.20, 3.08], [3.31, 3.26, 3.40]
    xa, xb = np.array(a, dtype=np.float64), np.array(b, dtype=np.float64)
    va, vb = xa.var(ddof=1) / len(a), xb.var(ddof=1) / len(b)
    t = (xa.mean() - xb.mean()) / np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    result = welch_test(a, b)
    assert result.diff == pytest.approx(xa.mean() - xb.mean(), abs=1e-14)
    assert result.t == pytest.approx(t, rel=1e-12)
    assert result.df == pytest.approx(df, rel=1e-12)
    assert result.p == pytest.approx(_t_tail_by_quadrature(t, df), rel=1e-6)


def test_welch_degenerate_cases() -> None:
    assert welch_test([4.0, 4.0], [2.0, 2.0]).p == 0.0  # deterministic measurement that differs
    assert welch_test([4.0, 4.0], [4.0, 4.0]).p == 1.0
    assert math.isnan(welch_test([4.0], [2.0, 2.5]).p)  # one seed: no spread to test against


def test_holm_known_example() -> None:
    # sorted 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> monotone 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    adjusted = holm([0.2, math.nan, 0.01])
    assert adjusted[0] == pytest.approx(0.2) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.02)


def test_verdict_three_outcomes() -> None:
    # lower is better; diff = claimed - other
    assert verdict(-0.10, 0.001, 0.02, "lower", "better") == CONFIRMED
    assert verdict(+0.10, 0.001, 0.02, "lower", "better") == CONTRADICTED
    assert verdict(-0.10, 0.20, 0.02, "lower", "better") == NOT_VISIBLE  # not significant after Holm
    assert verdict(-0.01, 0.001, 0.02, "lower", "better") == NOT_VISIBLE  # inside the noise floor
    assert verdict(+5.0, 0.001, 0.0, "higher", "better") == CONFIRMED
    # "as good as": worse beyond the floor and significant contradicts; within the floor confirms
    assert verdict(+0.10, 0.001, 0.02, "lower", "same") == CONTRADICTED
    assert verdict(+0.01, 0.50, 0.02, "lower", "same") == CONFIRMED
    assert verdict(+0.10, 0.50, 0.02, "lower", "same") == NOT_VISIBLE
    assert verdict(-0.10, 0.001, 0.02, "lower", "same") == CONFIRMED  # better counts as "as good as"
