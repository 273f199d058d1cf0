"""NTK-RoPE-mixed (Su, "Transformer upgrade 11", kexue.fm/archives/9706; nn/positions/rope.py
`ntk_mixed`): the frequencies equal the post's formula written out in float64, theta_i = b^(-2i/d) *
exp(-a (i + 1)^beta), a = ln(s) / (d/2)^beta (beta = 0.75 in Su's bojone/rerope ntk_patch.py); the
lowest frequency is interpolated by exactly s, factor 1 is plain RoPE, and a model with it decodes
with the cache equal to the full forward."""

from __future__ import annotations

import math

import pytest
import torch

from archlab import ModelConfig, RopeScaling, TransformerLM
from archlab.nn.positions.frequencies import base_inv_freq
from archlab.nn.positions.rope import RotaryEmbedding
from archlab.nn.positions.scaling import ROPE_KINDS
from tests.nn.test_kv_cache import cached_logits

THETA = 10000.0


def su_formula(d: int, theta: float, s: float, beta: float) -> torch.Tensor:
    """The post's per-pair frequencies, one pair at a time in float64."""
    a = math.log(s) / (d / 2) ** beta
    return torch.tensor(
        [theta ** (-2 * i / d) * math.exp(-a * (i + 1) ** beta) for i in range(d // 2)],
        dtype=torch.float64,
    )


@pytest.mark.parametrize("d", [8, 32, 128])
@pytest.mark.parametrize("s,beta", [(8.0, 0.75), (4.0, 0.625), (16.0, 1.0)])
def test_frequencies_equal_the_formula(d: int, s: float, beta: float) -> None:
    scaling = RopeScaling("ntk_mixed", s, mixed_b=beta)
    inv_freq, factor = ROPE_KINDS["ntk_mixed"].frequency_function()(d, THETA, scaling)
    want = su_formula(d, THETA, s, beta)
    torch.testing.assert_close(inv_freq, want, rtol=1e-12, atol=0)
    assert factor == 1.0
    base = base_inv_freq(d, THETA)
    # the lowest: exactly PI by s
    assert inv_freq[-1] * s == pytest.approx(float(base[-1]), rel=1e-12)
    ratio = base / inv_freq  # stretch per pair grows from ~1 to s
    assert (ratio[1:] > ratio[:-1]).all() and ratio[0] < s ** (1 / (d / 2) ** beta) + 1e-12


def test_default_exponent_and_factor_one() -> None:
    assert RopeScaling("ntk_mixed", 2.0).mixed_b == 0.75
    inv_freq, _ = ROPE_KINDS["ntk_mixed"].frequency_function()(
        32, THETA, RopeScaling("ntk_mixed", 1.0)
    )
    torch.testing.assert_close(inv_freq, base_inv_freq(32, THETA), rtol=1e-12, atol=0)


def test_tables_rotate_by_the_formula() -> None:
    """cos / sin of the model's rotary equal cos(p theta_i), sin(p theta_i) from
    the float64 formula."""
    rotary = RotaryEmbedding(16, THETA, "half", RopeScaling("ntk_mixed", 8.0), max_positions=64)
    positions = torch.arange(200)[None]
    cos, sin = rotary(positions)
    angles = positions[0, :, None].double() * su_formula(16, THETA, 8.0, 0.75)
    torch.testing.assert_close(cos[0, :, 0].double(), angles.cos().repeat(1, 2), rtol=0, atol=1e-4)
    torch.testing.assert_close(sin[0, :, 0, 8:].double(), angles.sin(), rtol=0, atol=1e-4)


def test_cached_decoding_equals_the_full_forward() -> None:
    torch.manual_seed(0)
    model = TransformerLM(
        ModelConfig(
            vocab_size=64,
            d_model=32,
            n_heads=4,
            n_layers=2,
            max_seq_len=16,
            rope=dict(scaling={"kind": "ntk_mixed", "factor": 4.0}),
        )
    ).eval()
    x = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(x)
        torch.testing.assert_close(cached_logits(model, x, (7,)), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "fields,message", [(dict(mixed_b=0.0), "mixed_b=0.0"), (dict(factor=0.5), "factor=0.5")]
)
def test_bad_values_fail_in_one_line(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RopeScaling("ntk_mixed", **{"factor": 2.0, **fields})
    with pytest.raises(ValueError, match="mixed_b=0.5.*only with kind in \\['ntk_mixed'\\]"):
        RopeScaling("linear", 2.0, mixed_b=0.5)
