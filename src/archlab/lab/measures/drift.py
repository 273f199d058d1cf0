"""Embedding drift by token frequency: how far each row moved from step 0, binned by how often the
run saw it.

The mechanism the optimizer suite tests (Lion / Tiger, arXiv 2302.06675; Su's analysis of sign
updates): a sign-based optimizer moves every row that has momentum by lr per coordinate and step,
so a row seen a few times and then never keeps drifting, while under AdamW its step decays with its
moment estimates. The statistic is therefore per-row displacement ||w_T - w_0|| (not norm growth:
a drift orthogonal to the row barely changes its norm), against the row's count in the batches the
run actually drew.

- `seen_counts` replays the run's batch stream: the trainer draws `grad_accum` micro-batches
  per step from one generator seeded with the run's seed, each draw `TokenData.batch_starts` of
  batch_size / grad_accum windows for all ranks together (so the world size does not matter);
  a row's count is its occurrences among the input tokens x of those windows (the positions
  whose embedding lookup receives a gradient). Skipped (non-finite) steps drew their batch too
  and are counted.
- `drift_by_count`: the mean displacement of the rare rows (seen 1..RARE_MAX times) and of the
  frequent rows (the FREQUENT_SHARE most-seen of the rows seen at all). Rows never seen are
  in neither bin.
w_0 comes from RUN_DIR/initial (train key `checkpoint.keep_initial`), w_T from the final checkpoint.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from archlab.data.tokens import TokenData

RARE_MAX = 10  # a row seen 1..RARE_MAX times in the run's batches is rare
FREQUENT_SHARE = 0.1  # the most-seen tenth of the rows seen at all are frequent


def seen_counts(
    data: TokenData,
    seed: int,
    steps: int,
    batch_size: int,
    block_size: int,
    grad_accum: int,
    vocab_size: int,
) -> np.ndarray:
    """(vocab_size,) occurrences of each id among the input tokens of the first `steps` steps'
    batches, drawn again exactly as the trainer draws them (see the module docstring)."""
    generator = torch.Generator().manual_seed(seed)
    train, offsets = np.asarray(data.splits["train"]), np.arange(block_size)
    counts = np.zeros(vocab_size, dtype=np.int64)
    for _ in range(steps * grad_accum):
        starts = data.batch_starts("train", batch_size // grad_accum, block_size, generator)
        counts += np.bincount(train[starts[:, None] + offsets].ravel(), minlength=vocab_size)[
            :vocab_size
        ]
    return counts


def row_drift(initial: torch.Tensor, final: torch.Tensor) -> np.ndarray:
    """||w_T - w_0|| per row of an embedding table (V, D), in float64."""
    return torch.linalg.vector_norm(final.double() - initial.double(), dim=1).numpy()


def drift_by_count(drift: np.ndarray, counts: np.ndarray) -> tuple[float | None, float | None]:
    """(mean drift of the rare rows, mean drift of the frequent rows); None for an empty bin."""
    rare = (counts >= 1) & (counts <= RARE_MAX)
    seen = np.flatnonzero(counts >= 1)
    top = seen[np.argsort(-counts[seen], kind="stable")][
        : max(1, math.ceil(FREQUENT_SHARE * len(seen)))
    ]
    rare_mean = float(drift[rare].mean()) if rare.any() else None
    frequent_mean = float(drift[top].mean()) if len(seen) else None
    return rare_mean, frequent_mean
