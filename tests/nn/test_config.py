"""ModelConfig: defaults resolved, shorthands, presets, and one clear error per bad value or combination;
a caller's value always beats a preset, a shorthand or a derivation."""

import dataclasses
import json
import math

import pytest

from archlab import ConfigError, ModelConfig, build_preset
from archlab.nn.config import RopeScaling
from archlab.nn.config_rules import (
    BLOCKS,
    DEFAULT_ACTIVATION,
    EMBED_SCALES,
    INITS,
    NORM_POSITIONS,
    QK_NORM_SCOPES,
    QK_NORMS,
)
from archlab.nn.presets import PRESETS, SIZES
from archlab.nn.variants import ACTIVATIONS, FFNS, NORMS, POSITIONS, ROPE_LAYOUTS
from archlab.train.config import resolve_config
from tests.conftest import run_without_torch


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
    c = build_preset("gemma2", "tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.d_model = 3
    assert ModelConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ConfigError, match="no field 'colour'"):
        ModelConfig.from_dict({**c.to_dict(), "colour": "red"})


def test_presets_and_sizes_combine_with_overrides():
    for name in PRESETS:
        for size in SIZES:
            build_preset(name, size)
    c = build_preset("llama", "small", n_layers=3, n_kv_heads=2)
    assert (c.n_layers, c.n_kv_heads, c.d_model) == (3, 2, 256)
    with pytest.raises(ConfigError, match="preset='lama'"):
        build_preset("lama")
    with pytest.raises(ConfigError, match="size='huge'"):
        build_preset("llama", "huge")


def test_preset_identities():
    assert build_preset("palm").n_kv_heads == 1
    g = build_preset("gemma2")
    assert (g.norm_position, g.attn_softcap, g.final_softcap, g.embed_scale) == ("double", 50.0, 30.0, "sqrt_d")
    assert [g.layer_is_sliding(i) for i in range(4)] == [True, False, True, False]
    o = build_preset("original")
    assert (o.norm_position, o.position, o.dropout, o.final_norm) == ("post", "sinusoidal", 0.1, False)


# ----- a caller's value always wins: shorthands, presets, derivations -----
def test_shorthand_with_a_contradicting_activation_fails_naming_both():
    assert ModelConfig().activation == DEFAULT_ACTIVATION == "silu"
    assert (ModelConfig(ffn="mlp", activation=None).activation, ModelConfig(ffn="geglu", activation="gelu").ffn) == (
        "silu", "glu")
    for make in (lambda: ModelConfig(ffn="swiglu", activation="gelu"),
                 lambda: build_preset("gemma2", ffn="swiglu", activation="gelu")):
        with pytest.raises(ConfigError) as err:
            make()
        msg = str(err.value)
        assert "\n" not in msg and "activation='gelu'" in msg and "ffn='swiglu'" in msg, msg


def test_a_shorthand_override_beats_the_presets_activation():
    assert build_preset("llama", activation="gelu").activation == "gelu"  # the bug: was silu
    assert (build_preset("gemma2", ffn="swiglu").activation, build_preset("gemma2").activation) \
        == ("silu", "gelu_tanh")
    for name in PRESETS:  # presets store explicit fields, never a shorthand that rewrites another field
        assert PRESETS[name](SIZES["tiny"]).get("ffn") in FFNS, name


CHOICES = {"norm": NORMS, "norm_position": NORM_POSITIONS, "block": BLOCKS, "ffn": FFNS, "activation": ACTIVATIONS,
           "position": POSITIONS, "rope_layout": ROPE_LAYOUTS, "qk_norm": QK_NORMS, "qk_norm_scope": QK_NORM_SCOPES,
           "embed_scale": EMBED_SCALES, "init": INITS, "window_pattern": ("S", "SF", "FS"),
           "n_kv_heads": (1, 2, 4), "parallel_norms": (1, 2), "sliding_window": (16, 32),
           "position_pattern": ("R", "RN", "N"), "rope_scaling": (None,), "full_layers": (1, 2, None)}


def _other_value(field: str, current: object) -> object:
    """A valid value of `field` other than the preset's (at the tiny size: 4 heads of 16 dims)."""
    if field in CHOICES:
        return next(v for v in CHOICES[field] if v != current)
    if isinstance(current, bool):
        return not current
    assert isinstance(current, float), f"add an alternative value for {field}={current!r} to CHOICES"
    return current / 2


PRESET_FIELDS = [(name, field) for name in PRESETS for field in PRESETS[name](SIZES["tiny"])]


@pytest.mark.parametrize("name,field", PRESET_FIELDS, ids=[f"{n}.{f}" for n, f in PRESET_FIELDS])
def test_an_override_of_any_preset_field_is_what_the_config_holds(name, field):
    value = _other_value(field, getattr(build_preset(name), field))
    direct = build_preset(name, **{field: value})
    assert getattr(direct, field) == value
    text = "none" if value is None else str(value)  # the CLI's spelling: archlab train --model.FIELD TEXT
    _, model = resolve_config([{"preset": name, f"model.{field}": text}])
    assert getattr(model, field) == value and model == direct


def test_derivations_are_beaten_by_an_override():
    g = build_preset("gemma2", max_seq_len=64, n_heads=8)  # window and GQA follow the shape
    assert (g.sliding_window, g.n_kv_heads) == (32, 4)
    g = build_preset("gemma2", sliding_window=None, n_kv_heads=1)
    assert (g.sliding_window, g.n_kv_heads, g.layer_is_sliding(0)) == (None, 1, False)
    assert build_preset("qwen3", "1b").n_kv_heads == SIZES["1b"]["n_kv_heads"]  # the size's, not 32 // 2
    original = build_preset("original")
    assert (original.final_norm, build_preset("original", norm_position="pre").final_norm) == (False, True)
    assert build_preset("original", final_norm=True).final_norm is True
    gptj = build_preset("gptj")
    assert (gptj.attn_bias, gptj.mlp_bias) == (False, True)
    assert (build_preset("gptj", mlp_bias=False).mlp_bias, build_preset("gpt2", bias=False)
            .attn_bias, build_preset("gpt2", attn_bias=False).mlp_bias) == (False, False, True)
    assert (build_preset("llama").d_ff, build_preset("llama", ffn="mlp").d_ff) == (192, 256)
    assert build_preset("llama", ffn="mlp", d_ff=100).d_ff == 100


def test_a_presets_field_of_a_switched_off_variant_is_dropped_but_the_callers_fails():
    c = build_preset("gpt2", norm="rmsnorm")
    assert (c.norm, c.norm_bias) == ("rmsnorm", False)
    c = build_preset("olmo2", position="alibi")
    assert (c.position, c.rope_theta) == ("alibi", ModelConfig().rope_theta)
    with pytest.raises(ConfigError, match=r"norm_bias=True is not allowed: only with norm='layernorm'"):
        build_preset("gpt2", norm="rmsnorm", norm_bias=True)
    with pytest.raises(ConfigError, match=r"rope_theta=20000.0 is not allowed: only with position='rope'"):
        build_preset("olmo2", position="alibi", rope_theta=2e4)


def test_saved_configs_and_rope_scaling_dicts_load():
    c = build_preset("llama", rope_scaling=RopeScaling(kind="linear", factor=2.0))
    saved = json.loads(json.dumps(c.to_dict()))  # what config.json of a checkpoint holds
    assert saved["activation"] == "silu" and ModelConfig.from_dict(saved) == c
    with pytest.raises(ConfigError, match="rope_scaling has no field 'bogus'; RopeScaling has the fields kind"):
        ModelConfig(rope_scaling={"kind": "linear", "bogus": 1})


FLOAT_FIELDS = [f.name for f in dataclasses.fields(ModelConfig) if "float" in str(f.type)]


@pytest.mark.parametrize("name", FLOAT_FIELDS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_every_float_field_rejects_nan_and_inf(name: str, value: float) -> None:
    extra = {"sliding_window": 8} if name == "attn_softcap" else {}
    with pytest.raises(ConfigError, match=rf"^ModelConfig\.{name}=(nan|inf|-inf) is not allowed: a finite number$"):
        ModelConfig(**extra, **{name: value})


def test_rope_scaling_floats_and_swish_beta_domain() -> None:
    with pytest.raises(ConfigError, match=r"^ModelConfig\.rope_scaling\.factor=inf is not allowed"):
        ModelConfig(rope_scaling={"kind": "linear", "factor": math.inf})
    with pytest.raises(ConfigError, match=r"^ModelConfig\.swish_beta=0\.0 is not allowed: a positive number"):
        ModelConfig(swish_beta=0.0)


# ----- ModelConfig.replace: a built config varied with its derived fields re-derived -----
REPLACE_CHANGES = [dict(ffn="mlp"), dict(ffn="swiglu"), dict(ffn="geglu"), dict(norm_position="post"), dict(bias=True),
                   dict(d_model=128), dict(n_heads=4), dict(activation="gelu")]


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("change", REPLACE_CHANGES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_replace_equals_building_with_the_change(name: str, change: dict) -> None:
    """Changing a field of a built config gives the config `build_preset` gives with that field as an override,
    derived fields (d_ff, activation, biases, final_norm, n_kv_heads, head_dim) included."""
    if name in ("gemma2", "qwen3") and "n_heads" in change:
        pytest.skip("the preset, not ModelConfig, derives n_kv_heads from n_heads: replace cannot know it")
    try:
        want = build_preset(name, "small", **change)
    except ConfigError:
        with pytest.raises(ConfigError):
            build_preset(name, "small").replace(**change)
        return
    assert build_preset(name, "small").replace(**change) == want


def test_replace_fixes_the_issue_numbers() -> None:
    """A small Llama switched to an MLP: d_ff 1024 and 4.85M parameters, as built (not the GLU's 704 and 3.87M)."""
    from archlab.costs import parameter_counts

    got = build_preset("llama", "small").replace(ffn="mlp")
    assert got.d_ff == 1024 and got.d_ff == 4 * 256
    assert parameter_counts(got)["total"] == parameter_counts(build_preset("llama", "small", ffn="mlp"))["total"]
    assert parameter_counts(got)["total"] == 4_852_992
    stale = dataclasses.replace(build_preset("llama", "small"), ffn="mlp")  # what the call sites used to do
    assert stale.d_ff == 704


def test_replace_keeps_explicit_values_and_changed_fields() -> None:
    """A derived field set away from its derivation is kept; a changed derived field is what it is set to."""
    c = ModelConfig(d_model=64, d_ff=100, n_kv_heads=2, final_norm=False, attn_bias=True)
    r = c.replace(ffn="mlp", norm_position="post", n_heads=8)
    assert (r.d_ff, r.n_kv_heads, r.final_norm, r.attn_bias, r.mlp_bias, r.head_dim) == (100, 2, False, True, False, 8)
    assert c.replace(d_ff=256).d_ff == 256
    assert c.replace() == c  # nothing changed, nothing re-derived differently


def test_replace_lists_every_derived_field_and_refuses_unknown_fields() -> None:
    from archlab.nn.config_rules import DERIVED

    assert set(DERIVED) == set(ModelConfig().derived_values())
    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    assert all(defaults[name] is None for name in DERIVED)  # each is derived exactly when left None
    with pytest.raises(ConfigError, match="ModelConfig has no field 'dff'"):
        ModelConfig().replace(dff=3)


def test_gau_and_deepnorm_derive_their_widths_and_final_norm():
    gau = ModelConfig(block="gau", n_heads=1, d_model=96)
    assert (gau.head_dim, gau.d_ff) == (96, 192)  # s = d / 1 head, e = 2 d rounded up to d_ff_multiple_of
    assert gau.replace(block="serial", n_heads=4).d_ff == ModelConfig(d_model=96).d_ff  # re-derived, not kept
    assert ModelConfig(block="gau", n_heads=1, d_ff=100).d_ff == 100  # an explicit e wins
    deep = ModelConfig(norm_position="deepnorm")
    assert deep.final_norm is False and deep.replace(norm_position="pre").final_norm is True


def test_building_and_checking_a_config_imports_no_torch():
    """nn/config.py checks its switches against the torch-free registries of nn/variants.py, nn/positions/scaling.py
    and nn/attention/options.py (lazy references: tests/nn/test_registry.py resolves them), so building every
    preset, a RoPE scaling, an option group and a refused value never imports torch; nor do the presets, the costs
    or the override grammar."""
    out = run_without_torch(
        "import archlab.nn.config, archlab.nn.presets, archlab.costs, archlab.overrides, archlab.train.config\n"
        "from archlab.nn.config import ConfigError, ModelConfig\n"
        "from archlab.nn.presets import PRESETS, SIZES, build_preset\n"
        "from archlab.nn.positions.scaling import RopeScaling\n"
        "from archlab.costs import report\n"
        "n = [report(build_preset(p, s)).params['total'] for p in PRESETS for s in SIZES]\n"
        "ModelConfig(rope_scaling=RopeScaling('yarn', 4.0, original_max_seq_len=256), ffn='swiglu')\n"
        "report(ModelConfig(attn_kernel='vq', vq={'codes': 8}, position='alibi'))\n"
        "try:\n    ModelConfig(norm='batchnorm')\nexcept ConfigError as err:\n    print(err)\n")
    assert "ModelConfig.norm='batchnorm' is not allowed: one of rmsnorm, layernorm" in out.stdout
