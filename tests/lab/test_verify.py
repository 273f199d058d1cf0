"""The verifier of what readers read (lab/publishing/verify.py, `archlab ablate --verify DIR`,
`scripts/publish_results.py --check`), on copies of published pages: an outcome word edited in
SUITE.md, a statement edited in claims.json, the "Trained by" line edited, a margin changed
in both suite.yaml and claims.json after registration (the pages rebuilt around it, so every
other file agrees), and a provenance field no page shows are each named and exit 1; the copies
as published verify with none. A suite folder's results.md and report.html are rendered again
and compared too."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from archlab.cli import main
from archlab.lab.publishing import publish
from archlab.lab.publishing.verify import verify
from tests.lab.test_report import (
    ROOT,
    report,  # noqa: F401 - the fixture: a suite's folder as `archlab ablate` writes it
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"
# three pages that share no comparison with a page left out, so their copy alone
# re-judges as published
PAGES = ("ffn", "heads", "original-vs-modern-screening")
GEGLU = "| GeGLU beats GeLU at equal parameters |"
GQA = "GQA loses little (as good as MHA)"


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The three pages and their summary, rebuilt in a copy (the summary then lists
    these pages only)."""
    docs = tmp_path_factory.mktemp("docs") / "results"
    for name in PAGES:
        shutil.copytree(DOCS / name, docs / name)
        shutil.copyfile(DOCS / f"{name}.md", docs / f"{name}.md")
    publish.rebuild(docs)
    assert publish.check(docs) == []
    return docs


@pytest.fixture
def docs(published: Path, tmp_path: Path) -> Path:
    shutil.copytree(published, tmp_path / "results")
    return tmp_path / "results"


def check(docs: Path, capsys: pytest.CaptureFixture) -> list[str]:
    """scripts/publish_results.py --check's exit code 1 and the lines it printed."""
    spec = importlib.util.spec_from_file_location(
        "publish_results", ROOT / "scripts" / "publish_results.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    capsys.readouterr()
    assert script.main(["--check", "--to", str(docs)]) == 1
    return capsys.readouterr().out.splitlines()


def test_the_pages_as_published_verify(published: Path, capsys: pytest.CaptureFixture) -> None:
    for name in PAGES:
        assert main(["ablate", "--verify", str(published / name)]) == 0
    assert capsys.readouterr().out.count(
        "every verdict and page recomputed from its files agrees"
    ) == len(PAGES)


def test_an_outcome_word_edited_in_suite_md_is_named(
    docs: Path, capsys: pytest.CaptureFixture
) -> None:
    page = docs / "ffn.md"
    text = page.read_text()
    [row] = [
        line for line in text.splitlines() if line.startswith(GEGLU) and "| confirmed |" in line
    ]
    line_no = text.splitlines().index(row) + 1
    page.write_text(text.replace(row, row.replace("| confirmed |", "| contradicted |")))
    [problem] = verify(docs / "ffn")
    assert problem.startswith(f"ffn: ffn.md line {line_no}, which begins {row[:60]!r}: ")
    published, given = problem.split(" published, the files give ")
    assert "| contradicted |" in published and "| confirmed |" in given
    assert check(docs, capsys)[0] == f"differs: {problem}"
    assert main(["ablate", "--verify", str(docs / "ffn")]) == 1


def test_a_statement_edited_in_claims_json_is_named(
    docs: Path, capsys: pytest.CaptureFixture
) -> None:
    path = docs / "heads" / "claims.json"
    rows = json.loads(path.read_text())
    [row] = [r for r in rows if r["claim"] == GQA]
    honest = row["statement"]
    # the outcome and every number left as published
    row["statement"] = "as good as mha (costs nothing)"
    path.write_text(json.dumps(rows, indent=1))
    problems = verify(docs / "heads")
    assert problems == [
        f"heads: {GQA!r}: statement 'as good as mha (costs nothing)' recomputed as {honest!r}",
        "heads: record.sha256: claims.json changed since the record was hashed",
    ]
    assert check(docs, capsys) == [f"differs: {p}" for p in problems] + [
        f"{docs}: 3 pages; {len(problems)} differences"
    ]


def test_an_edited_trained_by_line_is_named(docs: Path, capsys: pytest.CaptureFixture) -> None:
    page = docs / "original-vs-modern-screening.md"
    text = page.read_text()
    [line] = [x for x in text.splitlines() if x.startswith("Trained by")]
    forged = f"Trained by archlab at commit {'1' * 40}: all 48 runs (recorded by the runs)."
    page.write_text(text.replace(line, forged))
    line_no = text.splitlines().index(line) + 1
    [problem] = verify(docs / "original-vs-modern-screening")

    def shown(s: str) -> str:  # as verify quotes a line: its first 200 characters
        return repr(s[:200] + "..." if len(s) > 200 else s)

    assert problem == (
        f"original-vs-modern-screening: original-vs-modern-screening.md line {line_no}: "
        f"{shown(forged)} published, the files give {shown(line)}"
    )
    # what the page says, from its files (the release's provenance record)
    assert line != forged and line.startswith("Trained by archlab at commit 0eb6d2e")
    assert check(docs, capsys)[0] == f"differs: {problem}"


def test_a_margin_changed_in_suite_yaml_and_claims_json_after_registration_is_named(
    docs: Path, capsys: pytest.CaptureFixture
) -> None:
    """The edit a careful forger makes: the margin changed in suite.yaml and every page file
    rebuilt from it (claims.json, SUITE.md, the summary and record.sha256 all agree again). Only
    the registration disagrees."""
    suite = docs / "heads" / "suite.yaml"
    suite.write_text(suite.read_text() + "margins: {val_loss: 0.06}\n")
    publish.rebuild(docs)
    rows = {r["claim"]: r for r in json.loads((docs / "heads" / "claims.json").read_text())}
    assert rows[GQA]["margin"] == 0.06  # claims.json now says 0.06 too
    problems = verify(docs / "heads")
    # the margin of both non-inferiority claims, and with it their smallest effect (a margin's
    # plan targets it)
    mqa = "MQA loses little (as good as MHA)"
    assert problems == [
        f"heads: registration.json: {claim!r}: {key} 0.03 registered, 0.06 judged"
        for claim in (GQA, mqa)
        for key in ("margin", "smallest_effect")
    ]
    assert check(docs, capsys) == [f"differs: {p}" for p in problems] + [
        f"{docs}: 3 pages; 4 differences"
    ]


def test_a_provenance_field_no_page_shows_is_caught_by_the_records_hash(docs: Path) -> None:
    path = docs / "ffn" / "provenance.json"
    provenance = json.loads(path.read_text())
    provenance["arms"]["relu"]["params"] += 1
    path.write_text(json.dumps(provenance, indent=1))
    assert verify(docs / "ffn") == [
        "ffn: record.sha256: provenance.json changed since the record was hashed"
    ]


def test_a_suite_folders_pages_are_rendered_again_and_compared(report, tmp_path: Path) -> None:  # noqa: F811
    plan, _ = report
    folder = tmp_path / "suite"
    shutil.copytree(plan.out, folder, symlinks=True)
    assert verify(folder) == []
    md = (folder / "results.md").read_text()
    assert "confirmed" in md
    (folder / "results.md").write_text(md.replace("confirmed", "inconclusive", 1))
    html = (folder / "report.html").read_text()
    (folder / "report.html").write_text(
        html.replace('class="verdict">confirmed', 'class="verdict">contradicted', 1)
    )
    problems = verify(folder)
    assert [p.split(" line ")[0] for p in problems] == ["results.md", "report.html"]
    assert "inconclusive" in problems[0].split(" published")[0] and "contradicted" in problems[1]
