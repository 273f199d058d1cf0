"""`archlab ablate SUITE`: run an ablation suite (equal-budget arms, several seeds) and write its report.

    archlab ablate --list                              the built-in suites, one line each
    archlab ablate heads --budget tiny --plan          seeds each claim needs for 80% power, and the wall time
    archlab ablate norm-type --budget tiny --jobs 2    run (or continue) a suite; report in --out
    archlab ablate ffn --sequential pocock             look at n seeds, add n more only for undecided claims
    archlab ablate ffn --executor slurm --slurm-partition gpu --slurm-gpus 1   one Slurm job per run (an array)
    archlab ablate ffn --print-commands --out DIR      one `archlab train` line per run, for any scheduler
    archlab ablate ffn --collect DIR                   the report from runs made elsewhere

Every arm runs seeds 0..n-1; run folders live in a store shared by suites (--store, default runs/ablate/store),
named by a hash of the run's resolved config, so an arm two suites share trains once.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from typing import TYPE_CHECKING

from archlab.lab.suite import BUDGETS, load_suite, param_note, suite_index
from archlab.lab.variants import EXECUTORS, SEQUENTIAL_KINDS

if TYPE_CHECKING:
    from archlab.lab.runner import Plan, Progress

# the runner, executor, planning, verdicts and report import torch (the measures read checkpoints) and scipy: they are
# imported in the functions that plan, train and judge, so `--help` answers without them
DEFAULT_BUDGET = "small"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("ablate", help="run an ablation suite and compute its verdicts",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", nargs="?", help="a built-in suite name (see --list) or a suite .yaml file")
    parser.add_argument("--list", action="store_true", help="list the built-in suites and exit")
    parser.add_argument("--budget", choices=list(BUDGETS), default=None,
                        help=f"compute per run (default {DEFAULT_BUDGET}; --collect reads the plan's)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per arm (default: the budget's; >= 2)")
    parser.add_argument("--out", default=None, help="suite folder (default runs/ablate/SUITE-BUDGET)")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel, one thread each")
    parser.add_argument("--print-commands", action="store_true",
                        help="print the data and train commands instead of running them")
    parser.add_argument("--collect", metavar="DIR", default=None,
                        help="build the report from the finished run folders under DIR")
    parser.add_argument("--store", default=None, help="folder of the run folders, shared by suites (default: "
                        "store/ beside --out; --collect reads the plan's)")
    parser.add_argument("--plan", action="store_true", help="print the seeds each claim needs for 80%% power and "
                        "the wall time that costs, then exit (trains nothing)")
    parser.add_argument("--sequential", choices=SEQUENTIAL_KINDS, default=None,
                        help="two looks: judge at n seeds, add n more seeds only to undecided claims' arms, judge "
                        "again, at Pocock's or O'Brien-Fleming's levels (overall level 0.05)")
    parser.add_argument("--executor", choices=EXECUTORS, default="local",
                        help="local: runs here, --jobs at a time (default); slurm: one job per run through "
                        "submitit (a job array), then --collect")
    slurm = parser.add_argument_group("Slurm (with --executor slurm; each run is one task of a job array)")
    slurm.add_argument("--slurm-partition", default=None, help="partition (default: the cluster's)")
    slurm.add_argument("--slurm-time", type=int, default=60, metavar="MIN", help="time limit per run, minutes "
                       "(default 60)")
    slurm.add_argument("--slurm-gpus", type=int, default=0, help="GPUs per run (default 0)")
    slurm.add_argument("--slurm-cpus", type=int, default=2, help="CPU cores per run, its torch threads (default 2)")
    slurm.add_argument("--slurm-array-parallelism", type=int, default=64, metavar="N",
                       help="runs of the array at once (default 64)")
    parser.set_defaults(func=run)


def _list() -> int:
    for name, arms, title in suite_index():
        print(f"{name:20s} {arms:2d} arms  {title}")
    return 0


def _plan(args: argparse.Namespace) -> Plan:
    from archlab.lab.runner import plan_suite, read_plan

    recorded = read_plan(args.collect) if args.collect else {}
    budget = args.budget or recorded.get("budget") or DEFAULT_BUDGET
    seeds = args.seeds if args.seeds is not None else recorded.get("seeds")  # --seeds 0 is refused, not the default
    suite = load_suite(args.suite)
    out = args.collect or args.out or f"runs/ablate/{suite.name}-{budget}"
    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs} is not allowed: at least 1")
    return plan_suite(suite, BUDGETS[budget], out, seeds, store=args.store or recorded.get("store"),
                      extra=recorded.get("extra"))


def _show_progress(p: Progress) -> None:
    current = ", ".join(f"{arm}/seed{seed} step {step}/{steps}" for arm, seed, step, steps in p.running)
    eta = f", ETA {p.eta_s / 60:.1f} min" if p.eta_s is not None else ""
    line = f"[{p.done}/{p.total} runs done{eta}] {current}"
    if sys.stderr.isatty():
        print("\r" + line[:150].ljust(150), end="", file=sys.stderr, flush=True)
    elif p.done != getattr(_show_progress, "last", None):
        _show_progress.last = p.done
        print(line, file=sys.stderr, flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM (a scheduler's stop) is handled like Ctrl-C: runs checkpoint, then exit


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list()
    if not args.suite:
        raise ValueError("name a suite (archlab ablate --list shows them) or pass --list")
    from archlab.lab import planning
    from archlab.lab.executor import SlurmOptions, submit_plan
    from archlab.lab.report import needed as report_needed
    from archlab.lab.report import write_report
    from archlab.lab.runner import LabError, measure_plan, write_plan

    slurm = SlurmOptions(args.slurm_partition, args.slurm_time, args.slurm_gpus, args.slurm_cpus,
                         args.slurm_array_parallelism)
    plan = _plan(args)
    base = plan.suite.base_arm.params
    for arm in plan.suite.arms:
        print(f"{arm.name:24s} {arm.params:>12,} parameters  {param_note(plan.suite, arm, arm.params, base)}")
    command = shlex.join(["archlab", "ablate", args.suite, "--budget", plan.budget.name, "--seeds",
                          str(plan.seeds), "--out", str(plan.out)]
                         + (["--sequential", args.sequential] if args.sequential else []))
    if args.plan:
        print("\n".join(planning.format_plan(plan, planning.power_plan(plan), max(args.jobs, 2))))
        return 0
    if args.print_commands:
        write_plan(plan)
        print("\n".join(plan.commands()))
        print(f"# then: archlab ablate {args.suite} --collect {plan.out}")
        return 0
    if args.executor == "slurm" and not args.collect:
        write_plan(plan)
        jobs = submit_plan(plan, "slurm", slurm)
        array = jobs[0].job_id.split("_")[0] if jobs else ""  # submitit names each task ARRAY_TASK
        print(f"submitted {len(jobs)} runs" + (f" as job array {array}" if jobs else " (all were done)")
              + f"; when they finished: archlab ablate {args.suite} --collect {plan.out}")
        return 0
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        plan, results = _train_and_judge(args, plan)
        measured = measure_plan(plan, lambda r: print(f"measuring {r.arm}/seed{r.seed}", file=sys.stderr),
                                args.jobs)
    except LabError as err:
        print(f"archlab ablate: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\narchlab ablate: interrupted; the runs under way saved a checkpoint. Run `{command}` again to "
              "continue where it stopped.", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    for result in write_report(plan, measured, command, results=results):
        needed = f" (needs {report_needed(result)})" if result.seeds_needed else ""
        print(f"{result.outcome:26s} {result.claim.text}{needed}")
    print(f"report: {plan.out / 'report.html'}, {plan.out / 'results.md'}, {plan.out / 'results.csv'}")
    return 0


def _train(args: argparse.Namespace, plan: Plan) -> None:
    from archlab.lab.report import record_suite_time
    from archlab.lab.runner import prepare, run_plan, write_plan

    write_plan(plan)
    prepare(plan)
    start = time.perf_counter()
    try:
        run_plan(plan, args.jobs, _show_progress)
    finally:
        wall = record_suite_time(plan, time.perf_counter() - start, args.jobs)
    print(f"\ntrained in {wall:.0f} s (all sessions)", file=sys.stderr)


def _train_and_judge(args: argparse.Namespace, plan: Plan) -> tuple[Plan, list | None]:
    """Train (unless --collect), and with --sequential take the two looks; returns the final plan and, for
    --sequential, its results (else None: the report judges)."""
    from archlab.lab import planning
    from archlab.lab.runner import measure_plan, measure_timings, plan_suite
    from archlab.lab.verdicts import judge

    if not args.collect:
        _train(args, plan)
    if not args.sequential:
        return plan, None
    levels = planning.look_levels(args.sequential)
    first_plan = plan_suite(plan.suite, plan.budget, plan.out, plan.seeds, store=plan.store)
    timings = measure_timings(first_plan)
    first = judge(first_plan, measure_plan(first_plan, jobs=args.jobs), timings, alpha=levels[0])
    planning.record_look(plan.out, args.sequential, levels, 1, first)
    extra = planning.extra_seeds(first_plan, first)
    print(f"sequential ({args.sequential}, one-sided levels {levels[0]:.4g} then {levels[1]:.4g}): first look at "
          f"{plan.seeds} seeds; {len(extra)} arms of undecided claims get {plan.seeds} more seeds", file=sys.stderr)
    if not extra:
        return first_plan, first
    plan = plan_suite(plan.suite, plan.budget, plan.out, plan.seeds, store=plan.store, extra=extra)
    if not args.collect:
        _train(args, plan)
    undecided = [r.claim for r in first if r.claim.text in {c.text for c in plan.suite.claims}
                 and r.outcome == "inconclusive" and r.test is not None]
    second = judge(plan, measure_plan(plan, jobs=args.jobs), timings, alpha=levels[1], claims=undecided)
    planning.record_look(plan.out, args.sequential, levels, 2, second)
    return plan, planning.sequential_results(first, second, levels)
