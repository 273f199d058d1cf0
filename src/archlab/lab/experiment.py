"""The lab's front door: one suite at one budget, from its plan to its published pages, each
step computed once.

    from archlab.lab import Experiment

    exp = Experiment("ffn", budget="small", seeds=3, store="runs/ablate/store", jobs=2)
    exp.plan()     # every arm x seed resolved once: configs, store folder, command
    exp.power()    # each claim's seeds for 80% power and its mde (--plan)
    exp.run()      # prepare the data, train what is unfinished (stopped runs resume)
    exp.measure()  # each run's measures (kept beside the run) and the suite's timing pairs
    exp.judge()    # the verdicts
    exp.publish("runs/ablate/ffn-small")  # the record, the pages and the plots: writing only

    # from runs made elsewhere (--executor slurm)
    Experiment.collect("runs/ablate/ffn-small").publish()

    # a suite continued on a fresh machine: finished runs' records
    exp.read_records("docs/results/ffn/next")
    # measure the finished runs, copy their records (no checkpoints)
    exp.write_records("docs/results/ffn/next")

Each step is cached on the experiment and computed from the step before it; `run()` and a plan that
grows (`sequential`) drop what follows them. `archlab ablate` (commands/ablate.py) parses flags,
calls these and prints; `scripts/publish_results.py` collects through them. Planning returns new
values (a Plan holding the parameter-matched suite); nothing mutates the suite it was given.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import archlab.lab.analysis.stats as stats
import archlab.lab.runs.planning as planning
from archlab.lab.analysis.verdicts import ClaimResult, judge
from archlab.lab.publishing.record import Record
from archlab.lab.publishing.report import record_of, verdict_lines, write_report
from archlab.lab.runs import records
from archlab.lab.runs.collect import measure_plan, measure_timings
from archlab.lab.runs.executor import SlurmOptions, submit_plan
from archlab.lab.runs.plan import Plan, RunSpec, plan_suite, prepare, read_plan, write_plan
from archlab.lab.runs.runner import Progress, has_trained, is_done, run_plan
from archlab.lab.runs.suite_time import record_suite_time
from archlab.lab.spec import registration
from archlab.lab.spec.arms import param_note
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.registration import REGISTRATION
from archlab.lab.spec.suite import Claim, Suite, SuiteError
from archlab.lab.spec.suite_file import load_suite
from archlab.lab.spec.variants import EXECUTORS, MODES
from archlab.train.hardware import BF16_CPU_FLAGS, bf16_units, resolve_device

DEFAULT_BUDGET = "small"


class Experiment:
    """A suite at a budget: its settings, and each step's result once computed (module doc)."""

    def __init__(
        self,
        suite: str | Path,
        budget: str | None = None,
        seeds: int | None = None,
        store: str | Path | None = None,
        jobs: int = 1,
        executor: str = "local",
        *,
        out: str | Path | None = None,
        fold_over: bool = False,
        extra: dict[str, int] | None = None,
        mode: str = "default",
        slurm: SlurmOptions | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        """`suite`: a built-in suite's name or a YAML file; `budget`: tiny, small or medium (default
        small); `seeds`: per arm (default the suite's or the budget's); `store`: the run folders,
        shared by suites (default: the one `out`'s plan.json names, else store/ beside `out`);
        `jobs`: runs at once here, one thread each; `executor`: local, or slurm (`run` submits a
        job array, `collect` later); `out`: the suite's folder (default runs/ablate/SUITE-BUDGET);
        `fold_over`: a screening suite's mirrored half fraction too; `mode`: how every run
        trains (default, compiled, bf16: spec/variants.py MODES), recorded in each run's config
        and store key."""
        if jobs < 1:
            raise ValueError(f"--jobs {jobs} is not allowed: at least 1")
        if executor not in EXECUTORS:
            raise ValueError(f"--executor {executor!r} is not allowed: {', '.join(EXECUTORS)}")
        if mode not in MODES:
            raise ValueError(f"--mode {mode!r} is not allowed: one of {', '.join(MODES)}")
        if mode == "bf16" and executor == "local" and bf16_units(resolve_device("auto")) is None:
            raise ValueError(
                "--mode bf16 is not allowed here: this CPU has none of "
                f"{', '.join(BF16_CPU_FLAGS)} and no CUDA GPU is visible, so bf16 would be "
                "emulated, slower than fp32 (--mode default or compiled; a Slurm run checks "
                "its own machine)"
            )
        if budget is not None and budget not in BUDGETS:
            raise ValueError(f"--budget {budget!r} is not allowed: {', '.join(BUDGETS)}")
        self.spec, self.budget = str(suite), BUDGETS[budget or DEFAULT_BUDGET]
        self.seeds, self.store, self.jobs, self.executor = seeds, store, jobs, executor
        self.out, self.fold_over, self.extra, self.mode = out, fold_over, dict(extra or {}), mode
        self.slurm, self.log = slurm or SlurmOptions(), log or (lambda line: None)
        self._plan: Plan | None = None
        self._drop()

    @classmethod
    def collect(
        cls, folder: str | Path, suite: str | Path | None = None, **settings: object
    ) -> Experiment:
        """The experiment a suite folder's plan.json records (its suite, budget, seeds, store,
        fold-over and extra seeds); `settings` (jobs, log, ...) on top."""
        recorded = read_plan(folder)
        if not recorded:
            raise SuiteError(
                f"--collect {folder}: no plan.json there (made by `archlab ablate SUITE --out DIR`)"
            )
        kept = {
            "budget": recorded.get("budget"),
            "seeds": recorded.get("seeds"),
            "store": recorded.get("store"),
            "fold_over": bool(recorded.get("fold_over")),
            "extra": recorded.get("extra"),
            "mode": recorded.get("mode", "default"),
        }
        return cls(
            suite or recorded["suite"],
            out=folder,
            **{**kept, **{k: v for k, v in settings.items() if v is not None}},
        )

    def _drop(self, after: str = "plan") -> None:
        """Forget every step after `after` (a plan that changed, runs that trained)."""
        if after == "plan":
            self._power = None
        self._measured: dict[RunSpec, dict] | None = None
        self._timings: dict[str, dict] | None = None
        self._record: Record | None = None
        self._results: list[ClaimResult] | None = None

    # ------------------------------------------------------------------------------- before compute
    def plan(self) -> Plan:
        """Every arm at every seed, resolved once into its run (configs, store folder, command)."""
        if self._plan is None:
            suite = load_suite(self.spec, fold_over=self.fold_over or None)
            out = self.out or f"runs/ablate/{suite.name}-{self.budget.name}"
            # a folder planned before keeps its store unless another is given (its
            # plan.json names it)
            store = self.store or read_plan(out).get("store")
            self._plan = plan_suite(
                suite, self.budget, out, self.seeds, store=store, extra=self.extra, mode=self.mode
            )
        return self._plan

    @property
    def suite(self) -> Suite:
        return self.plan().suite

    def power(self) -> list[planning.PlanRow]:
        if self._power is None:
            self._power = planning.power_plan(self.plan())
        return self._power

    def power_text(self) -> list[str]:
        return planning.screening_lines(self.plan()) + planning.format_plan(
            self.plan(), self.power(), max(self.jobs, 2)
        )

    def arm_lines(self) -> list[str]:
        """One line per arm: its parameters and its note (d_ff matching; its size when more than 2%
        off the base)."""
        suite = self.suite
        base = suite.base_arm.params
        return [
            f"{arm.name:24s} {arm.params:>12,} "
            f"parameters  {param_note(suite, arm, arm.params, base)}"
            for arm in suite.arms
        ]

    def command(
        self, sequential: str | None = None, max_seeds: int | None = None, execution: bool = False
    ) -> str:
        """The `archlab ablate` line of this experiment: every setting that changes what it
        trains or where (the store and the folder) and how it is judged, which the record keeps;
        with `execution` also how it runs here (--jobs, --executor): the line that continues it
        where it stopped."""
        plan = self.plan()
        spec = Path(self.spec).stem if Path(self.spec).parent.name == "suites" else self.spec
        parts = [
            "archlab",
            "ablate",
            spec,
            "--budget",
            plan.budget.name,
            "--seeds",
            str(plan.seeds),
            "--out",
            str(plan.out),
            "--store",
            str(plan.store),
        ]
        parts += ["--jobs", str(self.jobs), "--executor", self.executor] if execution else []
        parts += ["--sequential", sequential] if sequential else []
        parts += ["--max-seeds", str(max_seeds)] if max_seeds is not None else []
        parts += ["--fold-over"] if plan.suite.screening.get("fold_over") else []
        parts += ["--mode", plan.mode] if plan.mode != "default" else []
        return shlex.join(parts)

    def register(self) -> dict:
        """The plan's registration (lab/spec/registration.py): its claims exactly as they
        will be judged, written in the suite's folder and the store before its runs train;
        a new one, kept beside the earlier ones, when the claims changed. Called by `run`,
        `submit` and `commands`."""
        plan = self.plan()
        trained = sum(has_trained(run) for run in plan.runs)
        folders = [
            plan.out / REGISTRATION,
            registration.store_path(plan.store, plan.suite.name, plan.budget.name),
        ]
        now, new = registration.register(plan.suite, plan.budget.name, plan.seeds, trained, folders)
        if new:
            when = (
                "before the first run"
                if now["before_first_run"]
                else f"after {trained} runs had trained"
            )
            self.log(
                f"registered {len(now['claims'])} claims at commit "
                f"{str(now['commit'])[:12]}, {when}: {folders[0]}"
            )
        return now

    def commands(self) -> list[str]:
        """The data and train command lines (the plan is written and registered first, so --collect
        finds the runs)."""
        write_plan(self.plan())
        self.register()
        return self.plan().commands()

    # ------------------------------------------------------------------------------------- compute
    def run(self, on_progress: Callable[[Progress], None] | None = None) -> float:
        """Prepare the data and train every unfinished run (`jobs` at a time), or with the slurm
        executor submit them as one job array (`collect` the folder once they finished); returns the
        suite's training wall time over all sessions (0 when submitted)."""
        if self.executor == "slurm":
            jobs = self.submit()
            self.log(
                f"submitted {len(jobs)} runs"
                + (f" as job array {jobs[0].job_id.split('_')[0]}" if jobs else " (all were done)")
            )
            return 0.0
        plan = self.plan()
        write_plan(plan)
        self.register()
        self._drop("runs")
        prepare(plan)
        start = time.perf_counter()
        try:
            run_plan(plan, self.jobs, on_progress)
        finally:
            wall = record_suite_time(plan.out, time.perf_counter() - start, self.jobs)
        return wall

    def submit(self) -> list:
        """Every unfinished run as one task of a Slurm job array (submitit); the jobs (empty when
        all were done). `Experiment.collect` the folder once they finished."""
        write_plan(self.plan())
        self.register()
        self._drop("runs")
        return submit_plan(self.plan(), "slurm", self.slurm)

    def read_records(self, folder: str | Path) -> int:
        """Lay the run records under `folder` (lab/runs/records.py) into the store, and their
        registration into the suite's folder, before the runs: a suite begun elsewhere goes on where
        it stopped. How many runs were laid in."""
        plan = self.plan()
        laid = records.read_records(Path(folder), plan.store, plan.out)
        self._drop("runs")
        return laid

    def write_records(self, folder: str | Path) -> int:
        """Measure the finished runs (once: cached beside each run) and copy each one's record,
        without its checkpoints, under `folder`, with the plan's registration; how many run records
        it holds now."""
        plan = self.plan()
        finished = replace(plan, runs=[r for r in plan.runs if is_done(r)])
        if finished.runs:
            measure_plan(finished, lambda r: self.log(f"measuring {r.arm}/seed{r.seed}"), self.jobs)
        return len(records.write_records(plan, Path(folder)))

    def measure(self) -> dict[RunSpec, dict]:
        """Each run's measures (cached beside it) and the suite's timing pairs (cached
        in its folder)."""
        if self._measured is None:
            self._measured = measure_plan(
                self.plan(), lambda r: self.log(f"measuring {r.arm}/seed{r.seed}"), self.jobs
            )
        if self._timings is None:
            self._timings = measure_timings(self.plan())
        return self._measured

    def record(self, command: str | None = None) -> Record:
        """The table with each arm's parameters and config hash, the configs and the provenance."""
        if self._record is None or (
            command is not None and self._record.provenance.get("command") != command
        ):
            measured = self.measure()
            self._record = record_of(
                self.plan(), measured, self._timings, command or self.command()
            )
        return self._record

    def judge(
        self, alpha: float = stats.ALPHA, claims: list[Claim] | None = None
    ) -> list[ClaimResult]:
        """Every claim's verdict at one-sided `alpha`, Holm over the suite
        (lab/analysis/verdicts.py); with `claims` only theirs, Holm over them (a sequential design's
        second look). Cached at the suite's alpha only."""
        if alpha != stats.ALPHA or claims is not None:
            return judge(self.record().table, alpha=alpha, claims=claims)
        if self._results is None:
            self._results = judge(self.record().table)
        return self._results

    def publish(
        self, out: str | Path | None = None, command: str | None = None
    ) -> list[ClaimResult]:
        """Write the record's files, results.md, report.html and the plots into `out` (default the
        suite's folder); returns the verdicts they show."""
        record = self.record(command)
        results = self.judge()
        if out is not None and Path(out) != record.folder:
            record = replace(record, folder=Path(out))
        write_report(self.plan(), record, results)
        return results

    def report(
        self, command: str | None = None, results: list[ClaimResult] | None = None
    ) -> list[ClaimResult]:
        """`publish` into the suite's folder; `results` (a sequential run's looks)
        stand for `judge()`'s."""
        if results is not None:
            self.record(command)
            self._results = results
        return self.publish(command=command)

    def verdict_lines(self, results: list[ClaimResult] | None = None) -> list[str]:
        """The verdicts as `archlab ablate` prints them (lab/publishing/report.py `verdict_lines`):
        `results`, or `judge()`'s."""
        return verdict_lines(self.plan(), self.judge() if results is None else results)

    def sequential(
        self,
        kind: str,
        cap: int | None = None,
        train: bool = True,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> list[ClaimResult]:
        """Two looks: judge at the plan's n seeds at the first look's level; the arms of undecided
        claims get seeds up to `cap` (default 2n), trained unless `train` is False (runs made
        elsewhere), and their claims are judged again at the second look's level. The experiment's
        plan becomes the extended one."""
        n = self.plan().seeds
        cap = cap if cap is not None else 2 * n
        levels = planning.look_levels(kind, seeds=(n, cap))
        if self.extra:  # the first look reads the plan's n seeds only
            self._replan({})
        first = self.judge(alpha=levels[0])
        planning.record_look(self.plan().out, kind, levels, 1, first)
        extra = planning.extra_seeds(self.plan(), first, cap)
        self.log(
            f"sequential ({kind}, one-sided levels {levels[0]:.4g} then {levels[1]:.4g}): first "
            f"look at {n} seeds; {len(extra)} arms of undecided claims get seeds up to {cap}"
        )
        if not extra:
            self._results = first
            return first
        self._replan(extra)
        if train:
            self.run(on_progress)
        undecided = [
            r.claim for r in first if r.outcome == stats.INCONCLUSIVE and r.test is not None
        ]
        second = self.judge(alpha=levels[1], claims=undecided)
        planning.record_look(self.plan().out, kind, levels, 2, second)
        self._results = planning.sequential_results(first, second, levels)
        return self._results

    def _replan(self, extra: dict[str, int]) -> None:
        """The same suite with `extra` seeds per arm; what was measured of the common runs stays
        cached beside them, the rest is dropped."""
        plan = self.plan()
        self.extra = dict(extra)
        timings = self._timings
        self._plan = plan_suite(
            plan.suite, plan.budget, plan.out, plan.seeds, store=plan.store, extra=self.extra
        )
        self._drop("runs")
        self._timings = timings  # timing pairs time fresh models, not runs
