"""`archlab ablate --verify DIR`: what readers read, checked against the files it is rendered from.

A folder is verified from its files alone: its verdicts judged again (lab/publishing/record.py), and

- claims.json, field by field: outcomes and numbers (to 1e-9 relative), statements, notes and
  every other word;
- its registration: each judged claim must be the one registered (lab/spec/registration.py);
- its record.sha256: each record file's bytes;
- its pages rendered again and compared line by line: results.md and report.html in a suite's
  folder; for a published page (a folder of docs/results), docs/results/SUITE.md, rendered with
  every page's verdicts as `scripts/publish_results.py --check` renders it (a comparison two pages
  share has one verdict).

Every difference is one line naming the file and what differs; none means every number, word and
rendered line agrees with the files.
"""

from __future__ import annotations

import json
from pathlib import Path

from archlab.lab.publishing import page, publish
from archlab.lab.publishing.record import (
    CLAIMS,
    HASHES,
    claim_rows,
    differences,
    hash_differences,
    registered_differences,
    rejudge,
)
from archlab.lab.publishing.summary import SUMMARY

PAGES = ("results.md", "report.html")  # what `archlab ablate` renders into a suite's folder


def published_docs(folder: Path) -> Path | None:
    """The docs/results folder `folder` is a page of (it holds the summary and the page's
    SUITE.md), or None."""
    docs = folder.parent
    return docs if (docs / SUMMARY).is_file() and (docs / f"{folder.name}.md").is_file() else None


def verify(folder: str | Path) -> list[str]:
    """Every difference between what `folder` publishes and what its files give (module doc);
    [] when none."""
    folder = Path(folder)
    rejudge(folder)  # refuses a folder that is not a record, in one line, before anything else
    docs = published_docs(folder)
    return publish.check(docs, only=folder.name) if docs is not None else verify_alone(folder)


def verify_alone(folder: Path) -> list[str]:
    """`folder` judged on its own: its claims.json (a comparison it shares with another page on
    its own family's figures), its registration, its record.sha256 where it has one, and the pages
    `archlab ablate` renders into a suite's folder, where they are."""
    record, results = rejudge(folder)
    path = folder / CLAIMS
    if not path.is_file():
        return [f"{path} does not exist"]
    problems = differences(
        json.loads(path.read_text(encoding="utf-8")), claim_rows(record.table, results)
    )
    problems += registered_differences(record)
    if (folder / HASHES).is_file():
        problems += hash_differences(folder)
    images = sorted(folder.glob("*.png"))
    rendered = {
        "results.md": lambda: page.markdown_text(record, results, [p.name for p in images]),
        "report.html": lambda: page.html_text(record, results, images),
    }
    for name in PAGES:
        if (folder / name).is_file():
            problems += publish.text_differences(name, folder / name, rendered[name]())
    return problems
