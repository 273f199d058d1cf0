"""The report from finished run folders (synthetic measures, no training): each claim's outcome
against numbers worked out here from explicit formulas (the arm + seed residual, Student's t,
Holm by hand), the tables, the files, and report.html rendered by a headless browser where
one is installed."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sp

from archlab.lab.analysis import stats
from archlab.lab.analysis.verdicts import ClaimResult, factorial_anova, judge, narang_agreement
from archlab.lab.experiment import Experiment
from archlab.lab.measures.measure import write_measured
from archlab.lab.publishing import books, publish
from archlab.lab.publishing.record import read_record
from archlab.lab.publishing.tables import claim_table
from archlab.lab.runs.collect import TIMED, measure_plan, table_of
from archlab.lab.runs.plan import Plan, plan_suite, write_plan
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite import Claim
from archlab.lab.spec.suite_file import load_suite
from archlab.train.config import resolve_config

SUITE = """
name: synthetic
title: a suite whose results are written by hand
source: a test
design: every number is written by the test
base: {preset: llama}
arms:
  a: {}
  b: {model.norm: layernorm}
  c: {model.block: parallel}
measure: [val_loss, kv_bytes_per_token, diverged]
timings:
  - {metric: step_s, kind: train_step, arms: [b, a], pairs: 4}
claims:
  - {text: b beats a, metric: val_loss, arm: b, versus: a}
  - {text: c is as good as a, metric: val_loss, arm: c, versus: a, expect: same, margin: 0.04}
  - {text: a's loss is higher than b's, metric: val_loss, arm: a, versus: b, direction: higher}
  - {text: a beats b, metric: val_loss, arm: a, versus: b, narang: better}
  - {text: b is faster than a, metric: step_s, arm: b, versus: a}
  - {text: c cuts the KV cache, metric: kv_bytes_per_token, arm: c, versus: a}
  - {text: c never diverges where a does, metric: diverged, arm: c, versus: a}
  - {text: c beats b but is untestable here, metric: val_loss, arm: c, versus: b, untestable: the test says so}
"""  # noqa: E501
ROOT = Path(__file__).resolve().parents[2]
# y[arm, seed] = mu_arm + u_seed + e[arm, seed], residuals summing to 0 over each arm and each seed
MU = {"a": 3.00, "b": 2.80, "c": 3.01}
U = [0.0, 0.1, -0.05]
E = {"a": [0.01, -0.02, 0.01], "b": [-0.02, 0.01, 0.01], "c": [0.01, 0.01, -0.02]}
VAL = {arm: [MU[arm] + U[s] + E[arm][s] for s in range(3)] for arm in MU}
KV = {"a": 4096.0, "b": 4096.0, "c": 2048.0}
# the timing's arms: [b, a]
STEP_S = {"b": [0.010, 0.011, 0.012, 0.010], "a": [0.012, 0.012, 0.013, 0.011]}


def _fake_runs(plan: Plan, values: dict[str, list[float]] = VAL) -> None:
    """Finished run folders: metrics.jsonl, config.json, a final checkpoint folder
    and cached measures."""
    for run in plan.runs:
        (run.run_dir / "checkpoints" / f"step_{run.steps:07d}").mkdir(parents=True)
        rows = [
            {
                "step": s,
                "kind": "train",
                "loss": 5.0 - s / 10,
                "lr": 1e-3,
                "grad_norm": 1.0 + s / 100,
            }
            for s in range(2, run.steps + 1, 2)
        ]
        rows += [
            {"step": s, "kind": "eval", "loss": values[run.arm][run.seed] + 1.0 / s}
            for s in (12, 24)
        ]
        (run.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        train, model = resolve_config([{k: v for k, v in run.keys.items()}])
        (run.run_dir / "config.json").write_text(
            json.dumps({"model": model.to_dict(), "train": train.to_dict()})
        )
        write_measured(
            run.run_dir,
            {
                "val_loss": values[run.arm][run.seed],
                "kv_bytes_per_token": KV.get(run.arm, 0.0),
                "diverged": 0.0,
            },
        )


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Plan, list]:
    root = tmp_path_factory.mktemp("report")
    (root / "synthetic.yaml").write_text(SUITE)
    plan = plan_suite(load_suite(root / "synthetic.yaml"), BUDGETS["tiny"], root / "out", seeds=3)
    write_plan(plan)
    # as `archlab ablate` registers a plan before its first run
    Experiment.collect(plan.out).register()
    _fake_runs(plan)
    (plan.out / TIMED).write_text(
        json.dumps({"step_s": {"arms": ["b", "a"], "a": STEP_S["b"], "b": STEP_S["a"]}})
    )
    results = Experiment.collect(plan.out).report(
        "archlab ablate synthetic --budget tiny --seeds 3"
    )
    return plan, results


def _residual_sigma() -> tuple[float, int]:
    """sigma_eps of the arm + seed model by hand: sum of squared residuals over (K - 1)(n - 1)."""
    y = np.array([VAL[a] for a in "abc"])
    e = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + y.mean()
    # the residuals are the ones written above
    assert np.allclose(e, np.array([E[a] for a in "abc"]))
    return math.sqrt((e**2).sum() / 4), 4


def _own(arm: str, versus: str) -> tuple[float, float]:
    """(mean, standard error) of the pair's own paired differences, by hand."""
    d = np.array(VAL[arm]) - np.array(VAL[versus])
    return float(d.mean()), float(d.std(ddof=1)) / math.sqrt(len(d))


def _holm_by_hand(ps: list[float]) -> list[float]:
    """Holm (1979): the i-th smallest of m p-values (from 0) times m - i, capped at
    1, then non-decreasing."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def test_outcomes_against_hand_computed_paired_tests(report: tuple[Plan, list]) -> None:
    _, results = report
    gain, se_ba = _own("b", "a")  # each pair on its own paired differences: n - 1 = 2 df
    deficit, se_ca = _own("c", "a")
    assert gain == pytest.approx(-0.20) and se_ba == pytest.approx(0.03 / math.sqrt(3))
    t_crit = sp.t.ppf(0.95, 2)
    # one-sided p of each claim's confirming test (w > 0: the claimed arm is worse) and of
    # the contradicting one
    q = sp.t.sf(0.20 / se_ba, 2)  # a 0.20-nat gain
    p = [q, sp.t.cdf((deficit - 0.04) / se_ca, 2), q, sp.t.cdf(0.20 / se_ba, 2)]
    d = np.log(STEP_S["b"]) - np.log(STEP_S["a"])  # the timing claim: paired log ratios, 3 df
    p_timing = sp.t.sf(-d.mean() / (d.std(ddof=1) / 2), 3)
    family = p + [p_timing]  # m = 5: the formula and the untestable claims stay out
    holm = _holm_by_hand(family)
    for r, want_p, want_holm in zip(results[:5], family, holm):
        assert r.p == pytest.approx(want_p, rel=1e-6) and r.p_adjusted == pytest.approx(
            want_holm, rel=1e-6
        )
        assert r.test.test == "paired t"
    # the smallest contra p of 5
    assert results[3].test.p_contra_adjusted == pytest.approx(5 * q, rel=1e-6)
    assert results[0].estimate == pytest.approx(-0.20) and results[1].estimate == pytest.approx(
        0.01
    )
    assert results[0].ci == pytest.approx((-0.20 - t_crit * se_ba, -0.20 + t_crit * se_ba))
    assert [r.outcome for r in results] == [
        stats.CONFIRMED,
        stats.INCONCLUSIVE,
        stats.CONFIRMED,
        stats.CONTRADICTED,
        stats.CONFIRMED,
        stats.BY_CONSTRUCTION,
        stats.UNTESTABLE,
        stats.UNTESTABLE,
    ]
    # the inconclusive non-inferiority claim (estimate 0.01, margin 0.04): seeds for 80% power at a
    # true difference of 0 against the margin, at Holm's first step 0.05 / 5, by the noncentral t of
    # the pair's own differences (n - 1 df), with their observed sd
    sd = se_ca * math.sqrt(3)

    def power(n: int) -> float:
        return sp.nct.sf(sp.t.ppf(1 - 0.05 / 5, n - 1), n - 1, 0.04 * math.sqrt(n) / sd)

    assert results[1].seeds_needed == next(n for n in range(2, 100) if power(n) >= 0.8)
    # and its minimum detectable effect at n = 3 is where that power curve crosses 80%
    mde = results[1].mde
    assert sp.nct.sf(sp.t.ppf(1 - 0.05 / 5, 2), 2, mde * math.sqrt(3) / sd) == pytest.approx(
        0.8, abs=1e-8
    )
    assert results[1].statement.startswith("not shown (90% CI of the deficit")


def test_a_claims_direction_decides_which_way_is_good(report: tuple[Plan, list]) -> None:
    """The same difference (a 0.10 above b): confirmed when the claim says higher, contradicted when
    the measure's own direction (lower loss is better) applies."""
    _, results = report
    higher, lower = results[2], results[3]
    assert higher.claim.better == "higher" and lower.claim.better == "lower"
    assert higher.estimate == lower.estimate == pytest.approx(0.20)
    assert lower.statement.startswith("worse than b by 0.2 ")
    assert (higher.outcome, lower.outcome) == (stats.CONFIRMED, stats.CONTRADICTED)


def test_timing_claims_use_the_log_ratio_of_the_pairs(report: tuple[Plan, list]) -> None:
    _, results = report
    d = np.log(STEP_S["b"]) - np.log(STEP_S["a"])  # b vs a, pair by pair
    se = d.std(ddof=1) / 2
    timing = results[4]
    assert timing.estimate == pytest.approx(d.mean()) and timing.p == pytest.approx(
        sp.t.sf(-d.mean() / se, 3)
    )
    assert len(timing.a) == 4 and "interleaved pairs" in timing.note


def test_formulas_and_untestable_claims_stay_outside_the_family(report: tuple[Plan, list]) -> None:
    plan, results = report
    kv, diverged, stated = results[5], results[6], results[7]
    assert kv.test is None and kv.estimate == pytest.approx(-2048.0) and not kv.in_family
    # no events in either arm
    assert diverged.test is not None and "no seed differs" in diverged.test.note
    assert stated.test is None and stated.note == "the test says so"
    md = (plan.out / "results.md").read_text()
    assert (
        "5 tested claims: 3 confirmed, 1 inconclusive, 1 contradicted. Outside the family (not "
        "tallied): 1 by construction, 2 untestable by this design." in md
    )


def test_the_needs_column_says_what_a_stated_effect_needs_and_when_no_plan_is_made() -> None:
    claim = Claim(
        "far better",
        "acc_8x_plain",
        "a",
        "b",
        min_effect=0.05,
        direction="higher",
        smallest_effect=0.1,
    )
    b = [0.30, 0.31, 0.29]
    kw = {"expect": "better", "better": "higher", "min_effect": 0.05}
    planned = stats.test_claim([0.42, 0.33, 0.38], b, smallest_effect=0.1, **kw)
    row = claim_table([ClaimResult(claim, planned, planned.outcome, planned.estimate, [0.4] * 3)])[
        1
    ][0]
    assert planned.outcome == stats.INCONCLUSIVE
    assert row[13] == f"{planned.seeds_needed} seeds per arm at a true gain of 0.1"
    unstated = stats.test_claim([0.42, 0.33, 0.38], b, **kw)
    row = claim_table([ClaimResult(claim, unstated, unstated.outcome, unstated.estimate)])[1][0]
    assert row[13] == "none planned: no smallest effect stated"
    # worse before adjustment (p_contra 0.037, the interval excludes 0), undecided after Holm
    # over three claims
    alone = stats.test_claim([0.28, 0.28, 0.28], b, smallest_effect=0.1, **kw)
    assert alone.outcome == stats.CONTRADICTED and alone.against_the_data
    against = stats.adjust([alone, planned, unstated])[0]
    row = claim_table([ClaimResult(claim, against, against.outcome, against.estimate)])[1][0]
    assert against.outcome == stats.INCONCLUSIVE and row[13].startswith(
        "none: the data point the other way"
    )
    # "not worse than" and "as good as within +-m" are planned at a true difference of 0, never at a
    # gain; the equivalence plan is the TOST's (90% power for each one-sided test: seeds_needed at
    # 0.9, by scipy's nct)
    # d: mean 0.0025, sd 0.043; the 90% bounds reach +-0.053
    a, b = [3.03, 2.96, 3.05, 2.97], [3.0] * 4
    sigma_d = float(np.std(np.subtract(a, b), ddof=1))
    for expect, power, words in (
        ("same", 0.8, "at a true difference of 0"),
        (
            "equivalent",
            0.9,
            "for equivalence within +-0.05 at a true difference of 0 (90% power per side)",
        ),
    ):
        test = stats.test_claim(a, b, expect=expect, better="lower", margin=0.05)
        claim = Claim("a as good as b", "val_loss", "a", "b", expect=expect, margin=0.05)
        seeds = next(
            n
            for n in range(2, 100)
            if sp.nct.sf(sp.t.ppf(0.95, n - 1), n - 1, 0.05 * math.sqrt(n) / sigma_d) >= power
        )
        assert test.outcome == stats.INCONCLUSIVE and test.seeds_needed == seeds, expect
        row = claim_table([ClaimResult(claim, test, test.outcome, test.estimate, a)])[1][0]
        assert row[13] == f"{seeds} seeds per arm {words}", expect


def test_narang_agreement_needs_a_decision() -> None:
    better = Claim("x", "val_loss", "a", "b", narang="better")
    assert narang_agreement(better, stats.CONFIRMED).endswith("we agree")
    assert narang_agreement(better, stats.CONTRADICTED).endswith("we disagree")
    same = Claim("x", "val_loss", "a", "b", narang="same")
    assert (
        narang_agreement(same, stats.INCONCLUSIVE)
        == "Narang et al.: same; not decided here (inconclusive)"
    )
    # no evidence is no agreement
    assert "consistent" not in narang_agreement(same, stats.INCONCLUSIVE)
    not_worse = Claim("x", "val_loss", "a", "b", expect="same", margin=0.02, narang="better")
    inside = stats.test_claim(
        [3.0, 3.01, 2.99], [3.0, 3.0, 3.0], expect="same", better="lower", margin=0.05
    )
    assert inside.outcome == stats.CONFIRMED and inside.ci[0] < 0 < inside.ci[1]
    assert narang_agreement(not_worse, stats.CONFIRMED, inside).endswith(
        # their "better" is not shown
        "consistent (we show not worse by more than the margin, not better)"
    )
    better = stats.test_claim(
        [2.9, 2.91, 2.89], [3.0, 3.0, 3.0], expect="same", better="lower", margin=0.05
    )
    # better, beyond 0
    assert narang_agreement(not_worse, stats.CONFIRMED, better).endswith("we agree")
    assert (
        narang_agreement(Claim("x", "val_loss", "a", "b"), stats.CONFIRMED)
        == "not measured by Narang et al."
    )


def test_pages_show_the_suites_noise_and_every_run(report: tuple[Plan, list]) -> None:
    plan, _ = report
    md = (plan.out / "results.md").read_text()
    sigma, _ = _residual_sigma()
    assert f"residual sigma_eps {sigma:.4g} (4 df)" in md
    y = np.array([VAL[x] for x in "abc"])
    ms_seed = 3 * ((y.mean(axis=0) - y.mean()) ** 2).sum() / 2
    tau2 = (ms_seed - sigma**2) / 3  # the seed (block) variance from the ANOVA's mean squares
    assert f"rho {tau2 / (tau2 + sigma**2):.4g}" in md
    assert (
        "Design: every number is written by the test" in md
        and "| a | 3 |" in md
        and "| 0/3 |" in md
    )
    rows = list(csv.DictReader((plan.out / "results.csv").open()))
    assert [(r["arm"], r["seed"]) for r in rows] == [(a, str(s)) for a in "abc" for s in range(3)]
    assert [float(r["val_loss"]) for r in rows] == pytest.approx([v for a in "abc" for v in VAL[a]])
    assert {r["run"] for r in rows} == {r.run_dir.name for r in plan.runs}
    assert all(r["config"] and r["parameters"] for r in rows)
    timings = list(csv.DictReader((plan.out / "timings.csv").open()))
    assert [float(t["seconds_a"]) for t in timings] == STEP_S["b"]


FACTORIAL = """
name: factorial
base: {preset: llama}
design: a 2 x 2 factorial written by hand
measure: [val_loss]
factors:
  norm: {pre: {}, post: {model.norm_position: post}}
  lr: {normal: {}, high: {optimizer.lr: 0.02}}
claims:
  - {text: pre beats post, metric: val_loss, factor: norm, arm: pre, versus: post}
"""


def test_a_factorial_contrast_uses_every_cell_on_its_own_differences(tmp_path: Path) -> None:
    (tmp_path / "f.yaml").write_text(FACTORIAL)
    plan = plan_suite(load_suite(tmp_path / "f.yaml"), BUDGETS["tiny"], tmp_path / "out", seeds=3)
    cells = {"pre-normal": 3.0, "pre-high": 3.2, "post-normal": 3.1, "post-high": 3.5}
    values = {
        arm: [mu + U[s] + E["abca"[i]][s] for s in range(3)]
        for i, (arm, mu) in enumerate(cells.items())
    }
    _fake_runs(plan, values)
    table = table_of(plan, measure_plan(plan))
    (result,) = judge(table)
    y = np.array([values[a] for a in cells])
    a, b = (y[0] + y[1]) / 2, (y[2] + y[3]) / 2  # per seed, the mean of each level's 2 cells
    d = a - b
    se = d.std(ddof=1) / math.sqrt(3)
    assert result.note == "the pair's own paired differences" and result.test.df == 2
    assert result.a == pytest.approx(list(a)) and result.estimate == pytest.approx(-0.2)
    assert result.test.se == pytest.approx(se) and result.p == pytest.approx(sp.t.sf(0.2 / se, 2))
    # the analysis of variance by hand: a main effect's sum of squares over the residual of
    # cells + seeds
    e = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + y.mean()
    sigma = math.sqrt((e**2).sum() / (3 * 2))  # (K - 1)(n - 1) = 6 df
    rows = {term: (df_, f, pv) for term, df_, f, pv in factorial_anova(table, "val_loss")}
    level = {
        "norm": [(y[0] + y[1]) / 2, (y[2] + y[3]) / 2],
        "lr": [(y[0] + y[2]) / 2, (y[1] + y[3]) / 2],
    }
    for factor, (hi, lo) in level.items():
        # 2 cells x 3 seeds per level
        ss = 6 * ((hi.mean() - y.mean()) ** 2 + (lo.mean() - y.mean()) ** 2)
        f = ss / sigma**2
        assert rows[factor][:2] == (1.0, pytest.approx(f)) and rows[factor][2] == pytest.approx(
            sp.f.sf(f, 1, 6)
        )
    assert rows["residual"][0] == 6.0 and set(rows) == {"norm", "lr", "norm:lr", "seed", "residual"}


ALIKE = FACTORIAL + "alike: [pre-normal, pre-high, post-normal, post-high]\n"


def test_alike_arms_pool_their_residual_unless_a_variance_test_separates_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "f.yaml").write_text(ALIKE)
    # with 3 seeds Bartlett's test cannot confirm even a 100x spread ratio; 6 seeds confirm
    # 10x (p 0.011)
    n = 6
    plan = plan_suite(load_suite(tmp_path / "f.yaml"), BUDGETS["tiny"], tmp_path / "out", seeds=n)
    rng = np.random.default_rng(0)
    seed_effect, noise = rng.normal(0, 0.05, n), rng.normal(0, 0.01, (4, n))
    # homoscedastic cells: the declared group pools its residual, 3 x 5 = 15 df, a mean of 2
    # cells per side
    values = {a.name: list(3.0 + seed_effect + noise[i]) for i, a in enumerate(plan.suite.arms)}
    _fake_runs(plan, values)
    (pooled,) = judge(table_of(plan, measure_plan(plan)))
    y = np.array([values[a.name] for a in plan.suite.arms])
    e = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + y.mean()
    sigma = math.sqrt((e**2).sum() / 15)
    assert "pooled residual of alike arms" in pooled.note and pooled.test.df == 15
    assert pooled.test.se == pytest.approx(
        sigma * math.sqrt((1 / 2 + 1 / 2) / 2) * math.sqrt(2 / n)
    )
    # high-lr cells 10x noisier: the group's spreads differ, so the pair's own differences judge it
    scale = {"pre-normal": 1, "pre-high": 10, "post-normal": 1, "post-high": 10}
    noisy = {arm: list(3.0 + seed_effect + scale[arm] * noise[i]) for i, arm in enumerate(scale)}
    plan = plan_suite(
        load_suite(tmp_path / "f.yaml"),
        BUDGETS["tiny"],
        tmp_path / "noisy",
        seeds=n,
        store=tmp_path / "noisy-store",
    )
    _fake_runs(plan, noisy)
    (own,) = judge(table_of(plan, measure_plan(plan)))
    d = np.array(
        [
            (
                noisy["pre-normal"][s]
                + noisy["pre-high"][s]
                - noisy["post-normal"][s]
                - noisy["post-high"][s]
            )
            / 2
            for s in range(n)
        ]
    )
    assert "the alike group's spreads differ > 3x" in own.note
    assert own.test.se == pytest.approx(d.std(ddof=1) / math.sqrt(n)) and own.test.df == n - 1


def _browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return name
    if os.environ.get("ARCHLAB_BROWSER_TESTS") == "1":
        pytest.fail(
            "ARCHLAB_BROWSER_TESTS=1 but no chromium, chromium-browser or google-chrome is on PATH"
        )
    pytest.skip(
        "no headless browser (chromium) on PATH: the report.html rendering test runs where one is "
        "installed, or set ARCHLAB_BROWSER_TESTS=1 to require it"
    )


def test_report_html_renders_in_a_browser(report: tuple[Plan, list], tmp_path: Path) -> None:
    plan, results = report
    browser = _browser()
    page = (plan.out / "report.html").read_text()
    probe = (
        "<script>window.addEventListener('load', () => "
        "document.body.setAttribute('data-images', JSON.stringify([...document.images].map(i => "
        "[i.complete, i.naturalWidth, i.naturalHeight]))));</script></body>"
    )
    checked = tmp_path / "report-probe.html"
    checked.write_text(page.replace("</body>", probe))
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=5000",
            "--dump-dom",
            checked.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    images = json.loads(re.search(r'data-images="([^"]*)"', dom).group(1).replace("&quot;", '"'))
    assert len(images) == 2 and all(ok and w > 300 and h > 200 for ok, w, h in images), images
    assert '<table class="claims">' in dom and '<table class="arms">' in dom
    assert re.findall(r'<b class="verdict">([^<]+)</b>', dom) == [r.outcome for r in results]


def test_publish_rebuilds_pages_from_their_files_and_checks_them(
    report: tuple[Plan, list], tmp_path: Path
) -> None:
    spec = importlib.util.spec_from_file_location(
        "publish_results", ROOT / "scripts" / "publish_results.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    plan, results = report
    with pytest.raises(SystemExit, match="is not a suite folder: it has no plan.json"):
        script.main([str(tmp_path / "nothing"), "--to", str(tmp_path / "docs")])
    docs = tmp_path / "docs"
    # the page the first lab published: Welch, a noise floor
    (docs / "synthetic").mkdir(parents=True)
    first = [
        {
            "suite": "synthetic",
            "claim": "b beats a",
            "difference": -0.1,
            "noise_floor": 0.05,
            "p_holm": 0.3,
            "verdict": "not visible at this scale",
        },
        {
            "suite": "synthetic",
            "claim": "a claim since dropped",
            "difference": 0.2,
            "noise_floor": 0.05,
            "p_holm": 0.01,
            "verdict": "confirmed",
        },
    ]
    (docs / "synthetic" / "first-rule.json").write_text(json.dumps(first))
    assert script.main([str(plan.out), "--to", str(docs)]) == 0
    page = (docs / "synthetic.md").read_text()
    assert "| b beats a | -0.1, not visible at this scale |" in page
    assert (
        "| a claim since dropped | 0.2, confirmed | (no claim of this text now: dropped "
        "or reworded) |" in page
    )
    assert (
        "[`results.csv`](synthetic/results.csv)" in page
        and "archlab ablate --verify docs/results/synthetic" in page
    )
    for name in ("results.csv", "timings.csv", "suite.yaml", "configs.yaml", "provenance.json"):
        assert (docs / "synthetic" / name).read_bytes() == (plan.out / name).read_bytes(), name
    rows = json.loads((docs / "synthetic" / "claims.json").read_text())
    assert [r["outcome"] for r in rows] == [r.outcome for r in results]
    assert script.main(["--check", "--to", str(docs)]) == 0
    # a published number changed by hand is found, and named
    tampered = [
        {**r, "outcome": "confirmed"} if r["claim"] == "c is as good as a" else r for r in rows
    ]
    (docs / "synthetic" / "claims.json").write_text(json.dumps(tampered))
    problems = publish.check(docs)
    assert problems == [
        "synthetic: 'c is as good as a': outcome 'confirmed' recomputed as 'inconclusive'",
        "synthetic: record.sha256: claims.json changed since the record was hashed",
    ]
    assert script.main(["--check", "--to", str(docs)]) == 1
    # a value in results.csv changed: the verdicts recomputed from the files differ from
    # the claims published
    assert script.main(["--to", str(docs)]) == 0 and not publish.check(docs)
    csv_path = docs / "synthetic" / "results.csv"
    csv_path.write_text(csv_path.read_text().replace(repr(VAL["b"][0]), repr(VAL["b"][0] + 0.5)))
    assert any("'b beats a'" in line for line in publish.check(docs))


def test_a_comparison_two_pages_share_gets_one_verdict(
    report: tuple[Plan, list], tmp_path: Path
) -> None:
    plan, _ = report
    docs = tmp_path / "docs"
    publish.import_folder(plan.out, docs)
    # the same runs judged in a second suite with more claims (a larger Holm family)
    twin = docs / "twin"
    shutil.copytree(docs / "synthetic", twin)
    text = (twin / "suite.yaml").read_text().replace("name: synthetic", "name: twin")
    extra = "".join(
        f"  - {{text: extra {i}, metric: val_loss, arm: c, versus: a, expect: "
        "same, margin: 0.001}\n"
        for i in range(6)
    )
    (twin / "suite.yaml").write_text(text + extra)
    provenance = json.loads((twin / "provenance.json").read_text())
    (twin / "provenance.json").write_text(json.dumps({**provenance, "suite": "twin"}))
    alone = {
        name: {r.claim.text: r for r in judge(read_record(docs / name).table)}
        for name in ("synthetic", "twin")
    }
    shared = "b beats a"
    # 11 claims vs 5
    assert alone["twin"][shared].p_adjusted > alone["synthetic"][shared].p_adjusted
    judged = books.judged(docs)
    both = [
        next(r for r in judged[name][1] if r.claim.text == shared) for name in ("synthetic", "twin")
    ]
    assert both[0].outcome == both[1].outcome
    assert both[0].p_adjusted == both[1].p_adjusted == alone["twin"][shared].p_adjusted
    assert "also judged in twin" in both[0].note and "also judged in synthetic" in both[1].note
    publish.rebuild(docs)
    summary = (docs / "README.md").read_text()
    assert summary.count("| b beats a") == 1 and "| b beats a (also in twin) |" in summary
    assert "q (BH across pages; secondary)" in summary


def test_a_looks_level_reaches_every_test_and_later_looks_replace_undecided_claims(
    report: tuple[Plan, list],
) -> None:
    from archlab.lab.runs.planning import sequential_results

    plan, first = report
    timings = json.loads((plan.out / TIMED).read_text())
    table = table_of(plan, measure_plan(plan), timings)
    strict = judge(table, alpha=0.001)
    # Holm p ~0.019
    assert first[0].outcome == stats.CONFIRMED and strict[0].outcome == stats.INCONCLUSIVE
    assert strict[0].test.alpha == 0.001 and strict[4].test.alpha == 0.001  # the timing claim too
    again = judge(table, claims=[first[1].claim])
    merged = sequential_results(first, again, [0.01, 0.04])
    assert [r.claim.text for r in merged] == [r.claim.text for r in first] and merged[1] is again[0]
    assert "second look" in merged[1].note and "decided at the first look" in merged[0].note
