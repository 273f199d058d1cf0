"""The lab's stored runs keep their keys: every built-in suite at budget small plans the same run folders
(`store.run_hash` of each arm and seed) as the code before issue 35 did, recorded in
tests/fixtures/run_ids_small.json (`python -m tests.lab.test_run_ids` rewrites it). A suite resumed after a change
that passes this retrains nothing.

`run_hash` (lab/runs/store.py) keys a run by its model config's non-default fields in the flat spelling
(`ModelConfig.to_flat_dict()`): the option groups (`favor`, `vq`, `gau`, `cosine`) nest fields that were flat, and
the suites that set them keep their keys only through that view."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import pytest

from archlab.lab.runs import store
from archlab.lab.runs.plan import plan_suite
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite_file import list_suites

RECORD = Path(__file__).resolve().parents[1] / "fixtures" / "run_ids_small.json"
RECORDED = json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.is_file() else {}


def run_ids(store: Path) -> dict[str, list[str]]:
    """Each built-in suite's run folder names at budget small, in plan order."""
    return {Path(s.path).stem: [r.run_dir.name for r in plan_suite(
        s, BUDGETS["small"], store / "plans" / Path(s.path).stem, store=store).runs] for s in list_suites()}


@pytest.fixture(scope="module")
def as_is(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    return run_ids(tmp_path_factory.mktemp("as-is"))


@pytest.mark.parametrize("suite", sorted(RECORDED))
def test_every_suite_plans_the_run_folders_it_planned_before(suite: str, as_is: dict[str, list[str]]) -> None:
    assert as_is[suite] == RECORDED[suite]


def test_the_hash_reads_the_flat_spelling() -> None:
    source = inspect.getsource(store.run_key)
    assert "to_flat_dict" in source and "model.to_dict()" not in source


def test_the_record_covers_every_built_in_suite(as_is: dict[str, list[str]]) -> None:
    assert sorted(as_is) == sorted(RECORDED)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        RECORD.write_text(json.dumps(run_ids(Path(tmp)), indent=1) + "\n", encoding="utf-8")
    sys.exit(0)
