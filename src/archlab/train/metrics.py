"""What a run records: RUN_DIR/metrics.jsonl (a JSON object per row), TensorBoard, norm ratios.

Rows carry `step` and `kind`: `train` (loss, lr, grad_norm, tokens_per_s, ...), `eval` (val loss and
the embedding outlier signature of `embedding_signature`), `ratios` (per-layer update-norm /
param-norm), `skip` (a non-finite step), `sample` (generated text) and `resume` (the step a resumed
run started from, its new `steps` and schedule end). A resumed run first drops the rows past its
checkpoint, so the file reads as if the run never stopped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

from archlab.storage import StorageError, replace_text, writing

logger = logging.getLogger(__name__)

METRICS = "metrics.jsonl"
TENSORBOARD = "tb"
LAYER = re.compile(r"^(layers\.\d+)\.")
# an entry within 1% of 1/lambda counts as "at the sign optimizers' fixed point"
NEAR_FIXED_POINT = 0.01

Row = dict[str, float | int | str | bool | None]


def read_metrics(run_dir: str | Path, kind: str | None = None) -> list[Row]:
    """The rows of a run's metrics.jsonl, optionally only those of one kind
    (`parse_metrics` checks them)."""
    path = Path(run_dir) / METRICS
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (is {run_dir} a training run folder?)")
    return [r for r in parse_metrics(path) if kind is None or r.get("kind") == kind]


def parse_metrics(path: Path) -> list[Row]:
    """Every row of metrics file `path`; one line naming the file, the line and what is wrong
    otherwise. A last line without its newline that does not parse is a row a writer was cut off
    in (a crash, or a run still writing while this reads): it is left out, since no checkpoint can
    hold its step."""
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            if number == len(lines):  # the unterminated last line: a torn write
                break
            if isinstance(err, UnicodeDecodeError):
                what = f"not UTF-8 text (byte 0x{line[err.start]:02x} at column {err.start + 1})"
            else:
                what = f"not a JSON row ({err.msg} at column {err.colno})"
            raise ValueError(
                f"{path} is corrupt: line {number} is {what}; restore the file or move it away"
            ) from None
        if (
            not isinstance(row, dict)
            or isinstance(row.get("step"), bool)
            or not isinstance(row.get("step"), int)
        ):
            raise ValueError(
                f"{path} is corrupt: line {number} is not a metrics row (an object with an integer "
                "'step'); restore the file or move it away"
            )
        rows.append(row)
    return rows


def _truncate(path: Path, last_step: int) -> None:
    """Keep only rows up to `last_step` (a crashed run may have logged steps its checkpoint
    lacks); the file is replaced whole, so a full disk leaves it as it was."""
    if not path.is_file():
        return
    keep = [json.dumps(row) for row in parse_metrics(path) if row["step"] <= last_step]
    replace_text(path, "".join(line + "\n" for line in keep))


class MetricsLogger:
    """Appends rows to metrics.jsonl and TensorBoard; a no-op on ranks other than 0."""

    def __init__(
        self,
        run_dir: str | Path,
        start_step: int = 0,
        tensorboard: bool = True,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled
        self.writer = None
        if not enabled:
            return
        run_dir = Path(run_dir)
        self.path = run_dir / METRICS
        with writing(self.path, "the metrics"):
            run_dir.mkdir(parents=True, exist_ok=True)
            _truncate(self.path, start_step)
            self.file = self.path.open("a", encoding="utf-8")
        if tensorboard:
            from torch.utils.tensorboard import (
                SummaryWriter,  # imports tensorboard: only when asked for
            )

            # purge_step drops events past the checkpoint that a crashed run had written
            self.writer = SummaryWriter(str(run_dir / TENSORBOARD), purge_step=start_step + 1)

    def log(self, step: int, kind: str, values: Row) -> None:
        if not self.enabled:
            return
        try:
            with writing(self.path, f"the step-{step} {kind} row"):
                self.file.write(json.dumps({"step": step, "kind": kind, **values}) + "\n")
                self.file.flush()
        except StorageError:
            # a row cut short is the unterminated last line parse_metrics leaves out; closing
            # drops what the buffer still holds, so close() raises nothing more
            with contextlib.suppress(OSError):
                self.file.close()
            raise
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


@torch.no_grad()
def embedding_signature(
    table: torch.Tensor,
    decay: float,
    previous: torch.Tensor | None = None,
    unseen: torch.Tensor | None = None,
) -> dict[str, float | int]:
    """The sign optimizers' embedding outlier signature (Su, kexue.fm/archives/9736) of table
    E (V, D):

    - `embed_max_abs`: max |E_ij|; under Lion/Tiger with decay lambda it heads for 1/lambda
      (100 at 0.01);
    - `embed_near_fixed_point`: the share of entries with ||E_ij| - 1/lambda| <= 1% of 1/lambda
      (decay > 0 only);
    - `embed_unseen_rows`, `embed_unseen_drift`: the rows marked in `unseen` (V,) (seen before, in
      no batch since `previous` was taken) and their mean L2 displacement from `previous` (V, D). A
      row without gradients should stand still; a sign optimizer keeps moving it by a full step.
    """
    e = table.detach().float()
    out: dict[str, float | int] = {"embed_max_abs": float(e.abs().max())}
    if decay > 0:
        star = 1.0 / decay
        out["embed_near_fixed_point"] = float(
            ((e.abs() - star).abs() <= NEAR_FIXED_POINT * star).float().mean()
        )
    if previous is not None and unseen is not None:
        rows = unseen.nonzero().flatten()
        out["embed_unseen_rows"] = int(rows.numel())
        if rows.numel():
            out["embed_unseen_drift"] = float((e[rows] - previous.float()[rows]).norm(dim=1).mean())
    return out


class EmbeddingWatch:
    """Which token ids the training batches held since the last evaluation, and the table as it was
    then: what `embedding_signature` needs, at the cost of one boolean scatter per micro-batch and a
    (V, D) copy. The trainer checkpoints it (`state_dict`), so a resumed run logs the same signature
    as one that never stopped (on several ranks, each resumes with rank 0's masks: the union over
    ranks is then a superset)."""

    def __init__(self, vocab_size: int, device: torch.device) -> None:
        self.seen_since = torch.zeros(vocab_size, dtype=torch.bool, device=device)  # (V,)
        # (V,) up to the snapshot
        self.seen_before = torch.zeros(vocab_size, dtype=torch.bool, device=device)
        self.snapshot: torch.Tensor | None = None

    def state_dict(self) -> dict[str, torch.Tensor | None]:
        snapshot = None if self.snapshot is None else self.snapshot.cpu()
        return {
            "seen_since": self.seen_since.cpu(),
            "seen_before": self.seen_before.cpu(),
            "snapshot": snapshot,
        }

    def load_state_dict(self, state: dict[str, torch.Tensor | None]) -> None:
        device = self.seen_since.device
        self.seen_since.copy_(state["seen_since"])
        self.seen_before.copy_(state["seen_before"])
        self.snapshot = None if state["snapshot"] is None else state["snapshot"].to(device)

    def see(self, ids: torch.Tensor) -> None:
        self.seen_since[ids.flatten()] = True

    def measure(
        self,
        table: torch.Tensor,
        decay: float,
        reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> dict[str, float | int]:
        """The signature now, then a new snapshot; `reduce` sums a tensor over the ranks
        (every rank calls)."""
        full = table.full_tensor() if isinstance(table, DTensor) else table.detach()
        seen = self.seen_since if reduce is None else reduce(self.seen_since.float()) > 0
        unseen = self.seen_before & ~seen
        out = embedding_signature(
            full, decay, self.snapshot, unseen if self.snapshot is not None else None
        )
        self.snapshot = full.clone()
        self.seen_before |= seen
        self.seen_since.zero_()
        return out
