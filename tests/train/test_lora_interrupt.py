"""A LoRA fine-tune really interrupted, in its own process, resumes exactly: killed by SIGKILL
between two checkpoints (a crash), then `archlab train --out RUN --resume` with no other flag,
ends with bitwise the merged weights, the adapters and the metrics of the run that never stopped.
test_lora_resume.py checks Ctrl-C and the refusals."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from archlab.checkpoint import list_checkpoints
from archlab.cli import main
from archlab.train.metrics import read_metrics
from tests.train.test_trainer import TINY, cli_flags, finish, launch, train_rows, wait_for

pytestmark = pytest.mark.kernels  # bitwise claims: rerun under AVX2 caps on AVX-512 CPUs

LORA = {
    "lora_rank": "4",
    "lora_alpha": "8",
    "lora_targets": "qkv_proj,down_proj",
    "optimizer.lr": "1e-2",
}


def init_flags(source: Path, prepared: Path, run: Path, **flags: str) -> list[str]:
    """`--init-from SOURCE` and the tiny settings, minus the model shape (the source's
    config gives it)."""
    merged = {k: v for k, v in TINY.items() if not k.startswith("model.")} | {
        "out": str(run),
        **LORA,
        **flags,
    }
    return [
        "--init-from",
        str(source),
        "--data",
        str(prepared),
        *[item for key, value in merged.items() for item in (f"--{key}", value)],
    ]


@pytest.fixture
def source(prepared: Path, tmp_path: Path) -> Path:
    assert main(["train", *cli_flags(prepared, tmp_path / "source", steps="2")]) == 0
    return tmp_path / "source"


def adapters(run: Path, step: str) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / step / "state.pt", weights_only=True)["lora"][
        "adapters"
    ]


@pytest.mark.slow
def test_a_lora_run_killed_by_sigkill_resumes_bitwise(
    prepared: Path, source: Path, tmp_path: Path
) -> None:
    # dropout, and evaluation plus a sample every step (slow steps: the kill lands between
    # checkpoints 5 and 10)
    flags = {
        "steps": "10",
        "checkpoint.save_every": "5",
        "model.dropout": "0.1",
        "logging.eval_every": "1",
        "logging.eval_batches": "100",
        "logging.samples": "1",
        "logging.sample_tokens": "8",
    }
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    proc = launch(init_flags(source, prepared, killed, **flags))
    wait_for(lambda: (killed / "checkpoints" / "step_0000005").is_dir(), proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert [p.name for p in list_checkpoints(killed)] == ["step_0000005"], (
        "the kill landed after the end"
    )
    # base rebuilt from source
    assert finish(launch(["--out", str(killed), "--resume"])).startswith("step 10:")
    finish(launch(init_flags(source, prepared, straight, **flags)))
    a = load_file(straight / "checkpoints" / "step_0000010" / "model.safetensors")
    b = load_file(killed / "checkpoints" / "step_0000010" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    sa, sb = adapters(straight, "step_0000010"), adapters(killed, "step_0000010")
    # 2 x (A, B)
    assert sa.keys() == sb.keys() and len(sa) == 4 and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert all(v.abs().max() > 0 for k, v in sa.items() if ".lora_B." in k), "B never moved"
    assert train_rows(straight) == train_rows(killed) and len(train_rows(killed)) == 10
    assert read_metrics(straight, "eval") == read_metrics(killed, "eval")
