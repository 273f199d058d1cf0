"""The windows a length evaluation scores: Su's repeated samples against the text they repeat, and
the plain windows paired by target (the same scored ids at every length, only the context grows)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from archlab.eval.samples import paired_windows, repeated_windows, sample_windows, windows


def test_repeated_samples_are_the_text_concatenated_with_itself() -> None:
    tokens = np.arange(1000) * 7 % 251
    length, count = 32, 3
    plain, repeated = windows(tokens, length, count), repeated_windows(tokens, length, count)
    assert repeated.shape == plain.shape == (count, length + 1)
    p = length // 2
    starts = np.linspace(0, len(tokens) - p, count).astype(np.int64)
    for row, start in zip(repeated.tolist(), starts):
        assert row == [int(tokens[start + i % p]) for i in range(length + 1)]  # base[i mod p]
    # the default score_last (half the length) ...
    scored = range(length + 1 - length // 2, length + 1)
    # ... lies in the second copy
    assert all(j >= p and repeated[0, j] == repeated[0, j - p] for j in scored)
    assert torch.equal(sample_windows(tokens, length, count, "plain"), plain)
    assert torch.equal(
        repeated_windows(tokens, 12, 1, period=5)[0], torch.tensor(tokens[:5])[torch.arange(13) % 5]
    )
    with pytest.raises(ValueError, match="samples 'twice' is not allowed: one of plain, repeated"):
        sample_windows(tokens, length, count, "twice")


def test_paired_windows_hold_the_scored_targets_fixed_and_grow_the_context() -> None:
    # every id distinct: a slice is known by its ids
    tokens = np.arange(1000, dtype=np.int64) * 7 % 1009
    lengths = [16, 64, 256]
    got = paired_windows(tokens, lengths, 5)
    # the first end has 256 tokens before it, the last is the end
    ends = np.linspace(256, 999, 5).astype(np.int64)
    for n, batch in got.items():
        assert batch.shape == (5, n + 1)
        assert batch.tolist() == [tokens[e - n : e + 1].tolist() for e in ends]
    for k in (1, 8, 16):  # the scored targets: the same ids at every length
        assert got[16][:, -k:].tolist() == got[64][:, -k:].tolist() == got[256][:, -k:].tolist()
    assert got[64][:, -17:].tolist() == got[16].tolist()  # a longer window only adds context before
    with pytest.raises(ValueError, match="held-out text has 100 tokens: too few for length 256"):
        paired_windows(tokens[:100], lengths, 5)
