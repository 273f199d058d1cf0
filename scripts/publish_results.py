"""Publish lab suites as docs pages, rebuild every page from its files, or check that they agree.

    # publish finished suite folders
    python scripts/publish_results.py runs/ablate/ffn-small ... --to docs/results
    # rebuild every page from its files
    python scripts/publish_results.py --to docs/results
    # recompute; exit 1 on a difference
    python scripts/publish_results.py --check --to docs/results
    # re-judge a page of the previous rule from its published files
    python scripts/publish_results.py --from-legacy block ffn ... --store DIR

A finished suite folder (`archlab ablate SUITE --out DIR`) is re-collected (`archlab ablate SUITE
--collect DIR`: cached measures, verdicts, plots, the record), its record and plots are copied to
docs/results/SUITE/, and then every page is rebuilt from its files (`archlab.lab.rebuild_pages`):
claims.json, record.sha256 (each record file's sha256), SUITE.md and the summary README.md (with
each record's hash), with one verdict per comparison two pages share. `--check` recomputes the
same without writing and lists every difference, each naming its page and file (CI runs it): a
claim's verdict, number or statement in claims.json, a claim judged otherwise than registered, a
record file whose bytes are not the hashed ones, and every line of SUITE.md and README.md that is
not the one the files give. `--from-legacy` turns a page published before the provenance rule (its
results.csv, timings.csv and claims.json) into a record: the current suite file, today's resolution
of each arm's config (checked against the run ids in results.csv), and the machine and wall time the
old page states.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from archlab.lab import (
    SUMMARY,
    Experiment,
    check_pages,
    from_legacy,
    import_folder,
    published_pages,
    rebuild_pages,
)

ROOT = Path(__file__).resolve().parents[1]


def publish_folder(suite_dir: Path, docs: Path) -> Path:
    """Re-collect a finished suite folder and copy its record and plots into docs/SUITE/."""
    plan = (
        json.loads((suite_dir / "plan.json").read_text(encoding="utf-8"))
        if (suite_dir / "plan.json").is_file()
        else None
    )
    if plan is None:
        raise SystemExit(
            f"publish_results: {suite_dir} is not a suite folder: it has no plan.json (made by "
            "`archlab ablate SUITE --out DIR`)"
        )
    spec = Path(plan["suite"])
    builtin = {s.stem for s in (ROOT / "src/archlab/lab/suites").glob("*.yaml")}
    spec = spec.stem if spec.parent.name == "suites" and spec.stem in builtin else str(spec)
    exp = Experiment.collect(suite_dir, str(spec))
    exp.publish(command=exp.command())
    return import_folder(suite_dir, docs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "suites", nargs="*", type=Path, help="finished suite folders (archlab ablate --out)"
    )
    parser.add_argument("--to", type=Path, default=ROOT / "docs/results", help="the docs folder")
    parser.add_argument(
        "--check",
        action="store_true",
        help="recompute every page and the summary; exit 1 if any published verdict differs",
    )
    parser.add_argument(
        "--from-legacy",
        nargs="+",
        default=None,
        metavar="NAME",
        help="re-judge these published pages of the previous rule from their files",
    )
    parser.add_argument(
        "--store",
        type=Path,
        default=Path("runs/ablate/store"),
        help="the store whose data folders "
        "--from-legacy hashes and whose run ids it checks (default runs/ablate/store)",
    )
    args = parser.parse_args(argv)
    if args.check:
        problems = check_pages(args.to)
        for line in problems:
            print(f"differs: {line}")
        print(
            f"{args.to}: {len(published_pages(args.to))} pages; "
            + (
                "every verdict and page recomputed from the files agrees"
                if not problems
                else f"{len(problems)} differences"
            )
        )
        return 1 if problems else 0
    for name in args.from_legacy or []:
        print(f"{name}: {from_legacy(args.to, name, args.store)}")
    for suite_dir in args.suites:
        print(f"{suite_dir} -> {publish_folder(suite_dir, args.to)}")
    for name in rebuild_pages(args.to):
        print(f"{args.to / name}.md")
    print(args.to / SUMMARY)
    return 0


if __name__ == "__main__":
    sys.exit(main())
