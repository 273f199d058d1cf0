"""Grids that outgrow one machine: one job per run through submitit (Slurm job arrays, or
its local executor).

`submit_plan` prepares the data here (tokenizing is quick and every job reads it), then submits
every unfinished run as one task of a job array (`executor.map_array`), each task running the run's
`archlab train` process as `archlab ablate` would locally (resumed from its last checkpoint if it
has one) and recording how it ended in the run folder. Slurm jobs are submitted and left to run
(`archlab ablate SUITE --collect DIR` builds the report once they finished; running the same submit
again resubmits only the unfinished runs); submitit's local executor (`cluster="local"`) runs the
same tasks as local processes, which is how the tests exercise it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import submitit

from archlab.lab.runs.plan import Plan, RunSpec, prepare
from archlab.lab.runs.runner import LabError, _finish, _start, is_done

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SlurmOptions:
    """What each run's job asks the scheduler for (`archlab ablate --executor slurm --slurm-*`)."""

    partition: str | None = None  # Slurm partition; None = the cluster's default
    time_min: int = 60  # wall-clock limit per run, minutes
    gpus: int = 0  # GPUs per run (runs use CUDA when one is visible)
    cpus: int = 2  # CPU cores per run; the run's torch threads
    array_parallelism: int = 64  # runs of the array running at once

    def __post_init__(self) -> None:
        for name, low in (("time_min", 1), ("gpus", 0), ("cpus", 1), ("array_parallelism", 1)):
            if getattr(self, name) < low:
                raise ValueError(
                    f"--slurm-{name.replace('_min', '').replace('_', '-')} {getattr(self, name)} "
                    f"is not allowed: at least {low}"
                )


def train_task(run: RunSpec, threads: int) -> dict:
    """One run, inside its job: the run's `archlab train` process with `threads` threads,
    its end recorded."""
    proc = _start(run, threads)
    proc.wait()
    # raises LabError (the task fails) on a failure that is not divergence
    _finish(run, proc.returncode)
    return {"arm": run.arm, "seed": run.seed, "returncode": proc.returncode}


def make_executor(folder: Path, cluster: str, options: SlurmOptions) -> submitit.AutoExecutor:
    """A submitit executor for the suite: `cluster` "slurm" or "local"
    (submitit's local processes)."""
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    params: dict[str, object] = {
        "timeout_min": options.time_min,
        "cpus_per_task": options.cpus,
        "gpus_per_node": options.gpus,
        "tasks_per_node": 1,
        "nodes": 1,
        "name": "archlab-ablate",
        "slurm_array_parallelism": options.array_parallelism,
    }
    if options.partition:
        params["slurm_partition"] = options.partition
    executor.update_parameters(**params)
    return executor


def submit_plan(
    plan: Plan, cluster: str = "slurm", options: SlurmOptions | None = None, wait: bool = False
) -> list[submitit.Job]:
    """Submit every unfinished run of the plan as one job array; with `wait`, block until all
    ended and raise LabError naming the first run that failed. Returns the jobs (empty when every
    run is done)."""
    options = options or SlurmOptions()
    prepare(plan)
    todo = [r for r in {r.run_dir: r for r in plan.runs}.values() if not is_done(r)]
    if not todo:
        return []
    executor = make_executor(plan.out / "submitit", cluster, options)
    jobs = executor.map_array(train_task, todo, [options.cpus] * len(todo))
    logger.info(
        "submitted %d runs of %s as job array %s", len(todo), plan.suite.name, jobs[0].job_id
    )
    if wait:
        for run, job in zip(todo, jobs):
            try:
                job.result()
            # submitit re-raises the task's error with the job's log around it
            except Exception as err:
                raise LabError(
                    f"arm {run.arm} seed {run.seed}: job {job.job_id} failed: "
                    f"{str(err).strip().splitlines()[-1]}; see {job.paths.stderr}"
                ) from None
    return jobs
