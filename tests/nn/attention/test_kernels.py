"""nn/attention/kernels.py: every registered kernel against attention written out in float64 (GQA
/ MQA, the plain causal case, a decode step, masks with padding and windows, additive biases,
softcap where supported), and the two protocols attention talks through: the kernel interface
and the position plan (a plan of a class attention has never seen works by what it says, not
by its type)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

from archlab.nn.attention.inputs import AttentionInputs
from archlab.nn.attention.kernels import KernelCall, sdpa
from archlab.nn.config.choices import ATTENTION_KERNELS
from archlab.nn.functional import causal_mask

B, H, DH = 2, 4, 8


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: KernelCall) -> torch.Tensor:
    """float64: softmax(cap * tanh(q k^T scale / cap) + bias, masked) v, query head h reading K/V
    head h // n_rep, the T queries being the last T key slots when no mask is given; merged to (B,
    T, H * Dh)."""
    q, k, v = q.double(), k.double(), v.double()
    T, S, n_rep = q.shape[2], k.shape[2], q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)
    scores = (q @ k.transpose(-1, -2)) * call.scale  # (B, H, T, S)
    if call.softcap is not None:
        scores = call.softcap * torch.tanh(scores / call.softcap)
    if call.bias is not None:
        scores = scores + call.bias.double()
    if call.mask is not None:
        visible = call.mask
    else:
        visible = torch.arange(S)[None, :] <= torch.arange(S - T, S)[:, None]  # (T, S)
    scores = scores.masked_fill(~visible, -math.inf)
    y = scores.softmax(-1) @ v  # (B, H, T, Dh)
    return y.transpose(1, 2).reshape(q.shape[0], T, -1)


def qkv(
    t: int, s: int, n_kv: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, t, DH, generator=gen),
        torch.randn(B, n_kv, s, DH, generator=gen),
        torch.randn(B, n_kv, s, DH, generator=gen),
    )


def padded_window_mask(t: int, s: int) -> torch.Tensor:
    """Queries at slots s-t..s-1 over keys 0..s-1, a window of 4, and row 0's first
    two slots padding."""
    key_mask = torch.ones(B, s, dtype=torch.bool)
    key_mask[0, :2] = False
    return causal_mask(torch.arange(s - t, s), torch.arange(s), 4, key_mask)  # (B, 1, T, S)


CASES = {  # name -> (T, S, mask builder, with bias)
    "prefill-causal": (6, 6, None, False),
    "decode": (1, 7, None, False),
    "chunk-after-cache-window-padding": (3, 8, padded_window_mask, False),
    "prefill-bias": (5, 5, None, True),
    "decode-bias-window-padding": (1, 9, padded_window_mask, True),
}


@pytest.mark.parametrize("n_kv", [H, 2, 1])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", ATTENTION_KERNELS)
def test_kernel_equals_float64_attention(name: str, case: str, n_kv: int) -> None:
    T, S, make_mask, with_bias = CASES[case]
    q, k, v = qkv(T, S, n_kv)
    bias = (
        torch.randn(1, H, T, S, generator=torch.Generator().manual_seed(5)) if with_bias else None
    )
    call = KernelCall(DH**-0.5, make_mask(T, S) if make_mask else None, bias)
    got = ATTENTION_KERNELS[name](q, k, v, call)
    assert got.shape == (B, T, H * DH)
    torch.testing.assert_close(got.double(), reference(q, k, v, call), rtol=1e-5, atol=1e-5)


def test_eager_softcaps_and_takes_a_plans_scores_and_sdpa_refuses_both() -> None:
    q, k, v = qkv(5, 5, 2)
    capped = KernelCall(DH**-0.5, None, None, softcap=0.5)
    torch.testing.assert_close(
        ATTENTION_KERNELS["eager"](q, k, v, capped).double(),
        reference(q, k, v, capped),
        rtol=1e-5,
        atol=1e-5,
    )
    doubled = KernelCall(
        DH**-0.5, None, None, scores=lambda q, k: 2 * (q @ k.repeat_interleave(2, 1).mT)
    )
    # the plan's scores, then the scale
    want = reference(q, k, v, KernelCall(2 * DH**-0.5, None, None))
    torch.testing.assert_close(
        ATTENTION_KERNELS["eager"](q, k, v, doubled).double(), want, rtol=1e-5, atol=1e-5
    )
    for call in (capped, doubled):
        with pytest.raises(ValueError, match="sdpa kernel cannot"):
            sdpa(q, k, v, call)


@dataclass(frozen=True)
class UnrotatedScores:
    """A position plan of a class attention has never seen: no rotation, and its own scores
    q . k (so attention must route it to the eager kernel by asking `computes_scores`, not
    by its type)."""

    rotates_cached_keys = False
    computes_scores = True
    layout = "half"

    def rotate_queries_keys(self, q: torch.Tensor, k: torch.Tensor, qk: torch.Tensor | None = None):  # noqa: ANN201
        return q, k

    def rotate_cached_keys(self, k: torch.Tensor) -> torch.Tensor:
        return k

    def projection_tables(self, dtype: torch.dtype) -> None:
        return None

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return q @ k.repeat_interleave(q.shape[1] // k.shape[1], dim=1).transpose(-1, -2)


def test_attention_asks_the_plan_and_calls_its_kernel_through_the_interface() -> None:
    """A RoPE model's attention layer given the plan above computes what the same weights compute
    without positions (position="none"), through the eager kernel even though the layer's own kernel
    is sdpa; and a layer whose kernel is swapped for a recording one hands it q (B, H, T, Dh) and k,
    v (B, K, S, Dh)."""
    from archlab import ModelConfig, TransformerLM

    torch.manual_seed(0)
    rope = TransformerLM(ModelConfig(d_model=32, n_heads=4, n_kv_heads=2, n_layers=1))
    nope = TransformerLM(
        ModelConfig(d_model=32, n_heads=4, n_kv_heads=2, n_layers=1, position="none")
    )
    nope.load_state_dict(rope.state_dict())
    attn = rope.layers[0].attn
    assert attn.kernel is ATTENTION_KERNELS["sdpa"]
    x = torch.randn(2, 6, 32)
    plain = nope.layers[0].attn(x, nope.attention_inputs(torch.arange(6).expand(2, 6))[0])
    asked = attn(x, AttentionInputs(UnrotatedScores(), None, None, None))
    torch.testing.assert_close(asked, plain, rtol=1e-5, atol=1e-6)
    inputs = rope.attention_inputs(torch.arange(6).expand(2, 6))[0]
    with_sdpa = attn(x, inputs)
    seen = []

    def recording(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: KernelCall
    ) -> torch.Tensor:
        seen.append((q.shape, k.shape, v.shape, call.scale))
        return ATTENTION_KERNELS["eager"](q, k, v, call)

    attn.kernel = recording
    torch.testing.assert_close(attn(x, inputs), with_sdpa, rtol=1e-5, atol=1e-6)
    assert seen[0][:3] == ((2, 4, 6, 8), (2, 2, 6, 8), (2, 2, 6, 8)) and seen[0][
        3
    ] == pytest.approx(8**-0.5)
