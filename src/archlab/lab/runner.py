"""Running a suite: the plan (one `archlab train` command per arm and seed), data, subprocesses, resume.

Every run is a subprocess of `archlab train`, so a suite can as well be printed (`--print-commands`) and run
by any scheduler (`lab/executor.py` submits them to Slurm), then collected. Runs share one prepared data folder
per tokenizer, the token budget, batch, schedule and seeds 0..n-1 (every arm alike); only the arm's overrides
differ. A run's folder is named by a hash of its resolved config, in a store that several suites may share
(`--store`): an arm that two suites both run (the base, post-norm, tied embeddings) trains once, and the
suite's folder links to it (SUITE/runs/ARM/seedN). A run is done when its folder holds the checkpoint of its
last step and metrics.jsonl (or a recorded divergence); a stopped run is continued with `--resume`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import multiprocessing
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from archlab.checkpoint import latest_checkpoint
from archlab.data.prepare import prepare_data
from archlab.lab import measure as lab_measure  # the workers' entry point, by its module's name
from archlab.lab.arms import arm_keys, flag_value, match_parameters, resolve_arm
from archlab.lab.budgets import Budget
from archlab.lab.measure import (
    ITEMS_KEY,
    MEASURES,
    STATUS,
    TIMING_ROUNDS,
    measure_run,
    read_measured,
    write_measured,
)
from archlab.lab.store import link_legacy, run_hash, set_aside, stale_reason
from archlab.lab.suite import Arm, Suite, SuiteError, Timing, at_budget
from archlab.lab.table import Run, Table
from archlab.lab.timing import time_pairs
from archlab.nn.config import ModelConfig
from archlab.train.config import resolve_config
from archlab.train.metrics import METRICS

logger = logging.getLogger(__name__)
PLAN = "plan.json"  # written in the suite's folder: which suite, budget, seeds and run folders it holds
DIVERGED_TEXT = "training diverged"  # what `archlab train` prints when it stops on non-finite steps (exit 1)


class LabError(RuntimeError):
    """A run failed for a reason other than divergence; the message names the arm and the log line."""


@dataclass(frozen=True)
class DataSpec:
    """One prepared data folder the suite's runs share."""

    source: str
    tokenizer: str
    vocab_size: int
    val_fraction: float
    max_files: int | None
    out: Path
    prepared: bool = False  # the source already is a prepared folder: used as it is
    bpe_dropout: float = 0.0  # the train split encoded with BPE-dropout: a folder of its own (val stays plain)

    def command(self) -> list[str]:
        cmd = ["archlab", "data", "prepare", "--data", self.source, "--tokenizer", self.tokenizer,
               "--vocab-size", str(self.vocab_size), "--val-fraction", str(self.val_fraction)]
        cmd += ["--max-files", str(self.max_files)] if self.max_files else []
        return cmd + (["--bpe-dropout", f"{self.bpe_dropout:g}"] if self.bpe_dropout else []) + ["--out", str(self.out)]


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: a plan holds each run once
class RunSpec:
    """One arm at one seed: its flags, folder and length."""

    arm: str
    seed: int
    run_dir: Path
    keys: dict[str, str]  # every dotted key the run sets, as flag text
    steps: int

    def command(self, resume: bool = False) -> list[str]:
        flags = [part for key, value in self.keys.items() for part in (f"--{key}", value)]
        return ["archlab", "train", *flags] + (["--resume"] if resume else [])


@dataclass
class Plan:
    suite: Suite
    budget: Budget
    seeds: int
    out: Path
    data: list[DataSpec] = field(default_factory=list)
    runs: list[RunSpec] = field(default_factory=list)

    store: Path | None = None  # where run folders live (default OUT/../store): shared by the suites beside OUT
    extra: dict[str, int] = field(default_factory=dict)  # arm -> seeds beyond `seeds` (--sequential's later looks)

    def runs_of(self, arm: str) -> list[RunSpec]:
        return [r for r in self.runs if r.arm == arm]

    def seeds_of(self, arm: str) -> int:
        return self.seeds + self.extra.get(arm, 0)

    def commands(self) -> list[str]:
        """Every command of the suite as shell lines: data preparation first, then one line per run."""
        data = [shlex.join(d.command()) for d in self.data if not d.prepared]
        unique = {r.run_dir: r for r in self.runs}.values()  # arms that resolve alike share one run
        return data + [shlex.join(r.command()) for r in unique]


def _data_spec(suite: Suite, arm: Arm, budget: Budget, out: Path) -> DataSpec:
    """The data folder an arm trains on: STORE/data/<tokenizer>-<hash of the request>, or a prepared source."""
    d = resolve_arm(suite, arm, budget)[0].data
    if (Path(d.source) / "meta.json").is_file():
        return DataSpec(d.source, d.tokenizer, d.vocab_size, d.val_fraction, None, Path(d.source), prepared=True)
    tok = {"byte": "byte", "bpe": f"bpe{d.vocab_size}"}.get(d.tokenizer, "file")
    # bpe_dropout enters the request only when set, so the folders prepared before it keep their names
    request = json.dumps([d.source, d.tokenizer, d.vocab_size, d.val_fraction, budget.max_files]
                         + ([d.bpe_dropout] if d.bpe_dropout else []))
    name = f"{tok}-{hashlib.sha1(request.encode()).hexdigest()[:8]}"  # arms with other data never share a folder
    return DataSpec(d.source, d.tokenizer, d.vocab_size, d.val_fraction, budget.max_files, out / "data" / name,
                    bpe_dropout=d.bpe_dropout)


def plan_suite(suite: Suite, budget: Budget, out: str | Path, seeds: int | None = None,
               store: str | Path | None = None, extra: dict[str, int] | None = None) -> Plan:
    """Resolve every arm (failing on the first bad one), match parameters, and lay out the runs: every arm at
    seeds 0..seeds-1 (plus `extra` seeds per arm), each in STORE/<run_hash>."""
    seeds = seeds if seeds is not None else suite.seeds or budget.seeds
    if seeds < 2:
        raise SuiteError(f"--seeds {seeds} is not allowed: at least 2 seeds per arm (a verdict needs a spread)")
    suite = at_budget(match_parameters(suite, budget), budget)
    plan = Plan(suite, budget, seeds, Path(out), store=Path(store) if store else Path(out).parent / "store",
                extra=dict(extra or {}))
    for arm in suite.arms:
        data = _data_spec(suite, arm, budget, plan.store)
        if data not in plan.data:
            plan.data.append(data)
        train = resolve_arm(suite, arm, budget)[0]
        for seed in range(plan.seeds_of(arm.name)):
            keys = {**arm_keys(suite, arm, budget), "data.source": str(data.out), "seed": str(seed)}
            run_dir = plan.store / run_hash(keys, budget, plan.store)
            link_legacy(run_dir, keys, budget)
            plan.runs.append(RunSpec(arm.name, seed, run_dir, {**keys, "out": str(run_dir)}, train.steps))
    return plan


def write_plan(plan: Plan) -> None:
    """plan.json (the suite, budget, seeds and each run's folder) and SUITE/runs/ARM/seedN links to the runs."""
    plan.out.mkdir(parents=True, exist_ok=True)
    record = {"suite": plan.suite.path, "budget": plan.budget.name, "seeds": plan.seeds, "extra": plan.extra,
              "fold_over": bool(plan.suite.screening.get("fold_over")),
              "store": str(plan.store), "arms": {a.name: a.overrides for a in plan.suite.arms},
              "runs": [{"arm": r.arm, "seed": r.seed, "dir": str(r.run_dir)} for r in plan.runs]}
    (plan.out / PLAN).write_text(json.dumps(record, indent=2, default=str), encoding="utf-8")
    for run in plan.runs:
        link = plan.out / "runs" / run.arm / f"seed{run.seed}"
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            if link.is_symlink() and Path(os.readlink(link)) == run.run_dir.resolve():
                continue
            if not link.is_symlink():
                continue  # an older lab's run folder in its place: left as it was
            link.unlink()
        link.symlink_to(run.run_dir.resolve(), target_is_directory=True)


def read_plan(out: str | Path) -> dict:
    path = Path(out) / PLAN
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def prepare(plan: Plan) -> None:
    """Tokenize each data folder once (reused when already prepared with the same request)."""
    for d in (d for d in plan.data if not d.prepared):
        prepare_data(d.source, d.out, d.tokenizer, d.vocab_size, d.val_fraction, max_files=d.max_files,
                     bpe_dropout=d.bpe_dropout)


# ------------------------------------------------------------------------------------------ state
def final_step(run_dir: Path) -> int:
    latest = latest_checkpoint(run_dir)
    return int(latest.name.split("_")[1]) if latest is not None else 0


def is_done(run: RunSpec) -> bool:
    """The checkpoint of the last step and metrics.jsonl exist, or the run stopped on divergence."""
    status = run.run_dir / STATUS
    if status.is_file() and json.loads(status.read_text(encoding="utf-8")).get("diverged"):
        return True
    return (run.run_dir / METRICS).is_file() and final_step(run.run_dir) >= run.steps


def current_step(run: RunSpec) -> int:
    """The last step in the run's metrics.jsonl (0 before the first row)."""
    path = run.run_dir / METRICS
    if not path.is_file():
        return 0
    for line in reversed(path.read_bytes().splitlines()):
        try:
            return int(json.loads(line)["step"])
        except ValueError:  # a row being written right now: the one before it will do
            continue
    return 0


# ------------------------------------------------------------------------------------------ running
@dataclass
class Progress:
    """What the progress display shows: runs done, the runs under way and their step, an ETA."""

    done: int
    total: int
    running: list[tuple[str, int, int, int]]  # (arm, seed, step, steps)
    eta_s: float | None


_started: dict[RunSpec, tuple[float, float]] = {}  # run -> (when its process started, wall seconds before)


def run_wall_s(run_dir: Path) -> float:
    """Seconds a finished run's processes took, from start-up to exit (0 when unknown): recorded in its status
    file; for runs the lab recorded without it, the time from its config (written at start) to its status."""
    status, config = run_dir / STATUS, run_dir / "config.yaml"
    if not status.is_file():
        return 0.0
    recorded = json.loads(status.read_text(encoding="utf-8")).get("wall_s")
    if recorded is not None:
        return float(recorded)
    return max(0.0, status.stat().st_mtime - config.stat().st_mtime) if config.is_file() else 0.0


def _start(run: RunSpec, threads: int | None) -> subprocess.Popen:
    """Start (or resume) one run's `archlab train` process; `threads` caps its intra-op threads (None: torch's)."""
    run.run_dir.mkdir(parents=True, exist_ok=True)
    _started[run] = (time.time(), run_wall_s(run.run_dir))  # a resumed run adds to its earlier sessions' time
    (run.run_dir / STATUS).unlink(missing_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if threads is not None:  # --jobs N: one thread per process, N processes on N cores, not N x cores fighting
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, "-m", "archlab", *run.command(resume=final_step(run.run_dir) > 0)[1:]]
    with (run.run_dir / "train.log").open("a", encoding="utf-8") as log:  # the child keeps its own handle
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def _finish(run: RunSpec, returncode: int) -> None:
    """Record how a run ended; raise on a failure that is not divergence."""
    log = (run.run_dir / "train.log").read_text(encoding="utf-8", errors="replace")
    diverged = returncode == 1 and DIVERGED_TEXT in log
    started, before = _started.pop(run, (time.time(), 0.0))
    status = {"returncode": returncode, "diverged": diverged, "wall_s": round(before + time.time() - started, 1)}
    (run.run_dir / STATUS).write_text(json.dumps(status), encoding="utf-8")
    if returncode != 0 and not diverged:
        last = next((line for line in reversed(log.splitlines()) if line.strip()), "(empty log)")
        raise LabError(f"arm {run.arm} seed {run.seed} failed (exit {returncode}): {last}; "
                       f"see {run.run_dir / 'train.log'}")


def run_plan(plan: Plan, jobs: int = 1, on_progress: Callable[[Progress], None] | None = None,
             poll_s: float = 0.5) -> None:
    """Run every unfinished run, `jobs` at a time; finished runs are skipped, stopped ones resumed.

    On Ctrl-C the runs under way receive it too, checkpoint and exit; the next call continues them.
    """
    unique = list({r.run_dir: r for r in reversed(plan.runs)}.values())[::-1]  # one run per folder (arms may agree)
    for run in unique:  # a finished run is reused only as the config it trained (a stopped one: --resume checks)
        if is_done(run) and (why := stale_reason(run)) is not None:  # set aside, trained anew
            logger.warning("%s/seed%d: the stored run %s is stale (%s); moved to %s, training it again", run.arm,
                           run.seed, run.run_dir.name, why, set_aside(run))
    todo = [r for r in unique if not is_done(r)]
    total, done = len(unique), len(unique) - len(todo)
    running: dict[RunSpec, subprocess.Popen] = {}
    start, steps_before = time.perf_counter(), {r: current_step(r) for r in todo}
    try:
        while todo or running:
            while todo and len(running) < jobs:
                run = todo.pop(0)
                running[run] = _start(run, 1 if jobs > 1 else None)
            for run, proc in list(running.items()):
                if proc.poll() is not None:
                    del running[run]
                    _finish(run, proc.returncode)
                    if not is_done(run):  # stopped by a signal: leave it for the next call
                        raise KeyboardInterrupt
                    done += 1
            if on_progress is not None:
                on_progress(_progress(plan, todo, running, done, total, start, steps_before))
            time.sleep(poll_s if running else 0)
    except BaseException:
        for proc in running.values():
            proc.terminate()  # SIGTERM: each run checkpoints its current step and exits
        for proc in running.values():
            proc.wait()
        raise


def _progress(plan: Plan, todo: list[RunSpec], running: dict, done: int, total: int, start: float,
              steps_before: dict[RunSpec, int]) -> Progress:
    now = {run: current_step(run) for run in running}
    pending = [r for r in plan.runs if r in steps_before]
    made = sum((r.steps if is_done(r) else now.get(r, steps_before[r])) - steps_before[r] for r in pending)
    left = sum(r.steps - (now.get(r, steps_before[r])) for r in todo + list(running))
    elapsed = time.perf_counter() - start
    eta = left * elapsed / made if made > 0 else None
    return Progress(done, total, [(r.arm, r.seed, now[r], r.steps) for r in running], eta)


# ------------------------------------------------------------------------------------------ measuring
def measure_plan(plan: Plan, on_run: Callable[[RunSpec], None] | None = None, jobs: int = 1
                 ) -> dict[RunSpec, dict]:
    """The suite's measures for every run, computed once and kept in RUN/lab-measures.json.

    Runs are visited seed by seed (arms interleaved), so a slow spell of the machine hits all arms alike; timing
    measures are then taken in TIMING_ROUNDS such rounds, each run keeping its best round. With `jobs` > 1 the
    untimed measures of `jobs` runs are taken at once, each run in a process of its own with one thread (as the
    runs trained); timings always run one at a time in this process, so nothing else competes with the clock."""
    missing = [str(r.run_dir) for r in plan.runs if not is_done(r)]
    if missing:
        raise LabError(f"{len(missing)} runs are not finished: {', '.join(missing[:5])}"
                       + (" ..." if len(missing) > 5 else ""))
    stale = [f"{r.arm}/seed{r.seed} ({why})" for r in plan.runs if (why := stale_reason(r)) is not None]
    if stale:
        raise LabError(f"{len(stale)} stored runs were trained with another config than today's code resolves, "
                       f"so they are not reused: {'; '.join(stale[:3])}{' ...' if len(stale) > 3 else ''}; run the "
                       "suite without --collect to set them aside and train them again")
    order = sorted(plan.runs, key=lambda r: r.seed)
    cached = {run: read_measured(run.run_dir) for run in order}  # stale versions dropped
    timed = {run: [m for m in plan.suite.measures if m not in cached[run] and MEASURES[m].timing] for run in order}
    wanted = {run: [m for m in plan.suite.measures if m not in cached[run] and not MEASURES[m].timing]
              for run in order}
    for run in order:
        if (wanted[run] or timed[run]) and on_run is not None:
            on_run(run)
    for run, values in _measured(plan, [r for r in order if wanted[r]], wanted, jobs):
        cached[run].update(values)
        write_measured(run.run_dir, cached[run])
    best: dict[RunSpec, dict] = {run: {} for run in order}
    for _ in range(TIMING_ROUNDS if any(timed.values()) else 0):
        for run in (r for r in order if timed[r]):
            for name, value in measure_run(run.run_dir, timed[run], plan.budget.measure_windows).items():
                best[run][name] = MEASURES[name].best(best[run][name], value) if name in best[run] else value
    for run in order:
        if timed[run]:
            cached[run].update(best[run])
            write_measured(run.run_dir, cached[run])
    return {run: {k: math.nan if v is None else v for k, v in cached[run].items()} for run in order}  # None: n/a


def _measured(plan: Plan, runs: list[RunSpec], wanted: dict[RunSpec, list[str]], jobs: int
              ) -> Iterator[tuple[RunSpec, dict]]:
    """(run, its `wanted` measures) for each of `runs`, in this process or, with jobs > 1, in a pool of `jobs`
    fresh processes (spawned: a forked copy of a parent that has run torch can hang), as each run finishes."""
    windows = plan.budget.measure_windows
    if jobs <= 1 or len(runs) <= 1:
        yield from ((run, measure_run(run.run_dir, wanted[run], windows)) for run in runs)
        return
    with ProcessPoolExecutor(min(jobs, len(runs)), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(lab_measure.measure_run, run.run_dir, wanted[run], windows): run for run in runs}
        for future in as_completed(futures):
            yield futures[future], future.result()


TIMED = "lab-timings.json"  # in the suite's folder: every timing's paired times, so a re-report does not redo them


def measure_timings(plan: Plan, on_timing: Callable[[Timing], None] | None = None) -> dict[str, dict]:
    """Every `timings:` entry of the suite: interleaved A/B pairs on freshly initialised models (no training
    seed: weights do not change speed), kept in SUITE/lab-timings.json as {metric: {"arms", "a", "b"}}."""
    path = plan.out / TIMED
    cached = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    for timing in plan.suite.timings:
        if timing.metric in cached and cached[timing.metric].get("arms") == list(timing.arms):
            continue
        if on_timing is not None:
            on_timing(timing)
        configs = [timed_config(plan, name, timing) for name in timing.arms]
        options = dict(timing.options)
        if timing.kind == "train_step":  # the budget's batch and context unless the timing says otherwise
            train = resolve_arm(plan.suite, plan.suite.arm(timing.arms[0]), plan.budget)[0]
            options = {"batch": train.data.batch_size, "block": train.data.block_size, **options}
        times = time_pairs(configs[0], configs[1], kind=timing.kind, pairs=timing.pairs, **options)
        cached[timing.metric] = {"arms": list(timing.arms), "kind": timing.kind, "options": timing.options,
                                 "a": list(times.a), "b": list(times.b)}
        plan.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cached, indent=1), encoding="utf-8")
    return cached


def timed_config(plan: Plan, arm: str, timing: Timing) -> ModelConfig:
    """The model an arm times: its resolved config with the timing's own model keys (a longer max_seq_len for a
    2k-token decode cache, say) on top."""
    keys = {**arm_keys(plan.suite, plan.suite.arm(arm), plan.budget), **{k: flag_value(v) for k, v in
                                                                          timing.keys.items()}}
    try:
        return resolve_config([keys])[1]
    except ValueError as err:
        raise SuiteError(f"suite {plan.suite.name} timing {timing.metric} arm {arm}: {err}") from None


def table_of(plan: Plan, measured: dict[RunSpec, dict], timings: dict[str, dict] | None = None,
             parameters: dict[str, int] | None = None, configs: dict[str, str] | None = None) -> Table:
    """The plan's measured values as the table verdicts read (lab/table.py): arms in the suite's order, each run's
    values and per-item outcomes, and (when given) each arm's parameters and config hash."""
    runs: dict[str, list[Run]] = {}
    for arm in plan.suite.arms:
        rows = []
        for run in sorted(plan.runs_of(arm.name), key=lambda r: r.seed):
            values = measured.get(run, {})
            rows.append(Run(arm.name, run.seed, run.run_dir.name,
                            {k: math.nan if v is None else float(v) for k, v in values.items()
                             if not k.endswith(ITEMS_KEY)},
                            {k.removesuffix(ITEMS_KEY): [float(x) for x in v] for k, v in values.items()
                             if k.endswith(ITEMS_KEY) and v is not None},
                            (parameters or {}).get(arm.name), (configs or {}).get(arm.name, "")))
        runs[arm.name] = rows
    return Table(plan.suite, plan.seeds, runs, dict(timings or {}))


def run_config(run: RunSpec) -> dict:
    """The resolved config a run wrote (config.json), for the report's exact configs."""
    return json.loads((run.run_dir / "config.json").read_text(encoding="utf-8"))

