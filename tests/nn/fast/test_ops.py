"""The hand-written kernels of nn/fast/ops.py against autograd on the same operands (float64):
values and gradients."""

from __future__ import annotations

import pytest
import torch

from archlab.nn.fast.ops import rms_norm, rope_qkv, silu_mul
from archlab.nn.positions.rope import full_tables
from tests.nn.fast.test_install import _grads, _rotate_reference


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
    torch.testing.assert_close(
        _grads(out, [gate_up])[0], _grads(ref, [gate_up])[0], rtol=1e-10, atol=1e-12
    )


@pytest.mark.parametrize(
    "layout, d_rot, n_kv",
    [("half", 8, 2), ("interleaved", 8, 4), ("half", 4, 1), ("interleaved", 6, 2)],
)
def test_rope_qkv_values_and_gradients_match_autograd_float64(
    layout: str, d_rot: int, n_kv: int
) -> None:
    """Whole and partial rotary, both layouts, GQA / MHA / MQA; angles per row (B, T) and
    broadcast (1, T)."""
    torch.manual_seed(0)
    H, Dh = 4, 8
    heads = torch.randn(2, 5, H + 2 * n_kv, Dh, dtype=torch.float64, requires_grad=True)
    for rows in (2, 1):
        angles = torch.rand(rows, 5, 1, d_rot // 2, dtype=torch.float64) * 40 - 20  # far past 2 pi
        # a YaRN-like attention factor
        cos, sin = full_tables(angles.cos() * 0.9, angles.sin() * 0.9, layout)
        got = rope_qkv(heads, cos, sin, H, n_kv, layout)
        q, k, v = heads.split([H, n_kv, n_kv], dim=2)
        want = (
            _rotate_reference(q, angles, layout) * 0.9,
            _rotate_reference(k, angles, layout) * 0.9,
            v,
        )
        if d_rot < Dh:  # the factor scales only the rotated dims
            want = tuple(
                torch.cat((w[..., :d_rot], t[..., d_rot:]), -1) for w, t in zip(want[:2], (q, k))
            ) + (v,)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
        out = torch.cat([t.flatten() * (i + 1) for i, t in enumerate(got)])
        ref = torch.cat([t.flatten() * (i + 1) for i, t in enumerate(want)])
        torch.testing.assert_close(
            _grads(out, [heads])[0], _grads(ref, [heads])[0], rtol=1e-10, atol=1e-12
        )
