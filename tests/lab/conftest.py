"""The lab's shared fixture: a real (tiny, in-process) run whose training batches
were recorded as the trainer drew them, read by the measures' tests (test_measure.py,
test_eval_measures.py, test_cost_measures.py, ...)."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch

from archlab.data.prepare import prepare_data
from archlab.data.tokens import TokenData
from archlab.train.config import resolve_config
from archlab.train.launch import train

BLOCK = 32
# what the fixture's run really drew: token counts of its training inputs
SEEN: dict[str, np.ndarray] = {}


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 4-step run (seed 3, 2 accumulation steps, step-0 weights kept) whose training batches
    are recorded as the trainer draws them, so the lab's replay of the batch stream can be checked
    against what was seen."""
    root = tmp_path_factory.mktemp("measure")
    text = root / "corpus.txt"
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text.write_text(
        "".join(
            (stdlib / name).read_text()
            for name in ("json/decoder.py", "json/encoder.py", "textwrap.py", "string.py")
        )
    )
    data = prepare_data(str(text), root / "data", "byte", val_fraction=0.3)
    keys = {
        "preset": "llama",
        "size": "tiny",
        "steps": "4",
        "data.source": str(data),
        "data.batch_size": "4",
        "data.block_size": str(BLOCK),
        "logging.eval_every": "2",
        "logging.eval_batches": "2",
        "logging.samples": "0",
        "logging.tensorboard": "false",
        "logging.progress": "false",
        "checkpoint.save_every": "2",
        "checkpoint.keep_last": "10",
        "out": str(root / "run"),
        "seed": "3",
        "optimizer.grad_accum": "2",
        "checkpoint.keep_initial": "true",
    }
    counts = np.zeros(256, dtype=np.int64)
    get_batch = TokenData.get_batch

    def recording(
        self: TokenData, split: str, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, ...]:
        x, y = get_batch(self, split, *args, **kwargs)
        if split == "train":
            counts[:] += np.bincount(x.numpy().ravel(), minlength=256)
        return x, y

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TokenData, "get_batch", recording)
        train(*resolve_config([keys]))
    SEEN["counts"] = counts
    return root / "run"
