"""RoPE: q_m . k_n depends only on m - n (both layouts, partial rotary), rotation-matrix algebra in
float64, and the interleaved/half layouts related by a fixed permutation."""

import math

import pytest
import torch

from archlab.nn.positions.frequencies import base_inv_freq
from archlab.nn.positions.rope import RotaryEmbedding, apply_rope


def rotate(
    x: torch.Tensor, pos: int, d_rot: int, layout: str, theta: float = 10000.0
) -> torch.Tensor:
    rope = RotaryEmbedding(d_rot, theta, layout)
    cos, sin = rope(torch.tensor([[pos]]))
    return apply_rope(x.view(1, 1, 1, -1), cos, sin, layout).view(-1)


def rotation_matrix(angle_pos: float, d: int, layout: str, theta: float = 10000.0) -> torch.Tensor:
    """Block-diagonal R(m) in float64, built from the paper's 2x2 blocks, in the
    given pair layout."""
    w = base_inv_freq(d, theta)
    R = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        a, b = (i, i + d // 2) if layout == "half" else (2 * i, 2 * i + 1)
        c, s = math.cos(angle_pos * w[i]), math.sin(angle_pos * w[i])
        R[a, a], R[a, b], R[b, a], R[b, b] = c, -s, s, c
    return R


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("head_dim,d_rot", [(16, 16), (16, 4), (32, 8)])
def test_score_depends_only_on_distance(layout, head_dim, d_rot):
    q, k = torch.randn(head_dim), torch.randn(head_dim)
    scores = {}
    for m, n in [(5, 2), (13, 10), (103, 100), (3, 0)]:  # all distance 3
        scores[(m, n)] = float(rotate(q, m, d_rot, layout) @ rotate(k, n, d_rot, layout))
    values = list(scores.values())
    assert max(values) - min(values) < 1e-4
    assert abs(values[0] - float(rotate(q, 7, d_rot, layout) @ rotate(k, 2, d_rot, layout))) > 1e-3


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_apply_rope_is_the_rotation_matrix(layout):
    x = torch.randn(16, dtype=torch.float64)
    got = rotate(x.float(), 7, 16, layout).double()
    torch.testing.assert_close(got, rotation_matrix(7, 16, layout) @ x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotation_matrix_algebra(layout):
    Ra, Rb = rotation_matrix(3.0, 8, layout), rotation_matrix(11.0, 8, layout)
    torch.testing.assert_close(Ra.T @ Rb, rotation_matrix(8.0, 8, layout))  # R(a)^T R(b) = R(b - a)
    # orthogonal: norms kept
    torch.testing.assert_close(Ra.T @ Ra, torch.eye(8, dtype=torch.float64))


def test_partial_rotary_passes_the_tail_through():
    x = torch.randn(16)
    y = rotate(x, 9, 4, "half")
    assert torch.equal(y[4:], x[4:])
    assert not torch.allclose(y[:4], x[:4])
    assert abs(float(y.norm() - x.norm())) < 1e-5


def test_interleaved_equals_half_after_permutation():
    d = 8
    # interleaved pairs (2i, 2i+1) -> halves (i, i + d/2)
    perm = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])
    x = torch.randn(d)
    inter = rotate(x, 5, d, "interleaved")
    half = rotate(x[perm], 5, d, "half")
    torch.testing.assert_close(inter[perm], half)


def test_position_zero_is_identity():
    x = torch.randn(1, 3, 2, 8)  # (B, T, heads, Dh)
    cos, sin = RotaryEmbedding(8, 10000.0)(torch.zeros(1, 3, dtype=torch.long))
    torch.testing.assert_close(apply_rope(x, cos, sin, "half"), x)
