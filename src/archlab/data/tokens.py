"""Training and evaluation windows from a prepared folder (`TokenData`): random (x, y) windows for
training, sharded by rank, and fixed, evenly strided windows for evaluation.

The folder is made by `prepare_data` (prepare.py); its token files are read back with `np.memmap`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from archlab.data.encode import SPLITS
from archlab.data.prepare import read_meta
from archlab.data.tokenizer import Tokenizer


class TokenData:
    """Read-only view of a prepared folder that draws random (x, y) windows, sharded by rank.

    Each call draws `batch_size * world_size` window starts from `generator` and keeps this rank's
    slice, so the ranks of a run together see exactly the batch a single process with the global
    batch would, and every rank must hold an identically seeded generator.
    """

    def __init__(self, data_dir: str | Path, rank: int = 0, world_size: int = 1) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in 0..{world_size - 1} (world_size {world_size})")
        self.data_dir, self.rank, self.world_size = Path(data_dir), rank, world_size
        meta = read_meta(self.data_dir)
        if meta is None:
            raise FileNotFoundError(
                f"{self.data_dir / 'meta.json'} does not exist; run `archlab data prepare` first"
            )
        self.meta = meta
        dtype = np.dtype(meta["dtype"])
        self.splits = {
            split: _open_tokens(self.data_dir / f"{split}.bin", dtype) for split in SPLITS
        }

    @property
    def vocab_size(self) -> int:
        return int(self.meta["tokenizer"]["vocab_size"])

    def tokenizer(self) -> Tokenizer:
        return Tokenizer.load(self.data_dir)

    def num_tokens(self, split: str) -> int:
        return len(self._split(split))

    def _split(self, split: str) -> np.ndarray:
        if split not in self.splits:
            raise ValueError(f"split {split!r} is not one of {SPLITS}")
        return self.splits[split]

    def batch_starts(
        self, split: str, batch_size: int, block_size: int, generator: torch.Generator
    ) -> np.ndarray:
        """The window starts of one draw for all ranks together (batch_size * world_size of
        them): what `get_batch` slices its rank's windows from, and what a replay of a run's
        batches draws (lab/measures/drift.py)."""
        # start i needs tokens i .. i + block_size inclusive
        n_starts = len(self._split(split)) - block_size
        if batch_size < 1 or block_size < 1 or n_starts < 1:
            raise ValueError(
                f"cannot draw batch_size {batch_size} x block_size {block_size} from split "
                f"{split!r} of {self.data_dir} ({len(self._split(split))} tokens; need block_size "
                "+ 1 and sizes >= 1)"
            )
        return torch.randint(n_starts, (batch_size * self.world_size,), generator=generator).numpy()

    def get_batch(
        self,
        split: str,
        batch_size: int,
        block_size: int,
        generator: torch.Generator,
        device: str | torch.device = "cpu",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random windows x (B, T) and targets y = x shifted left by one, both int64 on `device`."""
        starts = self.batch_starts(split, batch_size, block_size, generator)
        starts = starts[self.rank * batch_size : (self.rank + 1) * batch_size]  # this rank's slice
        return self._windows(split, starts, block_size, device)

    def strided_windows(self, split: str, n: int, block_size: int) -> np.ndarray:
        """`n` window starts spread evenly over the split, from its first token to its last full
        window (start i = round(i * (len - block_size - 1) / (n - 1))): fixed by the split alone,
        with no generator, so every run on this data (any seed, any arm) is scored on the same text.
        Windows overlap only when n * block_size exceeds the split."""
        last = len(self._split(split)) - block_size - 1  # the last start with block_size + 1 tokens
        if n < 1 or block_size < 1 or last < 0:
            raise ValueError(
                f"cannot lay {n} windows of block_size {block_size} over split {split!r} of "
                f"{self.data_dir} ({len(self._split(split))} tokens; need block_size + 1, n >= 1)"
            )
        if n == 1:
            return np.zeros(1, dtype=np.int64)
        return np.round(np.arange(n) * (last / (n - 1))).astype(np.int64)

    def windows_at(
        self,
        split: str,
        starts: np.ndarray,
        block_size: int,
        device: str | torch.device = "cpu",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The windows x (B, T) starting at `starts` and their targets y (x shifted left
        by one), int64."""
        return self._windows(split, np.asarray(starts), block_size, device)

    def _windows(
        self,
        split: str,
        starts: np.ndarray,
        block_size: int,
        device: str | torch.device,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # (B, T + 1), one gather
        window = self._split(split)[starts[:, None] + np.arange(block_size + 1)]
        xy = torch.from_numpy(window.astype(np.int64))
        x, y = xy[:, :-1], xy[:, 1:]  # (B, T) each
        # pinned memory lets the copy overlap the previous step
        if torch.device(device).type == "cuda":
            return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(
                device, non_blocking=True
            )
        return x.contiguous().to(device), y.contiguous().to(device)


def _open_tokens(path: Path, dtype: np.dtype) -> np.ndarray:
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; re-run `archlab data prepare`")
    if path.stat().st_size == 0:  # np.memmap refuses empty files
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")
