"""torchrun with two CPU processes on gloo (DDP and FSDP2) against one process with the
same global batch.

Tolerance: losses and grad norms agree to 1e-5 relative over 4 steps (seen: ~1e-7, the
all-reduce summation order), and the final weights to 1e-5 absolute. The DDP/FSDP checkpoints
are gathered on rank 0: they load into a plain model and resume in one process exactly like the
one-process run does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from archlab.checkpoint import load_model
from archlab.data.prepare import prepare_data
from archlab.train.distributed import setup
from archlab.train.metrics import read_metrics

REPO = Path(__file__).resolve().parents[2]
REL = 1e-5
FLAGS = [
    "--steps",
    "4",
    "--save-every",
    "0",
    "--model.d_model",
    "32",
    "--model.n_layers",
    "2",
    "--model.n_heads",
    "2",
    "--model.max_seq_len",
    "32",
    "--data.batch_size",
    "8",
    "--data.block_size",
    "32",
    "--logging.log_every",
    "1",
    "--logging.eval_every",
    "2",
    "--logging.eval_batches",
    "2",
    "--logging.samples",
    "1",
    "--logging.sample_tokens",
    "4",
    "--logging.ratio_every",
    "2",
    "--logging.progress",
    "false",
    "--logging.tensorboard",
    "false",
    "--optimizer.lr",
    "1e-2",
    "--optimizer.grad_accum",
    "2",
    "--schedule.warmup_steps",
    "1",
]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    (root / "corpus.txt").write_text(
        "".join(f"def f{i}(x):\n    return x * {i} + {i % 7}\n\n" for i in range(2000))
    )
    return prepare_data(str(root / "corpus.txt"), root / "prepared")


def run(args: list[str], nproc: int = 1) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    launcher = (
        ["-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--standalone"]
        if nproc > 1
        else []
    )
    cmd = [sys.executable, *launcher, "-m", "archlab", "train", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def single(prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("single") / "run"
    proc = run(["--data", str(prepared), "--out", str(out), *FLAGS])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module", params=["ddp", "fsdp"])
def two_procs(
    request: pytest.FixtureRequest, prepared: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The same run as `single`, by two processes under torchrun."""
    out = tmp_path_factory.mktemp(request.param) / "run"
    proc = run(
        ["--data", str(prepared), "--out", str(out), "--distributed", request.param, *FLAGS],
        nproc=2,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_two_processes_match_one_with_the_same_global_batch(two_procs: Path, single: Path) -> None:
    for kind, keys in (
        ("train", ("loss", "grad_norm", "lr")),
        ("eval", ("loss",)),
        ("ratios", ("layers.0",)),
    ):
        ours, ref = read_metrics(two_procs, kind), read_metrics(single, kind)
        assert [r["step"] for r in ours] == [r["step"] for r in ref] and ours
        for a, b in zip(ours, ref):
            for key in keys:
                assert a[key] == pytest.approx(b[key], rel=REL), (kind, a["step"], key)
    name = "checkpoints/step_0000004/model.safetensors"
    a, b = load_file(two_procs / name), load_file(single / name)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-5, msg=key)
    assert [r["text"] for r in read_metrics(two_procs, "sample")] == [
        r["text"] for r in read_metrics(single, "sample")
    ]
    model, _ = load_model(two_procs)  # the gathered FSDP/DDP checkpoint loads into a plain model
    assert not any(type(p.data) is not torch.Tensor for p in model.parameters())


@pytest.fixture(scope="module")
def single_resumed(single: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("single_resumed") / "run"
    shutil.copytree(single, out)
    proc = run(["--out", str(out), "--resume", "--steps", "6", "--extend"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_a_distributed_checkpoint_resumes_in_one_process(
    two_procs: Path, single_resumed: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    shutil.copytree(two_procs, out)
    proc = run(["--out", str(out), "--resume", "--steps", "6", "--extend", "--distributed", "none"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours, ref = read_metrics(out, "train")[-2:], read_metrics(single_resumed, "train")[-2:]
    assert [r["step"] for r in ours] == [r["step"] for r in ref] == [5, 6]
    for a, b in zip(ours, ref):
        assert a["loss"] == pytest.approx(b["loss"], rel=REL)


def test_distributed_mode_needs_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match="--distributed fsdp needs torchrun"):
        setup("fsdp", "cpu")


def test_torchrun_without_a_distributed_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(
        ValueError, match="launched with 2 processes but distributed='none'; pass --distributed"
    ):
        setup("none", "cpu")


def test_single_process_context() -> None:
    ctx = setup("none", "cpu")
    assert (ctx.rank, ctx.world_size, ctx.is_main, ctx.device.type) == (0, 1, True, "cpu")
