"""The hand-written kernels of nn/fast/ops.py against autograd or float64 math on the same operands:
values and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from archlab.nn.fast import ops as fused_ops
from archlab.nn.fast.ops import cross_entropy as fused_cross_entropy
from archlab.nn.fast.ops import linear_cross_entropy, rms_norm, rope_qkv, silu_mul
from archlab.nn.positions.rope import full_tables
from tests.nn.fast.test_install import _attention64, _bf16, _grads, _graph, _head_loss_reference, _rotate_reference


def test_rms_norm_values_and_gradients_match_autograd_float64() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(16, dtype=torch.float64, requires_grad=True)
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
    out = rms_norm(x, w, 1e-5)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    for got, want in zip(_grads(out, [x, w]), _grads(ref, [x, w])):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_silu_mul_values_and_gradients_match_autograd_float64() -> None:
    torch.manual_seed(0)
    gate_up = torch.randn(2, 7, 2 * 12, dtype=torch.float64, requires_grad=True) * 3
    gate, up = gate_up.chunk(2, dim=-1)
    ref = gate * torch.sigmoid(gate) * up
    out = silu_mul(gate_up)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(_grads(out, [gate_up])[0], _grads(ref, [gate_up])[0], rtol=1e-10, atol=1e-12)


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


@pytest.mark.parametrize("layout, d_rot, n_kv", [("half", 8, 2), ("interleaved", 8, 4), ("half", 4, 1),
                                                 ("interleaved", 6, 2)])
def test_rope_qkv_values_and_gradients_match_autograd_float64(layout: str, d_rot: int, n_kv: int) -> None:
    """Whole and partial rotary, both layouts, GQA / MHA / MQA; angles per row (B, T) and broadcast (1, T)."""
    torch.manual_seed(0)
    H, Dh = 4, 8
    heads = torch.randn(2, 5, H + 2 * n_kv, Dh, dtype=torch.float64, requires_grad=True)
    for rows in (2, 1):
        angles = torch.rand(rows, 5, 1, d_rot // 2, dtype=torch.float64) * 40 - 20  # far past 2 pi
        cos, sin = full_tables(angles.cos() * 0.9, angles.sin() * 0.9, layout)  # a YaRN-like attention factor
        got = rope_qkv(heads, cos, sin, H, n_kv, layout)
        q, k, v = heads.split([H, n_kv, n_kv], dim=2)
        want = (_rotate_reference(q, angles, layout) * 0.9, _rotate_reference(k, angles, layout) * 0.9, v)
        if d_rot < Dh:  # the factor scales only the rotated dims
            want = tuple(torch.cat((w[..., :d_rot], t[..., d_rot:]), -1) for w, t in zip(want[:2], (q, k))) + (v,)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
        out = torch.cat([t.flatten() * (i + 1) for i, t in enumerate(got)])
        ref = torch.cat([t.flatten() * (i + 1) for i, t in enumerate(want)])
        torch.testing.assert_close(_grads(out, [heads])[0], _grads(ref, [heads])[0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cap, coef, bias", [(None, 0.0, False), (None, 0.1, True), (2.0, 0.0, True),
                                             (2.0, 0.1, False)])
def test_linear_cross_entropy_values_and_gradients_match_autograd_float64(
    monkeypatch: pytest.MonkeyPatch, cap: float | None, coef: float, bias: bool
) -> None:
    """Softcap, z-loss, head bias and ignored rows, over chunks of 4 rows (the last one short)."""
    monkeypatch.setattr(fused_ops, "MIN_HEAD_CHUNK_ROWS", 4)
    monkeypatch.setattr(fused_ops, "HEAD_CHUNK_ELEMENTS", 1)
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
    """mm_dtype bf16 (autocast's head): the loss is the float64 loss of the bf16-rounded logits of bf16 operands;
    the float32 gradients are that loss's gradients with each GEMM's operands rounded to bf16 (within bf16
    rounding of the (c, V) gradient), over several chunks."""
    monkeypatch.setattr(fused_ops, "MIN_HEAD_CHUNK_ROWS", 8)
    monkeypatch.setattr(fused_ops, "HEAD_CHUNK_ELEMENTS", 1)
    torch.manual_seed(0)
    x = (torch.randn(20, 16) * 2).requires_grad_()
    w = torch.randn(40, 16, requires_grad=True)
    targets = torch.randint(0, 40, (20,))
    targets[[4, 13]] = -100
    loss, ce, z = linear_cross_entropy(x, w, None, targets, cap, coef, mm_dtype=torch.bfloat16)
    assert loss.dtype == torch.float32
    logits = (_bf16(x) @ _bf16(w).t()).bfloat16().double().requires_grad_()  # bf16 GEMM: rounded output
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


@pytest.mark.parametrize("block_elements", [2**24, 5 * 12 * 6])  # one block; blocks of 5, 5 and 2 query rows
def test_causal_attention_in_bf16_matches_float64_math_on_bf16_operands(
    monkeypatch: pytest.MonkeyPatch, block_elements: int
) -> None:
    """The forward is SDPA's flash kernel (bit for bit); the gradients of the GEMM backward agree with float64
    autograd of the written-out formula on the same bf16 inputs to bf16 rounding (relative error 1.5e-2; the
    flash kernel's own bf16 backward measured 3e-3, this one 6e-3 on larger shapes), block by block or in one."""
    monkeypatch.setattr(fused_ops, "ATTENTION_BLOCK_ELEMENTS", block_elements)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 12, 6, 8, generator=gen).mul(2).bfloat16().transpose(1, 2).requires_grad_()
               for _ in range(3))  # (B, H, T, Dh) as the model makes them: a view of (B, T, H, Dh)
    g = torch.randn(2, 6, 12, 8, generator=gen).bfloat16()
    out = fused_ops.causal_attention(q, k, v, 8**-0.5)
    assert "_CausalAttentionBackward" in _graph(out)
    assert torch.equal(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    got = torch.autograd.grad(out, [q, k, v], g)
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want_out = _attention64(*ref)
    torch.testing.assert_close(out.double(), want_out, rtol=1e-2, atol=1e-2)
    want = torch.autograd.grad(want_out, ref, g.double())
    for name, a, b in zip("qkv", got, want):
        assert a.dtype == torch.bfloat16 and a.shape == b.shape, name
        error = float((a.double() - b).norm() / b.norm())
        assert error < 1.5e-2, (name, error)


def test_causal_attention_compiles_in_one_graph_and_agrees_with_eager() -> None:
    """The compiled bf16 training step also takes `causal_attention`: it traces without a graph break and the
    compiled forward and gradients equal the eager ones to bf16 rounding."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 4, 16, 8, generator=gen).bfloat16().requires_grad_() for _ in range(3))
    g = torch.randn(2, 4, 16, 8, generator=gen).bfloat16()

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        assert fused_ops.use_causal_attention(q, k)
        return fused_ops.causal_attention(q, k, v, 8**-0.5)

    from torch._dynamo.backends.common import aot_autograd

    backward_ops: set[str] = set()

    def record_backward(gm: torch.fx.GraphModule, _inputs: list) -> torch.fx.GraphModule:
        backward_ops.update(str(node.target) for node in gm.graph.nodes if node.op == "call_function")
        return gm

    inductor = torch.compile(attention, fullgraph=True)
    recorded = torch.compile(attention, fullgraph=True, backend=aot_autograd(fw_compiler=lambda gm, _: gm,
                                                                               bw_compiler=record_backward))
    results = []
    for fn in (attention, inductor, recorded):  # the backward is compiled with the forward
        out = fn(q, k, v)
        results.append((out, *torch.autograd.grad(out, [q, k, v], g)))
    assert "aten._softmax_backward_data.default" in backward_ops
    assert not any("flash_attention" in op for op in backward_ops)  # the GEMM backward, not the flash one
    for a, b in zip(results[1], results[0]):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)
