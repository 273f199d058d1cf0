"""Stable softmax, cross entropy + z-loss and softcap against float64 math."""

import math

import torch

from archlab.nn.functional import cross_entropy, eager_attention, softcap, softmax, z_loss


def test_softmax_stable_for_huge_logits():
    x = torch.tensor([[1000.0, 1001.0, 999.0], [-1e4, 0.0, 1e4]])
    ref = torch.softmax(x.double(), -1)
    torch.testing.assert_close(softmax(x).double(), ref)
    assert torch.isfinite(softmax(x)).all()


def test_softmax_of_fully_masked_row_is_zero_not_nan():
    x = torch.full((2, 4), float("-inf"))
    assert torch.equal(softmax(x), torch.zeros(2, 4))


def test_cross_entropy_with_z_loss_matches_formula():
    logits = torch.randn(2, 7, 11) * 5
    targets = torch.randint(0, 11, (2, 7))
    targets[0, 0] = -100  # ignored in both terms
    lg = logits.double().reshape(-1, 11)
    tg = targets.reshape(-1)
    keep = tg != -100
    lse = torch.logsumexp(lg, -1)
    nll = (lse - lg.gather(1, tg.clamp_min(0)[:, None]).squeeze(1))[keep].mean()
    ref = nll + 1e-4 * (lse[keep] ** 2).mean()
    got = cross_entropy(logits, targets, z_loss_coef=1e-4)
    assert abs(float(got) - float(ref)) < 1e-5
    assert abs(float(cross_entropy(logits, targets)) - float(nll)) < 1e-5


def test_z_loss_value():
    logits = torch.tensor([[0.0, math.log(3.0)]])  # Z = 1 + 3 = 4
    assert abs(float(z_loss(logits, 1e-4)) - 1e-4 * math.log(4.0) ** 2) < 1e-9


def test_softcap_bounds_and_identity_near_zero():
    x = torch.linspace(-1e4, 1e4, 1001)
    y = softcap(x, 30.0)
    assert y.abs().max() <= 30.0
    small = torch.tensor([1e-3, -2e-3])
    torch.testing.assert_close(softcap(small, 30.0), small, rtol=1e-6, atol=0)
    assert softcap(x, None) is x


def test_eager_attention_matches_float64_formula():
    q, k, v = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    s = q.double() @ k.double().transpose(-1, -2) / math.sqrt(8)
    s = s.masked_fill(~mask, float("-inf"))
    ref = torch.softmax(s, -1) @ v.double()
    torch.testing.assert_close(
        eager_attention(q, k, v, mask=mask).double(), ref, rtol=1e-5, atol=1e-6
    )
