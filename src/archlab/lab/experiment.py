"""The lab's front door: one suite at one budget in one folder, from its plan to its report.

    exp = Experiment.create("ffn", budget="small", out="runs/ablate/ffn-small")
    exp.power()                      # each claim's seeds for 80% power and its mde (--plan)
    exp.train(jobs=2)                # prepare the data, train what is unfinished (stopped runs resume)
    exp.report(command)              # measure, time, judge, write the record and the pages; the results

    Experiment.create("ffn", collect="runs/ablate/ffn-small").report(command)   # from runs made elsewhere

`archlab ablate` (commands/ablate.py) parses flags, calls these and prints; `scripts/publish_results.py` collects
through them. Planning returns new values (a Plan holding the parameter-matched suite); nothing mutates the
suite it was given.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from archlab.lab import planning, stats
from archlab.lab.budgets import BUDGETS
from archlab.lab.collect import measure_plan, measure_timings, table_of
from archlab.lab.executor import SlurmOptions, submit_plan
from archlab.lab.plan import Plan, RunSpec, plan_suite, prepare, read_plan, write_plan
from archlab.lab.report import record_suite_time, write_report
from archlab.lab.runner import Progress, run_plan
from archlab.lab.suite import Suite, SuiteError
from archlab.lab.suite_file import load_suite
from archlab.lab.table import Table
from archlab.lab.verdicts import ClaimResult, judge

DEFAULT_BUDGET = "small"


@dataclass
class Experiment:
    """A planned suite (`plan`: the parameter-matched suite, the budget, seeds, folders and runs)."""

    plan: Plan
    spec: str  # what the suite was named by: a built-in name or a YAML path
    log: Callable[[str], None] = field(default=lambda line: None)  # progress lines (the command prints them)

    @classmethod
    def create(cls, spec: str, budget: str | None = None, out: str | Path | None = None, seeds: int | None = None,
               store: str | Path | None = None, collect: str | Path | None = None,
               log: Callable[[str], None] | None = None, fold_over: bool | None = None) -> Experiment:
        """Plan `spec` (a built-in suite or a YAML file): the budget, seeds, store (and a screening suite's
        fold-over) of `collect`'s plan.json when collecting, else the arguments, else the defaults (budget small,
        its seeds, store/ beside the folder)."""
        recorded = read_plan(collect) if collect else {}
        if collect and not recorded:
            raise SuiteError(f"--collect {collect}: no plan.json there (made by `archlab ablate SUITE --out DIR`)")
        name = budget or recorded.get("budget") or DEFAULT_BUDGET
        seeds = seeds if seeds is not None else recorded.get("seeds")  # --seeds 0 is refused, not the default
        fold_over = fold_over or recorded.get("fold_over") or None
        suite = load_suite(spec, fold_over=fold_over)
        folder = collect or out or f"runs/ablate/{suite.name}-{name}"
        plan = plan_suite(suite, BUDGETS[name], folder, seeds, store=store or recorded.get("store"),
                          extra=recorded.get("extra"))
        return cls(plan, spec, log or (lambda line: None))

    @property
    def suite(self) -> Suite:
        return self.plan.suite

    # ------------------------------------------------------------------------------------- before compute
    def power(self) -> list[planning.PlanRow]:
        return planning.power_plan(self.plan)

    def power_text(self, jobs: int) -> list[str]:
        return planning.screening_lines(self.plan) + planning.format_plan(self.plan, self.power(), jobs)

    def commands(self) -> list[str]:
        """The data and train command lines (the plan is written first, so --collect finds the runs)."""
        write_plan(self.plan)
        return self.plan.commands()

    def submit(self, options: SlurmOptions) -> list:
        """Every unfinished run as one task of a Slurm job array (submitit); --collect later."""
        write_plan(self.plan)
        return submit_plan(self.plan, "slurm", options)

    # ------------------------------------------------------------------------------------- compute
    def train(self, jobs: int = 1, on_progress: Callable[[Progress], None] | None = None) -> float:
        """Prepare the data and train every unfinished run; returns the suite's training wall time so far."""
        write_plan(self.plan)
        prepare(self.plan)
        start = time.perf_counter()
        try:
            run_plan(self.plan, jobs, on_progress)
        finally:
            wall = record_suite_time(self.plan, time.perf_counter() - start, jobs)
        return wall

    def measure(self, jobs: int = 1) -> dict[RunSpec, dict]:
        return measure_plan(self.plan, lambda r: self.log(f"measuring {r.arm}/seed{r.seed}"), jobs)

    def table(self, jobs: int = 1) -> Table:
        return table_of(self.plan, self.measure(jobs), measure_timings(self.plan))

    def judge(self, alpha: float = stats.ALPHA, jobs: int = 1) -> list[ClaimResult]:
        return judge(self.table(jobs), alpha=alpha)

    def report(self, command: str, results: list[ClaimResult] | None = None, jobs: int = 1) -> list[ClaimResult]:
        """Measure (cached), time, judge (unless `results`), and write the record and the pages."""
        return write_report(self.plan, self.measure(jobs), command, results=results)

    def sequential(self, kind: str, cap: int | None = None, jobs: int = 1, train: bool = True,
                   on_progress: Callable[[Progress], None] | None = None) -> list[ClaimResult]:
        """Two looks: judge at the plan's n seeds at the first look's level; the arms of undecided claims get seeds
        up to `cap` (default 2n), trained unless `train` is False (runs made elsewhere), and their claims are
        judged again at the second look's level. The experiment's plan becomes the extended one."""
        n = self.plan.seeds
        cap = cap if cap is not None else 2 * n
        levels = planning.look_levels(kind, seeds=(n, cap))
        first_plan = plan_suite(self.plan.suite, self.plan.budget, self.plan.out, n, store=self.plan.store)
        timings = measure_timings(first_plan)
        first = judge(table_of(first_plan, measure_plan(first_plan, jobs=jobs), timings), alpha=levels[0])
        planning.record_look(self.plan.out, kind, levels, 1, first)
        extra = planning.extra_seeds(first_plan, first, cap)
        self.log(f"sequential ({kind}, one-sided levels {levels[0]:.4g} then {levels[1]:.4g}): first look at {n} "
                 f"seeds; {len(extra)} arms of undecided claims get seeds up to {cap}")
        if not extra:
            self.plan = first_plan
            return first
        self.plan = plan_suite(self.plan.suite, self.plan.budget, self.plan.out, n, store=self.plan.store,
                               extra=extra)
        if train:
            self.train(jobs, on_progress)
        undecided = [r.claim for r in first if r.outcome == stats.INCONCLUSIVE and r.test is not None]
        second = judge(table_of(self.plan, measure_plan(self.plan, jobs=jobs), timings), alpha=levels[1],
                       claims=undecided)
        planning.record_look(self.plan.out, kind, levels, 2, second)
        return planning.sequential_results(first, second, levels)
