"""The machine's load beside every timing (lab/measures/timing_load.py), with a mocked
os.getloadavg: read after each pair and kept with the times (lab-timings.json, timings.csv and
back), shown beside each timing verdict in the terminal, in the claim's note and on the page, and
one line of warning when it exceeded the machine's CPUs (both sides)."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from archlab.lab.analysis import stats
from archlab.lab.analysis.table import Table
from archlab.lab.analysis.verdicts import judge
from archlab.lab.measures import timing_load
from archlab.lab.measures.timing import TIMINGS, time_pairs
from archlab.lab.measures.timing_load import (
    OtherWork,
    busy_cpu_seconds,
    load_note,
    load_warning,
    other_work,
    peak_load,
)
from archlab.lab.publishing.report import verdict_lines
from archlab.lab.publishing.tables import timing_table, timing_warnings
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
    # a machine without /proc/stat: the load average alone speaks (the other-work path: below)
    monkeypatch.setattr(timing_load, "busy_cpu_seconds", lambda: None)
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


class Counter:
    """A clock returning the given readings in turn."""

    def __init__(self, readings: list) -> None:
        self.readings = list(readings)

    def __call__(self):
        return self.readings.pop(0)


def test_other_work_is_the_machines_busy_time_less_this_process_over_the_wall_time(
    tmp_path: Path,
) -> None:
    """/proc/stat's cpu line parsed (idle and iowait apart, guest inside user); other processes'
    CPUs = (machine busy seconds - own CPU seconds) / wall seconds, NaN where the machine's busy
    time cannot be read; a pair may read below 0 (10 ms ticks), the mean over pairs never does."""
    hz = os.sysconf("SC_CLK_TCK")
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text(
        f"cpu  {3 * hz} {hz} {2 * hz} {50 * hz} {7 * hz} 0 {hz} 0 {5 * hz} 0\ncpu0 1 2\n"
    )
    assert busy_cpu_seconds(str(stat)) == pytest.approx(7.0)
    assert busy_cpu_seconds(str(tmp_path / "none")) is None
    stat.write_text("intr 1 2 3\n")
    assert busy_cpu_seconds(str(stat)) is None
    # 3 busy seconds over 2 wall seconds, 1 of them this process's own: 1 CPU of other work
    watch = OtherWork(busy=Counter([10.0, 13.0]), own=Counter([1.0, 2.0]), wall=Counter([0.0, 2.0]))
    watch.start()
    assert watch.stop() == pytest.approx(1.0)
    # this process alone: none
    watch = OtherWork(busy=Counter([10.0, 12.0]), own=Counter([1.0, 3.0]), wall=Counter([0.0, 2.0]))
    watch.start()
    assert watch.stop() == 0.0
    # a tick short: a pair reads below 0 (clamping each pair would bias the mean upward), and only
    # the mean over the pairs is held at 0
    watch = OtherWork(
        busy=Counter([10.0, 11.98]), own=Counter([1.0, 3.0]), wall=Counter([0.0, 2.0])
    )
    watch.start()
    assert watch.stop() == pytest.approx(-0.01)
    assert other_work({"others": [-0.01, 0.03]}) == pytest.approx(0.01)
    assert other_work({"others": [-0.01, -0.03]}) == 0.0
    watch = OtherWork(busy=Counter([None, 12.0]), own=Counter([1.0, 3.0]), wall=Counter([0.0, 2.0]))
    watch.start()
    assert math.isnan(watch.stop())
    with pytest.raises(RuntimeError, match="before start"):
        OtherWork().stop()


@pytest.mark.skipif(busy_cpu_seconds() is None, reason="no /proc/stat on this platform")
def test_a_process_spinning_beside_the_timing_is_counted_and_this_one_is_not() -> None:
    """A child process's spin inside the window is counted as other work (other tests may add to
    it, never take from it); this process's own spin is taken away: the machine's busy time over
    the window exceeds what is left by at least the CPU this process spent. A window lasts until
    the spinner has spent 0.5 CPU-seconds, not a fixed wall time, so the test holds when other
    work leaves the spinner less than half a CPU."""
    spawn = multiprocessing.get_context("spawn")
    started, stop = spawn.Event(), spawn.Event()
    child = spawn.Process(target=_spin, args=(started, stop))
    child.start()
    try:
        assert started.wait(60)
        (with_child,), spent = _until_spent(lambda: _cpu_of(child.pid), False, OtherWork())
    finally:
        stop.set()
        child.join(10)
    assert with_child >= 0.8 * spent >= 0.4
    # this process spinning: the same window read without taking its own time away holds it
    (alone, machine), spent = _until_spent(
        time.process_time, True, OtherWork(), OtherWork(own=lambda: 0.0)
    )
    assert spent >= 0.5
    assert machine - alone >= 0.8 * spent


def _until_spent(cpu, spin: bool, *watches: OtherWork) -> tuple[list[float], float]:  # noqa: ANN001
    """The other work each watch read, in CPU-seconds, over a window that lasts until `cpu()` has
    advanced 0.5 s (at most 60 s of wall), and the CPU-seconds it advanced. Spins here when
    `spin`, else sleeps."""
    for watch in watches:
        watch.start()
    wall0, cpu0 = time.perf_counter(), cpu()
    while cpu() - cpu0 < 0.5 and time.perf_counter() - wall0 < 60:
        if not spin:
            time.sleep(0.05)
    spent = cpu() - cpu0
    rates = [watch.stop() for watch in watches]
    wall = time.perf_counter() - wall0
    return [rate * wall for rate in rates], spent


def _cpu_of(pid: int) -> float:
    """A process's user and system CPU-seconds (/proc/PID/stat's 14th and 15th fields)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spin(started, stop) -> None:  # noqa: ANN001 - multiprocessing Events
    started.set()
    while not stop.is_set():
        pass


def test_a_timing_records_other_work_per_pair_and_the_note_and_warning_use_its_mean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    monkeypatch.setitem(TIMINGS, "fake", FakeKind(clock, slow=0))
    monkeypatch.setattr(os, "getloadavg", LoadAvg([1.9, 1.9, 1.9]))

    class Readings:
        def __init__(self, values: list[float]) -> None:
            self.values, self.starts = list(values), 0

        def start(self) -> None:
            self.starts += 1

        def stop(self) -> float:
            return self.values.pop(0)

    watch = Readings([0.0, 0.1, float("nan")])
    times = time_pairs(A, B, kind="fake", pairs=3, warmup=0, clock=clock, other_work=watch)
    assert times.others[:2] == [0.0, 0.1] and math.isnan(times.others[2]) and watch.starts == 3
    record = {"load": times.load, "others": times.others, "cpus": 2, "threads": 1}
    # the lagging load of 1.9 says nothing here: the mean over the readable pairs does
    assert other_work(record) == pytest.approx(0.05)
    assert load_note(record) == (
        "timed with 0.05 CPUs of other work (the mean over its 3 pairs) on 2 CPUs, 1 thread(s)"
    )
    # 1 thread on 2 CPUs: other work up to 1 CPU (and the 0.1 of noise) leaves the timing a core
    assert load_warning("t", {**record, "others": [1.1, 1.1]}) == ""
    assert load_warning("t", {**record, "others": [1.2, 1.2]}).startswith(
        "warning: timing t ran with 1.20 CPUs of other work on 2 CPUs: other work competed"
    )
    # torch's own threads (every core): any other work beyond the noise competes
    every = {**record, "threads": None}
    assert load_warning("t", {**every, "others": [0.1]}) == ""
    assert load_warning("t", {**every, "others": [0.2]}) != ""
    assert other_work({"others": [float("nan")]}) is None
    # timings.csv keeps them pair by pair (an unreadable pair stays NaN), and a page reads them back
    (tmp_path / "timed.yaml").write_text(SUITE)
    suite = load_suite(tmp_path / "timed.yaml")
    kept = {"arms": ["b", "a"], "a": times.a, "b": times.b, **record}
    Table(suite, 1, {"a": [], "b": []}, {"norm_s": kept}).write(tmp_path / "page", [])
    (tmp_path / "page" / "results.csv").write_text(
        "arm,seed,run,config,parameters\na,0,x,,\nb,0,y,,\n"
    )
    read = Table.read(tmp_path / "page", suite).timings["norm_s"]
    assert read["others"][:2] == [0.0, 0.1] and math.isnan(read["others"][2])
    # a timing from before other work was recorded writes the columns it always had
    Table(suite, 1, {"a": [], "b": []}, {"norm_s": {**kept, "others": []}}).write(
        tmp_path / "old", []
    )
    assert "other_cpus" not in (tmp_path / "old" / "timings.csv").read_text().splitlines()[0]
