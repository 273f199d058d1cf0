"""`archlab ablate SUITE`: run an ablation suite (equal-budget arms, several seeds), report it.

    archlab ablate --list                            the built-in suites, one line each
    archlab ablate heads --budget tiny --plan        seeds each claim needs for 80% power, wall time
    archlab ablate norm-type --budget tiny --jobs 2  run (or continue) a suite; report in --out
    archlab ablate ffn --sequential pocock           n seeds, n more only for undecided claims
    archlab ablate ffn --executor slurm --slurm-partition gpu --slurm-gpus 1
                                                     one Slurm job per run (an array)
    archlab ablate ffn --print-commands --out DIR    one `archlab train` line per run
    archlab ablate ffn --collect DIR                 the report from runs made elsewhere
    archlab ablate original-vs-modern-screening --plan       a screening design: runs, aliases, SEs
    archlab ablate original-vs-modern-screening --fold-over  add the mirrored half fraction
    archlab ablate --verify docs/results/ffn         a page recomputed from its files; 1 if not

Every arm runs seeds 0..n-1; run folders live in a store shared by suites (--store, default
runs/ablate/store), named by a hash of the run's resolved config, so an arm two suites
share trains once.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from typing import TYPE_CHECKING

from archlab.lab import BUDGETS, EXECUTORS, MODES, SEQUENTIAL_KINDS, suite_index

if TYPE_CHECKING:
    from archlab.lab import Experiment, Progress

# the runner, executor, planning, verdicts and report import torch (the measures read checkpoints)
# and scipy: they are imported in the functions that plan, train and judge, so `--help` answers
# without them
DEFAULT_BUDGET = "small"  # lab/experiment.py's default too


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ablate",
        help="run an ablation suite and compute its verdicts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "suite", nargs="?", help="a built-in suite name (see --list) or a suite .yaml file"
    )
    _add_actions(parser)
    _add_scale(parser)
    _add_design(parser)
    _add_executor(parser)
    parser.set_defaults(func=run)


def _add_actions(parser: argparse.ArgumentParser) -> None:
    """What the invocation does besides planning, training and judging a suite."""
    parser.add_argument("--list", action="store_true", help="list the built-in suites and exit")
    parser.add_argument(
        "--verify",
        metavar="DIR",
        default=None,
        help="recompute a suite folder or published page from its files (results.csv, items.csv, "
        "timings.csv, suite.yaml, provenance.json, registration.json): every verdict, number and "
        "statement of its claims.json, its registration, its record.sha256 and its rendered pages "
        "(results.md and report.html, or docs/results/SUITE.md); exit 0 when all agree, 1 (listing "
        "them) when any differ",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="print the seeds each claim needs for 80%% power and "
        "the wall time that costs, then exit (trains nothing)",
    )
    parser.add_argument(
        "--print-commands",
        action="store_true",
        help="print the data and train commands instead of running them",
    )
    parser.add_argument(
        "--collect",
        metavar="DIR",
        default=None,
        help="build the report from the finished run folders under DIR",
    )
    parser.add_argument(
        "--records",
        metavar="DIR",
        default=None,
        help="a suite that spans several sittings or machines: first lay the run records under DIR "
        "(finished runs without checkpoints) into the store, then write every finished run's "
        "record there, measured, with the registration and the suite's wall time so far: after "
        "the report, and on Ctrl-C",
    )


def _add_scale(parser: argparse.ArgumentParser) -> None:
    """How much each run computes, how many there are, where they go and how they train."""
    parser.add_argument(
        "--budget",
        choices=list(BUDGETS),
        default=None,
        help=f"compute per run (default {DEFAULT_BUDGET}; --collect reads the plan's)",
    )
    parser.add_argument(
        "--seeds", type=int, default=None, help="seeds per arm (default: the budget's; >= 2)"
    )
    parser.add_argument(
        "--out", default=None, help="suite folder (default runs/ablate/SUITE-BUDGET)"
    )
    parser.add_argument(
        "--store",
        default=None,
        help="folder of the run folders, shared by suites (default: "
        "store/ beside --out; --collect reads the plan's)",
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        default=None,
        help="how every run trains: default (eager fp32, the published pages' mode; --collect: the "
        "plan's); compiled (torch.compile: faster steps after a compile, floats that differ "
        "slightly); bf16 (autocast, on CPUs with bf16 units or a GPU). Recorded in each run's "
        "config and store key; measures and timing pairs read the eager model in every mode",
    )


def _add_design(parser: argparse.ArgumentParser) -> None:
    """Designs beyond every arm at n seeds: the sequential second look, a screening fold-over."""
    parser.add_argument(
        "--sequential",
        choices=SEQUENTIAL_KINDS,
        default=None,
        help="two looks: judge at n seeds, add n more seeds only to undecided claims' arms, judge "
        "again, at Pocock's or O'Brien-Fleming's levels (overall level 0.05)",
    )
    parser.add_argument(
        "--max-seeds",
        type=int,
        default=None,
        metavar="CAP",
        help="with --sequential: the second look's seeds per arm for undecided claims (default 2x "
        "the first look's); a claim still undecided there is 'inconclusive at n = CAP'",
    )
    parser.add_argument(
        "--fold-over",
        action="store_true",
        help="a screening suite: add the mirrored half fraction "
        "(every factor's level swapped), freeing main effects from two-factor interactions",
    )


def _add_executor(parser: argparse.ArgumentParser) -> None:
    """Where the runs execute: here, --jobs at a time, or as a Slurm job array."""
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel, one thread each")
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="local: runs here, --jobs at a time (default); slurm: one job per run through "
        "submitit (a job array), then --collect",
    )
    slurm = parser.add_argument_group(
        "Slurm (with --executor slurm; each run is one task of a job array)"
    )
    slurm.add_argument("--slurm-partition", default=None, help="partition (default: the cluster's)")
    slurm.add_argument(
        "--slurm-time",
        type=int,
        default=60,
        metavar="MIN",
        help="time limit per run, minutes (default 60)",
    )
    slurm.add_argument("--slurm-gpus", type=int, default=0, help="GPUs per run (default 0)")
    slurm.add_argument(
        "--slurm-cpus", type=int, default=2, help="CPU cores per run, its torch threads (default 2)"
    )
    slurm.add_argument(
        "--slurm-array-parallelism",
        type=int,
        default=64,
        metavar="N",
        help="runs of the array at once (default 64)",
    )


def rerun_argv(args: argparse.Namespace, exp: Experiment, how: bool = True) -> list[str]:
    """The command that reruns this experiment as it was asked for: the resume hint after Ctrl-C.
    Every flag that decides what is trained and judged is written out, resolved (budget, seeds,
    folder, store, the sequential design, a fold-over: `Experiment.command`), and with `how` those
    that decide how this invocation ran it (jobs, which also set each run's threads and so its
    timings, the executor, --collect, the Slurm options); the modes of one invocation (--list,
    --verify, --plan, --print-commands) never. Without `how` it is the report's recorded command,
    the same whether the report came from training or from --collect. Run as printed it reads
    and writes the same plan.json and store (a hint without --store once rewrote plan.json for
    the default store)."""
    argv = shlex.split(exp.command(args.sequential, args.max_seeds, execution=how))
    if not how:
        return argv
    if args.collect:
        argv += ["--collect", str(args.collect)]
    if args.records:
        argv += ["--records", str(args.records)]
    if args.executor == "slurm":
        if args.slurm_partition is not None:
            argv += ["--slurm-partition", args.slurm_partition]
        argv += ["--slurm-time", str(args.slurm_time), "--slurm-gpus", str(args.slurm_gpus)]
        argv += ["--slurm-cpus", str(args.slurm_cpus)]
        argv += ["--slurm-array-parallelism", str(args.slurm_array_parallelism)]
    return argv


def _list() -> int:
    for name, arms, title in suite_index():
        print(f"{name:20s} {arms:2d} arms  {title}")
    return 0


def _experiment(args: argparse.Namespace) -> Experiment:
    """The suite planned from the flags, after every flag is checked (one line each,
    before any work)."""
    from archlab.lab import Experiment, SlurmOptions

    slurm = SlurmOptions(
        args.slurm_partition,
        args.slurm_time,
        args.slurm_gpus,
        args.slurm_cpus,
        args.slurm_array_parallelism,
    )
    if args.max_seeds is not None and not args.sequential:
        raise ValueError(
            f"--max-seeds {args.max_seeds} needs --sequential (it caps the second look)"
        )
    settings = dict(
        jobs=args.jobs,
        executor=args.executor,
        slurm=slurm,
        log=lambda line: print(line, file=sys.stderr),
    )
    if args.collect:  # the budget, seeds and store of the folder's plan.json, unless given
        exp = Experiment.collect(
            args.collect,
            args.suite,
            budget=args.budget,
            seeds=args.seeds,
            store=args.store,
            fold_over=args.fold_over or None,
            mode=args.mode,
            **settings,
        )
    else:
        exp = Experiment(
            args.suite,
            args.budget,
            args.seeds,
            args.store,
            out=args.out,
            fold_over=args.fold_over,
            mode=args.mode or "default",
            **settings,
        )
    exp.plan()
    if args.max_seeds is not None and args.max_seeds <= exp.plan().seeds:
        raise ValueError(
            f"--max-seeds {args.max_seeds} is not allowed: more than the first look's "
            f"{exp.plan().seeds} seeds per arm"
        )
    return exp


def _show_progress(p: Progress) -> None:
    current = ", ".join(
        f"{arm}/seed{seed} step {step}/{steps}" for arm, seed, step, steps in p.running
    )
    eta = f", ETA {p.eta_s / 60:.1f} min" if p.eta_s is not None else ""
    line = f"[{p.done}/{p.total} runs done{eta}] {current}"
    if sys.stderr.isatty():
        print("\r" + line[:150].ljust(150), end="", file=sys.stderr, flush=True)
    elif p.done != getattr(_show_progress, "last", None):
        _show_progress.last = p.done
        print(line, file=sys.stderr, flush=True)


def _interrupt(signum: int, frame: object) -> None:
    # SIGTERM (a scheduler's stop) is handled like Ctrl-C: runs checkpoint, then exit
    raise KeyboardInterrupt


def _verify(folder: str) -> int:
    from archlab.lab import verify

    differences = verify(folder)
    for line in differences:
        print(f"differs: {line}")
    verdict = (
        f"{len(differences)} differences"
        if differences
        else "every verdict and page recomputed from its files agrees"
    )
    print(f"{folder}: {verdict}")
    return 1 if differences else 0


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list()
    if args.verify:
        if args.suite:
            raise ValueError(
                f"--verify {args.verify} takes a folder, not a suite: drop {args.suite!r}"
            )
        return _verify(args.verify)
    if not args.suite:
        raise ValueError("name a suite (archlab ablate --list shows them) or pass --list")
    exp = _experiment(args)
    print("\n".join(exp.arm_lines()))
    if args.plan or args.print_commands or (args.executor == "slurm" and not args.collect):
        return _without_training(args, exp)
    return _train_and_judge(args, exp)


def _without_training(args: argparse.Namespace, exp: Experiment) -> int:
    """--plan (the seeds each claim needs), --print-commands (the runs as command lines) or a Slurm
    submission (the runs as a job array): the suite planned, nothing trained here."""
    out = exp.plan().out
    if args.plan:
        print("\n".join(exp.power_text()))
    elif args.print_commands:
        print("\n".join(exp.commands()))
        print(f"# then: archlab ablate {args.suite} --collect {out}")
    else:
        jobs = exp.submit()
        array = jobs[0].job_id.split("_")[0] if jobs else ""  # submitit names each task ARRAY_TASK
        print(
            f"submitted {len(jobs)} runs"
            + (f" as job array {array}" if jobs else " (all were done)")
            + f"; when they finished: archlab ablate {args.suite} --collect {out}"
        )
    return 0


def _train_and_judge(args: argparse.Namespace, exp: Experiment) -> int:
    """Train what is missing (unless --collect), judge (in two looks with --sequential), write the
    report and print the verdicts; Ctrl-C or SIGTERM stops with the command that continues."""
    from archlab.lab import LabError

    out = exp.plan().out
    command = shlex.join(rerun_argv(args, exp, how=False))  # what the report records
    resume = shlex.join(rerun_argv(args, exp))  # the Ctrl-C hint: how it ran, too
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        if args.records:
            laid = exp.read_records(args.records)
            store = exp.plan().store
            print(f"{args.records}: {laid} run records laid into {store}", file=sys.stderr)
        if not args.collect:
            _train(exp)
        results = None
        if args.sequential:
            results = exp.sequential(
                args.sequential,
                args.max_seeds,
                train=not args.collect,
                on_progress=_show_progress,
            )
        results = exp.report(command, results)
        _write_records(args, exp)
    except LabError as err:
        print(f"archlab ablate: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        _write_records(args, exp)
        print(
            "\narchlab ablate: interrupted; finished runs and measures are kept, and a run under "
            f"way saved a checkpoint. Run `{resume}` again to continue where it stopped.",
            file=sys.stderr,
        )
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    print("\n".join(exp.verdict_lines(results)))
    print(f"report: {out / 'report.html'}, {out / 'results.md'}, {out / 'results.csv'}")
    return 0


def _write_records(args: argparse.Namespace, exp: Experiment) -> None:
    """With --records: the finished runs measured and their records written (none otherwise)."""
    if args.records:
        held = exp.write_records(args.records)
        print(f"{args.records}: {held} run records of {len(exp.plan().runs)} runs", file=sys.stderr)


def _train(exp: Experiment) -> None:
    wall = exp.run(_show_progress)
    print(f"\ntrained in {wall:.0f} s (all sessions)", file=sys.stderr)
