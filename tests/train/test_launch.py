"""train/launch.py: the three ways a run begins, from Python as from the command line. A run
resumed (and extended) through `train_run` equals the same run resumed by `archlab train --resume`,
bit for bit; a finished run trains nothing from either; a run from existing weights starts from
exactly those weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from archlab.checkpoint import load_checkpoint
from archlab.cli import main
from archlab.nn.config import ModelConfig
from archlab.train.launch import NothingToTrain, plan_run, train_run
from archlab.train.metrics import read_metrics
from tests.train.test_trainer import TINY, cli_flags

FLAGS = {**TINY, "model.dropout": "0.1", "checkpoint.save_every": "2", "steps": "2"}


def dotted(prepared: Path, out: Path, **flags: str) -> dict[str, str]:
    """The layer of dotted keys `cli_flags` spells as flags."""
    args = cli_flags(prepared, out, **flags)
    return dict(zip((a.removeprefix("--") for a in args[::2]), args[1::2], strict=True))


def same_checkpoint(a: Path, b: Path) -> None:
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    oa, ob = load_checkpoint(a).optimizer, load_checkpoint(b).optimizer
    for key, state in oa["state"].items():
        assert all(
            torch.equal(torch.as_tensor(v), torch.as_tensor(ob["state"][key][n]))
            for n, v in state.items()
        )
    assert oa["param_groups"] == ob["param_groups"]


@pytest.mark.kernels
def test_a_run_resumed_from_python_equals_one_resumed_from_the_command_line(
    prepared: Path, tmp_path: Path
) -> None:
    python, command = tmp_path / "python", tmp_path / "command"
    result = train_run([dotted(prepared, python, **FLAGS)])  # a fresh run from Python
    assert result.step == 2 and result.checkpoint == python / "checkpoints" / "step_0000002"
    shutil.copytree(python, command)
    # resumed and extended to 4 steps: its lr schedule stretched, dropout and batch streams restored
    result = train_run([{"out": str(python), "steps": "4"}], resume=True, extend=True)
    assert main(["train", "--out", str(command), "--resume", "--steps", "4", "--extend"]) == 0
    assert result.step == 4
    same_checkpoint(
        python / "checkpoints" / "step_0000004", command / "checkpoints" / "step_0000004"
    )
    rows = [
        [(r["step"], r["loss"], r["lr"], r["grad_norm"]) for r in read_metrics(run, "train")]
        for run in (python, command)
    ]
    assert rows[0] == rows[1] and [r[0] for r in rows[0]] == [1, 2, 3, 4]
    assert rows[0][2][2] != rows[0][1][2]  # the lr moved on along the extended schedule


def test_a_finished_run_trains_nothing_from_either(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    train_run([dotted(prepared, run, **{**FLAGS, "model.dropout": "0.0"})])
    message = (
        f"{run} is already at step 2 of 2: nothing to resume; to train longer: --resume --steps N "
        "--extend (N > 2)"
    )
    with pytest.raises(NothingToTrain) as done:
        train_run([{"out": str(run)}], resume=True)
    assert str(done.value) == message
    capsys.readouterr()
    assert main(["train", "--out", str(run), "--resume"]) == 0
    assert capsys.readouterr().out.strip() == message
    # nothing written
    assert [c.name for c in sorted((run / "checkpoints").iterdir())] == ["step_0000002"]


def test_a_run_from_weights_starts_from_exactly_them(prepared: Path, tmp_path: Path) -> None:
    """`init_from`: the source's config under the layers (its tokenizer the run's), the source's
    weights, the path recorded; a field changed by the layers maps the weights (GQA pooling) or is
    refused by name."""
    source = tmp_path / "source"
    train_run([dotted(prepared, source, **{**FLAGS, "model.dropout": "0.0"})])
    checkpoint = source / "checkpoints" / "step_0000002"
    start = plan_run(
        [{"out": str(tmp_path / "new"), "data.source": str(prepared), "steps": "3"}],
        init_from=str(source),
    )
    assert (start.step, start.resume, start.train.init_from, start.train.steps) == (
        0,
        False,
        str(source),
        3,
    )
    assert start.train.data.tokenizer == str(checkpoint / "tokenizer.json")
    assert start.model == ModelConfig.from_dict(
        json.loads((checkpoint / "config.json").read_text())["model"]
    )
    weights, saved = start.weights.state_dict(), load_file(checkpoint / "model.safetensors")
    assert all(torch.equal(weights[k], saved[k]) for k in saved) and not (tmp_path / "new").exists()
    pooled = plan_run(
        [{"out": str(tmp_path / "gqa"), "data.source": str(prepared), "model.n_kv_heads": "1"}],
        init_from=str(source),
    )
    assert pooled.model.n_kv_heads == 1 and pooled.weights.config.n_kv_heads == 1
    with pytest.raises(
        ValueError, match=r"^cannot change d_model 32 -> 48: no principled weight mapping"
    ):
        plan_run(
            [{"out": str(tmp_path / "wide"), "data.source": str(prepared), "model.d_model": "48"}],
            init_from=str(source),
        )
    with pytest.raises(
        ValueError, match=r"^--init-from starts a new run and --resume continues one"
    ):
        plan_run([{"out": str(tmp_path / "both")}], resume=True, init_from=str(source))
