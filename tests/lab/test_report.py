"""The report from finished run folders (synthetic metrics, no training): verdicts computed from the numbers,
tables with mean and spread, and report.html rendered by headless Chromium with its table, verdicts and images."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from archlab.lab import report as report_module
from archlab.lab import stats
from archlab.lab.measure import write_measured
from archlab.lab.report import judge, narang_agreement, write_report
from archlab.lab.runner import Plan, measure_plan, plan_suite, write_plan
from archlab.lab.suite import BUDGETS, Claim, load_suite, resolve_arm

SUITE = """
name: synthetic
title: a suite whose results are written by hand
source: a test
base: {preset: llama}
arms:
  a: {}
  b: {model.norm: layernorm}
  c: {model.block: parallel}
measure: [val_loss, step_ms]
claims:
  - {text: b beats a, metric: val_loss, arm: b, versus: a}
  - {text: c beats a, metric: val_loss, arm: c, versus: a}
  - {text: a is faster than b, metric: step_ms, arm: a, versus: b}
"""
ROOT = Path(__file__).resolve().parents[2]
VAL = {"a": [3.00, 3.02], "b": [2.50, 2.51], "c": [3.01, 2.99]}  # b far better; c inside the noise
STEP_MS = {"a": [50.0, 52.0], "b": [80.0, 81.0], "c": [40.0, 41.0]}


def _fake_runs(plan: Plan) -> None:
    """Finished run folders: metrics.jsonl, config.json, a final checkpoint folder and cached measures."""
    for run in plan.runs:
        (run.run_dir / "checkpoints" / f"step_{run.steps:07d}").mkdir(parents=True)
        rows = [{"step": s, "kind": "train", "loss": 5.0 - s / 10, "lr": 1e-3, "grad_norm": 1.0 + s / 100}
                for s in range(2, run.steps + 1, 2)]
        rows += [{"step": s, "kind": "eval", "loss": VAL[run.arm][run.seed] + 1.0 / s} for s in (12, 24)]
        (run.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        model = resolve_arm(plan.suite, plan.suite.arm(run.arm), BUDGETS["tiny"])[1]
        (run.run_dir / "config.json").write_text(json.dumps({"model": model.to_dict(), "train": run.keys}))
        write_measured(run.run_dir, {"val_loss": VAL[run.arm][run.seed], "step_ms": STEP_MS[run.arm][run.seed]})


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Plan, list]:
    root = tmp_path_factory.mktemp("report")
    (root / "synthetic.yaml").write_text(SUITE)
    plan = plan_suite(load_suite(root / "synthetic.yaml"), BUDGETS["tiny"], root / "out")
    _fake_runs(plan)
    results = write_report(plan, measure_plan(plan), "archlab ablate synthetic --budget tiny")
    return plan, results


def test_verdicts_follow_the_rule(report: tuple[Plan, list]) -> None:
    plan, results = report
    tests = [stats.welch_test(VAL["b"], VAL["a"]), stats.welch_test(VAL["c"], VAL["a"]),
             stats.welch_test(STEP_MS["a"], STEP_MS["b"])]
    adjusted = stats.holm([t.p for t in tests])
    assert [r.p_holm for r in results] == pytest.approx(adjusted)
    assert results[0].noise_floor == pytest.approx(math.sqrt(0.0002))  # std of the base arm a over its seeds
    assert [r.verdict for r in results] == [
        stats.verdict(t.diff, p, f, better, "better")
        for t, p, f, better in zip(tests, adjusted, [results[0].noise_floor] * 2 + [math.sqrt(2.0)],
                                   ["lower"] * 3)]
    assert results[1].verdict == stats.NOT_VISIBLE  # c differs from a by less than the noise floor


def test_tables_show_mean_and_spread(report: tuple[Plan, list]) -> None:
    plan, _ = report
    md = (plan.out / "results.md").read_text()
    a = plan.suite.arm("a")
    assert f"| a | 2 | {a.params:,} |" in md and "3.01 ± 0.01414" in md and "2.505 ± 0.007071" in md
    assert md.count("\n| b beats a |") == 1 and "## The verdict rule" in md
    assert (plan.out / "results.csv").read_text().splitlines()[0] == "arm,seed,parameters,val_loss,step_ms"


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return name
    pytest.skip("headless Chromium is not installed (`make test` installs Debian's chromium when run as root "
                "with apt-get; elsewhere install it by hand)")


def test_report_html_renders_in_chromium(report: tuple[Plan, list], tmp_path: Path) -> None:
    plan, results = report
    page = (plan.out / "report.html").read_text()
    probe = ("<script>window.addEventListener('load', () => document.body.setAttribute('data-images', "
             "JSON.stringify([...document.images].map(i => [i.complete, i.naturalWidth, i.naturalHeight]))));"
             "</script></body>")
    checked = tmp_path / "report-probe.html"
    checked.write_text(page.replace("</body>", probe))
    dom = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
                          "--dump-dom", checked.as_uri()], capture_output=True, text=True, timeout=120).stdout
    images = json.loads(re.search(r'data-images="([^"]*)"', dom).group(1).replace("&quot;", '"'))
    assert len(images) == 2 and all(ok and w > 300 and h > 200 for ok, w, h in images), images
    assert '<table class="claims">' in dom and '<table class="arms">' in dom
    verdicts = re.findall(r'<b class="verdict">([^<]+)</b>', dom)
    assert verdicts == [r.verdict for r in results]
    shot = tmp_path / "report.png"
    subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                    "--window-size=1200,2000", (plan.out / "report.html").as_uri()], capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_narang_agreement() -> None:
    better = Claim("x", "val_loss", "a", "b", narang="better")
    assert narang_agreement(better, stats.CONFIRMED).endswith("we agree")
    assert narang_agreement(better, stats.CONTRADICTED).endswith("we disagree")
    assert narang_agreement(better, stats.NOT_VISIBLE).endswith("no visible difference here")
    same = Claim("x", "val_loss", "a", "b", expect="same", narang="better")
    assert narang_agreement(same, stats.CONFIRMED).endswith("we agree")
    assert narang_agreement(Claim("x", "val_loss", "a", "b", narang="same"), stats.CONFIRMED).endswith("disagree")
    assert narang_agreement(Claim("x", "val_loss", "a", "b"), stats.CONFIRMED) == "not measured by Narang et al."


def test_publish_writes_a_page_per_suite_and_a_summary_of_every_claim(
        report: tuple[Plan, list], tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("publish_results", ROOT / "scripts" / "publish_results.py")
    publish = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(publish)
    plan, results = report
    with pytest.raises(SystemExit, match="is not a suite folder: it has no plan.json"):
        publish.main([str(tmp_path / "nothing"), "--to", str(tmp_path / "docs")])
    write_plan(plan)
    docs = tmp_path / "docs"
    assert publish.main([str(plan.out), "--to", str(docs), "--note", "The machine was shared."]) == 0
    page = (docs / "synthetic.md").read_text()
    assert page.startswith("# synthetic: a suite whose results are written by hand\n\nReproduce: `archlab ablate "
                           "synthetic --budget tiny --jobs 1`")
    assert "report.html`.\n\nThe machine was shared.\n\n" in page
    assert "![val_loss](synthetic/val_loss.png)" in page and "Machine: " in page
    assert (docs / "synthetic" / "val_loss.png").read_bytes() == (plan.out / "val_loss.png").read_bytes()
    summary = (docs / "README.md").read_text().splitlines()
    rows = [line for line in summary if line.startswith("| [synthetic](synthetic.md)")]
    assert len(rows) == len(results) == 3
    for row, result in zip(rows, results):  # the verdicts are the report's, in the suite's order
        assert f"| {result.claim.text} |" in row and row.endswith(f"| {result.verdict} | {result.narang} |")
    moved = [row.split(" | ")[6] for row in rows]
    assert moved == ["the claimed way"] * 3  # val_loss b 2.505 < a 3.01, c 3.00 < a 3.01; step_ms a 51 < b 80.5
    counts = next(line for line in summary if line.startswith("3 claims"))
    assert counts.startswith("3 claims from 1 suite: 2 confirmed, 1 not visible at this scale. Built-in suites not "
                             "published yet: block, embeddings, ffn,")  # every built-in suite: none published here
    (docs / "synthetic" / "reading.md").write_text("b wins by far.\n")
    assert publish.main([str(plan.out), "--to", str(docs)]) == 0  # publishing again keeps the reading
    assert "**[synthetic](synthetic.md).** b wins by far." in (docs / "README.md").read_text().splitlines()


def test_claims_compare_arms_on_the_seeds_both_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The base arm's extra seeds (noise_seeds) set the noise floor but never enter a comparison's means."""
    (tmp_path / "synthetic.yaml").write_text(SUITE)
    plan = plan_suite(load_suite(tmp_path / "synthetic.yaml"), BUDGETS["small"], tmp_path / "out")
    base = {0: 3.00, 1: 3.02, 2: 3.90, 3: 3.10}  # seed 2 an outlier, as a real base arm had
    val = {"a": base, "b": {0: 2.98, 1: 3.01}, "c": {0: 3.01, 1: 2.99}}
    assert [r.seed for r in plan.runs_of("a")] == [0, 1, 2, 3] and [r.seed for r in plan.runs_of("b")] == [0, 1]
    measured = {r: {"val_loss": val[r.arm][r.seed], "step_ms": 50.0 + r.seed} for r in plan.runs}
    results = judge(plan, measured)
    b_vs_a = stats.welch_test([2.98, 3.01], [3.00, 3.02])
    assert results[0].diff == pytest.approx(-0.015) and results[0].p == pytest.approx(b_vs_a.p)
    assert results[0].noise_floor == pytest.approx(stats.mean_std(list(base.values()))[1])  # all 4 seeds
    assert results[0].verdict == stats.NOT_VISIBLE  # over all base seeds b would look 0.25 nats better
    monkeypatch.setattr(report_module, "trained_params", lambda run: 1000)
    _, rows = report_module.arm_table(plan, measured)
    assert [r[:4] for r in rows[:3]] == [["a", "4", "1,000", "3.255 ± 0.4322"], ["a, seeds 0, 1", "2", "1,000",
                                                                                  "3.01 ± 0.01414"],
                                         ["b", "2", "1,000", "2.995 ± 0.02121"]]
