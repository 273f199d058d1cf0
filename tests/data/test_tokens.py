"""Tests for archlab.data.tokens: random windows (shift, determinism, rank shards), evenly strided
windows, bad inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from archlab.data.prepare import prepare_data
from archlab.data.tokens import TokenData
from tests.data.conftest import tokens, write


@pytest.fixture()
def prepared(tmp_path: Path) -> Path:
    text = "".join(chr(32 + i % 90) for i in range(3000))
    return prepare_data(str(write(tmp_path / "abc.txt", text)), tmp_path / "out", val_fraction=0.1)


def test_get_batch_windows_shift_and_determinism(prepared: Path) -> None:
    data, stored = TokenData(prepared), np.array(tokens(prepared, "train"))
    gen = torch.Generator().manual_seed(7)
    state = gen.get_state()
    x, y = data.get_batch("train", 4, 16, gen)
    assert x.shape == y.shape == (4, 16) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    starts = torch.randint(len(stored) - 16, (4,), generator=torch.Generator().manual_seed(7))
    for row, s in zip(x.tolist(), starts.tolist(), strict=True):
        assert row == stored[s : s + 16].tolist()
    gen.set_state(state)  # what the trainer does on resume
    x2, y2 = data.get_batch("train", 4, 16, gen)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(data.get_batch("train", 4, 16, gen)[0], x)
    # the one full window
    x, y = data.get_batch("val", 1, data.num_tokens("val") - 1, torch.Generator())
    assert x[0].tolist() + y[0, -1:].tolist() == tokens(prepared, "val")


def test_rank_shards_concatenate_to_the_single_process_batch(prepared: Path) -> None:
    single = TokenData(prepared).get_batch("train", 6, 8, torch.Generator().manual_seed(3))
    shards = [
        TokenData(prepared, rank=r, world_size=2).get_batch(
            "train", 3, 8, torch.Generator().manual_seed(3)
        )
        for r in (0, 1)
    ]
    assert torch.equal(torch.cat([s[0] for s in shards]), single[0])
    assert torch.equal(torch.cat([s[1] for s in shards]), single[1])
    assert not torch.equal(shards[0][0], shards[1][0])


def test_get_batch_bad_inputs_name_the_value(prepared: Path, tmp_path: Path) -> None:
    data = TokenData(prepared)
    with pytest.raises(ValueError, match="split 'test' is not one of"):
        data.get_batch("test", 2, 8, torch.Generator())
    n = data.num_tokens("val")
    with pytest.raises(
        ValueError, match=f"block_size {n} from split 'val' .*\\({n} tokens; need block_size \\+ 1"
    ):
        data.get_batch("val", 2, n, torch.Generator())
    with pytest.raises(ValueError, match=r"rank 2 is not in 0..1 \(world_size 2\)"):
        TokenData(prepared, rank=2, world_size=2)
    with pytest.raises(FileNotFoundError, match="meta.json does not exist"):
        TokenData(tmp_path)


def test_strided_windows_span_the_split_evenly_without_a_generator(tmp_path: Path) -> None:
    out = prepare_data(
        str(write(tmp_path / "c.txt", "abcdefghij" * 30)), tmp_path / "p", "byte", val_fraction=0.5
    )
    data = TokenData(out)
    n_val = data.num_tokens("val")  # half of the 302 bytes
    starts = data.strided_windows("val", 7, 10)
    # first token .. last full window
    assert starts.tolist() == [round(i * (n_val - 11) / 6) for i in range(7)]
    assert data.strided_windows("val", 1, 10).tolist() == [0]
    x, y = data.windows_at("val", starts, 10)
    val = np.asarray(data.splits["val"]).astype(np.int64)
    assert x.tolist() == [val[s : s + 10].tolist() for s in starts] and y.tolist() == [
        val[s + 1 : s + 11].tolist() for s in starts
    ]
    with pytest.raises(
        ValueError, match=r"cannot lay 2 windows of block_size 200 over split 'val'"
    ):
        data.strided_windows("val", 2, 200)


def test_each_rank_gets_its_slice_of_the_one_draw(tmp_path: Path) -> None:
    out = prepare_data(
        str(write(tmp_path / "c.txt", "abcdefghij" * 30)), tmp_path / "p", "byte", val_fraction=0.5
    )
    # 2 ranks x 3
    starts = TokenData(out, 0, 2).batch_starts("train", 3, 8, torch.Generator().manual_seed(5))
    train = np.asarray(TokenData(out).splits["train"]).astype(np.int64)
    for rank in (0, 1):
        x, _ = TokenData(out, rank, 2).get_batch("train", 3, 8, torch.Generator().manual_seed(5))
        assert x.tolist() == [train[s : s + 8].tolist() for s in starts[rank * 3 : (rank + 1) * 3]]
