"""The codebook of VQ attention: distances, the nearest code, hard assignment and commitment, and
the EMA of the codes, against their definitions in float64."""

import torch

from archlab.nn.attention.linear.codebook import (
    code_distances,
    code_vectors,
    codebook_from,
    ema_update,
    ema_update_codes,
    hard_assign,
    nearest_codes,
    one_hot_rows,
)
from tests.nn.attention.linear.test_vq import _data

f64 = torch.float64


def test_ema_update_closed_form():
    g = torch.Generator().manual_seed(3)
    sums, counts = (
        torch.randn(2, 3, 4, generator=g, dtype=f64),
        torch.rand(2, 3, generator=g, dtype=f64),
    )
    k = torch.randn(2, 2, 5, 4, generator=g, dtype=f64)
    assign = torch.nn.functional.one_hot(torch.randint(3, (2, 2, 5), generator=g), 3).to(f64)
    new_sums, new_counts = ema_update(sums, counts, k, assign, 0.9)
    for h in range(2):
        for c in range(3):
            sel = assign[:, h, :, c].bool()
            assert torch.allclose(new_counts[h, c], 0.9 * counts[h, c] + 0.1 * sel.sum())
            assert torch.allclose(new_sums[h, c], 0.9 * sums[h, c] + 0.1 * k[:, h][sel].sum(0))
    counts[0, 0] = 0.0
    assert torch.equal(codebook_from(sums, counts)[0, 0], sums[0, 0] / 0.01)


def test_distances_and_commitment():
    _, k, _, cb = _data()
    assert torch.allclose(
        code_distances(k, cb), torch.cdist(k, cb[None].expand(2, 2, 5, 6)) ** 2, atol=1e-10
    )
    assign, k_hat, sq = hard_assign(k, cb)
    assert torch.allclose(sq, (k - k_hat).square().sum(-1), atol=1e-12)


def test_nearest_codes_and_their_ema_by_index_equal_the_distance_and_one_hot_forms():
    """The hard path's fast forms against the definitions, in float64: the nearest code is the
    argmin of the full squared distances; the gathered c_z is the one-hot product; the EMA by
    index_add / bincount equals the one-hot EMA."""
    _, k, _, cb = _data(T=40)
    codes = nearest_codes(k, cb)
    assert torch.equal(codes, code_distances(k, cb).argmin(-1))
    onehot = torch.nn.functional.one_hot(codes, 5).to(f64)
    assert torch.equal(one_hot_rows(codes, 5, f64), onehot)
    assert torch.equal(code_vectors(codes, cb), onehot @ cb)
    sums, counts = torch.randn(2, 5, 6, dtype=f64), torch.rand(2, 5, dtype=f64)
    by_index = ema_update_codes(sums, counts, k, codes, 0.9)
    by_one_hot = ema_update(sums, counts, k, onehot, 0.9)
    assert torch.allclose(by_index[0], by_one_hot[0], atol=1e-12) and torch.allclose(
        by_index[1], by_one_hot[1]
    )
