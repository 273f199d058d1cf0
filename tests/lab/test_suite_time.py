"""The suite's wall time over sittings (lab/runs/suite_time.py): each sitting kept with its machine,
carried with the run records to a fresh machine, and each machine's share on the page."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from archlab.lab.publishing.page import cost_line
from archlab.lab.publishing.report import _training
from archlab.lab.runs.records import read_records, write_records
from archlab.lab.runs.suite_time import (
    SUITE_TIME,
    by_machine,
    read_suite_time,
    record_suite_time,
    sittings,
)
from archlab.train.hardware import describe_machine
from tests.lab.test_records import _record


def test_sittings_add_up_and_keep_their_machine(tmp_path: Path) -> None:
    assert read_suite_time(tmp_path) == {} and sittings({}) == []
    assert record_suite_time(tmp_path, 100.04, 2, machine="AMD EPYC") == 100.0
    assert record_suite_time(tmp_path, 50.0, 2, machine="Intel Xeon") == 150.0
    total = record_suite_time(tmp_path, 25.26, 1, machine="AMD EPYC")
    record = read_suite_time(tmp_path)
    assert total == 175.3 == record["train_wall_s"]
    assert [(s["wall_s"], s["jobs"], s["machine"]) for s in record["sittings"]] == [
        (100.0, 2, "AMD EPYC"),
        (50.0, 2, "Intel Xeon"),
        (25.3, 1, "AMD EPYC"),
    ]
    assert all(s["ended_at"].endswith("+00:00") for s in record["sittings"])
    # the last sitting's jobs and machine
    assert (record["jobs"], record["machine"]) == (1, "AMD EPYC")
    # each machine once, in the order it first trained, its sittings summed
    assert by_machine(record) == [
        {"machine": "AMD EPYC", "wall_s": 125.3, "sittings": 2},
        {"machine": "Intel Xeon", "wall_s": 50.0, "sittings": 1},
    ]
    # this machine where none is named
    record_suite_time(tmp_path / ".", 1.0, 2)
    assert read_suite_time(tmp_path)["sittings"][-1]["machine"] == describe_machine()


def test_a_record_from_before_sittings_reads_as_one_and_is_added_to(tmp_path: Path) -> None:
    old = {"train_wall_s": 5622.0, "jobs": 2, "machine": "AMD EPYC"}
    (tmp_path / SUITE_TIME).write_text(json.dumps(old))
    assert sittings(old) == [{"wall_s": 5622.0, "jobs": 2, "machine": "AMD EPYC", "ended_at": None}]
    assert record_suite_time(tmp_path, 60.0, 2, machine="Intel Xeon") == 5682.0
    kept = read_suite_time(tmp_path)["sittings"]
    assert [s["wall_s"] for s in kept] == [5622.0, 60.0] and kept[0]["ended_at"] is None


def test_the_wall_time_travels_with_the_records_and_is_never_replaced(tmp_path: Path) -> None:
    a, records, b = tmp_path / "a", tmp_path / "records", tmp_path / "b"
    a.mkdir()
    record_suite_time(a, 100.0, 2, machine="AMD EPYC")
    write_records(SimpleNamespace(out=a, runs=[]), records)  # a plan with no finished runs yet
    assert read_suite_time(records) == read_suite_time(a)
    # a fresh machine: laid into its suite folder, then its own sitting adds to it
    read_records(records, b / "store", b / "suite")
    assert read_suite_time(b / "suite") == read_suite_time(a)
    assert record_suite_time(b / "suite", 40.0, 2, machine="Intel Xeon") == 140.0
    # a suite folder's own record is kept where one is there already
    record_suite_time(records, 1.0, 2, machine="elsewhere")
    read_records(records, b / "store", b / "suite")
    assert read_suite_time(b / "suite")["train_wall_s"] == 140.0
    # run records beside it are still told apart from it
    _record(records / "0123456789abcdef", steps=4, last=4)
    assert read_records(records, b / "store", b / "suite") == 1


def test_the_page_names_each_machine_and_its_share_only_where_there_are_several() -> None:
    plan = SimpleNamespace(runs=[])
    same = {
        "train_wall_s": 30.0,
        "jobs": 2,
        "sittings": [
            {"wall_s": 10.0, "jobs": 2, "machine": "AMD EPYC", "ended_at": None},
            {"wall_s": 20.0, "jobs": 2, "machine": "AMD EPYC", "ended_at": None},
        ],
    }
    assert _training(plan, same) == {"suite_wall_s": 30.0, "jobs": 2}
    same["sittings"][1]["machine"] = "Intel Xeon"
    assert _training(plan, same)["machines"] == [
        {"machine": "AMD EPYC", "wall_s": 10.0, "sittings": 1},
        {"machine": "Intel Xeon", "wall_s": 20.0, "sittings": 1},
    ]
    one = {"machine": "AMD EPYC", "training": {"suite_wall_s": 600.0, "jobs": 2}}
    assert cost_line(one) == "Machine: AMD EPYC. Suite wall time: 10.0 min with --jobs 2."
    two = {
        "machine": "Intel Xeon",
        "training": {
            "runs": 4,
            "median_run_s": 700.0,
            "run_minutes": 46.7,
            "suite_wall_s": 1500.0,
            "jobs": 2,
            "machines": [
                {"machine": "AMD EPYC", "wall_s": 1200.0, "sittings": 2},
                {"machine": "Intel Xeon", "wall_s": 300.0, "sittings": 1},
            ],
        },
    }
    assert cost_line(two) == (
        "Machines, in the order the suite's sittings trained on them: (1) AMD EPYC; (2) Intel "
        "Xeon. Training: 4 runs, median 700 s per run (process start to exit), 46.7 run-minutes "
        "in all. Suite wall time: 25.0 min with --jobs 2 (20.0 min in 2 sittings on (1); 5.0 min "
        "in 1 sitting on (2))."
    )
