"""Per-layer positions (rope.pattern, rope.local_theta, rope.local_scaling), log-n attention scaling
and the HWFA preset: log-n equals its formula in float64; a NoPE layer is position-free; window
layers rotate with their own theta and, with rope.local_scaling off, without the global layers'
scaling (Gemma 3); HWFA (+ ReRoPE) trains and decodes with the cache equal to the full forward."""

from __future__ import annotations

import math

import pytest
import torch

from archlab import ModelConfig, RopeScaling, TransformerLM
from archlab.nn.config import ConfigError
from archlab.nn.functional import cross_entropy, softmax
from archlab.nn.positions.rope import RotaryEmbedding
from archlab.nn.presets import build_preset
from tests.nn.test_kv_cache import cached_logits

VOCAB, T = 64, 20
SMALL = dict(d_model=32, n_heads=4, n_layers=2, max_seq_len=16, vocab_size=VOCAB)
TOL = dict(rtol=1e-5, atol=1e-5)


def tiny(**fields: object) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(ModelConfig(**{**SMALL, **fields})).eval()


def ids(batch: int = 2, length: int = T, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def reference_logn_attention(
    attn: torch.nn.Module, x: torch.Tensor, base: int, window: int | None
) -> torch.Tensor:
    """A NoPE layer in float64: scores q_m . k_n / sqrt(Dh) * log(n_m) / log(base), n_m = keys
    query m sees."""
    B, t, _ = x.shape
    H, Dh = attn.n_heads, attn.head_dim
    q, k, v = (
        (x.double() @ attn.qkv_proj.weight.double().T)
        .view(B, t, 3 * H, Dh)
        .transpose(1, 2)
        .split(H, dim=1)
    )
    m, n = torch.arange(t)[:, None], torch.arange(t)[None, :]
    visible = (n <= m) & ((m - n < window) if window else True)
    seen = visible.sum(dim=1).double()  # keys each query sees
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(Dh) * (seen.log() / math.log(base))[:, None]
    y = softmax(scores.masked_fill(~visible, float("-inf"))) @ v
    return y.transpose(1, 2).reshape(B, t, H * Dh) @ attn.o_proj.weight.double().T


@pytest.mark.parametrize(
    "fields,base",
    [
        (dict(), 16),
        (dict(attn_logn_base=5), 5),
        (dict(sliding_window=6), 16),
        (dict(attn_impl="eager"), 16),
    ],
)
def test_logn_scaling_equals_its_formula(fields: dict, base: int) -> None:
    model = tiny(position="none", attn_logn=True, **fields)
    x = torch.randn(2, T, 32)
    inputs = model.attention_inputs(torch.arange(T).expand(2, T))[0]
    with torch.no_grad():
        got = model.layers[0].attn(x, inputs)
    want = reference_logn_attention(model.layers[0].attn, x, base, fields.get("sliding_window"))
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


def test_nope_layers_are_models_without_positions() -> None:
    nope, none = tiny(rope=dict(pattern="N")), tiny(position="none")
    with torch.no_grad():
        torch.testing.assert_close(nope(ids()), none(ids()), rtol=0, atol=0)
    mixed = tiny(rope=dict(pattern="RN"), n_layers=4)
    ropes = [
        inputs.rope is not None for inputs in mixed.attention_inputs(torch.arange(T).expand(2, T))
    ]
    assert ropes == [True, False, True, False]


def test_window_layers_rotate_with_rope_theta_local() -> None:
    local = tiny(sliding_window=8, window_pattern="S", rope=dict(local_theta=500.0))
    plain = tiny(sliding_window=8, window_pattern="S", rope=dict(theta=500.0))
    with torch.no_grad():
        torch.testing.assert_close(local(ids()), plain(ids()), rtol=0, atol=0)
    mixed = tiny(sliding_window=8, window_pattern="SF", rope=dict(local_theta=500.0))
    inputs = mixed.attention_inputs(torch.arange(T).expand(1, T))
    for layer, theta in [(0, 500.0), (1, 10000.0)]:
        cos, _ = RotaryEmbedding(8, theta)(torch.arange(T)[None])
        torch.testing.assert_close(inputs[layer].rope.cos, cos)


def reference_cos(theta: float, factor: float, d_rot: int = 8) -> torch.Tensor:
    """cos(p / factor * theta^(-2i/d)) in float64 for p < T, in the rotate_half layout (each
    pair's cos twice)."""
    i = torch.arange(0, d_rot, 2, dtype=torch.float64)
    # (T, d_rot/2)
    angles = (torch.arange(T, dtype=torch.float64)[:, None] / factor) * theta ** (-i / d_rot)
    return torch.cat((angles.cos(), angles.cos()), dim=-1)  # (T, d_rot)


@pytest.mark.parametrize("scaled_local,theta_local", [(False, 500.0), (True, 500.0), (False, None)])
def test_rope_scaling_on_global_layers_only(scaled_local: bool, theta_local: float | None) -> None:
    """Gemma 3: linear scaling (factor 4) on the full layers; window layers keep their
    own, unscaled base."""
    model = tiny(
        sliding_window=8,
        window_pattern="SF",
        rope=dict(
            local_theta=theta_local, local_scaling=scaled_local, scaling=RopeScaling("linear", 4.0)
        ),
    )
    inputs = model.attention_inputs(torch.arange(T).expand(1, T))
    local = reference_cos(
        10000.0 if theta_local is None else theta_local, 4.0 if scaled_local else 1.0
    )
    for layer, want in [(0, local), (1, reference_cos(10000.0, 4.0))]:
        torch.testing.assert_close(
            inputs[layer].rope.cos[0, :, 0].double(), want, rtol=0, atol=1e-6
        )
    x = ids(length=24)
    with torch.no_grad():
        full = model(x)
    torch.testing.assert_close(cached_logits(model, x, (5, 9)), full, **TOL)


@pytest.mark.parametrize(
    "fields",
    [
        dict(),
        dict(rope=dict(scaling=RopeScaling("rerope", window=3))),
        dict(rope=dict(scaling=RopeScaling("leaky_rerope", 4.0, window=3)), n_kv_heads=2),
        dict(rope=dict(local_theta=100.0), attn_impl="eager"),
    ],
    ids=["hwfa", "hwfa-rerope", "hwfa-leaky", "hwfa-local-theta"],
)
def test_hwfa_decodes_equal_to_the_full_forward(fields: dict) -> None:
    torch.manual_seed(0)
    model = TransformerLM(
        build_preset("hwfa", d_model=32, n_layers=3, max_seq_len=16, vocab_size=VOCAB, **fields)
    ).eval()
    assert (
        model.layer_windows == (4, 4, None)
        and model.layer_ropes[2] is None
        and model.config.attn_logn
    )
    x = ids(length=24)
    with torch.no_grad():
        full = model(x)
    for chunks in [(3,), (5, 9)]:
        torch.testing.assert_close(cached_logits(model, x, chunks), full, **TOL)


def test_hwfa_trains() -> None:
    torch.manual_seed(0)
    model = TransformerLM(
        build_preset("hwfa", d_model=32, n_layers=3, max_seq_len=16, vocab_size=VOCAB)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = ids(4, 17)
    losses = []
    for _ in range(30):
        loss = cross_entropy(model(x[:, :-1]), x[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize(
    "fields,message",
    [
        (dict(rope=dict(pattern="RX")), "rope.pattern='RX'"),
        (dict(rope=dict(pattern="")), "rope.pattern=''"),
        (dict(rope=dict(local_theta=1.0)), "rope.local_theta=1.0"),
        (dict(attn_logn_base=8), "only with attn_logn"),
        (dict(attn_logn=True, attn_logn_base=1), "attn_logn_base=1"),
        (dict(position="alibi", rope=dict(pattern="RN")), "only with position='rope'"),
        (
            dict(position="alibi", rope=dict(local_scaling=False)),
            r"rope=Rope\(.*local_scaling=False\) is not allowed: "
            "only with position='rope'",
        ),
    ],
)
def test_bad_values_fail_in_one_line(fields: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**fields)
