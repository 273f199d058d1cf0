"""One writer per run folder (train/lock.py): a second `archlab train` into a folder in use is
refused in one line before it writes anything, and the first finishes with its own config, metrics
and checkpoints; a lock left by a dead process is named and replaced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from archlab.checkpoint import list_checkpoints, load_checkpoint, verify_checkpoint
from archlab.train.lock import LOCK_FILE, RunLock, RunLocked
from archlab.train.metrics import read_metrics
from tests.conftest import snapshot
from tests.train.test_trainer import cli_flags

REPO = Path(__file__).resolve().parents[2]


def test_a_second_lock_on_a_held_folder_is_refused_naming_the_holder(tmp_path: Path) -> None:
    first = RunLock(tmp_path / "run").acquire()
    with pytest.raises(RunLocked, match=rf"in use by pid {os.getpid()} on host "):
        RunLock(tmp_path / "run").acquire()
    first.release()
    assert not (tmp_path / "run" / LOCK_FILE).exists()
    again = RunLock(tmp_path / "run").acquire()  # released: free again, and not reported stale
    assert again.stale is None
    again.release()


def test_a_lock_left_by_a_dead_process_is_named_stale_and_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_FILE).write_text(
        json.dumps({"pid": pid, "host": "h1", "started": 0, "command": "archlab train"})
    )
    with caplog.at_level("WARNING"):
        lock = RunLock(run).acquire()
    assert lock.stale is not None and lock.stale["pid"] == pid
    assert f"stale lock of pid {pid} on host h1" in caplog.text
    # the lock names its new holder
    assert json.loads((run / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()


def _train(prepared: Path, run: Path, preset: str, steps: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "archlab",
        "train",
        *cli_flags(
            prepared,
            run,
            preset=preset,
            steps=steps,
            **{
                "checkpoint.save_every": "5",
                "checkpoint.keep_last": "10",
                "precision.threads": "1",
            },
        ),
    ]


def test_two_concurrent_trains_into_one_folder_the_second_is_refused_the_first_is_intact(
    prepared: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(
        _train(prepared, run, "llama", "10"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (run / LOCK_FILE).is_file() or not (run / LOCK_FILE).read_text():
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first run never took the lock"
            time.sleep(0.02)
        first.send_signal(signal.SIGSTOP)  # hold it mid-run, lock taken, while the second one tries
        before = snapshot(run)
        second = subprocess.run(
            _train(prepared, run, "gpt2", "10"),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert snapshot(run) == before  # refused before writing anything
    finally:
        first.send_signal(signal.SIGCONT)
    out, err = first.communicate(timeout=120)
    assert second.returncode == 2
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and f"is in use by pid {first.pid} on host " in lines[0], second.stderr
    assert first.returncode == 0, err
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["preset"] == "llama"
    rows = [r for r in read_metrics(run) if r["kind"] == "train"]
    # one run's rows, no second run interleaved
    assert [r["step"] for r in rows] == list(range(1, 11))
    steps = [int(p.name.removeprefix("step_")) for p in list_checkpoints(run)]
    assert steps == [5, 10]
    for path in list_checkpoints(run):
        verify_checkpoint(path)
        ckpt = load_checkpoint(path)
        assert ckpt.config["train"]["preset"] == "llama"
        assert "layers.0.mlp.gate_up_proj.weight" in ckpt.model  # llama's SwiGLU, not gpt2's MLP
    assert not (run / LOCK_FILE).exists()  # released at the end
