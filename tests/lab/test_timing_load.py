"""The machine's load beside every timing (lab/measures/timing_load.py), with a mocked
os.getloadavg: read after each pair and kept with the times (lab-timings.json, timings.csv and
back), shown beside each timing verdict in the terminal, in the claim's note and on the page, and
one line of warning when it exceeded the machine's CPUs (both sides)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from archlab.lab.analysis import stats
from archlab.lab.analysis.table import Table
from archlab.lab.analysis.verdicts import judge
from archlab.lab.measures.timing import TIMINGS, time_pairs
from archlab.lab.measures.timing_load import load_note, load_warning, peak_load
from archlab.lab.publishing.page import timing_table, timing_warnings
from archlab.lab.publishing.report import verdict_lines
from archlab.lab.runs.collect import TIMED, measure_timings
from archlab.lab.runs.plan import plan_suite
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite_file import load_suite
from tests.lab.test_timing import A, B, FakeClock, FakeKind

SUITE = """
name: timed
title: one timing
source: a test
design: a timing only
base: {preset: llama}
arms: {a: {}, b: {model.norm: layernorm}}
measure: [val_loss]
timings:
  - {metric: norm_s, kind: norm_op, arms: [b, a], pairs: 3, options: {rows: 8, d: 16}}
claims:
  - {text: b is faster than a, metric: norm_s, arm: b, versus: a}
"""


class LoadAvg:
    """os.getloadavg returning the given 1-minute loads in turn (5- and 15-minute figures
    are never read)."""

    def __init__(self, loads: list[float]) -> None:
        self.loads, self.calls = list(loads), 0

    def __call__(self) -> tuple[float, float, float]:
        self.calls += 1
        return self.loads.pop(0), -1.0, -1.0


def test_the_load_is_read_after_each_pair_with_the_cpus_and_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    monkeypatch.setitem(TIMINGS, "fake", FakeKind(clock, slow=0))
    loads = LoadAvg([0.5, 4.7, 1.2, 9.9])
    monkeypatch.setattr(os, "getloadavg", loads)
    times = time_pairs(A, B, kind="fake", pairs=3, warmup=0, clock=clock, threads=1)
    assert times.load == [0.5, 4.7, 1.2] and loads.calls == 3  # once per pair, after it
    assert (times.cpus, times.threads) == (os.cpu_count(), 1) and 1 <= times.cores <= os.cpu_count()


def test_note_and_warning_on_both_sides_of_the_cpu_count() -> None:
    record = {"load": [0.5, 2.0, 1.0], "cpus": 2, "threads": 1}
    assert peak_load(record) == 2.0
    assert (
        load_note(record)
        == "timed at load 2.0 (1-min average, the highest of its 3 pairs) on 2 CPUs, 1 thread(s)"
    )
    # at the CPU count: every runnable thread had a core
    assert load_warning("norm_s", record) == ""
    loaded = {**record, "load": [0.5, 4.7, 1.0]}
    assert load_warning("norm_s", loaded) == (
        "warning: timing norm_s ran at load 4.7 on 2 CPUs: other work competed for the cores, so "
        "its times and its verdict are not a clean measurement; time it again on a quiet machine "
        "(delete its entry in lab-timings.json)"
    )
    old = {"arms": ["b", "a"], "a": [1.0], "b": [1.0]}  # a record from before loads were kept
    assert peak_load(old) is None and load_note(old) == "" and load_warning("norm_s", old) == ""
    assert peak_load({"load": [float("nan")]}) is None  # a platform without a load average


def test_a_loaded_timing_is_recorded_shown_and_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "timed.yaml").write_text(SUITE)
    plan = plan_suite(load_suite(tmp_path / "timed.yaml"), BUDGETS["small"], tmp_path / "out")
    monkeypatch.setattr(os, "getloadavg", LoadAvg([1.0, 4.7, 2.0]))
    # the 2-core machine of the issue
    monkeypatch.setattr("archlab.lab.measures.timing.cpu_count", lambda: 2)
    timings = measure_timings(plan)
    kept = json.loads((plan.out / TIMED).read_text())["norm_s"]
    assert (
        kept["load"] == [1.0, 4.7, 2.0]
        and kept["cpus"] == 2
        and kept["threads"] == 1
        and len(kept["a"]) == 3
    )
    # timings.csv keeps them, and a page reads them back
    table = Table(plan.suite, plan.seeds, {"a": [], "b": []}, timings)
    table.write(tmp_path / "page", [])  # results.csv (no runs here) and timings.csv
    (tmp_path / "page" / "results.csv").write_text(
        "arm,seed,run,config,parameters\na,0,x,,\nb,0,y,,\n"
    )
    read = Table.read(tmp_path / "page", plan.suite)
    assert {k: read.timings["norm_s"][k] for k in ("load", "cpus", "cores", "threads")} == {
        k: kept[k] for k in ("load", "cpus", "cores", "threads")
    }
    # the verdict's note, the terminal's line and warning, the page's table and warning
    (result,) = judge(read)
    note = "timed at load 4.7 (1-min average, the highest of its 3 pairs) on 2 CPUs, 1 thread(s)"
    assert result.note.endswith(f"log time ratio; {note}")
    assert result.outcome in (stats.CONFIRMED, stats.CONTRADICTED, stats.INCONCLUSIVE)
    lines = verdict_lines(plan, [result])  # what `archlab ablate` prints (Experiment.verdict_lines)
    assert (
        lines[0].startswith(f"{result.outcome:26s} b is faster than a") and f"[{note}]" in lines[0]
    )
    assert lines[1] == load_warning("norm_s", kept) and lines[1].startswith(
        "warning: timing norm_s ran at load 4.7"
    )
    record = type("R", (), {"suite": plan.suite, "table": read})()
    head, rows = timing_table(record)
    assert rows[0][head.index("load (1-min, highest)")] == "4.7 on 2 CPUs"
    assert timing_warnings(record) == [lines[1]]
