"""Collecting a finished plan: each run's measures (computed once, kept in RUN/lab-measures.json),
the suite's timings on fresh models (SUITE/lab-timings.json), and the plan's measured values as the
table verdicts read.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from archlab.lab.analysis.ladder import LADDER_SUITE, LadderFit, fit_ladder, ladder_values
from archlab.lab.analysis.table import Run, Table

# the workers' entry point, by its module's name
from archlab.lab.measures import measure as lab_measure
from archlab.lab.measures.measure import (
    ITEMS_KEY,
    MEASURES,
    TIMING_ROUNDS,
    measure_run,
    read_measured,
    write_measured,
)
from archlab.lab.measures.timing import time_pairs
from archlab.lab.runs.plan import Plan, RunSpec, plan_suite
from archlab.lab.runs.records import missing_measures
from archlab.lab.runs.runner import LabError, is_done
from archlab.lab.runs.store import stale_reason
from archlab.lab.spec.arms import arm_keys, flag_value, resolve_arm
from archlab.lab.spec.budgets import Budget
from archlab.lab.spec.suite import SuiteError, Timing
from archlab.lab.spec.suite_file import load_suite
from archlab.nn.config import ModelConfig
from archlab.train.config import resolve_config


def measure_plan(
    plan: Plan, on_run: Callable[[RunSpec], None] | None = None, jobs: int = 1
) -> dict[RunSpec, dict]:
    """The suite's measures for every run, computed once and kept in RUN/lab-measures.json.

    Runs are visited seed by seed (arms interleaved), so a slow spell of the machine hits all arms
    alike; timing measures are then taken in TIMING_ROUNDS such rounds, each run keeping its best
    round. With `jobs` > 1 the untimed measures of `jobs` runs are taken at once, each run in a
    process of its own with one thread (as the runs trained); timings always run one at a time in
    this process, so nothing else competes with the clock."""
    _check_measurable(plan)
    order = sorted(plan.runs, key=lambda r: r.seed)
    cached = {run: read_measured(run.run_dir) for run in order}  # stale versions dropped
    timed = {
        run: [m for m in plan.suite.measures if m not in cached[run] and MEASURES[m].timing]
        for run in order
    }
    wanted = {
        run: [m for m in plan.suite.measures if m not in cached[run] and not MEASURES[m].timing]
        for run in order
    }
    for run in order:
        if (wanted[run] or timed[run]) and on_run is not None:
            on_run(run)
    for run, values in _measured(plan, [r for r in order if wanted[r]], wanted, jobs):
        cached[run].update(values)
        write_measured(run.run_dir, cached[run])
    best = _best_timings(plan, order, timed)
    for run in order:
        if timed[run]:
            cached[run].update(best[run])
            write_measured(run.run_dir, cached[run])
    # None: n/a
    return {run: {k: math.nan if v is None else v for k, v in cached[run].items()} for run in order}


def _check_measurable(plan: Plan) -> None:
    """One LabError before any measure when a run is unfinished, was trained with another config
    than today's code resolves, or is a record without checkpoints lacking a measure."""
    missing = [str(r.run_dir) for r in plan.runs if not is_done(r)]
    if missing:
        raise LabError(
            f"{len(missing)} runs are not finished: {', '.join(missing[:5])}"
            + (" ..." if len(missing) > 5 else "")
        )
    stale = [
        f"{r.arm}/seed{r.seed} ({why})" for r in plan.runs if (why := stale_reason(r)) is not None
    ]
    if stale:
        raise LabError(
            f"{len(stale)} stored runs were trained with another config "
            "than today's code resolves, so they are not reused: "
            f"{'; '.join(stale[:3])}{' ...' if len(stale) > 3 else ''}; run the suite without "
            "--collect to set them aside and train them again"
        )
    lacking = missing_measures(plan)
    if lacking:
        raise LabError(
            f"{len(lacking)} runs are records without checkpoints (lab/runs/records.py), "
            "so they cannot be measured again, and lack measures the suite asks for: "
            f"{'; '.join(lacking[:3])}{' ...' if len(lacking) > 3 else ''}; move those run folders "
            "aside to train them again"
        )


def _best_timings(
    plan: Plan, order: list[RunSpec], timed: dict[RunSpec, list[str]]
) -> dict[RunSpec, dict]:
    """Each run's timing measures, taken in TIMING_ROUNDS rounds over the runs in `order` (one at a
    time, in this process), its best round kept."""
    best: dict[RunSpec, dict] = {run: {} for run in order}
    for _ in range(TIMING_ROUNDS if any(timed.values()) else 0):
        for run in (r for r in order if timed[r]):
            for name, value in measure_run(
                run.run_dir, timed[run], plan.budget.measure_windows
            ).items():
                best[run][name] = (
                    MEASURES[name].best(best[run][name], value) if name in best[run] else value
                )
    return best


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def measure_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of fresh processes (spawned: a forked copy of a parent that has run torch can hang)
    that ignore SIGINT: Ctrl-C reaches the lab, which stops, not each worker mid-import with a
    traceback of its own."""
    return ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn"), initializer=_ignore_sigint
    )


def _measured(
    plan: Plan, runs: list[RunSpec], wanted: dict[RunSpec, list[str]], jobs: int
) -> Iterator[tuple[RunSpec, dict]]:
    """(run, its `wanted` measures) for each of `runs`, in this process or, with jobs > 1, in a
    `measure_pool` of `jobs` processes, as each run finishes."""
    windows = plan.budget.measure_windows
    if jobs <= 1 or len(runs) <= 1:
        yield from ((run, measure_run(run.run_dir, wanted[run], windows)) for run in runs)
        return
    with measure_pool(min(jobs, len(runs))) as pool:
        futures = {
            pool.submit(lab_measure.measure_run, run.run_dir, wanted[run], windows): run
            for run in runs
        }
        for future in as_completed(futures):
            yield futures[future], future.result()


# in the suite's folder: every timing's paired times, so a re-report does not redo them
TIMED = "lab-timings.json"


def read_timings(plan: Plan) -> dict[str, dict]:
    """SUITE/lab-timings.json as `measure_timings` kept it ({} before any timing)."""
    path = plan.out / TIMED
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def measure_timings(
    plan: Plan, on_timing: Callable[[Timing], None] | None = None
) -> dict[str, dict]:
    """Every `timings:` entry of the suite: interleaved A/B pairs on freshly initialised
    models (no training seed: weights do not change speed), kept in SUITE/lab-timings.json
    as {metric: {"arms", "a", "b", "load", "others", "cpus", "cores", "threads"}} (the load
    after each pair and the CPUs other work kept busy during it: lab/measures/timing_load.py)."""
    path, cached = plan.out / TIMED, read_timings(plan)
    for timing in plan.suite.timings:
        if timing.metric in cached and cached[timing.metric].get("arms") == list(timing.arms):
            continue
        if on_timing is not None:
            on_timing(timing)
        configs = [timed_config(plan, name, timing) for name in timing.arms]
        options = dict(timing.options)
        # the budget's batch and context unless the timing says otherwise
        if timing.kind == "train_step":
            train = resolve_arm(plan.suite, plan.suite.arm(timing.arms[0]), plan.budget)[0]
            options = {"batch": train.data.batch_size, "block": train.data.block_size, **options}
        times = time_pairs(configs[0], configs[1], kind=timing.kind, pairs=timing.pairs, **options)
        cached[timing.metric] = {
            "arms": list(timing.arms),
            "kind": timing.kind,
            "options": timing.options,
            "a": list(times.a),
            "b": list(times.b),
            "load": list(times.load),
            "others": list(times.others),
            "cpus": times.cpus,
            "cores": times.cores,
            "threads": times.threads,
        }
        plan.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cached, indent=1), encoding="utf-8")
    return cached


def timed_config(plan: Plan, arm: str, timing: Timing) -> ModelConfig:
    """The model an arm times: its resolved config with the timing's own model keys (a longer
    max_seq_len for a 2k-token decode cache, say) on top."""
    keys = {
        **arm_keys(plan.suite, plan.suite.arm(arm), plan.budget),
        **{k: flag_value(v) for k, v in timing.keys.items()},
    }
    try:
        return resolve_config([keys])[1]
    except ValueError as err:
        raise SuiteError(
            f"suite {plan.suite.name} timing {timing.metric} arm {arm}: {err}"
        ) from None


def table_of(
    plan: Plan,
    measured: dict[RunSpec, dict],
    timings: dict[str, dict] | None = None,
    parameters: dict[str, int] | None = None,
    configs: dict[str, str] | None = None,
) -> Table:
    """The plan's measured values as the table verdicts read (lab/analysis/table.py): arms in the
    suite's order, each run's values and per-item outcomes, and (when given) each arm's parameters
    and config hash."""
    runs: dict[str, list[Run]] = {}
    for arm in plan.suite.arms:
        rows = []
        for run in sorted(plan.runs_of(arm.name), key=lambda r: r.seed):
            values = measured.get(run, {})
            rows.append(
                Run(
                    arm.name,
                    run.seed,
                    run.run_dir.name,
                    {
                        k: math.nan if v is None else float(v)
                        for k, v in values.items()
                        if not k.endswith(ITEMS_KEY)
                    },
                    {
                        k.removesuffix(ITEMS_KEY): [float(x) for x in v]
                        for k, v in values.items()
                        if k.endswith(ITEMS_KEY) and v is not None
                    },
                    (parameters or {}).get(arm.name),
                    (configs or {}).get(arm.name, ""),
                )
            )
        runs[arm.name] = rows
    return Table(plan.suite, plan.seeds, runs, dict(timings or {}))


def run_config(run: RunSpec) -> dict:
    """The resolved config a run wrote (config.json), for the report's exact configs."""
    return json.loads((run.run_dir / "config.json").read_text(encoding="utf-8"))


def stored_ladder(store: Path, budget: Budget) -> LadderFit | None:
    """The compute ladder of `budget` from its runs in `store`: every rung at the seeds 0..n-1 that
    all rungs finished and measured (n at least the budget's), or None."""
    plan = plan_suite(
        load_suite(LADDER_SUITE),
        budget,
        store.parent / f"{LADDER_SUITE}-{budget.name}",
        store=store,
        seeds=_stored_seeds(store, budget),
    )
    if not all(
        is_done(r) and read_measured(r.run_dir).get("val_loss") is not None for r in plan.runs
    ):
        return None
    return fit_ladder(
        ladder_values(table_of(plan, {r: read_measured(r.run_dir) for r in plan.runs}))
    )


def _stored_seeds(store: Path, budget: Budget) -> int:
    """How many seeds 0..n-1 every rung of the ladder has finished and measured in `store` (at
    least the budget's)."""
    n = budget.seeds
    while True:
        plan = plan_suite(
            load_suite(LADDER_SUITE), budget, store.parent / "ladder", store=store, seeds=n + 1
        )
        if not all(
            is_done(r) and read_measured(r.run_dir).get("val_loss") is not None for r in plan.runs
        ):
            return n
        n += 1
