"""The runner's bookkeeping: how a run's end is recorded, when a run counts as done, how timings are taken."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from archlab.lab import runner
from archlab.lab.measure import MEASURED, MEASURES, STATUS, TIMING_ROUNDS, write_measured
from archlab.lab.runner import LabError, RunSpec, _finish, is_done, measure_plan, plan_suite, run_wall_s
from archlab.lab.suite import BUDGETS, load_suite
from tests.lab.test_report import SUITE, _fake_runs


def test_finish_records_divergence_and_names_failures(tmp_path: Path) -> None:
    run = RunSpec("arm", 0, tmp_path / "run", {}, steps=10)
    run.run_dir.mkdir()
    (run.run_dir / "train.log").write_text("step 3 skipped\narchlab train: training diverged: 5 consecutive\n")
    _finish(run, 1)
    assert is_done(run)
    (run.run_dir / "train.log").write_text("Traceback ...\nValueError: boom\n")
    with pytest.raises(LabError, match="arm arm seed 0 failed \\(exit 1\\): ValueError: boom"):
        _finish(run, 1)
    assert not is_done(run)


def test_done_means_the_last_steps_checkpoint_and_metrics(tmp_path: Path) -> None:
    run = RunSpec("arm", 0, tmp_path / "run", {"steps": "10", "out": str(tmp_path / "run")}, steps=10)
    (run.run_dir / "checkpoints" / "step_0000005").mkdir(parents=True)
    (run.run_dir / "metrics.jsonl").write_text('{"step": 5, "kind": "train"}\n')
    assert not is_done(run)  # stopped part way: continued with --resume
    assert run.command(resume=True) == ["archlab", "train", "--steps", "10", "--out", str(run.run_dir), "--resume"]
    (run.run_dir / "checkpoints" / "step_0000010").mkdir()
    assert is_done(run)
    (run.run_dir / "metrics.jsonl").unlink()
    assert not is_done(run)


def test_run_wall_time_is_recorded_or_read_from_file_times(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert run_wall_s(run_dir) == 0.0  # not finished
    (run_dir / "config.yaml").write_text("{}")
    (run_dir / STATUS).write_text(json.dumps({"returncode": 0, "diverged": False}))  # an older lab's status
    os.utime(run_dir / "config.yaml", (1000.0, 1000.0))
    os.utime(run_dir / STATUS, (1123.5, 1123.5))
    assert run_wall_s(run_dir) == 123.5  # from the config written at start to the status written at exit
    (run_dir / STATUS).write_text(json.dumps({"returncode": 0, "diverged": False, "wall_s": 42.0}))
    assert run_wall_s(run_dir) == 42.0
    run = RunSpec("arm", 0, run_dir, {}, steps=10)
    (run_dir / "train.log").write_text("done\n")
    _finish(run, 0)  # a run the runner did not start: no start time to count from
    assert json.loads((run_dir / STATUS).read_text())["wall_s"] < 1.0


def test_timings_are_taken_in_rounds_over_all_runs_keeping_each_runs_best(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "synthetic.yaml").write_text(SUITE)
    plan = plan_suite(load_suite(tmp_path / "synthetic.yaml"), BUDGETS["tiny"], tmp_path / "out")
    _fake_runs(plan)  # val_loss and step_ms cached; drop step_ms so that it is timed again
    for run in plan.runs:
        write_measured(run.run_dir, {"val_loss": 1.0})
    order = sorted(plan.runs, key=lambda r: r.seed)
    calls: list[tuple[Path, list[str]]] = []
    slow_by_round = [5.0, 0.0, 9.0]  # round 1 is every run's fastest

    def fake_measure_run(run_dir: Path, names: list[str], windows: int) -> dict[str, float]:
        calls.append((run_dir, names))
        i, round_ = [r.run_dir for r in order].index(run_dir), (len(calls) - 1) // len(order)
        return {"step_ms": 100.0 + 10 * i + slow_by_round[round_]}

    monkeypatch.setattr(runner, "measure_run", fake_measure_run)
    measured = measure_plan(plan)
    assert TIMING_ROUNDS == 3
    assert calls == [(r.run_dir, ["step_ms"]) for r in order] * TIMING_ROUNDS  # rounds over all runs, in turn
    for i, run in enumerate(order):
        assert measured[run] == {"val_loss": 1.0, "step_ms": 100.0 + 10 * i}  # val_loss came from the cache
        assert json.loads((run.run_dir / MEASURED).read_text())["step_ms"] == 100.0 + 10 * i
    calls.clear()
    measure_plan(plan)
    assert calls == []  # kept: a second report times nothing again


def test_best_follows_each_measures_direction() -> None:
    assert MEASURES["step_ms"].best(3.0, 2.0) == 2.0 and MEASURES["decode_tok_s"].best(3.0, 2.0) == 3.0
    assert MEASURES["step_ms"].best(None, 2.0) is None  # n/a for the run (no checkpoint) stays n/a
    assert {n for n, m in MEASURES.items() if m.timing} == {"step_ms", "decode_tok_s"}
