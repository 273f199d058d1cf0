"""The runner's bookkeeping: how a run's end is recorded, when a run counts as done, each run's wall
time, the thread caps of `--jobs`; the Slurm path through submitit's real local executor; the power
plan against a hand-computed noncentral t."""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
import time
from pathlib import Path
from statistics import NormalDist

import pytest

from archlab.lab.analysis import stats
from archlab.lab.measures.measure import STATUS
from archlab.lab.runs import runner
from archlab.lab.runs.plan import RunSpec, plan_suite, prepare
from archlab.lab.runs.runner import LabError, _finish, is_done, run_wall_s
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite_file import load_suite


def test_finish_records_divergence_and_names_failures(tmp_path: Path) -> None:
    run = RunSpec("arm", 0, tmp_path / "run", {}, steps=10)
    run.run_dir.mkdir()
    (run.run_dir / "train.log").write_text(
        "step 3 skipped\narchlab train: training diverged: 5 consecutive\n"
    )
    _finish(run, 1)
    assert is_done(run)
    (run.run_dir / "train.log").write_text("Traceback ...\nValueError: boom\n")
    with pytest.raises(LabError, match="arm arm seed 0 failed \\(exit 1\\): ValueError: boom"):
        _finish(run, 1)
    assert not is_done(run)


def test_done_means_the_last_steps_checkpoint_and_metrics(tmp_path: Path) -> None:
    run = RunSpec(
        "arm", 0, tmp_path / "run", {"steps": "10", "out": str(tmp_path / "run")}, steps=10
    )
    (run.run_dir / "checkpoints" / "step_0000005").mkdir(parents=True)
    (run.run_dir / "metrics.jsonl").write_text('{"step": 5, "kind": "train"}\n')
    assert not is_done(run)  # stopped part way: continued with --resume
    assert run.command(resume=True) == [
        "archlab",
        "train",
        "--steps",
        "10",
        "--out",
        str(run.run_dir),
        "--resume",
    ]
    (run.run_dir / "checkpoints" / "step_0000010").mkdir()
    assert is_done(run)
    (run.run_dir / "metrics.jsonl").unlink()
    assert not is_done(run)


def test_run_wall_time_is_recorded_or_read_from_file_times(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert run_wall_s(run_dir) == 0.0  # not finished
    (run_dir / "config.yaml").write_text("{}")
    # an older lab's status
    (run_dir / STATUS).write_text(json.dumps({"returncode": 0, "diverged": False}))
    os.utime(run_dir / "config.yaml", (1000.0, 1000.0))
    os.utime(run_dir / STATUS, (1123.5, 1123.5))
    # from the config written at start to the status written at exit
    assert run_wall_s(run_dir) == 123.5
    (run_dir / STATUS).write_text(json.dumps({"returncode": 0, "diverged": False, "wall_s": 42.0}))
    assert run_wall_s(run_dir) == 42.0
    run = RunSpec("arm", 0, run_dir, {}, steps=10)
    (run_dir / "train.log").write_text("done\n")
    _finish(run, 0)  # a run the runner did not start: no start time to count from
    assert json.loads((run_dir / STATUS).read_text())["wall_s"] < 1.0


def test_power_plan_matches_a_hand_computed_noncentral_t(tmp_path: Path) -> None:
    from scipy import stats as sp

    from archlab.lab.runs.planning import format_plan, power_plan

    plan = plan_suite(load_suite("heads"), BUDGETS["small"], tmp_path / "out")
    # no published page: the budget's sd
    rows = {r.claim.text: r for r in power_plan(plan, tmp_path / "no-docs")}
    same = rows["GQA loses little (as good as MHA)"]
    # two loss claims and two timings; formulas stay out
    sigma_d, m = BUDGETS["small"].sigma * math.sqrt(2), 4
    margin = BUDGETS["small"].margin  # the claims state none: the budget's loss margin

    def power(n: int) -> float:  # the pair's own paired differences: n - 1 df
        return sp.nct.sf(sp.t.ppf(1 - 0.05 / m, n - 1), n - 1, margin * math.sqrt(n) / sigma_d)

    assert same.seeds == next(n for n in range(2, 200) if power(n) >= 0.8)
    assert "planning sd 0.0212" in same.why and "margin, at a true difference of 0" in same.why
    # the minimum detectable effect at the default 3 seeds is where that power curve crosses 80%
    crit = sp.t.ppf(1 - 0.05 / m, 2)
    assert sp.nct.sf(crit, 2, same.mde * math.sqrt(3) / sigma_d) == pytest.approx(0.8, abs=1e-8)
    assert f"mde at 3 seeds {same.mde:.3g}" in "\n".join(
        format_plan(plan, list(rows.values()), jobs=2, docs=tmp_path / "no-docs")
    )
    assert (
        rows["GQA cuts the KV cache"].seeds is None
        and "by construction" in rows["GQA cuts the KV cache"].why
    )
    assert (
        "24 interleaved pairs"
        in rows["MQA decodes faster than MHA at a 1k-token cache and batch 8"].why
    )
    text = "\n".join(format_plan(plan, list(rows.values()), jobs=2, docs=tmp_path / "no-docs"))
    runs = 3 * same.seeds
    assert (
        f"{same.seeds} seeds x 3 arms = {runs} runs, about {runs * 120 / 2 / 60:.0f} min wall"
        in text
    )
    assert "one-sided alpha 0.05/4" in text


def test_sequential_looks_at_stated_levels_and_extends_only_undecided_claims() -> None:
    from archlab.lab.analysis.verdicts import ClaimResult
    from archlab.lab.runs import planning

    # one-sided 0.05 overall is two-sided 0.10: Pocock's constant boundary 1.875 at K = 2,
    # O'Brien-Fleming's 1.678 * sqrt(2 / k) (Jennison & Turnbull 2000, tables 2.1 and 2.3);
    # one-sided levels = the normal tail
    tail = NormalDist().cdf
    assert planning.look_levels("pocock") == pytest.approx([tail(-1.875)] * 2, abs=3e-4)
    assert planning.look_levels("obrien-fleming") == pytest.approx(
        [tail(-1.678 * math.sqrt(2)), tail(-1.678)], abs=3e-4
    )
    plan = plan_suite(load_suite("heads"), BUDGETS["tiny"], "/nonexistent")
    c = {x.text: x for x in plan.suite.claims}
    fake = stats.test_claim([1.0, 1.1], [1.05, 1.2], expect="better", better="lower")
    results = [
        ClaimResult(c["GQA loses little (as good as MHA)"], fake, stats.INCONCLUSIVE, 0.0),
        ClaimResult(c["MQA loses little (as good as MHA)"], fake, stats.CONFIRMED, 0.0),
        ClaimResult(c["GQA cuts the KV cache"], None, stats.BY_CONSTRUCTION, 0.0),
    ]
    assert planning.extra_seeds(plan, results) == {"gqa": 2, "mha": 2}
    extended = plan_suite(plan.suite, BUDGETS["tiny"], "/nonexistent", extra={"gqa": 2, "mha": 2})
    assert [r.seed for r in extended.runs_of("gqa")] == [0, 1, 2, 3] and len(
        extended.runs_of("mqa")
    ) == 2
    # the first look's runs are the same folders (reused, not retrained)
    assert [r.run_dir for r in extended.runs_of("gqa")[:2]] == [
        r.run_dir for r in plan.runs_of("gqa")
    ]


SLURM_SUITE = """
name: two
design: the executor's plumbing
base: {preset: llama, steps: 4, logging.eval_every: 4, schedule.warmup_steps: 1}
arms: {a: {}, b: {model.norm: layernorm}}
measure: [val_loss]
claims: [{text: b beats a, metric: val_loss, arm: b, versus: a}]
"""


@pytest.mark.slow
def test_submitit_local_executor_trains_one_job_per_run(tmp_path: Path) -> None:
    """The Slurm path, through submitit's real local executor: one array task per run, each run's
    folder finished with its own config; submitting again submits nothing."""
    from archlab.lab.runs.executor import SlurmOptions, submit_plan

    (tmp_path / "two.yaml").write_text(SLURM_SUITE)
    plan = plan_suite(load_suite(tmp_path / "two.yaml"), BUDGETS["tiny"], tmp_path / "out")
    plan.runs = [plan.runs_of("a")[0], plan.runs_of("b")[1]]  # two runs keep it short: one per arm
    jobs = submit_plan(plan, cluster="local", options=SlurmOptions(cpus=1, time_min=5), wait=True)
    assert len(jobs) == 2 and len({j.job_id for j in jobs}) == 2
    for run in plan.runs:
        assert is_done(run) and json.loads((run.run_dir / STATUS).read_text())["returncode"] == 0
        config = json.loads((run.run_dir / "config.json").read_text())
        assert config["train"]["seed"] == run.seed and config["train"]["steps"] == 4
        assert config["model"]["norm"] == ("layernorm" if run.arm == "b" else "rmsnorm")
    # every run is done: nothing to submit
    assert submit_plan(plan, cluster="local", wait=True) == []
    with pytest.raises(ValueError, match="--slurm-cpus 0 is not allowed: at least 1"):
        SlurmOptions(cpus=0)


def test_plan_reads_a_published_pages_spread_and_run_time_when_nothing_is_stored(
    tmp_path: Path,
) -> None:
    from archlab.lab.runs.planning import format_plan, power_plan

    docs = Path(__file__).resolve().parents[2] / "docs" / "results"
    plan = plan_suite(
        load_suite("norm-type"), BUDGETS["small"], tmp_path / "out", store=tmp_path / "store"
    )
    rows = {r.claim.text: r for r in power_plan(plan, docs)}
    same = rows["RMSNorm is as good as LayerNorm"]
    published = list(csv.DictReader((docs / "norm-type" / "results.csv").open()))
    val = {(r["arm"], r["seed"]): float(r["val_loss"]) for r in published}
    d = [val["rmsnorm", s] - val["layernorm", s] for s in ("0", "1", "2")]
    assert same.sigma == pytest.approx(statistics.stdev(d)) and "on the published page" in same.why
    median = json.loads((docs / "norm-type" / "provenance.json").read_text())["training"][
        "median_run_s"
    ]
    assert (
        f"({median:.0f} s per run, the published page "
        f"{docs / 'norm-type'}: {median:.0f} s per run at budget small, "
        "as measured" in "\n".join(format_plan(plan, list(rows.values()), jobs=2, docs=docs))
    )
    # no page: the budget's figure
    elsewhere = {r.claim.text: r for r in power_plan(plan, tmp_path / "no-docs")}
    assert "planning sd" in elsewhere["RMSNorm is as good as LayerNorm"].why


@pytest.mark.slow
def test_jobs_cap_every_worker_at_one_thread_and_one_job_leaves_torch_its_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--jobs 2` trains in two worker processes on two cores: each starts with OMP_NUM_THREADS=1
    (and MKL's) and trains on one thread because of it (the run's own log says why); `--jobs
    1` caps nothing."""
    # the caps under test are the runner's, not this shell's
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    (tmp_path / "two.yaml").write_text(SLURM_SUITE)
    for jobs in (2, 1):
        plan = plan_suite(
            load_suite(tmp_path / "two.yaml"),
            BUDGETS["tiny"],
            tmp_path / f"out{jobs}",
            store=tmp_path / f"store{jobs}",
        )
        plan.runs = [plan.runs_of("a")[0], plan.runs_of("b")[0]]
        prepare(plan)
        runner.run_plan(plan, jobs=jobs, poll_s=0.1)
        for run in plan.runs:
            log = (run.run_dir / "train.log").read_text()
            chose = next(line for line in log.splitlines() if line.startswith("CPU threads: "))
            if jobs == 2:
                assert chose.startswith("CPU threads: 1 (OMP_NUM_THREADS;"), chose
            else:
                assert "OMP_NUM_THREADS" not in chose, chose
        assert "OMP_NUM_THREADS" not in os.environ  # the caps stay in the workers


def test_a_workers_thread_caps_are_in_its_environment_from_its_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """/proc/PID/environ is the environment a process was exec'd with: the caps must be there before
    the interpreter imports torch (a spawned worker imports the parent's main module first), not
    set once it runs. It is read once the worker answered a job (a refused one), so the process
    has been exec'd."""
    from archlab.lab.runs.worker import Worker

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    for threads, want in ((1, {b"OMP_NUM_THREADS=1", b"MKL_NUM_THREADS=1"}), (None, set())):
        worker = Worker.start(threads)
        try:
            worker.submit(
                "missing",
                {"data.source": str(tmp_path / "none"), "out": str(tmp_path / "r")},
                False,
                tmp_path / f"{threads}.log",
            )
            assert worker.result(timeout=300) == 2
            environ = set(Path(f"/proc/{worker.process.pid}/environ").read_bytes().split(b"\0"))
            assert {
                e for e in environ if e.startswith((b"OMP_NUM_THREADS=", b"MKL_NUM_THREADS="))
            } == want
        finally:
            worker.stop()
        assert "OMP_NUM_THREADS" not in os.environ and "MKL_NUM_THREADS" not in os.environ


@pytest.mark.slow
def test_a_stopped_plan_checkpoints_its_runs_under_way_and_the_next_call_resumes_them(
    tmp_path: Path,
) -> None:
    """Ctrl-C (here raised from the progress callback) while two runs train in two workers: each
    worker's run gets SIGTERM, checkpoints its current step and returns before the interrupt goes
    on; the next call resumes each from its checkpoint (its provenance records the resumed session)
    and finishes the plan."""
    from tests.cli.test_ablate import SUITE

    (tmp_path / "two-arms.yaml").write_text(SUITE)
    plan = plan_suite(
        load_suite(tmp_path / "two-arms.yaml"),
        BUDGETS["tiny"],
        tmp_path / "suite",
        store=tmp_path / "store",
        seeds=2,
    )
    prepare(plan)

    under_way: list[tuple[str, int]] = []

    def stop_midway(progress: runner.Progress) -> None:
        steps = [step for _, _, step, _ in progress.running]
        if len(steps) == 2 and min(steps) >= 6:  # both workers mid-run
            under_way.extend((arm, seed) for arm, seed, _, _ in progress.running)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.run_plan(plan, jobs=2, on_progress=stop_midway, poll_s=0.05)
    # the runs under way, not those finished or still waiting: each checkpointed where SIGTERM
    # found it, or done where it ended first (24 steps: a fast worker can finish between the
    # progress read and the signal); at least one is stopped
    stopped = [r for r in plan.runs if not is_done(r) and (r.run_dir / "checkpoints").is_dir()]
    at_stop = [r for r in plan.runs if (r.arm, r.seed) in under_way]
    assert len(at_stop) == 2 and all(r in stopped or is_done(r) for r in at_stop)
    assert stopped and set(stopped) <= set(at_stop)
    first_wall = {}
    for run in stopped:
        saved = sorted((run.run_dir / "checkpoints").glob("step_*"))
        assert saved and 0 < int(saved[-1].name.split("_")[1]) < run.steps, run.arm
        # its time so far is recorded, for the resumed session to add to
        first_wall[run] = run_wall_s(run.run_dir)
        assert first_wall[run] > 0, run.arm
    started = time.time()
    runner.run_plan(plan, jobs=2, poll_s=0.05)
    second_session = time.time() - started
    assert all(is_done(r) for r in plan.runs)
    for run in stopped:
        sessions = json.loads((run.run_dir / "provenance.json").read_text())["sessions"]
        assert len(sessions) == 2 and sessions[1]["from_step"] > 0, run.arm
        # both sessions' seconds: more than the first's, at most the first's plus the second call's
        wall = run_wall_s(run.run_dir)
        assert first_wall[run] < wall <= first_wall[run] + second_session + 0.2, run.arm
