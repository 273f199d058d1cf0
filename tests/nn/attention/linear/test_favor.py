"""FAVOR+ against exact softmax math (float64): unbiased estimates, convergence,
causality, redraw policy."""

import math

import pytest
import torch

from archlab.nn.attention.linear.favor import (
    FavorKernel,
    draw_projection,
    favor_attention,
    hyperbolic_features,
    orthogonal_gaussian,
    positive_features,
    trigonometric_features,
)
from archlab.nn.attention.linear.prefix_sums import quadratic_linear_attention


def _softmax_attention(q, k, v, scale):
    R = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(R, 1), v.repeat_interleave(R, 1)
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


def _estimate(q, k, w, kind):
    """Per draw: phi(q) . phi(k) for w (N, P, d)."""
    if kind == "positive":
        return (positive_features(q, w, False) * positive_features(k, w, False)).sum(-1)
    if kind == "hyperbolic":
        return (hyperbolic_features(q, w, False) * hyperbolic_features(k, w, False)).sum(-1)
    return (trigonometric_features(q, w) * trigonometric_features(k, w)).sum(-1)


@pytest.mark.parametrize("kind", ["positive", "hyperbolic", "trigonometric"])
@pytest.mark.parametrize("orthogonal", [False, True])
def test_estimate_is_unbiased(kind, orthogonal):
    """Mean of phi(q) . phi(k) over 20k draws is exp(q . k) within 4 standard errors; q and k along
    one axis, where the unfixed QR's sign bias shows (see the next test)."""
    d, m, N = 16, 16, 20000
    g = torch.Generator().manual_seed(1)
    q = torch.zeros(d, dtype=torch.float64)
    q[0] = 0.7  # noqa: E702
    k = torch.zeros(d, dtype=torch.float64)
    k[0] = 0.5  # noqa: E702
    rows = m if kind == "positive" else m // 2
    w = draw_projection(rows, d, orthogonal, g, draws=N)  # (N, rows, d)
    est = _estimate(q[None, None], k[None, None], w, kind).squeeze(-1)  # (N,)
    se = est.std() / math.sqrt(N)
    assert abs(est.mean() - math.exp(q @ k)) < 4 * se + 1e-12


def test_unfixed_qr_would_be_biased():
    """The pitfall the sign correction removes: Q from plain QR has Q[0, 0] of one sign, and the
    estimate along that axis is off by many standard errors; ours has both signs equally often."""
    d, N = 16, 20000
    g = torch.Generator().manual_seed(2)
    raw, _ = torch.linalg.qr(torch.randn(N, d, d, generator=g, dtype=torch.float64))
    assert (raw[:, 0, 0] < 0).float().mean() in (0.0, 1.0)
    ours = orthogonal_gaussian(d, d, g, draws=N)  # rows = Q's columns
    frac = (ours[:, 0, 0] < 0).double().mean().item()
    assert abs(frac - 0.5) < 4 * math.sqrt(0.25 / N)
    norms = torch.randn(N, d, d, generator=g, dtype=torch.float64).norm(dim=-1, keepdim=True)
    biased = raw.transpose(-1, -2) * norms
    x = torch.zeros(d, dtype=torch.float64)
    x[0] = 0.7  # noqa: E702
    est = _estimate(x[None, None], x[None, None], biased, "positive").squeeze(-1)
    assert abs(est.mean() - math.exp(x @ x)) > 6 * est.std() / math.sqrt(N)


def test_orthogonal_rows_orthogonal_within_blocks():
    w = orthogonal_gaussian(40, 16, torch.Generator().manual_seed(0))  # blocks of 16, 16, 8
    for lo, hi in ((0, 16), (16, 32), (32, 40)):
        u = w[lo:hi] / w[lo:hi].norm(dim=1, keepdim=True)
        assert torch.allclose(u @ u.T, torch.eye(hi - lo, dtype=torch.float64), atol=1e-12)


def test_positive_variance_law():
    """iid positive features: MSE = (1/m) e^{|z|^2} SM^2 (1 - e^{-|z|^2}), z = q + k (paper, lemma
    1); orthogonal features do better."""
    d, m, N = 8, 32, 40000
    g = torch.Generator().manual_seed(3)
    q = torch.randn(d, generator=g, dtype=torch.float64) * 0.4
    k = torch.randn(d, generator=g, dtype=torch.float64) * 0.4
    sm, z2 = math.exp(q @ k), ((q + k) ** 2).sum().item()
    law = math.exp(z2) * sm**2 * (1 - math.exp(-z2)) / m
    iid = _estimate(q[None], k[None], draw_projection(m, d, False, g, draws=N), "positive").squeeze(
        -1
    )
    ortho = _estimate(
        q[None], k[None], draw_projection(m, d, True, g, draws=N), "positive"
    ).squeeze(-1)
    mse_iid, mse_ortho = ((iid - sm) ** 2).mean().item(), ((ortho - sm) ** 2).mean().item()
    assert 0.85 < mse_iid / law < 1.15
    assert mse_ortho < mse_iid


def test_output_converges_to_softmax():
    """Mean absolute error against causal softmax attention, averaged over 4 draws, falls
    as m grows."""
    g = torch.Generator().manual_seed(4)
    d, T = 16, 24
    q = torch.randn(1, 2, T, d, generator=g, dtype=torch.float64) * 0.7
    k = torch.randn(1, 2, T, d, generator=g, dtype=torch.float64) * 0.7
    v = torch.randn(1, 2, T, d, generator=g, dtype=torch.float64)
    exact = _softmax_attention(q, k, v, d**-0.5)
    errors = []
    for m in (16, 256, 4096):
        err = [
            (favor_attention(q, k, v, draw_projection(m, d, True, g), d**-0.5)[0] - exact)
            .abs()
            .mean()
            for _ in range(4)
        ]
        errors.append(sum(err) / 4)
    assert errors[0] > errors[1] > errors[2]
    # ~ m^-1/2: 0.14, 0.065, 0.024 at this seed
    assert errors[0] / errors[2] > 3 and errors[2] < 0.05


@pytest.mark.parametrize("feature", ["positive", "hyperbolic"])
def test_query_stabiliser_cancels(feature):
    """favor_attention (query features divided by their max) equals linear attention over
    the raw features."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 4, 19, 8, generator=g, dtype=torch.float64) for _ in range(3))
    k, v = k[:, :2], v[:, :2]  # GQA: 4 query heads on 2 K/V heads
    w = draw_projection(16, 8, True, g)
    features = {"positive": positive_features, "hyperbolic": hyperbolic_features}[feature]
    s = 8**-0.25
    ref = quadratic_linear_attention(features(q * s, w, False), features(k * s, w, False), v)
    assert (favor_attention(q, k, v, w, 8**-0.5, feature)[0] - ref).abs().max() < 1e-12


def test_future_key_leaves_past_bit_identical():
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 2, 50, 8, generator=g) for _ in range(3))
    w = draw_projection(32, 8, True, g, torch.float32)
    o, _ = favor_attention(q, k, v, w, 8**-0.5)
    k2 = k.clone()
    k2[:, :, -1] *= 6.0
    o2, _ = favor_attention(q, k2, v, w, 8**-0.5)
    assert torch.equal(o[:, :, :-1], o2[:, :, :-1])


def _kernel(redraw=None, layer=0):
    return FavorKernel(
        head_dim=8,
        features=32,
        feature="positive",
        orthogonal=True,
        redraw=redraw,
        scale=8**-0.5,
        layer_idx=layer,
    )


def test_decoding_with_state_equals_full_forward():
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 2, 30, 8, generator=g) for _ in range(3))
    kern = _kernel().eval()
    full, _ = kern(q, k, v, None)
    out, state = kern(q[:, :, :11], k[:, :, :11], v[:, :, :11], None)
    outs, sizes = [out], []
    for t in range(11, 30):
        o, state = kern(
            q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], state, decoding=True
        )
        outs.append(o)
        sizes.append(state.nbytes())
    assert (torch.cat(outs, 2) - full).abs().max() < 1e-5
    assert len(set(sizes)) == 1 and sizes[0] == 2 * 2 * 32 * 9 * 4  # B * K * M * (Dv + 1) float32


def test_redraw_policy():
    """Same layer, same features; eval never redraws; training redraws every `redraw` calls,
    not when decoding."""
    q = torch.randn(1, 2, 4, 8)
    a, b = _kernel(redraw=2), _kernel(redraw=2)
    assert torch.equal(a.projection, b.projection)
    assert not torch.equal(a.projection, _kernel(layer=1).projection)
    first = a.projection.clone()
    a.eval()
    for _ in range(5):
        a(q, q, q, None)
    assert torch.equal(a.projection, first)
    a.train()
    a(q, q, q, None)
    a(q, q, q, None)
    assert torch.equal(a.projection, first)
    a(q, q, q, None, decoding=True)
    assert torch.equal(a.projection, first)
    a(q, q, q, None)
    assert not torch.equal(a.projection, first)
    assert "projection" not in a.state_dict()


def test_a_restored_call_count_gives_the_projection_training_reached():
    """After C training forwards, a fresh kernel given the count holds the same projection
    and redraws at the same later calls (the trainer's resume), for C on and between
    the redraw points."""
    q = torch.randn(1, 2, 4, 8)
    for calls in (0, 1, 2, 3, 4, 5, 7):
        trained = _kernel(redraw=2).train()
        for _ in range(calls):
            trained(q, q, q, None)
        restored = _kernel(redraw=2).train()
        restored.load_training_state(trained.training_state())
        assert restored.calls == calls and torch.equal(restored.projection, trained.projection), (
            calls
        )
        for _ in range(3):
            trained(q, q, q, None)
            restored(q, q, q, None)
            assert torch.equal(restored.projection, trained.projection), calls
