"""The lab's stored runs keep their keys: every built-in suite at budget small plans the same run folders
(`runner.run_hash` of each arm and seed) as the code before issue 35 did, recorded in
tests/fixtures/run_ids_small.json (`python -m tests.lab.test_run_ids` rewrites it). A suite resumed after a change
that passes this retrains nothing.

`run_hash` (lab/store.py) keys a run by its model config's non-default fields. The option groups (`favor`, `vq`,
`gau`, `cosine`) nest fields that were flat, so the hash must read `ModelConfig.to_flat_dict()` (the old spelling)
rather than `to_dict()`: the `flat` fixture runs the planner that way when run_hash does not do so itself yet."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import pytest

from archlab.lab import runner
from archlab.lab.runner import plan_suite
from archlab.lab.suite import BUDGETS, list_suites
from archlab.nn.config import ModelConfig

RECORD = Path(__file__).resolve().parents[1] / "fixtures" / "run_ids_small.json"
RECORDED = json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.is_file() else {}
RUNNER_READS_FLAT = "to_flat_dict" in inspect.getsource(runner.run_hash)


def run_ids(store: Path) -> dict[str, list[str]]:
    """Each built-in suite's run folder names at budget small, in plan order."""
    return {Path(s.path).stem: [r.run_dir.name for r in plan_suite(
        s, BUDGETS["small"], store / "plans" / Path(s.path).stem, store=store).runs] for s in list_suites()}


def uses_groups(suite: str) -> bool:
    """Whether a suite's configs set an option group (their flat fields moved into `favor`, `vq`, ...)."""
    path = next(Path(s.path) for s in list_suites() if Path(s.path).stem == suite)
    text = path.read_text(encoding="utf-8")
    return any(f"{key}" in text for key in ("favor", "vq_", "vq.", "gau_attention", "cosine_scale", "gau."))


@pytest.fixture(scope="module")
def flat(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The run ids with the hash over `to_flat_dict` (run_hash's two `to_dict()` calls on model configs read
    `to_flat_dict()`): the planner calls `ModelConfig.to_dict` nowhere else."""
    with pytest.MonkeyPatch.context() as patch:
        if not RUNNER_READS_FLAT:
            patch.setattr(ModelConfig, "to_dict", ModelConfig.to_flat_dict)
        return run_ids(tmp_path_factory.mktemp("flat"))


@pytest.fixture(scope="module")
def as_is(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    return run_ids(tmp_path_factory.mktemp("as-is"))


@pytest.mark.parametrize("suite", sorted(RECORDED))
def test_every_suite_plans_the_run_folders_it_planned_before(suite: str, flat: dict[str, list[str]]) -> None:
    assert flat[suite] == RECORDED[suite]


@pytest.mark.parametrize("suite", sorted(RECORDED))
def test_the_runner_as_it_is_keeps_the_keys_of_suites_without_option_groups(
    suite: str, as_is: dict[str, list[str]]
) -> None:
    if uses_groups(suite) and not RUNNER_READS_FLAT:
        assert as_is[suite] != RECORDED[suite], "runner.run_hash needs no change: drop RUNNER_READS_FLAT"
    else:
        assert as_is[suite] == RECORDED[suite]


def test_the_record_covers_every_built_in_suite(flat: dict[str, list[str]]) -> None:
    assert sorted(flat) == sorted(RECORDED)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        RECORD.write_text(json.dumps(run_ids(Path(tmp)), indent=1) + "\n", encoding="utf-8")
    sys.exit(0)
