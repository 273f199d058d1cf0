"""Run records (lab/runs/records.py): a suite stopped on one machine, its finished runs' records (no
checkpoints) carried to a fresh machine, goes on there without training them again and reports what
one uninterrupted sitting reports."""

from __future__ import annotations

import csv
import json
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from archlab.cli import main
from archlab.lab import Experiment, LabError
from archlab.lab.measures.measure import MEASURED, STATUS, write_measured
from archlab.lab.runs.plan import RunSpec, prepare
from archlab.lab.runs.records import (
    RECORD_FILES,
    is_record,
    last_step,
    missing_measures,
    read_records,
    record_folders,
)
from archlab.lab.runs.runner import is_done, run_plan
from archlab.train.metrics import METRICS
from tests.cli.test_ablate import SUITE


def _ablate(spec: Path, machine: Path) -> list[str]:
    """`archlab ablate` of the two-arm suite at tiny, 2 seeds, in MACHINE's folder and store."""
    return [
        "ablate",
        str(spec),
        "--budget",
        "tiny",
        "--seeds",
        "2",
        "--out",
        str(machine / "suite"),
        "--store",
        str(machine / "store"),
        "--jobs",
        "2",
    ]


def _results(folder: Path) -> list[dict]:
    return list(csv.DictReader((folder / "results.csv").open()))


@pytest.mark.slow
def test_a_suite_continued_from_records_reports_what_one_sitting_does(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    spec, records = tmp_path / "two-arms.yaml", tmp_path / "records"
    spec.write_text(SUITE, encoding="utf-8")

    # machine A: registered, the mha arm trained, then the sitting ends; its finished
    # runs become records
    a = Experiment(spec, "tiny", 2, tmp_path / "a" / "store", jobs=2, out=tmp_path / "a" / "suite")
    plan = a.plan()
    registered = a.register()
    prepare(plan)
    mha = plan.runs_of("mha")
    run_plan(replace(plan, runs=mha), jobs=2, poll_s=0.1)
    assert a.write_records(records) == 2
    held = record_folders(records)
    assert sorted(p.name for p in held) == sorted(r.run_dir.name for r in mha)
    for folder in held:
        # no checkpoints
        assert sorted(p.name for p in folder.iterdir()) == sorted(n for n in RECORD_FILES)
        assert "val_loss" in json.loads((folder / MEASURED).read_text())
    assert json.loads((records / "registration.json").read_text())["registrations"] == [registered]

    # machine B: a fresh store; the records are laid in, only gqa trains
    b = tmp_path / "b"
    assert main([*_ablate(spec, b), "--records", str(records)]) == 0
    err = capsys.readouterr().err
    assert (
        f"{records}: 2 run records laid into {b / 'store'}" in err
        and f"{records}: 4 run records of 4 runs" in err
    )
    for run in mha:
        moved = b / "store" / run.run_dir.name
        # not trained again
        assert not (moved / "checkpoints").exists() and not (moved / "train.log").exists()
        assert (moved / METRICS).read_bytes() == (run.run_dir / METRICS).read_bytes()
    gqa = [b / "store" / r.run_dir.name for r in plan.runs_of("gqa")]
    assert all((d / "checkpoints").is_dir() for d in gqa)
    [kept] = json.loads((b / "suite" / "registration.json").read_text())["registrations"]
    # A's registration, not a new one after runs
    assert kept == registered and kept["before_first_run"] is True
    assert len(record_folders(records)) == 4
    # B's sitting's wall time is committed with the records (A's ran outside `archlab ablate`)
    assert json.loads((records / "lab-time.json").read_text()) == json.loads(
        (b / "suite" / "lab-time.json").read_text()
    )

    # machine C: the whole suite in one sitting gives the same table, run ids and values
    c = tmp_path / "c"
    assert main(_ablate(spec, c)) == 0
    assert _results(b / "suite") == _results(c / "suite")

    # a record lacking a measure the suite asks for cannot be measured again: one line naming
    # run and measure
    d = tmp_path / "d"
    shutil.copytree(records, d / "records")
    dropped = d / "records" / mha[0].run_dir.name / MEASURED
    values = json.loads(dropped.read_text())
    dropped.write_text(json.dumps({k: v for k, v in values.items() if k != "val_loss"}))
    exp = Experiment(spec, "tiny", 2, d / "store", out=d / "suite")
    assert exp.read_records(d / "records") == 4
    with pytest.raises(
        LabError, match=r"1 runs are records without checkpoints .*mha/seed0 .*: val_loss"
    ):
        exp.measure()


def _record(
    run_dir: Path, steps: int, last: int, returncode: int = 0, diverged: bool = False
) -> RunSpec:
    run_dir.mkdir(parents=True)
    rows = [{"step": s, "kind": "train", "loss": 1.0} for s in range(2, last + 1, 2)]
    (run_dir / METRICS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / STATUS).write_text(
        json.dumps({"returncode": returncode, "diverged": diverged, "wall_s": 1.0})
    )
    return RunSpec("arm", 0, run_dir, {}, steps)


def test_a_record_is_done_only_with_a_clean_exit_and_metrics_to_its_last_step(
    tmp_path: Path,
) -> None:
    assert is_record(run := _record(tmp_path / "full", 24, 24)) and is_done(run)
    assert not is_record(run := _record(tmp_path / "short", 24, 22)) and not is_done(run)
    assert not is_record(run := _record(tmp_path / "failed", 24, 24, returncode=2)) and not is_done(
        run
    )
    run = _record(tmp_path / "checkpointed", 24, 24)
    # a run folder, not a record: done only with its last checkpoint
    (run.run_dir / "checkpoints").mkdir()
    assert not is_record(run) and not is_done(run)


def test_laying_records_in_keeps_what_the_store_holds(tmp_path: Path) -> None:
    records, store, suite = tmp_path / "records", tmp_path / "store", tmp_path / "suite"
    _record(records / "aaaa", 24, 24)
    _record(records / "bbbb", 24, 24)
    (records / "registration.json").write_text('{"format": 1, "registrations": []}')
    (records / "not-a-run").mkdir()
    (store / "aaaa").mkdir(parents=True)
    (store / "aaaa" / "mine").write_text("kept")
    (suite).mkdir()
    (suite / "registration.json").write_text("mine")
    assert read_records(records, store, suite) == 1
    # the store's own run is untouched
    assert sorted(p.name for p in (store / "aaaa").iterdir()) == ["mine"]
    assert (store / "bbbb" / METRICS).read_bytes() == (records / "bbbb" / METRICS).read_bytes()
    assert (
        not (store / "not-a-run").exists() and (suite / "registration.json").read_text() == "mine"
    )
    assert read_records(records, store, tmp_path / "fresh") == 0  # laid once
    assert (tmp_path / "fresh" / "registration.json").is_file()


def test_the_last_step_skips_a_row_being_written(tmp_path: Path) -> None:
    """A run read while it writes: a torn last row (or one without a step) counts as the row
    before it; no metrics file, or none with a step, is step 0."""
    assert last_step(tmp_path) == 0
    rows = [{"step": 48, "kind": "train"}, {"step": 50, "kind": "eval"}]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / METRICS).write_text(text)
    assert last_step(tmp_path) == 50
    (tmp_path / METRICS).write_text(text + '{"step": 52, "kind": "tr')
    assert last_step(tmp_path) == 50
    (tmp_path / METRICS).write_text(text + '{"kind": "note"}\n')
    assert last_step(tmp_path) == 50
    (tmp_path / METRICS).write_text('{"kind": "note"}\n{"step": ')
    assert last_step(tmp_path) == 0


def test_only_records_lacking_a_checkpoint_measure_stop_the_lab(tmp_path: Path) -> None:
    """A record (no checkpoint, a clean exit) lacking val_loss is named; the same lacking only
    metrics measures is not (they are taken from its metrics); a run that diverged before its first
    checkpoint is no record (its val_loss is n/a), nor is a run that still has its checkpoints."""
    record = _record(tmp_path / "record", 24, 24)
    write_measured(record.run_dir, {"diverged": 0.0})
    metrics_only = _record(tmp_path / "metrics-only", 24, 24)
    write_measured(metrics_only.run_dir, {"val_loss": 2.0})
    diverged = _record(tmp_path / "diverged", 24, 13, returncode=1, diverged=True)
    trained = _record(tmp_path / "trained", 24, 24)
    (trained.run_dir / "checkpoints").mkdir()
    plan = SimpleNamespace(
        runs=[replace(r, seed=i) for i, r in enumerate((record, metrics_only, diverged, trained))],
        suite=SimpleNamespace(measures=["val_loss", "diverged"]),
    )
    assert missing_measures(plan) == [f"arm/seed0 ({record.run_dir}): val_loss"]
