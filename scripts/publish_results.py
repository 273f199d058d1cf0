"""Publish finished lab suites as docs pages: one page per suite and a summary table of every claim.

    python scripts/publish_results.py runs/ablate/ffn-small runs/ablate/position-small ... --to docs/results

Each argument is a suite folder that `archlab ablate SUITE --budget B --out DIR` finished. For each, the report is
rebuilt from the run folders (`archlab ablate SUITE --collect DIR`: cached measures, the computed verdicts, the
plots), then `DIR/results.md` becomes `docs/results/SUITE.md` (its plots copied into `docs/results/SUITE/`) under
a header saying how to reproduce it, and `docs/results/README.md` gets one row per claim of every suite
published so far (suites published earlier keep their rows: the table is rebuilt from the pages' folders),
followed by each suite's `docs/results/SUITE/reading.md`, a person's reading of the numbers, where one exists.
Each suite's `results.csv` (and `timings.csv`) is copied beside its page.

The summary counts each comparison once: claims of two suites on the same runs (the same metric, the same run
folders on both sides: identical arms share folders) are one row, listed under the first suite with the others
named. Its outcome across the summary is re-derived with Benjamini-Hochberg's false discovery rate over every
empirical comparison of every published suite (`archlab.lab.stats.adjust(..., method="bh")`), beside each suite's
own Holm outcome. Nothing here computes a test: they come from `archlab.lab.verdicts.judge`, the rule every
report prints.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import sys
from pathlib import Path

from archlab.cli import main as archlab_main
from archlab.lab import stats
from archlab.lab.runner import Plan, measure_plan, measure_timings, plan_suite, read_plan
from archlab.lab.suite import BUDGETS, list_suites, load_suite
from archlab.lab.verdicts import ClaimResult, judge

SUMMARY = "claims.json"  # per published suite: its claims and verdicts, for the summary table
FIRST_RULE = "first-rule.json"  # per suite: its claims as the first lab's page judged them (kept for the comparison)
# verdicts of the first rule and outcomes of the current one that say the same thing
SAME_VERDICTS = {("confirmed", "confirmed"), ("contradicted", "contradicted"),
                 ("not visible at this scale", "inconclusive")}
READING = "reading.md"  # per published suite, written by a person after reading its numbers: kept across publishing


def publish(suite_dir: Path, docs: Path, note: str = "") -> list[dict]:
    """Rebuild one suite's report and write its page (with its results.csv); returns its claims as summary rows."""
    recorded = read_plan(suite_dir)
    if not recorded:
        raise SystemExit(f"publish_results: {suite_dir} is not a suite folder: it has no plan.json (made by "
                         "`archlab ablate SUITE --out DIR`)")
    spec = Path(recorded["suite"])  # a built-in suite's file (in whichever checkout ran it) goes by its name
    spec = spec.stem if spec.parent.name == "suites" and spec.stem in {s.name for s in list_suites()} else str(spec)
    suite = load_suite(spec)
    if archlab_main(["ablate", spec, "--collect", str(suite_dir)]) != 0:
        raise SystemExit(f"publish_results: could not collect {suite_dir}")
    plan = plan_suite(suite, BUDGETS[recorded["budget"]], suite_dir, recorded["seeds"], store=recorded.get("store"))
    results = judge(plan, measure_plan(plan), measure_timings(plan))
    images = docs / suite.name
    reading = (images / READING).read_text(encoding="utf-8") if (images / READING).is_file() else None
    first = first_rule_rows(images)
    shutil.rmtree(images, ignore_errors=True)
    images.mkdir(parents=True)
    if reading is not None:
        (images / READING).write_text(reading, encoding="utf-8")
    if first:
        (images / FIRST_RULE).write_text(json.dumps(first, indent=1), encoding="utf-8")
    text = (suite_dir / "results.md").read_text(encoding="utf-8")
    for png in sorted(suite_dir.glob("*.png")):
        shutil.copy2(png, images / png.name)
        text = text.replace(f"]({png.name})", f"]({suite.name}/{png.name})")
    for table in ("results.csv", "timings.csv"):
        if (suite_dir / table).is_file():
            shutil.copy2(suite_dir / table, images / table)
            text = text.replace(f"`{table}`", f"[`{table}`]({suite.name}/{table})")
    jobs = json.loads((suite_dir / "lab-time.json").read_text(encoding="utf-8")).get("jobs", 1) \
        if (suite_dir / "lab-time.json").is_file() else 1
    header = (f"Reproduce: `archlab ablate {suite.name} --budget {plan.budget.name} --jobs {jobs}` (about the "
              f"wall time below on a 2-core CPU). The run folders are not in the repository; this page is "
              f"`results.md` of that command's folder, the interactive page is its `report.html`.\n\n"
              + (f"{note}\n\n" if note else ""))
    title, _, rest = text.partition("\n")
    changes = changed_verdicts(first, results)
    (docs / f"{suite.name}.md").write_text(f"{title}\n\n{header}{rest.lstrip()}{changes}", encoding="utf-8")
    rows = [summary_row(suite.name, plan, r) for r in results]
    (images / SUMMARY).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return rows


def first_rule_rows(images: Path) -> list[dict]:
    """The suite's claims as the first lab published them (Welch's test, a noise floor: rows with `verdict`), kept
    in FIRST_RULE once a page under the current rule replaced them; [] when the suite never had such a page."""
    if (images / FIRST_RULE).is_file():
        return json.loads((images / FIRST_RULE).read_text(encoding="utf-8"))
    rows = json.loads((images / SUMMARY).read_text(encoding="utf-8")) if (images / SUMMARY).is_file() else []
    return [r for r in rows if "verdict" in r and "noise_floor" in r]


def changed_verdicts(first: list[dict], results: list[ClaimResult]) -> str:
    """A section that sets each claim of the first published page beside its outcome now (matched by the claim's
    text; first claims with no successor are listed as dropped or reworded)."""
    if not first:
        return ""
    now = {r.claim.text: r for r in results}
    lines = ["", "## Against the first published page", "",
             "The first lab judged this suite with Welch's unpaired test on 2 seeds per arm and a noise floor (the "
             "base arm's spread over 4 seeds) on top of the p-value, and confirmed \"as good as\" whenever the "
             "difference was under that floor. Each of its claims beside the outcome under the current rule:", "",
             "| claim | first page: difference, verdict | now: estimate [90% CI], outcome | changed |",
             "|---|---|---|---|"]
    for old in first:
        new = now.get(old["claim"])
        before = f"{_fmt(old.get('difference'))}, {old['verdict']}"
        if new is None:
            lines.append(f"| {old['claim']} | {before} | (no claim of this text now: dropped or reworded) | - |")
            continue
        low, high = new.ci
        ci = "" if math.isnan(low) else f" [{_fmt(low)}, {_fmt(high)}]"
        same = (old["verdict"], new.outcome) in SAME_VERDICTS
        lines.append(f"| {old['claim']} | {before} | {_fmt(new.estimate)}{ci}, {new.outcome} | "
                     f"{'no' if same else '**yes**'} |")
    return "\n".join(lines) + "\n"


def summary_row(suite: str, plan: Plan, result: ClaimResult) -> dict:
    """One claim for the summary: what the table shows, the comparison's identity, and its test (to re-adjust)."""
    c = result.claim
    sides = [sorted(r.run_dir.name for a in plan.suite.cells(c, side) for r in plan.runs_of(a))
             for side in (c.arm, c.versus)]
    key = json.dumps([c.metric, c.versus_metric, *sides, c.expect, c.margin, c.better])
    if plan.suite.timing(c) is not None:  # a timing is its own experiment, never the same as another suite's
        key = json.dumps([suite, c.metric, c.arm, c.versus])
    return {"suite": suite, "claim": c.text, "metric": c.metric, "arms": f"{c.arm} vs {c.versus}",
            "estimate": result.estimate, "ci": list(result.ci), "p_holm": result.p_adjusted,
            "outcome": result.outcome, "seeds_needed": result.seeds_needed, "narang": result.narang,
            "size": (f"margin {c.margin:g}" if c.expect == "same" and c.margin else
                     f"min {c.min_effect:g}" if c.min_effect else "-"),
            "key": key, "test": dataclasses.asdict(result.test) if result.test is not None else None}


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.4g}"


def unique_comparisons(rows: list[dict]) -> list[dict]:
    """Each comparison once (the first suite's row, the other suites that made it in `also`); the empirical ones
    re-judged with Benjamini-Hochberg over all of them (`q`, `summary_outcome`)."""
    first: dict[str, dict] = {}
    for row in rows:
        if row["key"] in first:
            first[row["key"]]["also"].append(row["suite"])
        else:
            first[row["key"]] = {**row, "also": []}
    unique = list(first.values())
    family = [r for r in unique if r["test"] is not None and r["outcome"] not in (stats.UNTESTABLE,
                                                                                 stats.BY_CONSTRUCTION)]
    # each suite's Holm adjustment is undone: the summary's family is every distinct comparison
    tests = [stats.ClaimTest(**{**r["test"], "ci": tuple(r["test"]["ci"]), "p_adjusted": None,
                                "p_contra_adjusted": None, "level": r["test"]["alpha"]}) for r in family]
    for row, test in zip(family, stats.adjust(tests, method="bh")):
        row["q"], row["summary_outcome"] = test.p_adjusted, test.outcome
    for row in unique:
        row.setdefault("q", None)
        row.setdefault("summary_outcome", row["outcome"])
    return unique


INTRO = ("Each suite below was run with `archlab ablate SUITE --budget small --jobs 2` on a 2-core CPU; every arm "
         "runs the same seeds (paired). Each page has the design (why it can show its claims), the exact command, "
         "the machine, the wall time, the claims with estimate, confidence interval, p-values, outcome and the "
         "seeds an inconclusive claim needs, the suite's pooled residual spread and between-arm seed correlation, "
         "the tables, the plots and `results.csv` (one row per run). Outcomes are computed by the rule in "
         "docs/lab.md and docs/lab-statistics.md, never written by hand: paired tests, Holm's correction within a "
         "suite, non-inferiority at a stated margin for \"as good as\" (for a loss in nats, the budget's margin: "
         "what 25% more base compute buys, measured by the [compute-ladder](compute-ladder.md) suite; 0.09 nats at "
         "`small`, and each page prices its margin as a compute multiplier). Across this summary each comparison is "
         "counted once (claims of two suites on the same runs are one row) and re-judged with Benjamini-Hochberg's "
         "false discovery rate over all of them (q < 0.05). \"By construction\" (arithmetic) and \"untestable by "
         "this design\" are outside both families and the counts.")


def write_summary(docs: Path) -> Path:
    """docs/results/README.md: every published comparison once, its outcomes, and a link to its suite's page."""
    pages = {path.parent.name: json.loads(path.read_text("utf-8")) for path in sorted(docs.glob(f"*/{SUMMARY}"))}
    # a page the first rule wrote and no current run has replaced yet: listed, never counted or re-judged
    stale = sorted(name for name, page in pages.items() if any("key" not in row for row in page))
    rows = [row for name, page in pages.items() if name not in stale for row in page]
    unique = unique_comparisons(rows)
    lines = ["# Lab results: the lecture's claims, measured", "", INTRO, "",
             "| suite | claim | metric | arms | estimate | 90% CI | margin / min | p (Holm, suite) | outcome (suite) "
             "| q (BH, summary) | outcome (summary) | seeds needed | Narang et al. |", "|---" * 13 + "|"]
    for r in unique:
        also = f" (also in {', '.join(r['also'])})" if r["also"] else ""
        low, high = r["ci"]
        ci = "n/a" if low is None or math.isnan(low) else f"[{_fmt(low)}, {_fmt(high)}]"
        lines.append(f"| [{r['suite']}]({r['suite']}.md) | {r['claim']}{also} | {r['metric']} | {r['arms']} | "
                     f"{_fmt(r['estimate'])} | {ci} | {r['size']} | {_fmt(r['p_holm'])} | {r['outcome']} | "
                     f"{_fmt(r['q'])} | {r['summary_outcome']} | {r['seeds_needed'] or '-'} | {r['narang']} |")
    missing = [s.name for s in list_suites() if s.name not in {r["suite"] for r in rows} and s.name not in stale]
    tested = [r["summary_outcome"] for r in unique if r["q"] is not None]
    outside = [r["summary_outcome"] for r in unique if r["q"] is None]
    n_suites = len({r["suite"] for r in rows})
    counts = ", ".join(f"{tested.count(v)} {v}" for v in dict.fromkeys(tested)) or "none"
    lines += ["", f"{len(rows)} claims from {n_suites} suite{'s' if n_suites != 1 else ''}, {len(unique)} distinct "
              f"comparisons; {len(tested)} tested: {counts}."
              + (" Outside the family: " + ", ".join(f"{outside.count(v)} {v}" for v in dict.fromkeys(outside)) + "."
                 if outside else "")
              + (f" Built-in suites not published yet: {', '.join(missing)}." if missing else ""), ""]
    if stale:
        lines += ["Pages still from the first rule, not yet re-run (their verdicts are neither counted nor re-judged "
                  "here; each page says how to read them): "
                  + ", ".join(f"[{name}]({name}.md)" for name in stale) + ".", ""]
    readings = [(path.parent.name, path.read_text(encoding="utf-8").strip())
                for path in sorted(docs.glob(f"*/{READING}")) if path.parent.name not in stale]
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
