"""RopeScaling and ROPE_KINDS (nn/positions/scaling.py): one-line refusals, the config carrying a
scaling, each kind's scaling at an evaluation length (RopeKind.at) and its context limit."""

from __future__ import annotations

import pytest

from archlab import ModelConfig, RopeScaling
from archlab.nn.positions.scaling import ROPE_KINDS, inference_kinds


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(kind="linear", factor=0.5), r"RopeScaling.factor=0.5 is not allowed: a number >= 1"),
        (
            dict(kind="none", factor=2.0),
            r"RopeScaling.factor=2.0 is not allowed: 1 with kind='none'",
        ),
        (
            dict(kind="yarn", factor=2.0),
            r"RopeScaling.original_max_seq_len=None is not allowed: required",
        ),
        (
            dict(kind="llama3", factor=2.0, original_max_seq_len=64, low_freq_factor=1.0),
            r"RopeScaling.high_freq_factor=None is not allowed: required with kind='llama3'",
        ),
        (
            dict(kind="yarn", factor=2.0, original_max_seq_len=64, low_freq_factor=1.0),
            r"RopeScaling.low_freq_factor=1.0 is not allowed: only with kind in \['llama3'\]",
        ),
        (
            dict(kind="linear", factor=2.0, truncate=False),
            r"RopeScaling.truncate=False is not allowed: only with",
        ),
        (
            dict(kind="ntk_by_parts", factor=2.0, original_max_seq_len=64, beta_fast=0.5),
            r"RopeScaling.beta_fast=0.5 is not allowed: > beta_slow=1.0",
        ),
        (
            dict(kind="yarn", factor=2.0, original_max_seq_len=0),
            r"original_max_seq_len=0 is not allowed: a positive",
        ),
        (dict(kind="ntk2"), r"RopeScaling.kind='ntk2' is not allowed: one of none, linear, ntk"),
    ],
)
def test_validation_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RopeScaling(**kwargs)


def test_model_config_carries_scaling() -> None:
    config = ModelConfig(
        rope=dict(scaling={"kind": "yarn", "factor": 2.0, "original_max_seq_len": 64})
    )
    assert config.rope.scaling == RopeScaling("yarn", 2.0, 64)
    assert ModelConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    ("kind", "length", "window", "want"),
    [
        ("none", 2048, None, None),
        ("linear", 2048, None, RopeScaling("linear", 8.0)),
        ("linear", 100, None, RopeScaling("linear", 1.0)),  # never below 1
        ("ntk", 1024, None, RopeScaling("ntk", 4.0)),
        ("ntk_mixed", 2048, None, RopeScaling("ntk_mixed", 8.0)),
        ("ntk_by_parts", 2048, None, RopeScaling("ntk_by_parts", 8.0, 256)),
        ("dynamic", 512, None, RopeScaling("dynamic", 2.0, 256)),
        ("yarn", 2048, None, RopeScaling("yarn", 8.0, 256)),
        (
            "llama3",
            2048,
            None,
            RopeScaling("llama3", 8.0, 256, low_freq_factor=1.0, high_freq_factor=4.0),
        ),
        ("rerope", 2048, None, RopeScaling("rerope", window=128)),  # W = L_train / 2
        ("rerope", 2048, 32, RopeScaling("rerope", window=32)),
        # Su's rule: W + (L - 1 - W) / k <= L_train / 2, k >= 16: (2047 - 64) / (128 - 64) = 30.98
        ("leaky_rerope", 2048, None, RopeScaling("leaky_rerope", (2047 - 64) / 64, window=64)),
        # (511 - 64) / 64 < 16
        ("leaky_rerope", 512, None, RopeScaling("leaky_rerope", 16.0, window=64)),
    ],
)
def test_each_kind_scales_for_an_evaluation_length(
    kind: str, length: int, window: int | None, want: RopeScaling | None
) -> None:
    """`RopeKind.at(length, train_len=256, window)`, the scaling eval length, the lab and
    plot rope apply."""
    assert ROPE_KINDS[kind].at(length, 256, window) == want


def test_kinds_without_an_inference_form_and_bad_windows_are_refused_in_one_line() -> None:
    with pytest.raises(
        ValueError, match="^rope.scaling.kind='inv_leaky_rerope' has no inference-time form"
    ):
        ROPE_KINDS["inv_leaky_rerope"].at(512, 256)
    with pytest.raises(
        ValueError, match="^window=300 is not allowed: between 1 and max_seq_len = 256$"
    ):
        ROPE_KINDS["rerope"].at(512, 256, 300)
    with pytest.raises(ValueError, match="^window=200 is not allowed with leaky_k='half'"):
        ROPE_KINDS["leaky_rerope"].at(512, 256, 200)
    assert ROPE_KINDS["leaky_rerope"].at(2048, 256, 64, leaky_k="train") == RopeScaling(
        # the longest distance onto the longest trained
        "leaky_rerope",
        (2047 - 64) / (255 - 64),
        window=64,
    )
    assert inference_kinds() == tuple(k for k in ROPE_KINDS if k != "inv_leaky_rerope")


@pytest.mark.parametrize(
    ("scaling", "limit"),
    [
        (RopeScaling("linear", 4.0), 1024),  # factor x L0 (L0 = max_seq_len when not given)
        (RopeScaling("yarn", 4.0, 128), 512),
        (RopeScaling("rerope", window=64), None),  # no relative position past the window: no limit
        (RopeScaling("leaky_rerope", 8.0, window=64), 64 + 1 + 8 * (255 - 64)),
        (RopeScaling("inv_leaky_rerope", 2.0, window=64), 64 + 1 + 2 * (255 - 64)),
    ],
)
def test_each_kinds_context_limit(scaling: RopeScaling, limit: int | None) -> None:
    assert ROPE_KINDS[scaling.kind].context_limit(scaling, 256) == limit
