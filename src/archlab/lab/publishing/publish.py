"""docs/results: the published pages, each rebuilt from its own files.

A page is a folder docs/results/SUITE/ holding a lab record (lab/publishing/record.py: results.csv,
items.csv, timings.csv, suite.yaml, configs.yaml, provenance.json, claims.json), its plots
and a person's reading (reading.md), plus the page docs/results/SUITE.md rendered from them
(lab/publishing/page.py, with its earlier verdicts beside it: lab/publishing/history.py).
`rebuild` re-judges every page from its files with one verdict per comparison two pages share
(lab/publishing/books.py), and writes claims.json, SUITE.md and the summary README.md
(lab/publishing/summary.py); `check` does the same without writing and lists every difference from
what is published.
"""

from __future__ import annotations

import difflib
import json
import shutil
from pathlib import Path

from archlab.lab.analysis.verdicts import ClaimResult
from archlab.lab.publishing import history, page, simple_effects, summary
from archlab.lab.publishing.books import judged, rows_of
from archlab.lab.publishing.record import (
    CLAIMS,
    HASHES,
    PREVIOUS_RULE,
    REJUDGED,
    Record,
    differences,
    hash_differences,
    read_record,
    record_digest,
    registered_differences,
    write_hashes,
)
from archlab.lab.publishing.registered import made_on_rejudging
from archlab.lab.publishing.summary import SUMMARY
from archlab.lab.spec.claims_index import ClaimsIndexError, load_index

PLOTS = (
    "val_loss.png",
    "grad_norm.png",
    "embed_row_norm.png",
    "half_normal.png",
    "main_effects.png",
)


def check(docs: Path, only: str | None = None) -> list[str]:
    """Every difference between what is published and what the pages' files give, each naming the
    page and what differs; [] when everything agrees. Per page (`only`: that page alone, its shared
    verdicts still judged with every page): claims.json against its verdicts recomputed (numbers,
    outcomes, statements, every field); the claims it judges against its registration; each record
    file against record.sha256; SUITE.md against the page rendered again from the files. Then the
    summary README.md against the one the pages give."""
    problems = []
    books = judged(docs)
    for name, rows in rows_of(books).items():
        if only is not None and name != only:
            continue
        path = docs / name / CLAIMS
        found = claims_differences(
            json.loads(path.read_text(encoding="utf-8")) if path.is_file() else [], rows
        )
        record, results = books[name]
        if record.registration is None:
            found.append("registration.json does not exist: its claims were never registered")
        found += registered_differences(record) + hash_differences(docs / name)
        found += text_differences(
            f"{name}.md", docs / f"{name}.md", page_text(docs, record, results)
        )
        problems += [f"{name}: {line}" for line in found]
    if only is None:
        try:
            readme = summary.text(docs, books)
        # the summary's lecture tally needs the index: its problems, one line each
        except ClaimsIndexError as err:
            return problems + [f"claims index {line}" for line in str(err).splitlines()]
        problems += text_differences(SUMMARY, docs / SUMMARY, readme)
    return problems


def claims_differences(published: list[dict], rows: list[dict]) -> list[str]:
    """A page's claims.json against its rows recomputed with every page (`rows_of`): every field,
    the headline Holm p of a shared comparison included."""
    return differences(published, rows, alone=False)


def text_differences(label: str, path: Path, regenerated: str, limit: int = 3) -> list[str]:
    """Where the published text at `path` differs from `regenerated`, line by line (difflib), the
    first `limit` changes quoted."""
    if not path.is_file():
        return [f"{label}: does not exist (rebuild it)"]
    published = path.read_text(encoding="utf-8")
    if published == regenerated:
        return []
    old, new = published.splitlines(), regenerated.splitlines()
    changes = [
        op
        for op in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes()
        if op[0] != "equal"
    ]
    out = [
        f"{label} line {i1 + 1}{_begins(old[i1:i2], new[j1:j2])}: "
        + " published, the files give ".join(_changed(old[i1:i2], new[j1:j2]))
        for _, i1, i2, j1, j2 in changes[:limit]
    ]
    return out + ([f"{label}: {len(changes) - limit} more changes"] if len(changes) > limit else [])


CONTEXT = 60  # characters quoted either side of a change within a line


def _begins(old: list[str], new: list[str]) -> str:
    """Where a change within one long line lies, for the reader: how the line begins (a table
    row: its claim)."""
    if (
        len(old) == len(new) == 1
        and old[0][:CONTEXT] == new[0][:CONTEXT]
        and len(old[0]) > 2 * CONTEXT
    ):
        return f", which begins {old[0][:CONTEXT]!r}"
    return ""


def _changed(old: list[str], new: list[str]) -> tuple[str, str]:
    """The two sides of a change, quoted: within one line, the part that differs with some context
    either side; whole lines otherwise (cut at 200 characters)."""
    a, b = " / ".join(old), " / ".join(new)
    if len(old) == len(new) == 1:
        # common head
        start = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        end = 0  # common tail, not overlapping the head
        while end < min(len(a), len(b)) - start and a[len(a) - 1 - end] == b[len(b) - 1 - end]:
            end += 1
        lo = max(0, start - CONTEXT)

        def part(s: str) -> str:
            hi = min(len(s), len(s) - end + CONTEXT)
            return ("..." if lo else "") + s[lo:hi] + ("..." if hi < len(s) else "")

        a, b = part(a), part(b)
    return tuple(repr(s[:200] + "..." if len(s) > 200 else s) if s else "(nothing)" for s in (a, b))


def rebuild(docs: Path) -> list[str]:
    """Re-judge every page from its files and write claims.json, record.sha256, SUITE.md and the
    summary; returns the pages."""
    books = judged(docs)
    load_index()  # first: a claims index that does not check stops the rebuild before any write
    for name, rows in rows_of(books).items():
        path = docs / name / CLAIMS
        if not path.is_file() or claims_differences(
            json.loads(path.read_text(encoding="utf-8")), rows
        ):
            # equal rows stay (their last bits too)
            path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
        write_hashes(docs / name)
        record, results = books[name]
        (docs / f"{name}.md").write_text(page_text(docs, record, results), encoding="utf-8")
    # after the pages: it lists their hashes
    (docs / SUMMARY).write_text(summary.text(docs, books), encoding="utf-8")
    return list(books)


# ------------------------------------------------------------------------------------------ pages
def page_text(docs: Path, record: Record, results: list[ClaimResult]) -> str:
    """docs/SUITE.md from the page's record: the lab's page with links into SUITE/, a screening's
    switches at the modern base from other pages' runs (lab/publishing/simple_effects.py), and the
    comparisons with the verdicts of earlier rules."""
    name = record.suite.name
    folder = docs / name
    plots = [f"{name}/{p}" for p in PLOTS if (folder / p).is_file()]
    extra = history.sections(folder, record, results)
    digest = record_digest(folder)
    record_line = (
        [
            f"Record: `{HASHES}` holds the sha256 of each of its files and plots; its own sha256 "
            f"is {digest[:16]}, so one hash names every byte these numbers come from."
        ]
        if digest
        else []
    )
    text = page.markdown_text(record, results, plots, extra, record_line)
    if record.suite.screening:  # each switch at the modern base, after the screening's own effects
        metric = "val_loss" if "val_loss" in record.suite.measures else record.suite.measures[0]
        at_base, noise = (
            simple_effects.section(docs, record, metric),
            "\n## How noisy this suite was",
        )
        text = (
            text.replace(noise, at_base.rstrip("\n") + "\n" + noise, 1)
            if noise in text
            else text + at_base
        )
    for file in (
        "results.csv",
        "items.csv",
        "timings.csv",
        "configs.yaml",
        "provenance.json",
        "claims.json",
        "suite.yaml",
        "registration.json",
        HASHES,
    ):
        text = text.replace(f"`{file}`", f"[`{file}`]({name}/{file})")
    return text.replace(
        "this page's folder", f"this page's folder (`archlab ablate --verify docs/results/{name}`)"
    )


def import_folder(suite_dir: Path, docs: Path) -> Path:
    """Copy a finished suite folder's record and plots into docs/SUITE/ (its reading and earlier
    rules' verdicts kept; the claims.json it replaces kept as previous-rule.json when it came from
    the previous rule, and as rejudged.json when a suite registered for its runs replaces a page
    registered on re-judging)."""
    record = read_record(suite_dir)
    folder = docs / record.suite.name
    folder.mkdir(parents=True, exist_ok=True)
    old = folder / CLAIMS
    if old.is_file() and not (folder / PREVIOUS_RULE).is_file():
        rows = json.loads(old.read_text(encoding="utf-8"))
        # written by the previous rule
        if rows and "p_holm_suite" not in rows[0] and "key" in rows[0]:
            shutil.copyfile(old, folder / PREVIOUS_RULE)
    if (
        old.is_file()
        and not (folder / REJUDGED).is_file()
        and made_on_rejudging(folder)
        and made_on_rejudging(suite_dir) is False
    ):
        # a registered re-run replaces a page registered on re-judging
        shutil.copyfile(old, folder / REJUDGED)
    for name in (
        "results.csv",
        "items.csv",
        "timings.csv",
        "suite.yaml",
        "configs.yaml",
        "provenance.json",
        "claims.json",
        "registration.json",
        *PLOTS,
    ):
        if (suite_dir / name).is_file():
            shutil.copyfile(suite_dir / name, folder / name)
        elif name in ("items.csv", "timings.csv") and (folder / name).is_file():
            (folder / name).unlink()
    return folder
