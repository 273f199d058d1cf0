"""What one run costs for `--plan` (lab/runs/run_cost.py): training compute against the explicit
FLOP formula, the scaling with known inputs, and each source in its order (this suite's runs, other
suites' runs at the budget in the same store, the published page at the same or another budget, the
budget's figure), each named in the printout."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from archlab.costs import matmul_params
from archlab.lab.measures.measure import STATUS
from archlab.lab.runs.plan import plan_suite, write_plan
from archlab.lab.runs.planning import format_plan, power_plan
from archlab.lab.runs.run_cost import RUN_START_S, plan_compute, run_compute, run_cost, scaled
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite_file import load_suite
from archlab.nn.config import ModelConfig
from archlab.train.config import resolve_config


def explicit_compute(keys: dict[str, str]) -> float:
    """steps x batch x block x 3 x (2 x matmul weights + 4 x heads x head_dim x layers x
    block), by hand."""
    train, model = resolve_config([{k: v for k, v in keys.items() if k != "out"}])
    block = train.data.block_size
    forward = 2 * matmul_params(model) + 4 * model.n_heads * model.head_dim * model.n_layers * block
    return train.steps * train.data.batch_size * block * 3 * forward


def test_run_compute_is_tokens_times_training_flops_per_token() -> None:
    model = ModelConfig(d_model=64, n_heads=4, n_layers=2, max_seq_len=128, vocab_size=256)
    forward = 2 * matmul_params(model) + 4 * 4 * 16 * 2 * 64
    assert run_compute(24, 8, 64, model) == 24 * 8 * 64 * 3 * forward


def test_scaling_keeps_the_start_and_scales_the_rest_with_compute() -> None:
    assert scaled(106.0, 2e12, 1e10, start=6.0) == pytest.approx(6.0 + 100.0 * 0.005)
    assert scaled(106.0, 1e10, 1e10, start=6.0) == 106.0  # the same compute: as measured
    assert scaled(4.0, 1e10, 2e10, start=6.0) == 6.0  # a run faster than the start: the start alone


def heads(budget: str, tmp_path: Path, out: str = "heads"):  # noqa: ANN201
    return plan_suite(
        load_suite("heads"), BUDGETS[budget], tmp_path / out, store=tmp_path / "store"
    )


def page(docs: Path, budget: str, median: float) -> Path:
    (docs / "heads").mkdir(parents=True, exist_ok=True)
    (docs / "heads" / "provenance.json").write_text(
        json.dumps({"budget": budget, "training": {"median_run_s": median}})
    )
    return docs


def test_a_page_at_another_budget_is_scaled_by_training_flops(tmp_path: Path) -> None:
    """The issue's case: heads at tiny from the small page's 355 s per run. Tiny's runs are 1/363 of
    small's compute: about 7 s a run, where the page's figure as it was said 355 s (18 min for 21
    runs at --jobs 2)."""
    tiny, small = heads("tiny", tmp_path), heads("small", tmp_path, "small")
    c_tiny = statistics.fmean(explicit_compute(r.keys) for r in tiny.runs)
    c_small = statistics.fmean(explicit_compute(r.keys) for r in small.runs)
    assert plan_compute(tiny) == pytest.approx(c_tiny, rel=1e-12)
    docs = page(tmp_path / "docs", "small", 355.0)
    cost = run_cost(tiny, docs)
    assert cost.seconds == pytest.approx(
        RUN_START_S + (355.0 - RUN_START_S) * c_tiny / c_small, rel=1e-9
    )
    assert 5 < cost.seconds < 10 and 300 < c_small / c_tiny < 400
    assert cost.source.startswith(
        f"the published page {docs / 'heads'}: 355 s per run at budget small, scaled by "
        "training FLOPs per run"
    )
    text = "\n".join(format_plan(tiny, power_plan(tiny, docs), jobs=2, docs=docs))
    assert f"({cost.seconds:.0f} s per run, the published page" in text
    same = run_cost(small, docs)  # the page's own budget: its figure as measured
    assert same.seconds == 355.0 and same.source.endswith(
        "355 s per run at budget small, as measured"
    )


def test_this_suites_runs_then_other_suites_runs_at_the_budget_come_first(tmp_path: Path) -> None:
    docs = page(tmp_path / "docs", "small", 355.0)
    plan = heads("tiny", tmp_path)
    # another suite at tiny in the same store, two finished runs with known walls
    other = plan_suite(
        load_suite("norm-type"), BUDGETS["tiny"], tmp_path / "norm-type", store=tmp_path / "store"
    )
    write_plan(other)
    rates = []
    for run, wall in zip(other.runs[:2], (20.0, 30.0)):
        run.run_dir.mkdir(parents=True)
        train, model = resolve_config([{k: v for k, v in run.keys.items() if k != "out"}])
        (run.run_dir / "config.json").write_text(
            json.dumps({"train": train.to_dict(), "model": model.to_dict()})
        )
        (run.run_dir / STATUS).write_text(json.dumps({"returncode": 0, "wall_s": wall}))
        rates.append((wall - RUN_START_S) / explicit_compute(run.keys))
    cost = run_cost(plan, docs)
    assert cost.seconds == pytest.approx(
        RUN_START_S + statistics.median(rates) * plan_compute(plan), rel=1e-9
    )
    assert cost.source.startswith(f"2 runs of other suites at budget tiny in {plan.store}")
    # a suite at another budget in the store is not this budget's measurement
    assert "other suites" not in run_cost(heads("small", tmp_path, "small"), docs).source
    # this suite's own finished runs: their median, as measured
    for run, wall in zip(plan.runs[:3], (11.0, 13.0, 40.0)):
        run.run_dir.mkdir(parents=True, exist_ok=True)
        (run.run_dir / STATUS).write_text(
            json.dumps({"returncode": 1, "diverged": True, "wall_s": wall})
        )
    own = run_cost(plan, docs)
    assert (
        own.seconds == 13.0
        and own.source == "the median of this suite's 3 stored runs at budget tiny"
    )


def test_without_any_measurement_the_budgets_figure_says_so(tmp_path: Path) -> None:
    cost = run_cost(heads("tiny", tmp_path), tmp_path / "no-docs")
    assert cost.seconds == BUDGETS["tiny"].run_s and cost.source.startswith("budget tiny's figure")
