"""The checks of ModelConfig.__post_init__ (nn/config/model.py, with the choices of
nn/config/choices.py; each group's own in test_config_groups.py): each bad value refused in one line
naming the field, the value and what is allowed; NaN and inf refused before any range check."""

from __future__ import annotations

import math

import pytest

from archlab import ConfigError, ModelConfig, build_preset
from archlab.nn.config.model import DEFAULT_ACTIVATION
from tests.nn.test_config import FLOAT_FIELDS


@pytest.mark.parametrize(
    "kwargs,needles",
    [
        (dict(d_model=64, n_heads=5), ["n_heads=5", "d_model=64"]),
        (dict(n_heads=4, n_kv_heads=3), ["n_kv_heads=3", "n_heads=4"]),
        (dict(norm="batchnorm"), ["norm='batchnorm'", "rmsnorm", "layernorm"]),
        (dict(activation="mish"), ["activation='mish'", "silu"]),
        (dict(position="xpos"), ["position='xpos'", "alibi"]),
        (dict(norm_position="sideways"), ["norm_position='sideways'", "nonresidual_post"]),
        # 16 * 0.3 = 4.8 -> 4 is fine? no: see below
        (dict(rope=dict(fraction=0.3)), ["rope.fraction=0.3", "even"]),
        (
            dict(position="learned", rope=dict(theta=5e5)),
            ["rope=Rope(theta=500000.0", "position='rope'"],
        ),
        (
            dict(position="alibi", rope=dict(layout="interleaved")),
            ["layout='interleaved'", "only with position"],
        ),
        (dict(dropout=1.5), ["dropout=1.5", "[0, 1)"]),
        (dict(attn_softcap=-1.0), ["attn_softcap=-1.0"]),
        (dict(attn_softcap=50.0, attn_impl="sdpa"), ["attn_impl='sdpa'", "attn_softcap"]),
        (dict(window_pattern="SXF", sliding_window=8), ["window_pattern='SXF'"]),
        (dict(norm="rmsnorm", norm_bias=True), ["norm_bias=True", "layernorm"]),
        (dict(parallel_norms=3), ["parallel_norms=3"]),
        (dict(vocab_size=0), ["vocab_size=0"]),
        (dict(qk_norm="rmsnorm", key_norm=True), ["key_norm"]),
    ],
)
def test_bad_values_name_field_value_and_allowed(kwargs, needles):
    if kwargs == dict(rope=dict(fraction=0.3)):
        # head_dim 16 * 0.3 = 4.8 -> 4: allowed
        kwargs = dict(d_model=64, n_heads=4, rope=dict(fraction=0.3))
        assert ModelConfig(**kwargs).rope_dim == 4
        kwargs = dict(d_model=64, n_heads=4, rope=dict(fraction=0.1))  # 1.6 -> 1: odd, not allowed
        needles = ["rope.fraction=0.1", "even"]
    with pytest.raises(ConfigError) as err:
        ModelConfig(**kwargs)
    msg = str(err.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, msg


def test_shorthand_with_a_contradicting_activation_fails_naming_both():
    assert ModelConfig().activation == DEFAULT_ACTIVATION == "silu"
    assert (
        ModelConfig(ffn="mlp", activation=None).activation,
        ModelConfig(ffn="geglu", activation="gelu").ffn,
    ) == ("silu", "glu")
    for make in (
        lambda: ModelConfig(ffn="swiglu", activation="gelu"),
        lambda: build_preset("gemma2", ffn="swiglu", activation="gelu"),
    ):
        with pytest.raises(ConfigError) as err:
            make()
        msg = str(err.value)
        assert "\n" not in msg and "activation='gelu'" in msg and "ffn='swiglu'" in msg, msg


@pytest.mark.parametrize("name", FLOAT_FIELDS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_every_float_field_rejects_nan_and_inf(name: str, value: float) -> None:
    extra = {"sliding_window": 8} if name == "attn_softcap" else {}
    with pytest.raises(
        ConfigError, match=rf"^ModelConfig\.{name}=(nan|inf|-inf) is not allowed: a finite number$"
    ):
        ModelConfig(**extra, **{name: value})


def test_rope_scaling_floats_and_swish_beta_domain() -> None:
    with pytest.raises(
        ConfigError, match=r"^ModelConfig\.rope\.scaling\.factor=inf is not allowed"
    ):
        ModelConfig(rope=dict(scaling={"kind": "linear", "factor": math.inf}))
    with pytest.raises(
        ConfigError, match=r"^ModelConfig\.swish_beta=0\.0 is not allowed: a positive number"
    ):
        ModelConfig(swish_beta=0.0)
