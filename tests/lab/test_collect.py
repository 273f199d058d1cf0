"""Collecting a finished plan: timings taken in rounds over all runs (each run's best kept), untimed
measures in a pool of fresh processes with the values one process gives, and each `timings:` pair
timed once on the arms' configs."""

from __future__ import annotations

import json
import multiprocessing
import signal
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from archlab.lab.measures.measure import MEASURED, TIMING_ROUNDS, write_measured
from archlab.lab.measures.timing import PairedTimes
from archlab.lab.runs import collect
from archlab.lab.runs.collect import measure_plan, measure_pool
from archlab.lab.runs.plan import plan_suite
from archlab.lab.runs.runner import LabError
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite_file import load_suite
from tests.lab.test_report import _fake_runs

TIMED_SUITE = """
base: {preset: llama}
design: timings by rounds
arms: {a: {}, b: {model.norm: layernorm}, c: {model.block: parallel}}
measure: [val_loss, step_ms]
claims: [{text: b beats a, metric: val_loss, arm: b, versus: a}]
"""


def test_timings_are_taken_in_rounds_over_all_runs_keeping_each_runs_best(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "synthetic.yaml").write_text(TIMED_SUITE)
    plan = plan_suite(load_suite(tmp_path / "synthetic.yaml"), BUDGETS["tiny"], tmp_path / "out")
    _fake_runs(plan)
    for run in plan.runs:  # val_loss cached, step_ms not: it is timed
        write_measured(run.run_dir, {"val_loss": 1.0})
    order = sorted(plan.runs, key=lambda r: r.seed)
    calls: list[tuple[Path, list[str]]] = []
    slow_by_round = [5.0, 0.0, 9.0]  # round 1 is every run's fastest

    def fake_measure_run(run_dir: Path, names: list[str], windows: int) -> dict[str, float]:
        calls.append((run_dir, names))
        i, round_ = [r.run_dir for r in order].index(run_dir), (len(calls) - 1) // len(order)
        return {"step_ms": 100.0 + 10 * i + slow_by_round[round_]}

    monkeypatch.setattr(collect, "measure_run", fake_measure_run)
    measured = measure_plan(plan)
    assert TIMING_ROUNDS == 3
    # rounds over all runs, in turn
    assert calls == [(r.run_dir, ["step_ms"]) for r in order] * TIMING_ROUNDS
    for i, run in enumerate(order):
        # val_loss came from the cache
        assert measured[run] == {"val_loss": 1.0, "step_ms": 100.0 + 10 * i}
        assert json.loads((run.run_dir / MEASURED).read_text())["step_ms"] == 100.0 + 10 * i
    calls.clear()
    measure_plan(plan)
    assert calls == []  # kept: a second report times nothing again


def test_jobs_measure_runs_in_other_processes_with_the_same_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--jobs 2 takes the untimed measures in a pool of fresh processes: none in this one (its
    measure_run is replaced by one that fails), each run's own values, cached as one process would
    have cached them."""
    (tmp_path / "synthetic.yaml").write_text(
        TIMED_SUITE.replace("[val_loss, step_ms]", "[val_loss, train_loss]")
    )
    plan = plan_suite(
        load_suite(tmp_path / "synthetic.yaml"), BUDGETS["tiny"], tmp_path / "out", seeds=2
    )
    _fake_runs(plan)
    for i, run in enumerate(plan.runs):  # each run its own last three losses: mean 2 + i
        rows = [
            {"step": s, "kind": "train", "loss": 2.0 + i + d}
            for s, d in ((2, -1.0), (4, 0.0), (6, 1.0))
        ]
        (run.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def in_this_process(*args: object) -> dict:
        raise AssertionError("measured in the parent process")

    monkeypatch.setattr(collect, "measure_run", in_this_process)
    measured = measure_plan(plan, jobs=2)
    for i, run in enumerate(plan.runs):
        assert measured[run]["train_loss"] == pytest.approx(2.0 + i)
        assert json.loads((run.run_dir / MEASURED).read_text())["train_loss"] == pytest.approx(
            2.0 + i
        )
    for run in plan.runs:
        (run.run_dir / MEASURED).unlink()
    with pytest.raises(AssertionError, match="parent process"):  # one job: measured here, as before
        measure_plan(plan, jobs=1)


def test_timings_time_each_pair_on_the_arms_configs_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `timings:` entry reaches time_pairs with both arms' models (and the timing's own
    model keys), the budget's batch and context for a train step, and is kept: a second
    report times nothing."""
    (tmp_path / "t.yaml").write_text(
        TIMED_SUITE.replace("measure: [val_loss, step_ms]", "measure: [val_loss]")
        + "timings:\n  - {metric: decode_s, kind: decode, arms: [c, a], pairs: 3, "
        "options: {cache_len: 200}, keys: {model.max_seq_len: 256}}\n"
        "  - {metric: step_s, kind: train_step, arms: [b, a], pairs: 2}\n"
    )
    plan = plan_suite(load_suite(tmp_path / "t.yaml"), BUDGETS["tiny"], tmp_path / "out")
    calls = []

    def fake(config_a, config_b, *, kind, pairs, **options):  # noqa: ANN001, ANN003, ANN202
        calls.append((config_a, config_b, kind, pairs, options))
        return PairedTimes(
            [1.0] * pairs, [2.0] * pairs, ["ab"] * pairs, [4.7] * pairs, 2, 2, 1, [0.25] * pairs
        )

    monkeypatch.setattr(collect, "time_pairs", fake)
    timings = collect.measure_timings(plan)
    (a_decode, b_decode, kind, pairs, options), (a_step, b_step, kind2, pairs2, options2) = calls
    assert (a_decode.block, b_decode.block, a_decode.max_seq_len, kind, pairs, options) == (
        "parallel",
        "serial",
        256,
        "decode",
        3,
        {"cache_len": 200},
    )
    assert (a_step.norm, b_step.norm, a_step.max_seq_len, kind2, pairs2) == (
        "layernorm",
        "rmsnorm",
        128,
        "train_step",
        2,
    )
    assert options2 == {"batch": 8, "block": 64}  # the tiny budget's batch and context
    assert timings["decode_s"] == {
        "arms": ["c", "a"],
        "kind": "decode",
        "options": {"cache_len": 200},
        "a": [1.0] * 3,
        "b": [2.0] * 3,
        "load": [4.7] * 3,  # the machine's load after each pair, beside its CPUs, cores and threads
        "others": [0.25] * 3,  # the CPUs other work kept busy during each pair
        "cpus": 2,
        "cores": 2,
        "threads": 1,
    }
    calls.clear()
    assert collect.measure_timings(plan) == timings and calls == []


def _sigint_handler() -> object:
    return signal.getsignal(signal.SIGINT)


def test_the_measure_pools_workers_leave_ctrl_c_to_the_lab():
    """Ctrl-C reaches the whole process group: a measuring worker must ignore it (the lab stops and
    says how to continue), not die mid-import with a traceback of its own. A plain spawned worker
    would not ignore it."""
    # as from a terminal: a job started in the background with `&` has SIGINT ignored from its
    # start, and its children would inherit that, the plain worker included
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with measure_pool(1) as pool:
            assert pool.submit(_sigint_handler).result() == signal.SIG_IGN
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            assert pool.submit(_sigint_handler).result() == signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_plan_with_an_unfinished_or_stale_run_is_refused_before_any_measure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unfinished run (its last checkpoint missing) and a run whose stored config resolves to
    another than the plan's each stop the measures with one line naming it, before any measure is
    taken; the same plan finished and unchanged is measured."""
    (tmp_path / "synthetic.yaml").write_text(TIMED_SUITE)
    plan = plan_suite(load_suite(tmp_path / "synthetic.yaml"), BUDGETS["tiny"], tmp_path / "out")
    _fake_runs(plan)
    taken: list[Path] = []
    monkeypatch.setattr(
        collect, "measure_run", lambda run_dir, names, windows: taken.append(run_dir) or {}
    )
    first = sorted(plan.runs, key=lambda r: r.seed)[0]
    last = first.run_dir / "checkpoints" / f"step_{first.steps:07d}"
    last.rename(last.with_name("aside"))
    with pytest.raises(LabError, match=rf"^1 runs are not finished: {first.run_dir}$"):
        measure_plan(plan)
    last.with_name("aside").rename(last)
    config = json.loads((first.run_dir / "config.json").read_text())
    plan_z_loss = config["train"]["z_loss_coef"]
    config["train"]["z_loss_coef"] = 0.5
    (first.run_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        LabError,
        match=rf"^1 stored runs were trained with another config .*: {first.arm}/seed0 "
        r"\(train.z_loss_coef is 0.5 in the stored run",
    ):
        measure_plan(plan)
    assert taken == []
    config["train"]["z_loss_coef"] = plan_z_loss
    (first.run_dir / "config.json").write_text(json.dumps(config))
    measure_plan(plan)
    assert len(taken) == len(plan.runs) * TIMING_ROUNDS
