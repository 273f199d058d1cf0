"""The embedding outlier signature (kexue.fm/archives/9736) against hand-computed values, and its
wiring in the trainer: a token that vanishes from the batches drifts under Tiger and stands still
with lazy rows; metrics.jsonl read back row for row, a row cut off mid-write left out, a damaged
line named; a full disk mid-row is one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from archlab.storage import StorageError
from archlab.train.config import resolve_config
from archlab.train.distributed import setup
from archlab.train.metrics import (
    EmbeddingWatch,
    MetricsLogger,
    _truncate,
    embedding_signature,
    parse_metrics,
    read_metrics,
)
from archlab.train.trainer import Trainer
from tests.conftest import SmallFilesystem


def test_signature_by_hand() -> None:
    table = torch.tensor([[10.0, -9.95, 3.0], [-10.2, 0.5, 9.89], [0.0, 1.0, 2.0]])
    previous = torch.tensor([[10.0, -9.95, 3.0], [-10.0, 0.5, 9.89], [3.0, 5.0, 2.0]])
    unseen = torch.tensor([False, True, True])
    got = embedding_signature(table, 0.1, previous, unseen)
    assert got["embed_max_abs"] == pytest.approx(10.2)
    # 10.0 and -9.95; -10.2 and 9.89 are out of 1%
    assert got["embed_near_fixed_point"] == pytest.approx(2 / 9)
    assert got["embed_unseen_rows"] == 2
    assert got["embed_unseen_drift"] == pytest.approx((0.2 + 5.0) / 2, rel=1e-6)
    # no decay: no fixed point to be near
    assert set(embedding_signature(table, 0.0)) == {"embed_max_abs"}


def test_watch_marks_rows_seen_before_and_not_since() -> None:
    watch = EmbeddingWatch(5, torch.device("cpu"))
    table = torch.zeros(5, 2)
    watch.see(torch.tensor([[0, 1], [1, 2]]))
    assert "embed_unseen_rows" not in watch.measure(table, 0.0)  # no snapshot yet
    watch.see(torch.tensor([[2, 2]]))
    table[0] = torch.tensor([3.0, 4.0])
    got = watch.measure(table, 0.0)
    # rows 0 and 1
    assert (got["embed_unseen_rows"], got["embed_unseen_drift"]) == (2, pytest.approx(2.5))
    watch.see(torch.tensor([[0, 3]]))
    # rows 1 and 2 idle now; 3 was never seen before
    assert watch.measure(table, 0.0)["embed_unseen_rows"] == 2


FLAGS = {
    "model.d_model": "32",
    "model.n_layers": "1",
    "model.n_heads": "2",
    "model.max_seq_len": "16",
    "data.batch_size": "2",
    "data.block_size": "16",
    "logging.progress": "false",
    "logging.tensorboard": "false",
    "logging.samples": "0",
    "logging.eval_every": "0",
    "logging.eval_batches": "1",
    "checkpoint.save_every": "0",
    "steps": "20",
    "optimizer.name": "tiger",
    "optimizer.lr": "1e-2",
    "optimizer.decay_embeddings": "true",
    "schedule.name": "constant",
}
VANISHING = 7  # a token id held by the first batch only


@pytest.mark.parametrize("lazy", [False, True])
def test_a_vanished_token_drifts_under_tiger_and_stands_still_with_lazy_rows(
    lazy: bool, prepared: Path, tmp_path: Path
) -> None:
    train, model = resolve_config(
        [
            {
                **FLAGS,
                "data.source": str(prepared),
                "out": str(tmp_path / "run"),
                "optimizer.lazy_embeddings": str(lazy).lower(),
            }
        ]
    )
    trainer = Trainer(train, model, setup("none", "cpu"))
    get_batch = trainer.data.get_batch

    def batches(split: str, *args: object, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = get_batch(split, *args, **kwargs)
        if split == "train":
            x = x.masked_fill(x == VANISHING, 8)
            if trainer.state.step == 0:
                x[0, 0] = VANISHING
        return x, y

    trainer.data.get_batch = batches  # type: ignore[method-assign]
    trainer.train_step()
    trainer._evaluate_and_log()  # the snapshot after the token's only step
    before = trainer.state.raw.embed_tokens.weight[VANISHING].detach().clone()
    for _ in range(10):
        trainer.train_step()
    trainer._evaluate_and_log()
    trainer.metrics.close()
    row = read_metrics(tmp_path / "run", "eval")[-1]
    table = trainer.state.raw.embed_tokens.weight.detach()
    moved = float((table[VANISHING] - before).norm())
    assert row["embed_max_abs"] == pytest.approx(float(table.abs().max()))
    assert row["embed_unseen_rows"] >= 1 and "embed_near_fixed_point" in row
    if lazy:
        assert moved == 0.0 and row["embed_unseen_drift"] == 0.0
    else:  # ten full Tiger steps of lr x RMS(row) on each of 32 entries, all in one direction
        assert moved > 10 * 1e-2 * 0.5 * 32**0.5 and row["embed_unseen_drift"] > 0


def test_watch_state_round_trip_gives_the_same_next_signature() -> None:
    a = EmbeddingWatch(6, torch.device("cpu"))
    table = torch.arange(12.0).view(6, 2)
    a.see(torch.tensor([0, 1, 2]))
    a.measure(table, 0.1)
    a.see(torch.tensor([2, 3]))
    b = EmbeddingWatch(6, torch.device("cpu"))
    b.load_state_dict(a.state_dict())
    moved = table + torch.tensor([[1.0, 0.0]] * 6)
    assert a.measure(moved, 0.1) == b.measure(moved, 0.1)


# ------------------------------------------------------------------------------------ metrics.jsonl
ROWS = [
    {"step": 1, "kind": "train", "loss": 2.5},
    {"step": 2, "kind": "eval", "loss": 2.25},
    {"step": 3, "kind": "train", "loss": 2.0},
]


def _write(path: Path, rows: list[dict], tail: bytes = b"") -> Path:
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows) + tail)
    return path


def test_a_metrics_file_is_read_back_row_for_row(tmp_path: Path) -> None:
    _write(tmp_path / "metrics.jsonl", ROWS)
    assert parse_metrics(tmp_path / "metrics.jsonl") == ROWS
    assert read_metrics(tmp_path, "eval") == [ROWS[1]]


@pytest.mark.parametrize(
    "tail", [b'{"step": 4, "ki', b'{"step": 4, "kind": "sample", "text": "caf\xc3']
)
def test_a_last_row_cut_off_mid_write_is_left_out(tail: bytes, tmp_path: Path) -> None:
    """A writer killed mid-row (or a run still writing) leaves an unterminated last line: its step
    is past every checkpoint, so reading skips it and a resume's truncation drops it."""
    path = _write(tmp_path / "metrics.jsonl", ROWS, tail)
    assert parse_metrics(path) == ROWS
    _truncate(path, 2)
    assert path.read_bytes() == b"".join(json.dumps(r).encode() + b"\n" for r in ROWS[:2])


@pytest.mark.parametrize(
    ("damage", "line", "what"),
    [
        (
            lambda raw: raw[:10] + b"\xa4" + raw[11:],
            1,
            "is not UTF-8 text (byte 0xa4 at column 11)",
        ),
        (
            lambda raw: raw.replace(b'"eval"', b'"eval'),
            2,
            "is not a JSON row (Expecting ',' delimiter at column 29)",
        ),
        (
            lambda raw: raw.replace(b'{"step": 3', b'{"stp": 3'),
            3,
            "is not a metrics row (an object with an integer",
        ),
        (lambda raw: raw + b"[1, 2]\n", 4, "is not a metrics row"),
        (lambda raw: raw.replace(b'"step": 2', b'"step": true'), 2, "is not a metrics row"),
    ],
)
def test_a_damaged_metrics_file_is_named_with_its_line(
    damage: Callable[[bytes], bytes], line: int, what: str, tmp_path: Path
) -> None:
    path = _write(tmp_path / "metrics.jsonl", ROWS)
    path.write_bytes(damage(path.read_bytes()))
    for read in (
        lambda: parse_metrics(path),
        lambda: read_metrics(tmp_path),
        lambda: _truncate(path, 2),
    ):
        with pytest.raises(ValueError) as err:
            read()
        assert str(err.value).startswith(f"{path} is corrupt: line {line} {what}"), str(err.value)


def test_a_full_disk_mid_row_is_one_line_and_keeps_every_full_row(
    small_filesystem: Callable[[int], SmallFilesystem],
) -> None:
    """On a tmpfs that really fills up: the row that does not fit raises one StorageError naming
    metrics.jsonl; the rows before it parse (a cut-off last row is left out), closing raises nothing
    more, and a resumed logger drops the cut-off row and appends after the full ones."""
    fs = small_filesystem(64)
    logger = MetricsLogger(fs.path, tensorboard=False)
    for step in (1, 2):
        logger.log(step, "train", {"loss": 3.0 - step})
    fs.fill(leave=0)
    with pytest.raises(StorageError) as caught:
        # past the slack of the file's last 4 KiB page
        logger.log(3, "sample", {"text": "x" * 20000})
    assert (
        str(caught.value)
        == f"cannot write the step-3 sample row to {fs.path / 'metrics.jsonl'}: no space "
        "left on device"
    )
    logger.close()
    assert [(r["step"], r["loss"]) for r in parse_metrics(fs.path / "metrics.jsonl")] == [
        (1, 2.0),
        (2, 1.0),
    ]
    fs.free()
    resumed = MetricsLogger(fs.path, start_step=2, tensorboard=False)
    resumed.log(3, "train", {"loss": 0.5})
    resumed.close()
    lines = (fs.path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3]
