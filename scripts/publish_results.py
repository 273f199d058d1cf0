"""Publish finished lab suites as docs pages: one page per suite and a summary table of every claim.

    python scripts/publish_results.py runs/ablate/ffn-small runs/ablate/position-small ... --to docs/results

Each argument is a suite folder that `archlab ablate SUITE --budget B --out DIR` finished. For each, the report is
rebuilt from the run folders (`archlab ablate SUITE --collect DIR`: cached measures, the computed verdicts, the
plots), then `DIR/results.md` becomes `docs/results/SUITE.md` (its plots copied into `docs/results/SUITE/`) under
a header saying how to reproduce it, and `docs/results/README.md` gets one row per claim of every suite
published so far (suites published earlier keep their rows: the table is rebuilt from the pages' folders),
followed by each suite's `docs/results/SUITE/reading.md`, a person's reading of the numbers, where one exists.
Nothing here computes a verdict: they come from `archlab.lab.report.judge`, the rule every report prints.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from archlab.cli import main as archlab_main
from archlab.lab.measure import MEASURES
from archlab.lab.report import ClaimResult, judge
from archlab.lab.runner import measure_plan, plan_suite, read_plan
from archlab.lab.suite import BUDGETS, list_suites, load_suite

SUMMARY = "claims.json"  # per published suite: its claims and verdicts, for the summary table
READING = "reading.md"  # per published suite, written by a person after reading its numbers: kept across publishing


def publish(suite_dir: Path, docs: Path, note: str = "") -> list[dict]:
    """Rebuild one suite's report and write its page; returns its claims as summary rows."""
    recorded = read_plan(suite_dir)
    if not recorded:
        raise SystemExit(f"publish_results: {suite_dir} is not a suite folder: it has no plan.json (made by "
                         "`archlab ablate SUITE --out DIR`)")
    spec = Path(recorded["suite"])  # a built-in suite's file (in whichever checkout ran it) goes by its name
    spec = spec.stem if spec.parent.name == "suites" and spec.stem in {s.name for s in list_suites()} else str(spec)
    suite = load_suite(spec)
    if archlab_main(["ablate", spec, "--collect", str(suite_dir)]) != 0:
        raise SystemExit(f"publish_results: could not collect {suite_dir}")
    plan = plan_suite(suite, BUDGETS[recorded["budget"]], suite_dir, recorded["seeds"])
    results = judge(plan, measure_plan(plan))
    images = docs / suite.name
    reading = (images / READING).read_text(encoding="utf-8") if (images / READING).is_file() else None
    shutil.rmtree(images, ignore_errors=True)
    images.mkdir(parents=True)
    if reading is not None:
        (images / READING).write_text(reading, encoding="utf-8")
    text = (suite_dir / "results.md").read_text(encoding="utf-8")
    for png in sorted(suite_dir.glob("*.png")):
        shutil.copy2(png, images / png.name)
        text = text.replace(f"]({png.name})", f"]({suite.name}/{png.name})")
    jobs = json.loads((suite_dir / "lab-time.json").read_text(encoding="utf-8")).get("jobs", 1) \
        if (suite_dir / "lab-time.json").is_file() else 1
    header = (f"Reproduce: `archlab ablate {suite.name} --budget {plan.budget.name} --jobs {jobs}` (about the "
              f"wall time below on a 2-core CPU). The run folders are not in the repository; this page is "
              f"`results.md` of that command's folder, the interactive page is its `report.html`.\n\n"
              + (f"{note}\n\n" if note else ""))
    title, _, rest = text.partition("\n")
    (docs / f"{suite.name}.md").write_text(f"{title}\n\n{header}{rest.lstrip()}", encoding="utf-8")
    rows = [{"suite": suite.name, "claim": r.claim.text, "metric": r.claim.metric,
             "arms": f"{r.claim.arm} vs {r.claim.versus}", "difference": r.diff, "p_holm": r.p_holm,
             "noise_floor": r.noise_floor, "moved": moved(r), "verdict": r.verdict, "narang": r.narang}
            for r in results]
    (images / SUMMARY).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return rows


def moved(result: ClaimResult) -> str:
    """Which way the claimed arm's mean went, whatever the verdict: a trend that 2 seeds cannot confirm is
    still worth showing (the verdict says whether it is more than noise)."""
    better = result.claim.direction or MEASURES[result.claim.metric].better
    gain = -result.diff if better == "lower" else result.diff
    return "no difference" if gain == 0 else ("the claimed way" if gain > 0 else "the other way")


def write_summary(docs: Path) -> Path:
    """docs/results/README.md: every published claim, its verdict, and a link to its suite's page."""
    rows = [row for path in sorted(docs.glob(f"*/{SUMMARY}")) for row in json.loads(path.read_text("utf-8"))]
    lines = ["# Lab results: the lecture's claims, measured", "",
             "Each suite below was run with `archlab ablate SUITE --budget small --jobs 2` on a 2-core CPU "
             "(d_model 128, 4 layers, 300 steps of 16 x 128 bytes of Python source, 2 seeds per arm and 4 for "
             "the base arm); each page has the exact command, the machine, the wall time, the tables and the "
             "plots. Verdicts are computed by the rule in docs/lab.md (Welch's t-test on the seeds both arms ran, "
             "Holm's correction, the base arm's spread over its 4 seeds as the noise floor), never written by "
             "hand. \"Not visible at this scale\" is a "
             "result: 300 steps of a 0.9M-parameter model cannot show every effect that the sources measured "
             "at 100M-10B parameters. It is also a matter of power: with 2 seeds per arm, Welch's test has about "
             "one degree of freedom, so only an effect that is large against both arms' spreads survives Holm's "
             "correction. The \"mean moved\" column says which way each mean went all the same, and `--seeds N` "
             "buys power where a claim matters.", "",
             "| suite | claim | metric | arms | difference | noise floor | mean moved | p (Holm) | verdict | "
             "Narang et al. |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| [{r['suite']}]({r['suite']}.md) | {r['claim']} | {r['metric']} | {r['arms']} | "
                     f"{r['difference']:.4g} | {r['noise_floor']:.3g} | {r['moved']} | {r['p_holm']:.3g} | "
                     f"{r['verdict']} | {r['narang']} |")
    missing = [s.name for s in list_suites() if s.name not in {r["suite"] for r in rows}]
    counts = {v: sum(r["verdict"] == v for r in rows) for v in sorted({r["verdict"] for r in rows})}
    n_suites = len({r["suite"] for r in rows})
    lines += ["", f"{len(rows)} claims from {n_suites} suite{'s' if n_suites != 1 else ''}: "
              + ", ".join(f"{n} {v}" for v, n in counts.items()) + "."
              + (f" Built-in suites not published yet: {', '.join(missing)}." if missing else ""), ""]
    readings = [(path.parent.name, path.read_text(encoding="utf-8").strip())
                for path in sorted(docs.glob(f"*/{READING}"))]
    if readings:
        lines += ["## Reading the numbers", ""]
        lines += [f"**[{name}]({name}.md).** {text}\n" for name, text in readings]
    path = docs / "README.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suites", nargs="+", type=Path, help="finished suite folders (archlab ablate --out)")
    parser.add_argument("--to", type=Path, default=Path("docs/results"), help="the docs folder to write")
    parser.add_argument("--note", default="", help="a paragraph for the pages' header (how loaded the machine was)")
    args = parser.parse_args(argv)
    args.to.mkdir(parents=True, exist_ok=True)
    for suite_dir in args.suites:
        rows = publish(suite_dir, args.to, args.note)
        print(f"{suite_dir} -> {args.to / rows[0]['suite']}.md ({len(rows)} claims)" if rows else suite_dir)
    print(write_summary(args.to))
    return 0


if __name__ == "__main__":
    sys.exit(main())
