"""The RoPE methods at inference: each method's scaling at each length, and Leaky ReRoPE's
slope by Su's rule (the largest position any query sees, from every (m, n) pair, within half
the training length)."""

from __future__ import annotations

import pytest
import torch

from archlab.eval.rope_methods import method_scaling
from archlab.nn.positions.rerope import relative_positions
from archlab.nn.positions.scaling import RopeScaling


def test_each_method_scales_to_the_target_length() -> None:
    assert method_scaling("none", 64, 16) is None
    assert method_scaling("linear", 64, 16) == RopeScaling("linear", 4.0)
    assert method_scaling("yarn", 64, 16) == RopeScaling("yarn", 4.0, 16)
    assert method_scaling("ntk", 8, 16) == RopeScaling("ntk", 1.0)  # never below 1
    assert method_scaling("rerope", 64, 16) == RopeScaling("rerope", window=8)
    # the older mapping, kept
    leaky = method_scaling("leaky_rerope", 64, 16, window=6, leaky_k="train")
    longest = relative_positions(torch.tensor([[63]]), torch.tensor([[0]]), 6, leaky.factor)
    # the longest distance lands on the longest one trained
    assert float(longest) == pytest.approx(15)
    with pytest.raises(ValueError, match="scaling 'rope2' is not allowed"):
        method_scaling("rope2", 64, 16)


def largest_position(length: int, scaling: RopeScaling) -> float:
    """The largest relative position any query of a `length`-token window sees, from every
    (m, n) pair."""
    pos = torch.arange(length)[None]
    return float(relative_positions(pos, pos, scaling.window, scaling.factor)[0].tril().max())


@pytest.mark.parametrize(
    "train_len,window", [(256, None), (256, 64), (256, 100), (16, None), (64, 8)]
)
def test_leaky_slope_by_su_rule_keeps_every_position_within_half_the_training_length(
    train_len: int,
    window: int | None,
) -> None:
    """Su (kexue.fm/archives/9708): W + (L - 1 - W) / k <= N / 2 at every test length, and k
    never below 16."""
    for length in (train_len, 2 * train_len, 3 * train_len + 5, 8 * train_len, 16 * train_len):
        scaling = method_scaling("leaky_rerope", length, train_len, window)
        assert scaling.window == (train_len // 4 if window is None else window)
        assert largest_position(length, scaling) <= train_len / 2 + 1e-9, (length, scaling)
        assert scaling.factor >= 16
    at_8x = method_scaling("leaky_rerope", 2048, 256, 64)
    # about 31, against the older mapping's ~10
    assert at_8x.factor == pytest.approx((2047 - 64) / (128 - 64))
    assert method_scaling("leaky_rerope", 2048, 256, 64, leaky_k="train").factor == pytest.approx(
        1983 / 191
    )
    assert method_scaling("leaky_rerope", 2048, 256, 64, leaky_k=8).factor == 8.0  # k given


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            dict(window=128),
            r"^window=128 is not allowed with leaky_k='half': below max_seq_len / 2 = 128",
        ),
        (dict(window=64, leaky_k=0.5), r"^leaky_k=0.5 is not allowed"),
        (dict(window=64, leaky_k="half2"), r"^leaky_k='half2' is not allowed"),
    ],
)
def test_leaky_slope_bad_inputs_fail_in_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        method_scaling("leaky_rerope", 2048, 256, **kwargs)
    assert "\n" not in str(err.value)
