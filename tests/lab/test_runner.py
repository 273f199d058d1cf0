"""The runner's bookkeeping: how a run's end is recorded, when a run counts as done."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from archlab.lab.measure import STATUS
from archlab.lab.runner import LabError, RunSpec, _finish, is_done, run_wall_s


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
