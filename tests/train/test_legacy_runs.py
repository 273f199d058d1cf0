"""Run folders written before issue 35 (flat `favor_*`, `vq_*`, `gau_attention`, `cosine_scale` keys; made by
tests/fixtures/legacy_runs.py with that code) load and resume under today's code to exactly the losses and weights
the old code reached by training straight through."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from archlab.checkpoint import latest_checkpoint, load_model
from archlab.cli import main
from archlab.run_folder import read_checkpoint_config
from tests.fixtures.legacy_runs import HERE, RUNS, corpus, losses, weights_digest

EXPECTED = json.loads((HERE / "expected.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("legacy")
    corpus(root)
    return root


@pytest.mark.parametrize("name", list(RUNS))
def test_an_old_run_folder_resumes_to_the_old_codes_losses_and_weights(
    name: str, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = folder / name
    shutil.copytree(HERE / name, run)
    monkeypatch.chdir(folder)  # the runs name their data by the relative path `data`
    saved = json.loads((run / "config.json").read_text(encoding="utf-8"))["model"]
    assert {k for k in RUNS[name] if k.removeprefix("model.") in saved} == set(RUNS[name])  # old flat keys
    model, _ = load_model(latest_checkpoint(run))  # the old config.json builds today's model
    assert model.config.to_flat_dict() == saved
    assert main(["train", "--out", name, "--resume", "--steps", "4"]) == 0
    assert losses(run) == EXPECTED[name]["losses"]
    assert weights_digest(latest_checkpoint(run)) == EXPECTED[name]["weights"]
    assert read_checkpoint_config(latest_checkpoint(run))["model"] == model.config.to_dict()
