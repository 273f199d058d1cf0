"""`archlab ablate SUITE --executor slurm` against a real Slurm: the runs go to `sbatch` as one job
array (through submitit), run as Slurm jobs on the machine's node, and `--collect` builds the report
from their folders.

Slurm is a system service, so the test runs where one answers: `scripts/slurm-single-node.sh`
installs and starts a single-node Slurm (munge, slurmctld, slurmd; `.ci/run` does it on CI's
own machine). Elsewhere it skips, saying why. The executor's plumbing without a cluster is
tests/lab/test_runner.py (submitit's local executor).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from archlab.cli import main
from archlab.lab.measures.measure import STATUS
from archlab.lab.runs.plan import read_plan
from archlab.lab.runs.runner import is_done
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite_file import load_suite

SUITE = """
name: slurm-two
design: the executor's plumbing on a real Slurm
base: {preset: llama, steps: 4, logging.eval_every: 4, schedule.warmup_steps: 1}
arms: {a: {}, b: {model.norm: layernorm}}
measure: [val_loss]
claims: [{text: b beats a, metric: val_loss, arm: b, versus: a}]
"""
# the four 4-step runs take seconds each; a queue that does not drain in 10 minutes is stuck
WAIT_S = 600


def _slurm_state() -> str | None:
    """Why the test cannot run here, or None when sbatch and an idle (or busy) node answer."""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return (
            "Slurm is absent (no sbatch / sinfo): scripts/slurm-single-node.sh installs "
            "and starts one"
        )
    try:
        states = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"sinfo did not answer ({err}): start Slurm with scripts/slurm-single-node.sh"
    usable = {"idle", "mixed", "allocated", "completing"}
    if states.returncode != 0 or not usable & set(states.stdout.split()):
        why = (states.stderr or states.stdout).strip().splitlines()[-1:] or ["no node"]
        return f"no usable Slurm node ({why[0]}): start Slurm with scripts/slurm-single-node.sh"
    return None


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_slurm_state() is not None, reason=str(_slurm_state())),
]


def _wait_for(job_id: str, runs: list[Path]) -> None:
    """Until every run recorded how it ended (its task writes lab-status.json last) and no task of
    the job array is queued or running."""
    deadline = time.monotonic() + WAIT_S
    queued = None
    while time.monotonic() < deadline:
        queued = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%i %T"], capture_output=True, text=True
        )
        if (
            all((run / STATUS).is_file() for run in runs)
            and queued.returncode == 0
            and not queued.stdout.strip()
        ):
            return
        time.sleep(2)
    pytest.fail(
        f"job array {job_id} not finished after "
        f"{WAIT_S} s: {queued.stdout.strip() if queued else ''}"
    )


def test_a_tiny_suite_runs_as_a_slurm_job_array_and_collects(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    suite = tmp_path / "slurm-two.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "suite"
    assert (
        main(
            [
                "ablate",
                str(suite),
                "--budget",
                "tiny",
                "--seeds",
                "2",
                "--out",
                str(out),
                "--executor",
                "slurm",
                "--slurm-cpus",
                "1",
                "--slurm-time",
                "10",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "submitted 4 runs as job array " in printed and f"--collect {out}" in printed
    job_id = printed.split("as job array ")[1].split(";")[0].strip()
    # the array's id (its tasks are JOB_0 ... JOB_3), what squeue -j takes
    assert job_id.isdigit(), job_id
    recorded = read_plan(out)
    assert len(recorded["runs"]) == 4
    _wait_for(job_id, [Path(run["dir"]) for run in recorded["runs"]])
    plan_suite = load_suite(suite)
    for run in recorded["runs"]:
        folder = Path(run["dir"])
        status = json.loads((folder / STATUS).read_text())
        assert status["returncode"] == 0, (run, (folder / "train.log").read_text()[-1000:])
        config = json.loads((folder / "config.json").read_text())
        assert config["train"]["seed"] == run["seed"] and config["train"]["steps"] == 4
        assert config["model"]["norm"] == ("layernorm" if run["arm"] == "b" else "rmsnorm")
    # every task ran under Slurm, as a task of the one array: submitit's log folder names
    # the array's tasks
    logs = sorted(p.name for p in (out / "submitit").glob(f"{job_id}_*_log.out"))
    assert len(logs) == 4, logs
    assert main(["ablate", str(suite), "--collect", str(out)]) == 0
    collected = capsys.readouterr().out
    assert (
        "b beats a" in collected
        and (out / "results.md").is_file()
        and (out / "report.html").is_file()
    )
    from archlab.lab.runs.plan import plan_suite as plan_of

    plan = plan_of(plan_suite, BUDGETS["tiny"], out, seeds=2, store=Path(recorded["store"]))
    assert all(is_done(run) for run in plan.runs)
    # submitting again finds every run done: nothing goes to sbatch
    assert (
        main(
            [
                "ablate",
                str(suite),
                "--budget",
                "tiny",
                "--seeds",
                "2",
                "--out",
                str(out),
                "--executor",
                "slurm",
            ]
        )
        == 0
    )
    assert "submitted 0 runs (all were done)" in capsys.readouterr().out
