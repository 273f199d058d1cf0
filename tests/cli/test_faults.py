"""Filesystem faults through the CLI, on a size-capped tmpfs that really fills up or is really
read-only (root only; the tests skip elsewhere, saying why): a full disk at a checkpoint, a
full disk while data is prepared, and a read-only --out are each one line naming the path and
what happened (exit 1), nothing the user had is lost, and a resumed run finishes as if the
fault never happened."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from archlab.checkpoint import list_checkpoints, load_checkpoint, verify_checkpoint
from archlab.cli import main
from tests.conftest import SmallFilesystem, snapshot
from tests.train.test_trainer import cli_flags

HORIZON = {"schedule.horizon": "4"}


def shown(terminal: pytest.CaptureFixture) -> str:
    out = terminal.readouterr()
    return out.out + out.err


def train_losses(run: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if r["kind"] == "train"]


def test_a_full_disk_at_a_checkpoint_is_one_line_and_resume_finishes(
    prepared: Path,
    small_filesystem: Callable[[int], SmallFilesystem],
    terminal: pytest.CaptureFixture,
    tmp_path: Path,
) -> None:
    """The run trains to step 4 and cannot write its checkpoint: one line (not torch's 54-line
    RuntimeError), the step-2 checkpoint byte for byte as it was; with space freed, --resume ends
    where an uninterrupted run ends."""
    fs = small_filesystem(2048)
    run = fs.path / "run"
    assert main(["train", *cli_flags(prepared, run, steps="2", **HORIZON)]) == 0
    first = run / "checkpoints" / "step_0000002"
    before = snapshot(first)
    shown(terminal)
    fs.fill(leave=64 * 1024)  # room for the log rows, not for a ~470 KB checkpoint
    resume = ["train", *cli_flags(prepared, run, steps="4", **HORIZON), "--resume"]
    assert main(resume) == 1
    lines = shown(terminal).splitlines()
    assert "Traceback" not in "\n".join(lines) and sum("error" in line for line in lines) == 1, (
        lines
    )
    assert lines[-1] == (
        f"archlab train: error: no space left on device at {run / 'checkpoints'}: checkpoint step "
        f"4 was not written; the previous one ({first}) is still valid; free some space, then "
        "continue with --resume"
    )
    assert (
        list_checkpoints(run) == [first] and snapshot(first) == before and verify_checkpoint(first)
    )
    fs.free()
    assert main(resume) == 0
    straight = tmp_path / "straight"
    assert main(["train", *cli_flags(prepared, straight, steps="4", **HORIZON)]) == 0
    ours, theirs = (load_checkpoint(r / "checkpoints" / "step_0000004") for r in (run, straight))
    assert ours.model.keys() == theirs.model.keys()
    assert all(ours.model[k].equal(theirs.model[k]) for k in ours.model)
    assert train_losses(run) == train_losses(straight) and len(train_losses(run)) == 4


@pytest.mark.parametrize("command", ["train", "data prepare"])
def test_a_full_disk_while_preparing_data_is_one_line_and_keeps_nothing(
    command: str,
    prepared: Path,
    small_filesystem: Callable[[int], SmallFilesystem],
    terminal: pytest.CaptureFixture,
) -> None:
    """The corpus's ~240 KB of tokens on a 128 KB disk: the only line printed names the folder, and
    the disk is as empty as before (no run folder, no temp folder)."""
    fs = small_filesystem(128)
    corpus = prepared.parent / "corpus.txt"
    if command == "train":
        out = fs.path / "run"
        argv = ["train", *cli_flags(prepared, out, steps="2"), "--data", str(corpus)]
        folder = out / "data"
    else:
        out = folder = fs.path / "data"
        argv = ["data", "prepare", "--data", str(corpus), "--out", str(out)]
    assert main(argv) == 1
    assert shown(terminal) == (
        f"archlab {command.split()[0]}: error: cannot write the prepared data to {folder}: no "
        "space left on device; nothing was kept\n"
    )
    assert list(fs.path.iterdir()) == []


def test_a_full_disk_never_replaces_a_prepared_folder(
    prepared: Path,
    small_filesystem: Callable[[int], SmallFilesystem],
    terminal: pytest.CaptureFixture,
) -> None:
    """Preparing another corpus into a folder that holds one: it is built beside it, so a full disk
    leaves the old folder as it was."""
    fs = small_filesystem(256)
    small = fs.path / "small.txt"
    small.write_text("def f():\n    return 1\n" * 200)
    out = fs.path / "data"
    assert main(["data", "prepare", "--data", str(small), "--out", str(out)]) == 0
    before = snapshot(out)
    shown(terminal)
    assert (
        main(["data", "prepare", "--data", str(prepared.parent / "corpus.txt"), "--out", str(out)])
        == 1
    )
    assert shown(terminal) == (
        f"archlab data: error: cannot write the prepared data to {out}: no space left on "
        "device; nothing was kept\n"
    )
    assert snapshot(out) == before and sorted(p.name for p in fs.path.iterdir()) == [
        "data",
        "small.txt",
    ]


def test_a_read_only_out_is_one_line_before_any_work(
    prepared: Path,
    small_filesystem: Callable[[int], SmallFilesystem],
    terminal: pytest.CaptureFixture,
) -> None:
    """A new run, a resumed one and prepared data on a read-only mount (root ignores permissions,
    not a read-only mount): each the only line printed, naming the folder; the finished
    run is untouched."""
    fs = small_filesystem(2048)
    run = fs.path / "run"
    assert main(["train", *cli_flags(prepared, run, steps="2", **HORIZON)]) == 0
    before = snapshot(run)
    shown(terminal)
    fs.remount("ro")
    refused = "read-only file system; give a writable folder\n"
    cases = [
        (
            ["train", *cli_flags(prepared, run, steps="4", **HORIZON), "--resume"],
            f"archlab train: error: --out {run} cannot be written: {refused}",
        ),
        (
            ["train", *cli_flags(prepared, fs.path / "new", steps="2")],
            f"archlab train: error: --out {fs.path / 'new'} cannot be written (its "
            f"parent {fs.path}): {refused}",
        ),
        (
            [
                "data",
                "prepare",
                "--data",
                str(prepared.parent / "corpus.txt"),
                "--out",
                str(fs.path / "data"),
            ],
            f"archlab data: error: --out {fs.path / 'data'} cannot be written (its "
            f"parent {fs.path}): {refused}",
        ),
    ]
    for argv, message in cases:
        assert main(argv) == 1
        assert shown(terminal) == message
    assert snapshot(run) == before and [p.name for p in fs.path.iterdir()] == ["run"]
