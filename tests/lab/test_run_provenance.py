"""A page's provenance is its runs' own records (lab/publishing/run_provenance.py), gathered
and never reconstructed: runs trained at two commits are listed under each, a run resumed under
another commit is listed under both with its steps, a run without a record is named, and a page
whose runs recorded nothing says so plainly. The records here are written by the trainer's own
`provenance.session` on a real prepared folder; the fake commits are set by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from archlab.data.prepare import prepare_data, prepared_hash
from archlab.lab.publishing import run_provenance
from archlab.train import provenance
from archlab.train.config import resolve_config

COMMIT_A, COMMIT_B = "a" * 40, "b" * 40


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    (root / "corpus.txt").write_text("def f(x):\n    return x + 1\n" * 400)
    return prepare_data(str(root / "corpus.txt"), root / "byte-prepared")


def record(run_dir: Path, data: Path, commits: list[str], steps: list[int] | None = None) -> None:
    """A run's record as the trainer writes it, one session per commit (resumed at `steps`)."""
    train, _ = resolve_config([{"preset": "llama", "data.source": str(data), "out": str(run_dir)}])
    run_dir.mkdir(parents=True)
    for commit, step in zip(commits, steps or [0]):
        now = provenance.session(train, data, torch.device("cpu"), 1, step, resumed=step > 0)
        now["code"] = {"commit": commit, "dirty": False}
        provenance.start_session(run_dir, now)


def test_runs_at_two_commits_are_each_listed_with_their_runs(tmp_path: Path, data: Path) -> None:
    runs = [
        (f"{arm}/seed{seed}", tmp_path / f"{arm}{seed}") for arm in ("a", "b") for seed in (0, 1)
    ]
    for label, run_dir in runs:
        record(run_dir, data, [COMMIT_B if label == "b/seed1" else COMMIT_A])
    gathered = run_provenance.gather(runs)
    assert gathered["recorded"] == [label for label, _ in runs] and gathered["unrecorded"] == []
    assert gathered["resumed"] == []
    assert [(g["value"]["commit"], g["runs"]) for g in gathered["code"]] == [
        (COMMIT_A, ["a/seed0", "a/seed1", "b/seed0"]),
        (COMMIT_B, ["b/seed1"]),
    ]
    assert [(g["value"], g["runs"]) for g in gathered["data"]] == [
        ({"folder": "byte-prepared", "sha256": prepared_hash(data)}, [label for label, _ in runs])
    ]
    first = run_provenance.lines(gathered)[0]
    assert first == (
        f"Trained at 2 commits (recorded by the runs): {COMMIT_A}: a/seed0, a/seed1, "
        f"b/seed0; {COMMIT_B}: b/seed1."
    )
    # all at one commit: one line naming it and every run
    record(tmp_path / "b1-again", data, [COMMIT_A])
    one = run_provenance.gather([*runs[:3], ("b/seed1", tmp_path / "b1-again")])
    assert run_provenance.lines(one)[0] == (
        f"Trained by archlab at commit {COMMIT_A}: all 4 runs (recorded by the runs)."
    )


def test_a_run_resumed_under_another_commit_is_listed_under_both_with_its_steps(
    tmp_path: Path, data: Path
) -> None:
    record(tmp_path / "a0", data, [COMMIT_A])
    record(tmp_path / "a1", data, [COMMIT_A, COMMIT_B], steps=[0, 150])
    gathered = run_provenance.gather([("a/seed0", tmp_path / "a0"), ("a/seed1", tmp_path / "a1")])
    assert [(g["value"]["commit"], g["runs"]) for g in gathered["code"]] == [
        (COMMIT_A, ["a/seed0", "a/seed1 steps 0-150"]),
        (COMMIT_B, ["a/seed1 steps 150-"]),
    ]
    assert gathered["resumed"] == [f"a/seed1 at step 150: code.commit: {COMMIT_A} -> {COMMIT_B}"]
    # the same software: not split
    assert [g["runs"] for g in gathered["versions"]] == [["a/seed0", "a/seed1"]]
    page = run_provenance.lines(gathered)
    assert page[0].startswith(
        f"Trained at 2 commits (recorded by the runs): {COMMIT_A}: a/seed0, a/seed1 steps 0-150;"
    )
    assert page[-1] == f"Resumed runs: a/seed1 at step 150: code.commit: {COMMIT_A} -> {COMMIT_B}."


def test_runs_without_records_are_named_and_a_page_of_none_says_so_plainly(
    tmp_path: Path, data: Path
) -> None:
    record(tmp_path / "a0", data, [COMMIT_A])
    (tmp_path / "a1").mkdir()  # trained before runs recorded their provenance
    gathered = run_provenance.gather([("a/seed0", tmp_path / "a0"), ("a/seed1", tmp_path / "a1")])
    assert gathered["unrecorded"] == ["a/seed1"]
    assert run_provenance.lines(gathered)[0] == (
        f"Trained by archlab at commit {COMMIT_A}: a/seed0 (recorded by the runs). The other 1 "
        "runs: provenance not recorded by the runs (a/seed1)."
    )
    none = run_provenance.gather([("a/seed1", tmp_path / "a1")])
    assert run_provenance.lines(none) == ["Trained by: provenance not recorded by the runs."]
    assert run_provenance.lines(None, "its results.csv was published at commit f89187d56056") == [
        "Trained by: provenance not recorded by the runs. Reconstructed afterwards, not a record: "
        "its results.csv was published at commit f89187d56056."
    ]


def test_a_suites_page_gathers_its_runs_records(tmp_path: Path, data: Path) -> None:
    """The report writes the runs' records into the page's provenance.json (`runs`) and
    results.md shows them: the wiring from run folders to the page, with one run resumed
    under another commit."""
    from archlab.lab.experiment import Experiment
    from archlab.lab.runs.plan import plan_suite, write_plan
    from archlab.lab.spec.budgets import BUDGETS
    from archlab.lab.spec.suite_file import load_suite
    from tests.lab.test_report import _fake_runs

    (tmp_path / "two.yaml").write_text("""
name: two
title: two arms
source: a test
design: every number is written by the test
base: {preset: llama}
arms: {a: {}, b: {model.norm: layernorm}}
measure: [val_loss, kv_bytes_per_token, diverged]
claims: [{text: b beats a, metric: val_loss, arm: b, versus: a}]
""")
    plan = plan_suite(load_suite(tmp_path / "two.yaml"), BUDGETS["tiny"], tmp_path / "out", seeds=2)
    _fake_runs(plan, {"a": [3.0, 3.1], "b": [2.9, 3.0], "c": [0.0, 0.0]})
    for run in plan.runs:
        (run.run_dir / provenance.RECORD).unlink(missing_ok=True)
        commits = [COMMIT_A, COMMIT_B] if (run.arm, run.seed) == ("b", 1) else [COMMIT_A]
        for commit, step in zip(commits, (0, 12)):
            now = provenance.session(
                run.configs()[0], data, torch.device("cpu"), 1, step, resumed=step > 0
            )
            provenance.start_session(
                run.run_dir, {**now, "code": {"commit": commit, "dirty": False}}
            )
    write_plan(plan)
    Experiment.collect(plan.out).report("archlab ablate two --budget tiny --seeds 2")
    page = (plan.out / "results.md").read_text()
    assert (
        f"Trained at 2 commits (recorded by the runs): {COMMIT_A}: a/seed0, a/seed1, b/seed0, "
        f"b/seed1 steps 0-12; {COMMIT_B}: b/seed1 steps 12-."
    ) in page
    assert f"Resumed runs: b/seed1 at step 12: code.commit: {COMMIT_A} -> {COMMIT_B}." in page
    recorded = json.loads((plan.out / "provenance.json").read_text())[run_provenance.RUNS]
    assert recorded["recorded"] == ["a/seed0", "a/seed1", "b/seed0", "b/seed1"]
    # the page's lines come from the record it keeps
    assert run_provenance.lines(recorded)[0] in page


def test_each_recorded_section_lists_every_value_with_its_runs(tmp_path: Path, data: Path) -> None:
    """Runs on two CPUs, at 1 and 2 threads, one of them in 2 processes: the CPU and execution lines
    name each value with its runs, in the words a reader reads (thread / threads, processes only
    where there were several); sections with one value name it once for all runs."""
    runs = [(f"a/seed{seed}", tmp_path / f"a{seed}") for seed in (0, 1)]
    for (_, run_dir), (threads, world) in zip(runs, [(1, 1), (2, 2)]):
        record(run_dir, data, [COMMIT_A])
        path = run_dir / "provenance.json"
        text = json.loads(path.read_text())
        session = text["sessions"][-1]
        session["machine"].update(cpu_model=f"CPU {threads}", threads=threads)
        session["execution"]["world_size"] = world
        path.write_text(json.dumps(text))
    gathered = run_provenance.gather(runs)
    page = run_provenance.lines(gathered)
    cpu = next(line for line in page if line.startswith("Runs' CPU: "))
    cpu_class = gathered["machine"][0]["value"]["cpu_class"]
    assert (
        cpu == f"Runs' CPU: CPU 1 ({cpu_class}), 1 thread (a/seed0); CPU 2 ({cpu_class}), "
        "2 threads (a/seed1)."
    )
    execution = next(line for line in page if line.startswith("Runs' execution: "))
    assert execution.count("; ") == 1 and execution.endswith(", 2 processes (a/seed1).")
    assert "processes" not in execution.split("; ")[0]
    software = next(line for line in page if line.startswith("Runs' software: "))
    assert software.endswith("(all 2 runs).") and "; " not in software
