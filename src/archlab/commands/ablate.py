"""`archlab ablate SUITE`: run an ablation suite (equal-budget arms, several seeds) and write its report.

    archlab ablate --list                              the built-in suites, one line each
    archlab ablate norm-type --budget tiny --jobs 2    run (or continue) a suite; report in --out
    archlab ablate ffn --print-commands --out DIR      one `archlab train` line per run, for any scheduler
    archlab ablate ffn --collect DIR                   the report from runs made elsewhere
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time

from archlab.lab.report import record_suite_time, write_report
from archlab.lab.runner import (
    LabError,
    Plan,
    Progress,
    measure_plan,
    plan_suite,
    prepare,
    read_plan,
    run_plan,
    write_plan,
)
from archlab.lab.suite import BUDGETS, list_suites, load_suite, param_note

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
    parser.set_defaults(func=run)


def _list() -> int:
    for suite in list_suites():
        print(f"{suite.name:20s} {len(suite.arms):2d} arms  {suite.title}")
    return 0


def _plan(args: argparse.Namespace) -> Plan:
    recorded = read_plan(args.collect) if args.collect else {}
    budget = args.budget or recorded.get("budget") or DEFAULT_BUDGET
    seeds = args.seeds or recorded.get("seeds")
    suite = load_suite(args.suite)
    out = args.collect or args.out or f"runs/ablate/{suite.name}-{budget}"
    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs} is not allowed: at least 1")
    return plan_suite(suite, BUDGETS[budget], out, seeds)


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
    plan = _plan(args)
    base = plan.suite.base_arm.params
    for arm in plan.suite.arms:
        print(f"{arm.name:24s} {arm.params:>12,} parameters  {param_note(plan.suite, arm, arm.params, base)}")
    command = shlex.join(["archlab", "ablate", args.suite, "--budget", plan.budget.name, "--seeds",
                          str(plan.seeds), "--out", str(plan.out)])
    if args.print_commands:
        write_plan(plan)
        print("\n".join(plan.commands()))
        print(f"# then: archlab ablate {args.suite} --collect {plan.out}")
        return 0
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        if not args.collect:
            write_plan(plan)
            prepare(plan)
            start = time.perf_counter()
            try:
                run_plan(plan, args.jobs, _show_progress)
            finally:
                wall = record_suite_time(plan, time.perf_counter() - start, args.jobs)
            print(f"\ntrained in {wall:.0f} s (all sessions)", file=sys.stderr)
        measured = measure_plan(plan, lambda r: print(f"measuring {r.arm}/seed{r.seed}", file=sys.stderr))
    except LabError as err:
        print(f"archlab ablate: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\narchlab ablate: interrupted; the runs under way saved a checkpoint. Run `{command}` again to "
              "continue where it stopped.", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    for result in write_report(plan, measured, command):
        print(f"{result.verdict:26s} {result.claim.text}")
    print(f"report: {plan.out / 'report.html'}, {plan.out / 'results.md'}, {plan.out / 'results.csv'}")
    return 0
