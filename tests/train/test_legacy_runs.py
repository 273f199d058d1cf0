"""Run folders written before issue 35 (flat `favor_*`, `vq_*`, `gau_attention`, `cosine_scale`
keys; made by tests/fixtures/legacy_runs.py with that code) load and resume under today's code to
the losses and weights the old code reached by training straight through.

The old code's figures were recorded on other machines (expected.json says which), and float bits
differ between CPU classes, so they are compared within a tolerance. Bitwise, the resumed run is
compared with a twin resumed on this machine in the same test: the same old folder taken to step 3,
saved by today's code in today's format, and resumed from there to step 4.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from archlab.checkpoint import latest_checkpoint, load_model
from archlab.cli import main
from archlab.run_folder import read_checkpoint_config
from tests.fixtures.legacy_runs import HERE, RUNS, corpus, losses, weights

pytestmark = pytest.mark.kernels  # bitwise claims: rerun under AVX2 caps on AVX-512 CPUs

EXPECTED = json.loads((HERE / "expected.json").read_text(encoding="utf-8"))
# A loss is one fp32 mean over 128 tokens: another CPU's kernels change its last bits (fp32 eps is
# 1.2e-7); 1e-6 relative is 8 eps, and a changed step (another batch, learning rate or formula)
# moves these losses by >= 1e-3.
LOSS_RTOL = 1e-6
# Weights after 4 AdamW steps at lr 3e-3: the old code's straight run on an AMD Zen 2 (AVX2) and
# today's resume of the Intel-made (AVX-512) folder differ by at most 7.1e-6 (vq; favor 1.2e-7).
# 1e-4 is a thirtieth of one step's update, so a changed update (another learning rate, decay or
# moment) still fails.
WEIGHT_ATOL = 1e-4


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("legacy")
    corpus(root)
    return root


def resume(name: str, steps: int) -> None:
    assert main(["train", "--out", name, "--resume", "--steps", str(steps)]) == 0


@pytest.mark.parametrize("name", list(RUNS))
def test_an_old_run_folder_resumes_to_the_old_codes_losses_and_weights(
    name: str, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = folder / name
    shutil.copytree(HERE / name, run)
    monkeypatch.chdir(folder)  # the runs name their data by the relative path `data`
    saved = json.loads((run / "config.json").read_text(encoding="utf-8"))["model"]
    # old flat keys
    assert {k for k in RUNS[name] if k.removeprefix("model.") in saved} == set(RUNS[name])
    model, _ = load_model(latest_checkpoint(run))  # the old config.json builds today's model
    assert model.config.to_flat_dict() == saved
    resume(name, 4)
    assert read_checkpoint_config(latest_checkpoint(run))["model"] == model.config.to_dict()

    old_losses = [float.fromhex(x) for x in EXPECTED[name]["losses"]]
    assert [float.fromhex(x) for x in losses(run)] == pytest.approx(
        old_losses, rel=LOSS_RTOL, abs=0
    )
    got, old = (
        weights(latest_checkpoint(run)),
        load_file(HERE / "reference" / f"{name}.safetensors"),
    )
    assert got.keys() == old.keys()
    for key in old:
        torch.testing.assert_close(got[key], old[key], rtol=0, atol=WEIGHT_ATOL, msg=key)

    # bitwise: the same folder resumed in two legs on this machine, the second from
    # today's own format
    twin = folder / f"{name}-twin"
    shutil.copytree(HERE / name, twin)
    resume(twin.name, 3)
    assert (
        "favor_features"
        not in json.loads((twin / "config.json").read_text(encoding="utf-8"))["model"]
    )
    resume(twin.name, 4)
    assert losses(twin) == losses(run)
    twin_weights = weights(latest_checkpoint(twin))
    assert all(torch.equal(twin_weights[key], got[key]) for key in got)
