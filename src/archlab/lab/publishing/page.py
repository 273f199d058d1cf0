"""A suite's page from its record (lab/publishing/record.py) and verdicts:
results.md and report.html.

The page says where the numbers came from (the commit, versions, machine, data hash, command, scale
and cost), then its sections: the tables and the paragraphs beside them
(lab/publishing/tables.py; a screening's design and effects: lab/publishing/screening_section.py).
Nothing here needs the run folders, so a published page is rebuilt from its files
(`scripts/publish_results.py`), and plots are passed in as files.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from archlab.lab.analysis import stats
from archlab.lab.analysis.verdicts import ClaimResult
from archlab.lab.measures.measure import MEASURES
from archlab.lab.publishing import registered, run_provenance
from archlab.lab.publishing.record import Record
from archlab.lab.publishing.screening_section import screening_section
from archlab.lab.publishing.tables import (
    anova_table,
    arm_table,
    claim_table,
    ladder_section,
    margin_text,
    spread_lines,
    tally,
    timing_table,
    timing_warnings,
)
from archlab.lab.spec.arms import PARAM_TOLERANCE
from archlab.lab.spec.budgets import evidence_caveat, evidence_note

RULE = (
    "Every arm runs the same seeds; a claim compares the arms seed by seed (paired), on the pair's "
    "own paired differences (arms the suite declares alike may pool their group's residual when "
    "a variance test does not separate them). A measure scored on a fixed item set (continuation "
    "cuts, accuracy windows) is tested with seeds and items both random (REML components, a "
    "negative one truncated at 0), so the verdict generalises to other items; a 'better' claim on "
    "hits also gets an exact item sign-flip test, and the larger p decides. 'Better': a one-sided "
    "test at the Holm-adjusted level (Holm 1979) over the suite's tested claims, confirmed when "
    "significant (and the estimate reaches min_effect), contradicted when the opposite test is "
    "significant. 'Not worse than': non-inferiority at a margin registered before the run (each "
    "page says when its margins were set), confirmed when the one-sided upper bound of the deficit "
    "lies inside it (Schuirmann 1987; Lakens 2017), contradicted when the lower bound lies "
    "beyond it; when the interval also excludes 0 on the worse side the page says 'but worse by "
    "X'. 'As good as within +-m': equivalence, both bounds inside. Otherwise inconclusive, with "
    "the minimum detectable effect at this n and the seeds per arm for 80% power at the stated "
    "smallest effect (a 'not worse than' claim: at a true difference of 0). A grid claim is judged "
    "at each grid's best arm, and is untestable where a grid's best arm is at its edge. Divergence "
    "is a rate (exact paired test), spike counts a count test, losses of arms with diverged runs "
    "a rank test; no events at all is 'untestable by this design'. Speed is timed on fresh models "
    "in interleaved A/B pairs and judged on the log time ratio. Formulas are 'by construction' and "
    "outside the family and the tallies; a calibration suite's claims are tested but never tallied "
    "as the lecture's. The rule: docs/lab-statistics.md."
)


def header_lines(record: Record) -> list[str]:
    """Where the numbers came from, in a few lines a reader can weigh."""
    p = record.provenance
    lines = [
        f"Budget `{record.budget.name}`, seeds 0-{record.table.seeds - 1} for every arm (paired). "
        f"Command: `{p.get('command', 'n/a')}`. Per-run values: `results.csv`"
        + (
            ", per-item outcomes: `items.csv`"
            if any(r.items for a in record.table.runs.values() for r in a)
            else ""
        )
        + "; configs: `configs.yaml`; provenance: `provenance.json`; recompute every verdict: "
        "`archlab ablate --verify DIR` on this page's folder."
    ]
    lines += registered.lines(
        record.registration,
        sum(len(runs) for runs in record.table.runs.values()),
        p.get(run_provenance.RUNS),
    )
    lines += run_provenance.lines(p.get(run_provenance.RUNS), run_provenance.reconstructed(p))
    judged = p.get("judged_by", {})
    if judged.get("commit"):
        lines.append(
            "Measured (what the run folders had not cached, at each measure's version) and judged "
            f"at commit {judged['commit'][:12]}"
            + (" (with local changes)" if judged.get("dirty") is True else "")
            + (
                f"; torch {judged['torch']}, numpy {judged.get('numpy')}, "
                f"scipy {judged.get('scipy')}, statsmodels "
                f"{judged.get('statsmodels')}, Python {judged.get('python')}"
                if judged.get("torch")
                else ""
            )
            + "."
        )
    # pages made before the runs recorded theirs: the folders hashed when judged
    data = p.get("data", {})
    if data:
        lines.append(
            "Data: "
            + "; ".join(f"{name} sha256 {h[:16]}" for name, h in data.items())
            + (f" ({p['data_note']})" if p.get("data_note") else "")
            + "."
        )
    if p.get("scale", {}).get("text"):
        lines.append(f"Scale: {p['scale']['text']}.")
    lines.append(cost_line(p))
    if note := evidence_note(record.budget.name, record.table.seeds, record.suite.seeds):
        lines.insert(0, note)
    return lines


def cost_line(p: dict) -> str:
    """The page's machine and cost: the machine (each, numbered, where the suite's sittings trained
    on several), the runs' times, and the suite's wall time (each machine's share)."""
    t = p.get("training", {})
    machines = t.get("machines", [])
    parts = [
        "Machines, in the order the suite's sittings trained on them: "
        + "; ".join(f"({i}) {m['machine']}" for i, m in enumerate(machines, 1))
        + "."
        if machines
        else f"Machine: {p.get('machine', 'not recorded')}."
    ]
    if t.get("runs"):
        parts.append(
            f"Training: {t['runs']} runs, median {t['median_run_s']:.0f} s per run (process start "
            f"to exit), {t['run_minutes']:.1f} run-minutes in all."
        )
    if t.get("suite_wall_s"):
        shares = "; ".join(
            f"{m['wall_s'] / 60:.1f} min in {m['sittings']} "
            f"sitting{'s' if m['sittings'] != 1 else ''} on ({i})"
            for i, m in enumerate(machines, 1)
        )
        parts.append(
            f"Suite wall time: {t['suite_wall_s'] / 60:.1f} min with --jobs {t.get('jobs', 1)}"
            + (f" ({shares})." if shares else ".")
        )
    if t.get("note"):
        parts.append(t["note"])
    return " ".join(parts)


def markdown(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(
        lines + ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    )


def _html_table(head: list[str], rows: list[list[str]], cls: str) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def sections(
    record: Record, results: list[ClaimResult]
) -> list[tuple[str, str, tuple | None, list[str]]]:
    """The page's sections as (title, cls, table or None, paragraphs), shared by
    results.md and report.html."""
    s = record.suite
    caveat = evidence_caveat(record.budget.name, record.table.seeds, s.seeds)
    out = [
        ("Claims", "claims", claim_table(results, caveat), [tally(results), margin_text(record)])
    ]
    if (screen := screening_section(record)) is not None:
        out.append(("Screening design and effects", "effects", *screen))
    out.append(("How noisy this suite was", "spread", None, spread_lines(record)))
    if (ladder := ladder_section(record)) is not None:
        out.append(("Compute ladder (the base at multiples of the steps)", "ladder", *ladder))
    if (table := anova_table(record)) is not None:
        out.append(
            ("Factorial analysis (val_loss ~ factors and interactions + seed)", "anova", table, [])
        )
    if (table := timing_table(record)) is not None:
        out.append(
            ("Timings (fresh models, interleaved pairs)", "timings", table, timing_warnings(record))
        )
    out.append(
        (
            "Arms (mean ± standard deviation over seeds)",
            "arms",
            arm_table(record),
            [
                "Parameters (of the models the runs built): an arm more than "
                f"{PARAM_TOLERANCE:.0%} off the base is flagged in the note column.",
                "Measures: " + "; ".join(f"`{m}` = {MEASURES[m].label}" for m in s.measures) + ".",
            ],
        )
    )
    return out


def _overrides(record: Record) -> list[str]:
    arms = record.provenance.get("arms", {})
    return [
        f"- `{a.name}`: "
        + (
            " ".join(
                f"--{k} {v}" for k, v in arms.get(a.name, {}).get("overrides", a.overrides).items()
            )
            or "(the base)"
        )
        for a in record.suite.arms
    ]


def write_markdown(
    record: Record, results: list[ClaimResult], plots: list[str], extra: str = ""
) -> Path:
    """results.md in the record's folder (`markdown_text`)."""
    path = record.folder / "results.md"
    path.write_text(markdown_text(record, results, plots, extra), encoding="utf-8")
    return path


def markdown_text(
    record: Record,
    results: list[ClaimResult],
    plots: list[str],
    extra: str = "",
    header: list[str] | None = None,
) -> str:
    """The record's page in Markdown; `plots`: image paths relative to the page; `extra`: a closing
    section; `header`: lines after the header's budget line (a published page's record hash)."""
    s = record.suite
    head = header_lines(record)
    at = next((i + 1 for i, line in enumerate(head) if line.startswith("Budget `")), len(head))
    head[at:at] = header or []
    parts = [
        f"# {s.name}: {s.title}",
        "",
        f"Source: {s.source}",
        "",
        f"Design: {s.design}",
        "",
        *[line for text in head for line in (text, "")],
    ]
    for title, _, table, paragraphs in sections(record, results):
        parts += (
            [f"## {title}", ""]
            + ([markdown(*table), ""] if table else [])
            + [line for p in paragraphs if p for line in (p, "")]
        )
    parts += [
        f"Narang et al. 2021 (arXiv 2102.11972): {s.narang or 'did not measure this switch.'}",
        "",
        "## Arms' overrides",
        "",
        *_overrides(record),
        "",
        "## The verdict rule",
        "",
        RULE,
        "",
    ]
    if plots:
        parts += ["Plots: " + ", ".join(f"![{Path(p).stem}]({p})" for p in plots), ""]
    return "\n".join(parts) + extra


_CLASSES = {
    stats.CONFIRMED: "confirmed",
    stats.CONTRADICTED: "contradicted",
    stats.INCONCLUSIVE: "inconclusive",
    stats.UNTESTABLE: "untestable",
    stats.BY_CONSTRUCTION: "construction",
}
_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;
margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;font-size:14px}th{background:#f3f3f3}
.confirmed{background:#d9f2d9}.contradicted{background:#f6d5d5}.inconclusive{background:#f2f2f2}
.untestable{background:#fff3cd}.construction{background:#e3ecf7}
img{max-width:100%;margin:0.5em 0}pre{background:#f7f7f7;padding:0.8em;overflow:auto;font-size:12px}"""  # noqa: E501


def verdict_caveat(record: Record, result: ClaimResult) -> str:
    """The caveat a verdict carries on its line (`budgets.evidence_caveat`): none for a formula,
    which holds at any budget."""
    if result.outcome == stats.BY_CONSTRUCTION:
        return ""
    return evidence_caveat(record.budget.name, record.table.seeds, record.suite.seeds)


def write_html(record: Record, results: list[ClaimResult], images: list[Path]) -> Path:
    """report.html in the record's folder (`html_text`)."""
    path = record.folder / "report.html"
    path.write_text(html_text(record, results, images), encoding="utf-8")
    return path


def config_of(config: dict) -> dict:
    """An arm's resolved config as the page shows it: without the hash configs.yaml keeps beside it,
    so a page from a plan and one from its files read alike."""
    return {k: v for k, v in config.items() if k != "config"}


def html_text(record: Record, results: list[ClaimResult], images: list[Path]) -> str:
    """The record's page as one self-contained HTML file, `images` embedded."""
    s = record.suite
    verdicts = "".join(
        f'<li class="{_CLASSES.get(r.outcome, "inconclusive")}"><b '
        f'class="verdict">{html.escape(r.outcome)}</b>: '
        f"{html.escape(r.claim.text)}: {html.escape(r.statement)} ({html.escape(r.narang)})"
        + (f" {html.escape(c)}" if (c := verdict_caveat(record, r)) else "")
        + "</li>"
        for r in results
    )
    body = "".join(
        f"<h2>{html.escape(title)}</h2>"
        + (_html_table(*table, cls) if table else "")
        + "".join(f"<p>{html.escape(p.removeprefix('- '))}</p>" for p in paragraphs if p)
        for title, cls, table, paragraphs in sections(record, results)
    )
    imgs = "".join(
        f'<figure><img alt="{p.stem}" src="data:image/png;base64,'
        f'{base64.b64encode(p.read_bytes()).decode()}"><figcaption>{p.stem}</figcaption></figure>'
        for p in images
    )
    configs = "".join(
        f"<h3>{html.escape(arm)}</h3><pre>{html.escape(json.dumps(config_of(c), indent=1))}</pre>"
        for arm, c in record.configs.items()
    )
    header = "".join(f"<p>{html.escape(line)}</p>" for line in header_lines(record))
    page = f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>archlab ablate {html.escape(s.name)}</title>
<style>{_STYLE}</style></head><body>
<h1>{html.escape(s.name)}: {html.escape(s.title)}</h1><p>Source: {html.escape(s.source)}</p>
<p id="design">Design: {html.escape(s.design)}</p><div id="compute">{header}</div>
<h2>Verdicts</h2><ul id="verdicts">{verdicts}</ul>{body}
<p>Narang et al. 2021 (arXiv 2102.11972): {html.escape(s.narang or "did not measure this switch.")}</p>
<h2>The verdict rule</h2><p>{html.escape(RULE)}</p><h2>Plots</h2>{imgs}
<h2>Exact configs (seed 0 of each arm)</h2>{configs}</body></html>"""  # noqa: E501
    return page
