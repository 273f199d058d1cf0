"""Re-run published lab pages for a release: each suite registered before its first run, at the
seeds the release rule gives, trained on one store, its finished runs' records committed under its
page as it goes.

    # each suite's release seeds and why, nothing run
    python scripts/release_lab.py --seeds-only
    # train (or continue) these suites, in this order
    python scripts/release_lab.py ffn vocab --jobs 2
    # then publish a finished one (re-collected)
    python scripts/publish_results.py runs/release/ffn-small

Seeds (the release rule, docs/lab.md "The release"): at least 3 per arm, and more where a claim's
registered smallest effect needs 8 or fewer at the power plan's 80% (`archlab ablate SUITE --plan`,
the spread of the page being replaced); a claim that needs more than 8 keeps the suite's seeds
and says so on its page (its minimum detectable effect). A suite already begun keeps the seeds
its registration holds.

Each suite runs as `archlab ablate SUITE --budget small --seeds N --out runs/release/SUITE-small
--store runs/release/store --jobs J --records docs/results/SUITE/runs`: `--records` lays the runs
committed there by an earlier sitting into the store first (so a fresh machine goes on where the
last one stopped) and writes every finished run's record (metrics and measures, no checkpoints) and
the registration there, after the report and on Ctrl-C. Before the first suite, the records under
every page are laid into the store, so a run two suites share (the base arm's seeds) is found, not
trained again. Commit docs/results/*/runs/ after each sitting.

The suite's wall time is kept per sitting with its machine (lab/runs/suite_time.py) in the suite's
folder and beside its records, laid into a fresh machine's folder first; with 0eb6d2e's package,
whose lab-time.json holds one total, this script adds each sitting's growth as its entry. Stop a
sitting with Ctrl-C, or SIGTERM to its `archlab ablate`, so that the script writes it.

Each run records the commit of the archlab it ran and whether that checkout had local changes
(train/provenance.py), and the page lists them. To keep a release at one commit across sittings,
train with the release commit's package and this script from any later one:

    git worktree add ../release 0eb6d2e
    PYTHONPATH=../release/src python scripts/release_lab.py vocab heads --jobs 2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from archlab.lab import BUDGETS, Experiment, suite_index

ROOT = Path(__file__).resolve().parents[1]


def _this_checkouts(module: str, path: str) -> ModuleType:
    """A module of this checkout's source, whichever archlab package is imported (the release
    trains with an earlier commit's, on PYTHONPATH)."""
    spec = importlib.util.spec_from_file_location(module, ROOT / "src" / "archlab" / path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


# the suite's wall time per sitting (lab/runs/suite_time.py), which 0eb6d2e's package lacks
suite_time = _this_checkouts("suite_time", "lab/runs/suite_time.py")
SUITE_TIME, sittings = suite_time.SUITE_TIME, suite_time.sittings
read_suite_time, record_suite_time = suite_time.read_suite_time, suite_time.record_suite_time

FLOOR, CAP = 3, 8  # the release rule: at least 3 seeds, more up to 8 where a claim needs them


def registered_seeds(records: Path) -> int | None:
    """The seeds of the registration an earlier sitting committed beside the records, if any."""
    path = records / "registration.json"
    if not path.is_file():
        return None
    registrations = json.loads(path.read_text(encoding="utf-8"))["registrations"]
    return int(registrations[-1]["seeds"]) if registrations else None


def release_rule(needs: list[int | None]) -> int:
    """The release rule: at least FLOOR seeds per arm, and as many as the most any claim needs
    where that is CAP or fewer (a claim that needs more keeps what the others give; None: a claim
    with no t-plan)."""
    return max([FLOOR, *(n for n in needs if n is not None and n <= CAP)])


def rule_seeds(suite: str, budget: str, out: Path) -> tuple[int, list[str]]:
    """The release rule's seeds for `suite`, and one line per claim: the seeds it needs and whether
    it gets them."""
    rows = Experiment(suite, budget, out=out).power()
    seeds = release_rule([row.seeds for row in rows])
    lines = []
    for row in rows:
        if row.seeds is None:
            lines.append(f"  -  {row.claim.text}: no t-plan ({row.why})")
        else:
            got = (
                "gets them"
                if row.seeds <= seeds
                else f"needs {row.seeds} > {CAP}: stays at {seeds}"
            )
            lines.append(f"  {row.seeds:3d} seeds  {row.claim.text}: {got}")
    return seeds, lines


def release_seeds(suite: str, args: argparse.Namespace) -> int:
    """The suite's seeds: as registered beside its records, else by the release rule (and why)."""
    records = args.docs / suite / "runs"
    seeds = registered_seeds(records)
    if seeds is None:
        seeds, lines = rule_seeds(suite, args.budget, args.work / f"{suite}-{args.budget}")
        print(f"{suite}: {seeds} seeds per arm (the release rule)\n" + "\n".join(lines), flush=True)
    else:
        print(
            f"{suite}: {seeds} seeds per arm (registered in {records / 'registration.json'})",
            flush=True,
        )
    return seeds


def lay_records(known: list[str], args: argparse.Namespace) -> int:
    """Every page's committed records into the one store, so a run two suites share (the base
    arm's seeds) is found, not trained again; the number laid."""
    return sum(
        Experiment(
            name, args.budget, store=args.work / "store", out=args.work / f"{name}-{args.budget}"
        ).read_records(args.docs / name / "runs")
        for name in known
    )


def register_all(seeds: dict[str, int], args: argparse.Namespace) -> None:
    """Every listed suite registered before any trains (before its own runs, a run shared with an
    earlier suite aside), its registration copied beside its records so that it is committed
    with them even where none of it trains in this sitting."""
    for suite, n in seeds.items():
        out, records = args.work / f"{suite}-{args.budget}", args.docs / suite / "runs"
        Experiment(suite, args.budget, n, store=args.work / "store", out=out).register()
        records.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "registration.json", records / "registration.json")


def train_suite(suite: str, seeds: int, args: argparse.Namespace) -> int:
    """One suite's `archlab ablate` (its exit code), its wall time kept per sitting beside its
    records (`keep_sittings`)."""
    folder, records = args.work / f"{suite}-{args.budget}", args.docs / suite / "runs"
    before = read_suite_time(folder) or read_suite_time(records)
    if before and not (folder / SUITE_TIME).is_file():  # a fresh machine: the sittings before it
        folder.mkdir(parents=True, exist_ok=True)
        (folder / SUITE_TIME).write_text(json.dumps(before, indent=1), encoding="utf-8")
    command = ablate_command(suite, seeds, args)
    print("$ " + " ".join(command[2:]), flush=True)
    try:
        return subprocess.call(command)
    finally:  # a sitting stopped with Ctrl-C too
        keep_sittings(before, folder, records)


def keep_sittings(before: dict, folder: Path, records: Path) -> None:
    """The suite's lab-time.json after a sitting, with each sitting and its machine, into its
    folder and beside its records. An archlab that keeps sittings (lab/runs/suite_time.py) wrote
    them; one from before (the release's package, 0eb6d2e) keeps one total and the last machine,
    so this sitting's entry is the total's growth on that machine, after the sittings before it."""
    after = read_suite_time(folder)
    if not after.get("train_wall_s"):
        return
    if "sittings" not in after:
        grown = after["train_wall_s"] - sum(s["wall_s"] for s in sittings(before))
        path = folder / SUITE_TIME
        path.write_text(
            json.dumps({**before, "sittings": sittings(before)}, indent=1), encoding="utf-8"
        )
        if round(grown, 1) > 0:
            record_suite_time(folder, grown, after.get("jobs", 1), after.get("machine"))
    records.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(folder / SUITE_TIME, records / SUITE_TIME)


def ablate_command(suite: str, seeds: int, args: argparse.Namespace) -> list[str]:
    """The `archlab ablate` that trains (or continues) one suite, its records under its page."""
    return [
        sys.executable,
        "-m",
        "archlab",
        "ablate",
        suite,
        "--budget",
        args.budget,
        "--seeds",
        str(seeds),
        "--out",
        str(args.work / f"{suite}-{args.budget}"),
        "--store",
        str(args.work / "store"),
        "--jobs",
        str(args.jobs),
        "--records",
        str(args.docs / suite / "runs"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "suites", nargs="*", help="suites to train, in this order (default: every built-in one)"
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--budget", default="small")
    parser.add_argument(
        "--work", type=Path, default=ROOT / "runs" / "release", help="suite folders and store"
    )
    parser.add_argument(
        "--docs", type=Path, default=ROOT / "docs" / "results", help="the published pages"
    )
    parser.add_argument(
        "--seeds-only", action="store_true", help="print each suite's seeds and exit"
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs} is not allowed: at least 1 run at a time")
    if args.budget not in BUDGETS:
        parser.error(f"--budget {args.budget!r} is not allowed: one of {', '.join(BUDGETS)}")
    known = [name for name, _, _ in suite_index()]
    unknown = [s for s in args.suites if s not in known]
    if unknown:
        parser.error(f"not a built-in suite: {', '.join(unknown)} (one of {', '.join(known)})")
    if not args.seeds_only:
        laid = lay_records(known, args)
        print(f"{laid} run records of the pages laid into {args.work / 'store'}", flush=True)
    seeds = {suite: release_seeds(suite, args) for suite in args.suites or known}
    if args.seeds_only:
        return 0
    register_all(seeds, args)
    print(f"registered {len(seeds)} suites: {', '.join(seeds)}", flush=True)
    for suite, n in seeds.items():
        code = train_suite(suite, n, args)
        if code != 0:
            print(f"{suite}: archlab ablate exited {code}; stopping here", file=sys.stderr)
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
