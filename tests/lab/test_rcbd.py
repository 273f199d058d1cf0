"""The randomized complete block fit (archlab.lab.analysis.rcbd) against statsmodels' OLS with arm
and seed dummies, and its variance components against simulated suites with known truth."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from archlab.lab.analysis import stats
from archlab.lab.analysis.rcbd import HETEROSCEDASTIC_RATIO, rcbd

TABLE = {
    "base": [3.012, 3.051, 2.987, 3.030],
    "glu": [2.981, 3.030, 2.960, 2.991],
    "tied": [3.020, 3.066, 2.999, 3.029],
}


def test_residual_sigma_and_contrast_match_statsmodels_ols():
    smf = pytest.importorskip("statsmodels.formula.api")
    import pandas as pd

    rows = [(arm, s, v) for arm, values in TABLE.items() for s, v in enumerate(values)]
    frame = pd.DataFrame(rows, columns=["arm", "seed", "y"])
    ols = smf.ols("y ~ C(arm, Treatment('base')) + C(seed)", data=frame).fit()
    fit = rcbd(TABLE)
    assert fit.pooled.df == ols.df_resid == (3 - 1) * (4 - 1)
    assert fit.pooled.sigma == pytest.approx(math.sqrt(ols.scale), rel=1e-10)
    term = "C(arm, Treatment('base'))[T.glu]"
    claim = stats.test_claim(
        TABLE["glu"], TABLE["base"], expect="better", better="lower", pooled=fit.pooled
    )
    assert claim.estimate == pytest.approx(ols.params[term], rel=1e-10)
    assert claim.se == pytest.approx(ols.bse[term], rel=1e-10)
    # OLS's two-sided p, halved (t < 0)
    assert claim.p == pytest.approx(ols.pvalues[term] / 2, rel=1e-8)


def test_two_arms_pooled_equals_the_paired_t():
    two = {"a": TABLE["glu"], "b": TABLE["base"]}
    fit = rcbd(two)
    pooled = stats.test_claim(
        two["a"], two["b"], expect="better", better="lower", pooled=fit.pooled
    )
    paired = stats.test_claim(two["a"], two["b"], expect="better", better="lower")
    assert pooled.p == pytest.approx(paired.p, rel=1e-10) and pooled.df == paired.df
    # 2 arms: mirror residuals
    assert fit.spread_ratio == pytest.approx(1.0) and not fit.heteroscedastic


def test_variance_components_recover_a_known_rho():
    rng = np.random.default_rng(11)
    k, n, tau, omega = 4, 2000, 0.03, 0.01
    y = (
        3.0
        + np.arange(k)[:, None] * 0.01
        + rng.normal(0, tau, (1, n))
        + rng.normal(0, omega, (k, n))
    )
    fit = rcbd({f"arm{i}": row for i, row in enumerate(y)})
    assert fit.pooled.sigma == pytest.approx(omega, rel=0.03)
    assert fit.tau == pytest.approx(tau, rel=0.05)
    assert fit.rho == pytest.approx(tau**2 / (tau**2 + omega**2), abs=0.01)  # 0.9
    assert fit.sigma_run == pytest.approx(math.hypot(tau, omega), rel=0.05)
    assert fit.arm_means["arm3"] - fit.arm_means["arm0"] == pytest.approx(0.03, abs=0.002)
    assert not fit.heteroscedastic


def test_heteroscedastic_arm_is_flagged():
    rng = np.random.default_rng(12)
    n = 40
    u = rng.normal(0, 0.03, n)
    table = {
        "base": 3 + u + rng.normal(0, 0.01, n),
        "glu": 3 + u + rng.normal(0, 0.01, n),
        "high-lr": 3 + u + rng.normal(0, 0.08, n),
    }
    fit = rcbd(table)
    residual_rows = [fit.residuals[arm] for arm in table]
    assert fit.homogeneity_p == pytest.approx(scipy_stats.bartlett(*residual_rows).pvalue, rel=1e-9)
    assert fit.heteroscedastic and fit.spread_ratio > HETEROSCEDASTIC_RATIO
    assert max(fit.arm_spreads, key=fit.arm_spreads.get) == "high-lr"


def test_bad_tables_are_refused():
    with pytest.raises(ValueError, match="at least 2 arms"):
        rcbd({"a": [1.0, 2.0]})
    with pytest.raises(ValueError, match="same seeds; seeds per arm: {'a': 2, 'b': 3}"):
        rcbd({"a": [1.0, 2.0], "b": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match=r"non-finite values at \(arm, seed\) \[\('b', 1\)\]"):
        rcbd({"a": [1.0, 2.0], "b": [1.0, math.nan]})
    with pytest.raises(ValueError, match="at least 2 seeds"):
        rcbd({"a": [1.0], "b": [2.0]})


def test_the_flag_rarely_fires_on_homoscedastic_suites():
    rng = np.random.default_rng(13)
    suites, k, n = 400, 5, 4
    y = rng.normal(0, 0.03, (suites, 1, n)) + rng.normal(0, 0.01, (suites, k, n))
    flagged = sum(rcbd({str(i): row for i, row in enumerate(t)}).heteroscedastic for t in y)
    assert flagged / suites <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / suites)
