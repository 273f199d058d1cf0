"""ModelConfig: defaults resolved, shorthands, and one clear error per bad value or combination."""

import dataclasses

import pytest

from archlab import ConfigError, ModelConfig
from archlab.nn.config import parse_overrides
from archlab.nn.presets import PRESETS, SIZES


def test_resolved_sizes():
    c = ModelConfig(d_model=96, n_heads=4, ffn="mlp")
    assert (c.n_kv_heads, c.head_dim, c.d_ff) == (4, 24, 384)
    c = ModelConfig(d_model=96, n_heads=4, ffn="glu")
    assert c.d_ff == 256
    assert ModelConfig(n_heads=4, n_kv_heads=1).n_kv_heads == 1


@pytest.mark.parametrize("short,act", [("swiglu", "silu"), ("geglu", "gelu"), ("reglu", "relu")])
def test_glu_shorthands(short, act):
    c = ModelConfig(ffn=short)
    assert (c.ffn, c.activation) == ("glu", act)


@pytest.mark.parametrize(
    "kwargs,needles",
    [
        (dict(d_model=64, n_heads=5), ["n_heads=5", "d_model=64"]),
        (dict(n_heads=4, n_kv_heads=3), ["n_kv_heads=3", "n_heads=4"]),
        (dict(norm="batchnorm"), ["norm='batchnorm'", "rmsnorm", "layernorm"]),
        (dict(activation="mish"), ["activation='mish'", "silu"]),
        (dict(position="xpos"), ["position='xpos'", "alibi"]),
        (dict(norm_position="sideways"), ["norm_position='sideways'", "nonresidual_post"]),
        (dict(rope_fraction=0.3), ["rope_fraction=0.3", "even"]),  # 16 * 0.3 = 4.8 -> 4 is fine? no: see below
        (dict(position="learned", rope_theta=5e5), ["rope_theta=500000.0", "position='rope'"]),
        (dict(position="alibi", rope_layout="interleaved"), ["rope_layout='interleaved'"]),
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
    if kwargs == dict(rope_fraction=0.3):
        kwargs = dict(d_model=64, n_heads=4, rope_fraction=0.3)  # head_dim 16 * 0.3 = 4.8 -> 4: allowed
        assert ModelConfig(**kwargs).rope_dim == 4
        kwargs = dict(d_model=64, n_heads=4, rope_fraction=0.1)  # 1.6 -> 1: odd, not allowed
        needles = ["rope_fraction=0.1", "even"]
    with pytest.raises(ConfigError) as err:
        ModelConfig(**kwargs)
    msg = str(err.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, msg


def test_frozen_and_round_trip():
    c = ModelConfig.from_preset("gemma2", "tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.d_model = 3
    assert ModelConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ConfigError, match="no field 'colour'"):
        ModelConfig.from_dict({**c.to_dict(), "colour": "red"})


def test_presets_and_sizes_combine_with_overrides():
    for name in PRESETS:
        for size in SIZES:
            ModelConfig.from_preset(name, size)
    c = ModelConfig.from_preset("llama", "small", n_layers=3, n_kv_heads=2)
    assert (c.n_layers, c.n_kv_heads, c.d_model) == (3, 2, 256)
    with pytest.raises(ConfigError, match="preset='lama'"):
        ModelConfig.from_preset("lama")
    with pytest.raises(ConfigError, match="size='huge'"):
        ModelConfig.from_preset("llama", "huge")


def test_preset_identities():
    assert ModelConfig.from_preset("palm").n_kv_heads == 1
    g = ModelConfig.from_preset("gemma2")
    assert (g.norm_position, g.attn_softcap, g.final_softcap, g.embed_scale) == ("double", 50.0, 30.0, "sqrt_d")
    assert [g.layer_is_sliding(i) for i in range(4)] == [True, False, True, False]
    o = ModelConfig.from_preset("original")
    assert (o.norm_position, o.position, o.dropout, o.final_norm) == ("post", "sinusoidal", 0.1, False)


def test_parse_overrides_types():
    got = parse_overrides(ModelConfig, ["--n_layers", "3", "--model.qk_norm=rmsnorm", "--attn_softcap", "none",
                                        "--tie-embeddings", "true", "--rope_theta", "5e5"])
    assert got == {"n_layers": 3, "qk_norm": "rmsnorm", "attn_softcap": None, "tie_embeddings": True,
                   "rope_theta": 5e5}
    with pytest.raises(ConfigError, match="n_layers='three'"):
        parse_overrides(ModelConfig, ["--n_layers", "three"])
    with pytest.raises(ConfigError, match="no field 'layers'"):
        parse_overrides(ModelConfig, ["--layers", "3"])
