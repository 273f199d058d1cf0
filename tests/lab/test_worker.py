"""The lab's worker processes (lab/runs/worker.py) train a run exactly as `archlab train` alone
does: a run trained after another one in the same worker ends, bit for bit, where the same command
ends in a fresh process, and writes the same provenance record; a failing run is reported by its
exit code and the worker goes on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from archlab.checkpoint import latest_checkpoint
from archlab.lab.runs import runner
from archlab.lab.runs.plan import plan_suite, prepare
from archlab.lab.runs.worker import Worker
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite_file import load_suite
from archlab.train.metrics import read_metrics
from archlab.train.provenance import read_record

SUITE = """
name: two
design: the worker's equality with archlab train
base: {preset: llama, steps: 6, logging.eval_every: 3, logging.log_every: 1, schedule.warmup_steps: 1,
       model.dropout: 0.1}
arms: {a: {}, b: {model.norm: layernorm, model.position: alibi}}
measure: [val_loss]
claims: [{text: b beats a, metric: val_loss, arm: b, versus: a}]
"""  # noqa: E501


def rows(run: Path) -> list[tuple]:
    return [
        (
            r["kind"] if "kind" in r else "train",
            r["step"],
            r.get("loss"),
            r.get("grad_norm"),
            r.get("lr"),
        )
        for r in read_metrics(run)
        if r.get("kind", "train") in ("train", "eval")
    ]


@pytest.mark.kernels
@pytest.mark.slow
def test_a_run_trained_after_another_in_one_worker_equals_archlab_train_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the worker and the lone process alike
    (tmp_path / "two.yaml").write_text(SUITE)
    plan = plan_suite(
        load_suite(tmp_path / "two.yaml"),
        BUDGETS["tiny"],
        tmp_path / "out",
        store=tmp_path / "store",
    )
    # b and a/1 follow a/0
    plan.runs = [plan.runs_of("a")[0], plan.runs_of("b")[0], plan.runs_of("a")[1]]
    prepare(plan)
    runner.run_plan(plan, jobs=1, poll_s=0.05)
    for run in plan.runs[1:]:
        alone = tmp_path / f"alone-{run.arm}{run.seed}"
        flags = [part for k, v in run.keys.items() if k != "out" for part in (f"--{k}", v)]
        subprocess.run(
            [sys.executable, "-m", "archlab", "train", *flags, "--out", str(alone)],
            check=True,
            capture_output=True,
            env={**os.environ},
        )
        assert rows(run.run_dir) == rows(alone) and len(rows(alone)) == 8
        mine, theirs = (
            load_file(latest_checkpoint(d) / "model.safetensors") for d in (run.run_dir, alone)
        )
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
        opt = [
            torch.load(latest_checkpoint(d) / "optimizer.pt", weights_only=True)
            for d in (run.run_dir, alone)
        ]
        assert all(
            torch.equal(a, b)
            for a, b in zip(
                *(
                    [
                        t
                        for s in o["state"].values()
                        for t in s.values()
                        if isinstance(t, torch.Tensor)
                    ]
                    for o in opt
                )
            )
        )
        # the same provenance record (train/provenance.py) as archlab train writes, its time aside
        mine, theirs = (
            [{k: v for k, v in s.items() if k != "started_at"} for s in read_record(d)["sessions"]]
            for d in (run.run_dir, alone)
        )
        assert mine == theirs and len(mine) == 1 and mine[0]["from_step"] == 0


@pytest.mark.slow
def test_a_refused_run_is_its_exit_code_and_its_line_in_its_log_and_the_worker_goes_on(
    tmp_path: Path,
) -> None:
    worker = Worker.start(threads=1)
    try:
        (tmp_path / "corpus.txt").write_text("def f(x):\n    return x\n" * 50)
        keys = {
            "preset": "llama",
            "model.d_model": "7",
            "data.source": str(tmp_path / "corpus.txt"),
            "out": str(tmp_path / "r"),
        }
        worker.submit("bad", keys, False, tmp_path / "train.log")
        # a refused config: archlab train's one line and exit code
        assert worker.result(timeout=120) == 2
        lines = (tmp_path / "train.log").read_text().splitlines()
        assert (
            len(lines) == 1
            and lines[0].startswith("archlab train: error:")
            and "d_model" in lines[0]
        )
        assert not (tmp_path / "r").exists()
        worker.submit(
            "missing",
            {**keys, "model.d_model": "16", "data.source": str(tmp_path / "none")},
            False,
            tmp_path / "second.log",
        )
        # the same process serves the next
        assert worker.result(timeout=120) == 2 and worker.process.is_alive()
        assert str(tmp_path / "none") in (tmp_path / "second.log").read_text()
    finally:
        worker.stop()
    assert not worker.process.is_alive()


@pytest.mark.slow
def test_a_worker_killed_before_it_read_its_run_reports_the_signal(tmp_path: Path) -> None:
    """SIGTERM to a whole `archlab ablate` (pgrep -f) can reach a worker still starting: it dies
    with the run's message unread, its end of the pipe resets, and the lab's interrupt path must get
    the exit code (-9 here), not the pipe's ConnectionResetError."""
    worker = Worker.start(threads=1)
    try:
        worker.submit("run", {"preset": "llama"}, False, tmp_path / "train.log")
        os.kill(worker.process.pid, signal.SIGKILL)  # still importing: the message is unread
        assert worker.result(timeout=None) == -signal.SIGKILL
    finally:
        worker.stop()
