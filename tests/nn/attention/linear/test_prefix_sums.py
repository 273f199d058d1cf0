"""Chunked prefix-sum causal linear attention against the explicit T x T masked form (float64)."""

import pytest
import torch

from archlab.nn.attention.linear.prefix_sums import (
    causal_linear_attention,
    quadratic_linear_attention,
)


def _inputs(B=2, H=4, K=2, T=37, M=12, Dv=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    phi_q = torch.rand(B, H, T, M, generator=g, dtype=torch.float64) + 0.01
    phi_k = torch.rand(B, K, T, M, generator=g, dtype=torch.float64) + 0.01
    v = torch.randn(B, K, T, Dv, generator=g, dtype=torch.float64)
    return phi_q, phi_k, v


@pytest.mark.parametrize("chunk", [1, 4, 16, 64])
def test_prefix_sums_equal_quadratic_form(chunk):
    phi_q, phi_k, v = _inputs()
    o, _ = causal_linear_attention(phi_q, phi_k, v, chunk=chunk)
    ref = quadratic_linear_attention(phi_q, phi_k, v)
    assert (o - ref).abs().max() < 1e-12


def test_quadratic_form_against_loop():
    """The reference itself against the definition, one query at a time, GQA head h reading K/V head
    h // R."""
    phi_q, phi_k, v = _inputs(B=1, H=2, K=1, T=6)
    ref = quadratic_linear_attention(phi_q, phi_k, v)
    for h in range(2):
        for i in range(6):
            w = phi_k[0, 0, : i + 1] @ phi_q[0, h, i]  # (i+1,)
            assert torch.allclose(
                ref[0, h, i], (w[:, None] * v[0, 0, : i + 1]).sum(0) / w.sum(), atol=1e-14
            )


def test_state_continues_the_sequence():
    """Two calls chained through the state, and one token at a time, equal one call; the state is
    [sum phi(k) v^T | sum phi(k)] of every token so far."""
    phi_q, phi_k, v = _inputs()
    full, state_full = causal_linear_attention(phi_q, phi_k, v, chunk=8)
    a, state = causal_linear_attention(phi_q[:, :, :20], phi_k[:, :, :20], v[:, :, :20], chunk=8)
    b, state = causal_linear_attention(
        phi_q[:, :, 20:], phi_k[:, :, 20:], v[:, :, 20:], state, chunk=8
    )
    assert (torch.cat((a, b), 2) - full).abs().max() < 1e-12
    steps, state = [], None
    for t in range(phi_q.shape[2]):
        o, state = causal_linear_attention(
            phi_q[:, :, t : t + 1], phi_k[:, :, t : t + 1], v[:, :, t : t + 1], state
        )
        steps.append(o)
    assert (torch.cat(steps, 2) - full).abs().max() < 1e-12
    S = torch.einsum("bktm,bktd->bkmd", phi_k, v)
    assert torch.allclose(state_full[..., :-1], S, atol=1e-12)
    assert torch.allclose(state_full[..., -1], phi_k.sum(2), atol=1e-12)


def test_future_key_leaves_past_bit_identical():
    phi_q, phi_k, v = _inputs(T=40)
    o, _ = causal_linear_attention(phi_q, phi_k, v, chunk=16)
    phi_k2, v2 = phi_k.clone(), v.clone()
    phi_k2[:, :, 30] *= 50.0
    v2[:, :, 30] += 3.0
    o2, _ = causal_linear_attention(phi_q, phi_k2, v2, chunk=16)
    assert torch.equal(o[:, :, :30], o2[:, :, :30])
    assert not torch.equal(o[:, :, 30:], o2[:, :, 30:])
