"""`archlab.cli.main`: what users cause ends in one line (Ctrl-C: exit 130; a closed pipe: a quiet
exit; a full disk: exit 1), and `archlab --help`, every command's `--help` and `inspect` of a preset
or YAML config do not import torch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from archlab.checkpoint import list_checkpoints
from archlab.cli import COMMANDS, EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, main
from archlab.train.trainer import Trainer
from tests.conftest import run_without_torch
from tests.train.test_trainer import cli_flags

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}


def test_top_level_help_imports_no_torch() -> None:
    code = "from archlab.cli import build_parser; print(build_parser().format_help())"
    out = run_without_torch(code)
    assert all(name in out.stdout for name in ("inspect", "data", "train", "generate", "plot"))


# every command's --help (and its actions'), and inspect of a preset or a YAML config: flags, help
# and the costs come from the config dataclasses and torch-free name lists (issue 22: `train --help`
# took 3.7 s, `inspect` 6 s)
WITHOUT_TORCH = [
    ["--help"],
    *([name, "--help"] for name in COMMANDS),
    ["data", "prepare", "--help"],
    ["plot", "run", "--help"],
    ["plot", "rope", "--help"],
    ["eval", "length", "--help"],
    ["eval", "passkey", "--help"],
    ["eval", "continuation", "--help"],
    ["inspect", "--preset", "llama", "--size", "small"],
    [
        "inspect",
        "--preset",
        "gemma2",
        "--size",
        "tiny",
        "--json",
        "--model.rope_scaling.kind",
        "linear",
        "--model.rope_scaling.factor",
        "2",
    ],
    ["inspect", "--config", "configs/tiny-llama.yaml", "--n_layers", "4", "--json"],
    ["ablate", "--list"],
]


@pytest.mark.parametrize("argv", WITHOUT_TORCH, ids=[" ".join(a) for a in WITHOUT_TORCH])
def test_help_and_inspect_import_no_torch(argv: list[str]) -> None:
    code = (
        f"from archlab.cli import main\ntry:\n    rc = main({argv!r})\nexcept SystemExit as "
        "stop:  # --help\n"
        "    rc = stop.code\nassert not rc, rc\n"
    )
    out = run_without_torch(code, cwd=REPO)
    assert out.stdout.strip()


def test_a_closed_pipe_exits_quietly() -> None:
    # `archlab inspect --json | head -c 1`: the reader is gone before archlab writes
    proc = subprocess.Popen(
        [sys.executable, "-m", "archlab", "inspect", "--json"],
        env=ENV,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_BROKEN_PIPE == 141 and err == b""


def test_a_second_ctrl_c_exits_130_in_one_line(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Trainer.train_step

    def step_then_two_ctrl_c(self: Trainer) -> dict:
        row = original(self)
        if self.state.step == 2:
            os.kill(os.getpid(), signal.SIGINT)  # the first: finish this step, checkpoint, stop
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)  # the second, before the checkpoint: stop now
            time.sleep(0.05)
        return row

    monkeypatch.setattr(Trainer, "train_step", step_then_two_ctrl_c)
    run = tmp_path / "run"
    assert main(["train", *cli_flags(prepared, run, steps="10")]) == EXIT_INTERRUPTED == 130
    captured = capsys.readouterr()
    assert captured.err.strip() == "archlab train: interrupted" and "Traceback" not in captured.out
    assert list_checkpoints(run) == []


def test_inspect_varies_a_checkpoints_config_like_a_preset(tmp_path: Path, capsys) -> None:
    """`inspect --checkpoint RUN --ffn mlp` and `--preset llama --size small --ffn mlp` report
    the d_ff and parameter count of build_preset("llama", "small", ffn="mlp") (the derived d_ff
    re-derived, issue 23)."""
    from archlab.checkpoint import save_checkpoint
    from archlab.costs import parameter_counts
    from archlab.nn.presets import build_preset

    small = build_preset("llama", "small")
    tok = tmp_path / "tokenizer.json"
    tok.write_text("{}")
    save_checkpoint(tmp_path / "run", 1, {}, {}, {}, {"model": small.to_dict()}, tok)
    want = build_preset("llama", "small", ffn="mlp")
    for args in (["--checkpoint", str(tmp_path / "run")], ["--preset", "llama", "--size", "small"]):
        capsys.readouterr()
        assert main(["inspect", *args, "--ffn", "mlp", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["config"]["d_ff"] == want.d_ff == 1024
        assert report["params"]["total"] == parameter_counts(want)["total"]


def test_inspect_of_a_checkpoint_or_a_hf_folder_imports_no_torch(tmp_path: Path, capsys) -> None:
    """`inspect --checkpoint` reads config.json only (run_folder.py, interop/hf_config.py): no
    torch, and the same report as the torch path's ModelConfig gives."""
    from archlab.checkpoint import save_checkpoint
    from archlab.costs import parameter_counts
    from archlab.interop.families import FAMILIES
    from archlab.interop.hf_config import config_to_hf
    from archlab.nn.presets import build_preset

    small = build_preset("llama", "small")
    tok = tmp_path / "tokenizer.json"
    tok.write_text("{}")
    save_checkpoint(tmp_path / "run", 1, {}, {}, {}, {"model": small.to_dict()}, tok)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(
        json.dumps(config_to_hf(small, FAMILIES["llama"])[0])
    )
    for source in (
        tmp_path / "run",
        tmp_path / "run" / "checkpoints" / "step_0000001",
        tmp_path / "hf",
    ):
        argv = ["inspect", "--checkpoint", str(source), "--json"]
        out = run_without_torch(
            f"from archlab.cli import main\nassert main({argv!r}) == 0\n", cwd=REPO
        )
        report = json.loads(out.stdout)
        assert report["config"]["d_model"] == small.d_model and report[
            "params"
        ] == parameter_counts(small), source


def test_inspect_reads_a_run_config_as_train_resolves_it(capsys) -> None:
    """`inspect --config FILE` reports the model `train --config FILE` would build (its preset,
    size and model.* keys, vocab_size from its tokenizer), with --size and model flags on top, as
    train layers them."""
    from archlab.costs import parameter_counts
    from archlab.overrides import load_yaml
    from archlab.train.config import resolve_config

    yaml = str(REPO / "configs" / "tiny-llama.yaml")
    _, want = resolve_config([load_yaml(yaml), {"size": "small", "model.n_layers": "3"}])
    assert (
        main(["inspect", "--config", yaml, "--size", "small", "--model.n_layers", "3", "--json"])
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["config"] == want.to_dict() and want.d_model == 256 and want.n_layers == 3
    assert report["params"]["total"] == parameter_counts(want)["total"]


def _raising(err: BaseException) -> Callable[[object], int]:
    def run(args: object) -> int:
        raise err

    return run


def test_a_full_disk_no_writer_named_is_still_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The CLI's last net: a filesystem fault from a write no library code wrapped (its OSError
    names the file, or sits behind torch's RuntimeError) is one line, exit 1; any other error
    keeps its traceback."""
    import errno

    from archlab.commands import inspect

    def fails_with(err: BaseException) -> int:
        monkeypatch.setattr(inspect, "run", _raising(err))
        return main(["inspect"])

    assert fails_with(OSError(errno.ENOSPC, "No space left on device", "/data/out/length.md")) == 1
    assert (
        capsys.readouterr().err
        == "archlab inspect: error: cannot write /data/out/length.md: no space left on device\n"
    )
    behind = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    behind.__context__ = OSError(errno.EROFS, "Read-only file system")
    assert fails_with(behind) == 1
    assert (
        capsys.readouterr().err == "archlab inspect: error: a write failed: read-only file system\n"
    )
    # a read, too
    assert fails_with(PermissionError(errno.EACCES, "Permission denied", "/etc/run.yaml")) == 1
    assert (
        capsys.readouterr().err
        == "archlab inspect: error: cannot open /etc/run.yaml: permission denied\n"
    )
    with pytest.raises(RuntimeError, match="a bug"):
        fails_with(RuntimeError("a bug"))
    with pytest.raises(OSError, match="Input/output error"):
        fails_with(OSError(errno.EIO, "Input/output error"))
