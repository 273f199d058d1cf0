"""The hand-written losses of nn/fast/losses.py against torch, autograd or float64 math on the same
operands: values and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from archlab.nn.fast import losses
from archlab.nn.fast.losses import cross_entropy as fused_cross_entropy
from archlab.nn.fast.losses import linear_cross_entropy
from tests.nn.fast.test_install import _bf16, _head_loss_reference


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
def test_cross_entropy_matches_torch_with_ignored_rows(dtype: torch.dtype, tol: float) -> None:
    torch.manual_seed(0)
    logits = (torch.randn(40, 33, dtype=dtype) * 4).requires_grad_()
    targets = torch.randint(0, 33, (40,))
    targets[::7] = -100
    want = F.cross_entropy(logits, targets, ignore_index=-100)
    got = fused_cross_entropy(logits, targets, -100)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    (g_want,) = torch.autograd.grad(want * 1.7, logits)
    (g_got,) = torch.autograd.grad(got * 1.7, logits)
    torch.testing.assert_close(g_got, g_want, rtol=tol, atol=tol)
    assert g_got[::7].abs().max() == 0  # ignored rows get no gradient


def test_cross_entropy_refuses_a_second_backward() -> None:
    logits = torch.randn(4, 5, requires_grad=True)
    loss = fused_cross_entropy(logits, torch.tensor([0, 1, 2, 3]), -100)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward ran twice"):
        loss.backward()


@pytest.mark.parametrize(
    "cap, coef, bias", [(None, 0.0, False), (None, 0.1, True), (2.0, 0.0, True), (2.0, 0.1, False)]
)
def test_linear_cross_entropy_values_and_gradients_match_autograd_float64(
    monkeypatch: pytest.MonkeyPatch, cap: float | None, coef: float, bias: bool
) -> None:
    """Softcap, z-loss, head bias and ignored rows, over chunks of 4 rows (the last one short)."""
    monkeypatch.setattr(losses, "MIN_HEAD_CHUNK_ROWS", 4)
    monkeypatch.setattr(losses, "HEAD_CHUNK_ELEMENTS", 1)
    torch.manual_seed(0)
    x = (torch.randn(10, 6, dtype=torch.float64) * 2).requires_grad_()
    w = torch.randn(7, 6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(7, dtype=torch.float64, requires_grad=True) if bias else None
    targets = torch.randint(0, 7, (10,))
    targets[[3, 9]] = -100
    loss, ce, z = linear_cross_entropy(x, w, b, targets, cap, coef)
    want_ce, want_z = _head_loss_reference(x, w, b, targets, cap, coef)
    for got, want in ((loss, want_ce + want_z), (ce, want_ce), (z, want_z)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert not ce.requires_grad and not z.requires_grad
    params = [x, w] + ([b] if bias else [])
    got_grads = torch.autograd.grad(loss * 1.7, params)
    for got, want in zip(got_grads, torch.autograd.grad((want_ce + want_z) * 1.7, params)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    assert got_grads[0][[3, 9]].abs().max() == 0  # an ignored row's hidden state gets no gradient


@pytest.mark.parametrize("cap, coef", [(None, 0.0), (2.0, 0.1)])
def test_linear_cross_entropy_in_bf16_matches_float64_math_on_bf16_operands(
    monkeypatch: pytest.MonkeyPatch, cap: float | None, coef: float
) -> None:
    """mm_dtype bf16 (autocast's head): the loss is the float64 loss of the bf16-rounded logits of
    bf16 operands; the float32 gradients are that loss's gradients with each GEMM's operands rounded
    to bf16 (within bf16 rounding of the (c, V) gradient), over several chunks."""
    monkeypatch.setattr(losses, "MIN_HEAD_CHUNK_ROWS", 8)
    monkeypatch.setattr(losses, "HEAD_CHUNK_ELEMENTS", 1)
    torch.manual_seed(0)
    x = (torch.randn(20, 16) * 2).requires_grad_()
    w = torch.randn(40, 16, requires_grad=True)
    targets = torch.randint(0, 40, (20,))
    targets[[4, 13]] = -100
    loss, ce, z = linear_cross_entropy(x, w, None, targets, cap, coef, mm_dtype=torch.bfloat16)
    assert loss.dtype == torch.float32
    # bf16 GEMM: rounded output
    logits = (_bf16(x) @ _bf16(w).t()).bfloat16().double().requires_grad_()
    capped = logits if cap is None else cap * torch.tanh(logits / cap)
    keep = targets != -100
    lse = capped.logsumexp(-1)[keep]
    want_ce = (lse - capped[keep].gather(1, targets[keep, None]).squeeze(1)).mean()
    want_z = coef * lse.square().mean()
    torch.testing.assert_close(ce.double(), want_ce, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(z.double(), want_z, rtol=1e-6, atol=1e-6)
    (g_logits,) = torch.autograd.grad(want_ce + want_z, logits)
    gx, gw = torch.autograd.grad(loss, [x, w])
    assert gx.dtype == gw.dtype == torch.float32
    tol = dict(rtol=5e-3, atol=5e-3 * float(g_logits.abs().max()))
    torch.testing.assert_close(gx.double(), g_logits @ _bf16(w), **tol)
    torch.testing.assert_close(gw.double(), g_logits.t() @ _bf16(x), **tol)
    assert gx[[4, 13]].abs().max() == 0
