"""ModelConfig: defaults resolved, shorthands, presets, and one clear error per bad value or
combination; a caller's value always beats a preset, a shorthand or a derivation."""

import dataclasses
import json

import pytest

from archlab import ConfigError, ModelConfig, build_preset
from archlab.nn.config import RopeScaling
from archlab.nn.config.choices import (
    ACTIVATIONS,
    BLOCKS,
    EMBED_SCALES,
    FFNS,
    INITS,
    NORM_PLACEMENTS,
    NORMS,
    POSITIONS,
    QK_NORM_SCOPES,
    QK_NORMS,
)
from archlab.nn.presets import PRESETS, SIZES
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


def test_frozen_and_round_trip():
    c = build_preset("gemma2", "tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.d_model = 3
    assert ModelConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ConfigError, match="no field 'colour'"):
        ModelConfig.from_dict({**c.to_dict(), "colour": "red"})


# ----- a caller's value always wins: shorthands, presets, derivations -----


CHOICES = {
    "norm": NORMS,
    "norm_position": tuple(NORM_PLACEMENTS),
    "block": BLOCKS,
    "ffn": FFNS,
    "activation": ACTIVATIONS,
    "position": POSITIONS,
    "qk_norm": QK_NORMS,
    "qk_norm_scope": QK_NORM_SCOPES,
    "embed_scale": EMBED_SCALES,
    "init": INITS,
    "window_pattern": ("S", "SF", "FS"),
    "n_kv_heads": (1, 2, 4),
    "parallel_norms": (1, 2),
    "sliding_window": (16, 32),
    "full_layers": (1, 2, None),
}


def _other_value(field: str, current: object) -> object:
    """A valid value of `field` other than the preset's (at the tiny size: 4 heads of 16 dims)."""
    if field in CHOICES:
        return next(v for v in CHOICES[field] if v != current)
    if field == "rope":  # the group, another base and the preset's other settings
        return dataclasses.replace(current, theta=current.theta / 2)
    if isinstance(current, bool):
        return not current
    assert isinstance(current, float), (
        f"add an alternative value for {field}={current!r} to CHOICES"
    )
    return current / 2


PRESET_FIELDS = [(name, field) for name in PRESETS for field in PRESETS[name](SIZES["tiny"])]


def test_saved_configs_and_rope_scaling_dicts_load():
    c = build_preset("llama", rope=dict(scaling=RopeScaling(kind="linear", factor=2.0)))
    saved = json.loads(json.dumps(c.to_dict()))  # what config.json of a checkpoint holds
    assert saved["activation"] == "silu" and ModelConfig.from_dict(saved) == c
    with pytest.raises(
        ConfigError, match="rope.scaling has no field 'bogus'; RopeScaling has the fields kind"
    ):
        ModelConfig(rope=dict(scaling={"kind": "linear", "bogus": 1}))


FLOAT_FIELDS = [f.name for f in dataclasses.fields(ModelConfig) if "float" in str(f.type)]


# ----- ModelConfig.replace: a built config varied with its derived fields re-derived -----
REPLACE_CHANGES = [
    dict(ffn="mlp"),
    dict(ffn="swiglu"),
    dict(ffn="geglu"),
    dict(norm_position="post"),
    dict(bias=True),
    dict(d_model=128),
    dict(n_heads=4),
    dict(activation="gelu"),
]


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize(
    "change", REPLACE_CHANGES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items())
)
def test_replace_equals_building_with_the_change(name: str, change: dict) -> None:
    """Changing a field of a built config gives the config `build_preset` gives with
    that field as an override, derived fields (d_ff, activation, biases, final_norm,
    n_kv_heads, head_dim) included."""
    if name in ("gemma2", "qwen3") and "n_heads" in change:
        pytest.skip(
            "the preset, not ModelConfig, derives n_kv_heads from n_heads: replace cannot know it"
        )
    try:
        want = build_preset(name, "small", **change)
    except ConfigError:
        with pytest.raises(ConfigError):
            build_preset(name, "small").replace(**change)
        return
    assert build_preset(name, "small").replace(**change) == want


def test_replace_fixes_the_issue_numbers() -> None:
    """A small Llama switched to an MLP: d_ff 1024 and 4.85M parameters, as built (not the GLU's
    704 and 3.87M)."""
    from archlab.costs import parameter_counts

    got = build_preset("llama", "small").replace(ffn="mlp")
    assert got.d_ff == 1024 and got.d_ff == 4 * 256
    assert (
        parameter_counts(got)["total"]
        == parameter_counts(build_preset("llama", "small", ffn="mlp"))["total"]
    )
    assert parameter_counts(got)["total"] == 4_852_992
    # what the call sites used to do
    stale = dataclasses.replace(build_preset("llama", "small"), ffn="mlp")
    assert stale.d_ff == 704


def test_replace_keeps_explicit_values_and_changed_fields() -> None:
    """A derived field set away from its derivation is kept; a changed derived field is what it
    is set to."""
    c = ModelConfig(d_model=64, d_ff=100, n_kv_heads=2, final_norm=False, attn_bias=True)
    r = c.replace(ffn="mlp", norm_position="post", n_heads=8)
    assert (r.d_ff, r.n_kv_heads, r.final_norm, r.attn_bias, r.mlp_bias, r.head_dim) == (
        100,
        2,
        False,
        True,
        False,
        8,
    )
    assert c.replace(d_ff=256).d_ff == 256
    assert c.replace() == c  # nothing changed, nothing re-derived differently


def test_replace_lists_every_derived_field_and_refuses_unknown_fields() -> None:
    from archlab.nn.config.model import DERIVED

    assert set(DERIVED) == set(ModelConfig().derived_values())
    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    assert all(defaults[name] is None for name in DERIVED)  # each is derived exactly when left None
    with pytest.raises(ConfigError, match="ModelConfig has no field 'dff'"):
        ModelConfig().replace(dff=3)


def test_gau_and_deepnorm_derive_their_widths_and_final_norm():
    gau = ModelConfig(block="gau", n_heads=1, d_model=96)
    # s = d / 1 head, e = 2 d rounded up to d_ff_multiple_of
    assert (gau.head_dim, gau.d_ff) == (96, 192)
    # re-derived, not kept
    assert gau.replace(block="serial", n_heads=4).d_ff == ModelConfig(d_model=96).d_ff
    assert ModelConfig(block="gau", n_heads=1, d_ff=100).d_ff == 100  # an explicit e wins
    deep = ModelConfig(norm_position="deepnorm")
    assert deep.final_norm is False and deep.replace(norm_position="pre").final_norm is True


def test_building_and_checking_a_config_imports_no_torch():
    """nn/config/ checks its switches against the torch-free registries of its choices.py and
    nn/positions/scaling.py (lazy references: tests/nn/test_registry.py resolves them), so building
    every preset, a RoPE scaling, an option group and a refused value never imports torch; nor do
    the presets, the costs or the override grammar."""
    out = run_without_torch(
        "import archlab.nn.config, archlab.nn.presets, "
        "archlab.costs, archlab.overrides, archlab.train.config\n"
        "from archlab.nn.config import ConfigError, ModelConfig\n"
        "from archlab.nn.presets import PRESETS, SIZES, build_preset\n"
        "from archlab.nn.positions.scaling import RopeScaling\n"
        "from archlab.costs import report\n"
        "n = [report(build_preset(p, s)).params['total'] for p in PRESETS for s in SIZES]\n"
        "ModelConfig(rope={'scaling': RopeScaling('yarn', 4.0, "
        "original_max_seq_len=256)}, ffn='swiglu')\n"
        "report(ModelConfig(attn_kernel='vq', vq={'codes': 8}, position='alibi'))\n"
        "try:\n    ModelConfig(norm='batchnorm')\nexcept ConfigError as err:\n    print(err)\n"
    )
    assert "ModelConfig.norm='batchnorm' is not allowed: one of rmsnorm, layernorm" in out.stdout
