"""Running a plan (lab/runs/plan.py): each run's `archlab train` command, `jobs` at a
time, progress, resume.

Locally the runs train in `jobs` worker processes that keep torch imported (lab/runs/worker.py), one
run after another, each run exactly as its own `archlab train` process would train it; a Slurm task
(lab/runs/executor.py) runs one `archlab train` subprocess.

A run is done when its folder holds the checkpoint of its last step and metrics.jsonl (or a recorded
divergence), or is a finished run's record (lab/runs/records.py: no checkpoint, a clean exit,
metrics to its last step); a stopped run is continued with `--resume`; how a run ended is recorded
beside it (measure.STATUS).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from archlab.checkpoint import latest_checkpoint
from archlab.lab.measures.measure import STATUS
from archlab.lab.runs.plan import Plan, RunSpec
from archlab.lab.runs.records import is_record, last_step
from archlab.lab.runs.store import set_aside, stale_reason
from archlab.lab.runs.worker import Worker
from archlab.train.metrics import METRICS

logger = logging.getLogger(__name__)
# what `archlab train` prints when it stops on non-finite steps (exit 1)
DIVERGED_TEXT = "training diverged"


class LabError(RuntimeError):
    """A run failed for a reason other than divergence; the message names the arm and
    the log line."""


# ------------------------------------------------------------------------------------------ state
def final_step(run_dir: Path) -> int:
    latest = latest_checkpoint(run_dir)
    return int(latest.name.split("_")[1]) if latest is not None else 0


def is_done(run: RunSpec) -> bool:
    """The checkpoint of the last step and metrics.jsonl exist, the run stopped on divergence, or
    its folder is a finished run's record."""
    status = run.run_dir / STATUS
    if status.is_file() and json.loads(status.read_text(encoding="utf-8")).get("diverged"):
        return True
    return (
        (run.run_dir / METRICS).is_file() and final_step(run.run_dir) >= run.steps
    ) or is_record(run)


def has_trained(run: RunSpec) -> bool:
    """Whether any step of the run has trained (its metrics.jsonl exists)."""
    return (run.run_dir / METRICS).is_file()


def current_step(run: RunSpec) -> int:
    """The last step in the run's metrics.jsonl (0 before the first row)."""
    return last_step(run.run_dir)


# ------------------------------------------------------------------------------------------ running
@dataclass
class Progress:
    """What the progress display shows: runs done, the runs under way and their step, an ETA."""

    done: int
    total: int
    running: list[tuple[str, int, int, int]]  # (arm, seed, step, steps)
    eta_s: float | None


# run -> (when its process started, wall seconds before)
_started: dict[RunSpec, tuple[float, float]] = {}


def run_wall_s(run_dir: Path) -> float:
    """Seconds a finished run's processes took, from start-up to exit (0 when unknown): recorded
    in its status file; for runs the lab recorded without it, the time from its config (written at
    start) to its status."""
    status, config = run_dir / STATUS, run_dir / "config.yaml"
    if not status.is_file():
        return 0.0
    recorded = json.loads(status.read_text(encoding="utf-8")).get("wall_s")
    if recorded is not None:
        return float(recorded)
    return max(0.0, status.stat().st_mtime - config.stat().st_mtime) if config.is_file() else 0.0


def _begin(run: RunSpec) -> bool:
    """Get a run's folder ready to (re)start and note when it started; whether it resumes (from
    its last checkpoint)."""
    run.run_dir.mkdir(parents=True, exist_ok=True)
    # a resumed run adds to its earlier sessions' time
    _started[run] = (time.time(), run_wall_s(run.run_dir))
    (run.run_dir / STATUS).unlink(missing_ok=True)
    return final_step(run.run_dir) > 0


def _start(run: RunSpec, threads: int | None) -> subprocess.Popen:
    """Start (or resume) one run's `archlab train` process; `threads` caps its intra-op
    threads (None: torch's)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # --jobs N: one thread per process, N processes on N cores, not N x cores fighting
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, "-m", "archlab", *run.command(resume=_begin(run))[1:]]
    # the child keeps its own handle
    with (run.run_dir / "train.log").open("a", encoding="utf-8") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def _record_end(run: RunSpec, returncode: int) -> tuple[bool, str]:
    """Write how a run's session ended and its seconds so far (its earlier sessions' included, so a
    run stopped and resumed counts every session): (diverged, its log)."""
    log = (run.run_dir / "train.log").read_text(encoding="utf-8", errors="replace")
    diverged = returncode == 1 and DIVERGED_TEXT in log
    started, before = _started.pop(run, (time.time(), 0.0))
    status = {
        "returncode": returncode,
        "diverged": diverged,
        "wall_s": round(before + time.time() - started, 1),
    }
    (run.run_dir / STATUS).write_text(json.dumps(status), encoding="utf-8")
    return diverged, log


def _finish(run: RunSpec, returncode: int) -> None:
    """Record how a run ended; raise on a failure that is not divergence."""
    diverged, log = _record_end(run, returncode)
    if returncode != 0 and not diverged:
        last = next((line for line in reversed(log.splitlines()) if line.strip()), "(empty log)")
        raise LabError(
            f"arm {run.arm} seed {run.seed} failed (exit {returncode}): {last}; "
            f"see {run.run_dir / 'train.log'}"
        )


def run_plan(
    plan: Plan,
    jobs: int = 1,
    on_progress: Callable[[Progress], None] | None = None,
    poll_s: float = 0.5,
) -> None:
    """Run every unfinished run, `jobs` at a time in as many worker processes; finished runs are
    skipped, stopped ones resumed.

    On Ctrl-C (or SIGTERM) the runs under way checkpoint and stop; the next call continues them.
    """
    # one run per folder (arms may agree)
    unique = list({r.run_dir: r for r in reversed(plan.runs)}.values())[::-1]
    _set_aside_stale(unique)
    todo = [r for r in unique if not is_done(r)]
    total, done = len(unique), len(unique) - len(todo)
    start, steps_before = time.perf_counter(), {r: current_step(r) for r in todo}
    # --jobs N: one thread per worker, N workers on N cores, not N x cores fighting; one job
    # keeps torch's choice
    workers = [Worker.start(1 if jobs > 1 else None) for _ in range(min(jobs, len(todo)))]
    try:
        while todo or any(w.busy for w in workers):
            for worker in workers:
                if worker.busy is None and todo:
                    run = todo.pop(0)
                    worker.submit(run, run.keys, _begin(run), run.run_dir / "train.log")
            for worker in (w for w in workers if w.busy is not None):
                code = worker.result()
                if code is None:
                    continue
                run, worker.busy = worker.busy, None
                _finish(run, code)
                if not is_done(run):  # stopped by a signal: leave it for the next call
                    raise KeyboardInterrupt
                done += 1
            running = {w.busy: w for w in workers if w.busy is not None}
            if on_progress is not None:
                on_progress(_progress(plan, todo, running, done, total, start, steps_before))
            if running:
                time.sleep(poll_s)
    except BaseException:
        _interrupt(workers)
        raise
    finally:
        for worker in workers:
            worker.stop()


def _set_aside_stale(runs: list[RunSpec]) -> None:
    """A finished run is reused only as the config it trained (a stopped one: --resume checks):
    one whose stored config today's code resolves otherwise is moved aside and trained anew."""
    for run in runs:
        if is_done(run) and (why := stale_reason(run)) is not None:
            logger.warning(
                "%s/seed%d: the stored run %s is stale (%s); moved to %s, training it again",
                run.arm,
                run.seed,
                run.run_dir.name,
                why,
                set_aside(run),
            )


def _interrupt(workers: list[Worker]) -> None:
    """Stop the runs under way: SIGTERM to each busy worker (its run checkpoints its current step
    and returns), then wait for every one and record its time so far (a resumed run adds to
    it)."""
    for worker in workers:
        if worker.busy is not None:
            worker.interrupt()
    for worker in workers:
        if worker.busy is not None:
            _record_end(worker.busy, worker.result(timeout=None))


def _progress(
    plan: Plan,
    todo: list[RunSpec],
    running: dict,
    done: int,
    total: int,
    start: float,
    steps_before: dict[RunSpec, int],
) -> Progress:
    now = {run: current_step(run) for run in running}
    pending = [r for r in plan.runs if r in steps_before]
    made = sum(
        (r.steps if is_done(r) else now.get(r, steps_before[r])) - steps_before[r] for r in pending
    )
    left = sum(r.steps - (now.get(r, steps_before[r])) for r in todo + list(running))
    elapsed = time.perf_counter() - start
    eta = left * elapsed / made if made > 0 else None
    return Progress(done, total, [(r.arm, r.seed, now[r], r.steps) for r in running], eta)
