"""What a run records: `RUN_DIR/metrics.jsonl` (one JSON object per row), TensorBoard events, norm ratios.

Rows carry `step` and `kind`: `train` (loss, lr, grad_norm, tokens_per_s, ...), `eval` (val loss),
`ratios` (per-layer update-norm / param-norm), `skip` (a non-finite step), `sample` (generated text) and
`resume` (the step a resumed run started from, its new `steps` and schedule end).
A resumed run first drops the rows past its checkpoint, so the file reads as if the run never stopped.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

logger = logging.getLogger(__name__)

METRICS = "metrics.jsonl"
TENSORBOARD = "tb"
LAYER = re.compile(r"^(layers\.\d+)\.")

Row = dict[str, float | int | str | bool | None]


def read_metrics(run_dir: str | Path, kind: str | None = None) -> list[Row]:
    """The rows of a run's metrics.jsonl, optionally only those of one kind."""
    path = Path(run_dir) / METRICS
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (is {run_dir} a training run folder?)")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if kind is None or r.get("kind") == kind]


def _truncate(path: Path, last_step: int) -> None:
    """Keep only rows up to `last_step` (a crashed run may have logged steps its checkpoint lacks)."""
    if not path.is_file():
        return
    keep = [line for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line)["step"] <= last_step]
    path.write_text("".join(line + "\n" for line in keep), encoding="utf-8")


class MetricsLogger:
    """Appends rows to metrics.jsonl and TensorBoard; a no-op on ranks other than 0."""

    def __init__(
        self, run_dir: str | Path, start_step: int = 0, tensorboard: bool = True, enabled: bool = True
    ) -> None:
        self.enabled = enabled
        self.writer = None
        if not enabled:
            return
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / METRICS
        _truncate(self.path, start_step)
        self.file = self.path.open("a", encoding="utf-8")
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # imports tensorboard: only when asked for

            # purge_step drops events past the checkpoint that a crashed run had written
            self.writer = SummaryWriter(str(run_dir / TENSORBOARD), purge_step=start_step + 1)

    def log(self, step: int, kind: str, values: Row) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps({"step": step, "kind": kind, **values}) + "\n")
        self.file.flush()
        if self.writer is not None:
            for key, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.writer.add_scalar(f"{kind}/{key}", value, step)
                elif isinstance(value, str):
                    self.writer.add_text(f"{kind}/{key}", value, step)

    def close(self) -> None:
        if not self.enabled:
            return
        self.file.close()
        if self.writer is not None:
            self.writer.close()


def layer_group(name: str) -> str:
    """`layers.3.attn.qkv_proj.weight` -> `layers.3`; `embed_tokens.weight` -> `embed_tokens`."""
    match = LAYER.match(name)
    return match.group(1) if match else name.split(".")[0]


def grouped_norms(tensors: dict[str, torch.Tensor]) -> dict[str, float]:
    """L2 norm per layer group of named tensors; FSDP shards are summed over the ranks.

    Every rank must call this together when the tensors are DTensors (one all-reduce).
    """
    groups = sorted({layer_group(n) for n in tensors})
    index = {g: i for i, g in enumerate(groups)}
    first = next(iter(tensors.values()))
    local = first.to_local() if isinstance(first, DTensor) else first
    sq = torch.zeros(len(groups), dtype=torch.float64, device=local.device)
    sharded = False
    for name, t in tensors.items():
        if isinstance(t, DTensor):
            t, sharded = t.to_local(), True
        sq[index[layer_group(name)]] += t.detach().double().square().sum()
    if sharded:
        torch.distributed.all_reduce(sq)
    return dict(zip(groups, sq.sqrt().tolist()))
