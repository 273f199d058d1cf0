"""Run records: a finished run's files without its checkpoints, so a suite that takes more than one
sitting can be committed where it stopped and continued on a fresh machine.

A record is the run folder's config (config.json, config.yaml), its metrics (metrics.jsonl),
how it ended (lab-status.json), the lab's measures of it (lab-measures.json) and what it ran on
(provenance.json): everything the report reads once a run is measured, and ~20 KB at `small` where
its checkpoints are megabytes. `write_records` copies the finished and measured runs of a plan into
RECORDS/<run folder>/ (the folder's name is its store key, so a run two suites share is one record)
with the plan's registration and the suite's wall time so far (lab/runs/suite_time.py) beside
them; `read_records` lays them into a store that lacks them, and the registration and wall time
into the suite's folder, before the plan runs (the next sitting adds its time to the earlier ones',
so a page counts every machine's sittings). The runner then counts such a run as done
(`is_record`: no checkpoint, a clean exit, metrics to the last step) and the measures read their
cache; a measure read from a checkpoint that a record does not hold cannot be taken again (its
checkpoints stayed behind), and `missing_measures` says which run and measure, so the lab stops
with that line instead of training it again unasked. A run that stopped on divergence before
its first checkpoint is no record: its checkpoint measures are n/a.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from archlab.lab.measures.measure import MEASURED, MEASURES, STATUS, read_measured
from archlab.lab.runs.plan import Plan, RunSpec
from archlab.lab.runs.suite_time import SUITE_TIME
from archlab.lab.spec.registration import REGISTRATION
from archlab.train.metrics import METRICS

RECORD_FILES = ("config.json", "config.yaml", METRICS, STATUS, MEASURED, "provenance.json")
CHECKPOINTS = "checkpoints"


def last_step(run_dir: Path) -> int:
    """The last step in a run folder's metrics.jsonl (0 before the first row)."""
    path = run_dir / METRICS
    if not path.is_file():
        return 0
    for line in reversed(path.read_bytes().splitlines()):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError):  # a row being written right now: the one before it will do
            continue
    return 0


def ended_cleanly(run_dir: Path) -> bool:
    """Whether the run's status file records a clean exit (return code 0)."""
    status = run_dir / STATUS
    return (
        status.is_file() and json.loads(status.read_text(encoding="utf-8")).get("returncode") == 0
    )


def is_record(run: RunSpec) -> bool:
    """A run folder that holds a finished run's record and no checkpoint: a clean exit and metrics
    to its last step."""
    return (
        not (run.run_dir / CHECKPOINTS).exists()
        and ended_cleanly(run.run_dir)
        and last_step(run.run_dir) >= run.steps
    )


def missing_measures(plan: Plan) -> list[str]:
    """'ARM/seedN (RUN): m1, m2' for each record of the plan that lacks one of the suite's measures
    read from a checkpoint (a record cannot be measured from one again: its checkpoints stayed
    behind; measures of the metrics are taken from the record). A run that stopped on divergence
    before saving a checkpoint is no record: its checkpoint measures are n/a, as `measure_run`
    gives them."""
    out = []
    for run in {r.run_dir: r for r in plan.runs}.values():
        status = run.run_dir / STATUS
        if not status.is_file() or (run.run_dir / CHECKPOINTS).exists():
            continue
        if json.loads(status.read_text(encoding="utf-8")).get("diverged"):
            continue
        held = read_measured(run.run_dir)
        lacking = [m for m in plan.suite.measures if m not in held and MEASURES[m].needs_checkpoint]
        if lacking:
            out.append(f"{run.arm}/seed{run.seed} ({run.run_dir}): {', '.join(lacking)}")
    return out


def measured_runs(plan: Plan) -> list[RunSpec]:
    """The plan's runs that hold every measure of the suite in their cache (each
    run folder once)."""
    unique = {r.run_dir: r for r in plan.runs}.values()
    return [
        r
        for r in unique
        if (r.run_dir / STATUS).is_file()
        and all(m in read_measured(r.run_dir) for m in plan.suite.measures)
    ]


def write_records(plan: Plan, records: Path) -> list[Path]:
    """Copy each measured run's record into RECORDS/<run folder>/, and the plan's registration and
    wall time beside them (RECORDS/registration.json, RECORDS/lab-time.json); returns the record
    folders written (a record already there is rewritten, so a run measured again carries its new
    values)."""
    records.mkdir(parents=True, exist_ok=True)
    written = []
    for run in measured_runs(plan):
        folder = records / run.run_dir.name
        folder.mkdir(exist_ok=True)
        for name in RECORD_FILES:
            if (run.run_dir / name).is_file():
                shutil.copyfile(run.run_dir / name, folder / name)
        written.append(folder)
    for name in (REGISTRATION, SUITE_TIME):
        if (plan.out / name).is_file():
            shutil.copyfile(plan.out / name, records / name)
    return written


def record_folders(records: Path) -> list[Path]:
    """The run records under RECORDS (folders holding a status file and metrics)."""
    if not records.is_dir():
        return []
    return sorted(
        p for p in records.iterdir() if (p / STATUS).is_file() and (p / METRICS).is_file()
    )


def read_records(records: Path, store: Path, suite_folder: Path) -> int:
    """Lay the records under RECORDS into STORE (each run folder the store lacks; a run it holds is
    kept as it is) and their registration and wall time into SUITE_FOLDER where it has none; returns
    how many runs were laid in."""
    laid = 0
    for record in record_folders(records):
        target = store / record.name
        if target.exists():
            continue
        target.mkdir(parents=True)
        for name in RECORD_FILES:
            if (record / name).is_file():
                shutil.copyfile(record / name, target / name)
        laid += 1
    for name in (REGISTRATION, SUITE_TIME):
        if (records / name).is_file() and not (suite_folder / name).is_file():
            suite_folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(records / name, suite_folder / name)
    return laid
