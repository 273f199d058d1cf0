"""The old spellings of ModelConfig (nn/config/legacy.py) and layers of fields
(nn/config/layers.py): configs saved with the flat keys of older code (before the option groups;
before the `rope` group and `cosine` as its own switch) load and are spelled back exactly as that
code saved them, the old keys are aliases on the command line and in suites, Python callers are told
the new spelling, and a group's sub-keys edit the group below."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from archlab.nn.config import (
    LEGACY_KEYS,
    LEGACY_SWITCHES,
    VQ,
    ConfigError,
    Cosine,
    Favor,
    ModelConfig,
    Rope,
    RopeScaling,
    from_legacy,
)
from archlab.nn.presets import PRESETS, build_preset
from archlab.overrides import typed_overrides
from archlab.train.config import resolve_config
from tests.nn.test_config_groups import LEGACY, OLD_FIELDS

# configs saved by the code before the `rope` group (the flat rope keys, `cosine_attention` beside
# `cosine`): name -> its dotted keys, `to_dict()` and `to_flat_dict()` as that code wrote them
BEFORE_ROPE = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "configs_before_rope_group.json").read_text(
        encoding="utf-8"
    )
)


@pytest.mark.parametrize("run", ["favor", "vq", "gau", "cosine"])
def test_a_config_saved_with_the_flat_keys_loads_and_is_spelled_back_the_same(run: str) -> None:
    saved = json.loads((LEGACY / run / "config.json").read_text(encoding="utf-8"))["model"]
    assert list(saved) == OLD_FIELDS  # written by the code before the groups
    config = ModelConfig.from_dict(saved)
    assert config.to_flat_dict() == saved and list(config.to_flat_dict()) == OLD_FIELDS
    assert ModelConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_spells_the_old_fields(preset: str) -> None:
    config = build_preset(preset)
    flat = config.to_flat_dict()
    assert list(flat) == OLD_FIELDS
    assert ModelConfig.from_dict(flat) == config
    defaults = {f.name: f.default for f in dataclasses.fields(Favor)}
    # off: the defaults
    assert flat["favor_features"] is defaults["features"] and flat["vq_codes"] == VQ().codes


def test_from_legacy_moves_keys_into_groups_and_drops_the_defaults_of_a_group_that_is_off() -> None:
    assert from_legacy(
        {"attn_kernel": "vq", "vq_codes": 8, "favor_features": None, "favor_feature": "positive"}
    ) == {"attn_kernel": "vq", "vq": {"codes": 8}}
    assert from_legacy({"cosine_attention": True, "cosine_scale": "fixed"}) == {
        "cosine": {"scale": "fixed"}
    }
    assert from_legacy({"cosine_attention": True, "cosine": {"scale": "dynamic"}}) == {
        "cosine": {"scale": "dynamic"}
    }
    assert from_legacy({"cosine_attention": True}) == {"cosine": {}}
    assert from_legacy({"cosine_attention": False, "cosine_scale": "fixed", "cosine": None}) == {
        "cosine": None
    }
    # then refused: block is off
    assert from_legacy({"gau_attention": "relu2"}) == {"gau": {"attention": "relu2"}}
    assert from_legacy({"position": "alibi", "rope_theta": 10000.0, "rope_scaling": None}) == {
        "position": "alibi"
    }
    assert from_legacy({"rope_theta": 5e5, "position_pattern": "RN"}) == {
        "rope": {"theta": 5e5, "pattern": "RN"}
    }
    with pytest.raises(
        ConfigError, match="'vq_codes' is the old spelling of vq.codes; give 'vq' alone"
    ):
        from_legacy({"attn_kernel": "vq", "vq": {"codes": 4}, "vq_codes": 8})
    with pytest.raises(
        ConfigError, match="'rope_theta' is the old spelling of rope.theta; give 'rope' alone"
    ):
        from_legacy({"rope": {"fraction": 0.5}, "rope_theta": 5e5})
    with pytest.raises(
        ConfigError, match=r"^ModelConfig: cosine_attention=False turns cosine off, but cosine="
    ):
        from_legacy({"cosine_attention": False, "cosine": {"scale": "dynamic"}})
    flat_group_keys = [k for k in OLD_FIELDS if k.startswith(("favor_", "vq_", "rope_"))] + [
        "position_pattern"
    ]
    assert set(LEGACY_KEYS) == {"gau_attention", "cosine_scale", *flat_group_keys}
    assert LEGACY_SWITCHES == {"cosine_attention": "cosine"}


def test_python_callers_are_told_the_new_spelling() -> None:
    with pytest.raises(ConfigError) as err:
        build_preset("llama", attn_kernel="favor", favor_features=64)
    assert str(err.value) == (
        "ModelConfig has no field 'favor_features': it is favor.features now (favor=Favor("
        "features=...), or --model.favor.features on the command line)"
    )
    with pytest.raises(ConfigError, match="'vq_block': it is vq.block now"):
        ModelConfig(attn_kernel="vq").replace(vq_block=8)
    with pytest.raises(ConfigError) as err:
        build_preset("llama", rope_theta=5e5)
    assert str(err.value) == (
        "ModelConfig has no field 'rope_theta': it is rope.theta now (rope=Rope(theta=...), "
        "or --model.rope.theta on the command line)"
    )
    with pytest.raises(
        ConfigError, match=r"^ModelConfig has no field 'position_pattern': it is rope.pattern now"
    ):
        ModelConfig().replace(position_pattern="RN")
    with pytest.raises(ConfigError) as err:
        ModelConfig().replace(cosine_attention=True)
    assert str(err.value) == (
        "ModelConfig has no field 'cosine_attention': it is cosine now (cosine=Cosine() on, "
        "None off; --model.cosine.scale fixed on the command line)"
    )


# old dotted keys -> the same settings in the new spelling (what a suite file or a flag gives)
ALIASES = [
    (
        {"model.attn_kernel": "favor", "model.favor_features": "64", "model.favor_redraw": "3"},
        {"model.attn_kernel": "favor", "model.favor.features": "64", "model.favor.redraw": "3"},
    ),
    (
        {"model.attn_kernel": "vq", "model.vq_codes": "8", "model.vq_assign": "soft"},
        {"model.attn_kernel": "vq", "model.vq.codes": "8", "model.vq.assign": "soft"},
    ),
    (
        {
            "model.rope_theta": "5e5",
            "model.rope_layout": "interleaved",
            "model.rope_fraction": "0.5",
        },
        {
            "model.rope.theta": "5e5",
            "model.rope.layout": "interleaved",
            "model.rope.fraction": "0.5",
        },
    ),
    (
        {
            "model.rope_scaling.kind": "yarn",
            "model.rope_scaling.factor": "4",
            "model.rope_scaling.original_max_seq_len": "64",
        },
        {"model.rope.scaling": '{"kind": "yarn", "factor": 4, "original_max_seq_len": 64}'},
    ),
    (
        {"model.position_pattern": "RRN", "model.n_layers": "3"},
        {"model.rope.pattern": "RRN", "model.n_layers": "3"},
    ),
    (
        {
            "model.rope_theta_local": "100",
            "model.rope_scaling_local": "false",
            "model.rope_scaling": "linear",
            "model.rope_scaling.factor": "2",
            "model.sliding_window": "8",
            "model.window_pattern": "SF",
        },
        {
            "model.rope.local_theta": "100",
            "model.rope.local_scaling": "false",
            "model.rope.scaling.kind": "linear",
            "model.rope.scaling.factor": "2",
            "model.sliding_window": "8",
            "model.window_pattern": "SF",
        },
    ),
    (
        {"preset": "hwfa2", "model.rope_scaling.window": "16"},
        {"preset": "hwfa2", "model.rope.scaling.window": "16"},
    ),
    ({"model.cosine_attention": "true"}, {"model.cosine.scale": "fixed"}),
    (
        {"model.cosine_attention": "true", "model.cosine_scale": "dynamic"},
        {"model.cosine": "dynamic"},
    ),
    ({"preset": "olmo2", "model.cosine_attention": "false"}, {"preset": "olmo2"}),
]


@pytest.mark.parametrize(("old", "new"), ALIASES)
def test_the_old_flat_keys_are_aliases_on_the_command_line_and_in_suites(
    old: dict, new: dict
) -> None:
    common = {"data.source": "unused"}
    got, want = resolve_config([{**common, **old}])[1], resolve_config([{**common, **new}])[1]
    assert got == want and got.to_flat_dict() == want.to_flat_dict()
    # each changes something
    assert got != resolve_config([common])[1] or "model.cosine_attention" in old


@pytest.mark.parametrize("name", sorted(BEFORE_ROPE))
def test_a_config_saved_before_the_rope_group_loads_and_is_spelled_back_the_same(name: str) -> None:
    """config.json of a run made before the `rope` group (written by that code: the fixture)
    loads, spells back the flat view that code gave (the run store's key), and is the config its
    flags give today."""
    saved = BEFORE_ROPE[name]
    config = ModelConfig.from_dict(saved["model"])
    assert config.to_flat_dict() == saved["flat"] and list(config.to_flat_dict()) == OLD_FIELDS
    assert config == resolve_config([{"data.source": "unused", **saved["keys"]}])[1]
    assert ModelConfig.from_dict(config.to_dict()) == config == ModelConfig.from_dict(saved["flat"])
    assert "rope_theta" not in config.to_dict() and "cosine_attention" not in config.to_dict()


def test_sub_keys_of_a_group_edit_the_group_below() -> None:
    """`--model.favor.redraw 3` on a resumed FAVOR+ run keeps its other settings (the layer below),
    as `--model.rope_scaling.window` keeps a preset's ReRoPE kind."""
    assert typed_overrides(ModelConfig, {"favor.redraw": "3"}) == {"favor": {"redraw": 3}}
    base = ModelConfig(attn_kernel="favor", favor=Favor(features=8, feature="hyperbolic"))
    assert base.replace(**typed_overrides(ModelConfig, {"favor.redraw": "3"})).favor == Favor(
        features=8, feature="hyperbolic", redraw=3
    )
    saved = {
        "model": base.to_dict(),
        "train": resolve_config([{"data.source": "unused"}])[0].to_dict(),
    }
    # the same run: resumable
    assert resolve_config([{"model.favor.features": "8"}], saved=saved)[1] == base


def test_sub_keys_of_the_rope_group_edit_it_down_to_its_scaling() -> None:
    """`--model.rope.scaling.window 64` on hwfa2 keeps its ReRoPE kind and other settings; a scaling
    given with its kind replaces the one below; `replace` edits a group given as a dict."""
    hwfa2 = build_preset("hwfa2")
    edited = build_preset("hwfa2", **typed_overrides(ModelConfig, {"rope.scaling.window": "16"}))
    assert edited.rope == Rope(
        pattern="R",
        scaling=RopeScaling("rerope", window=16, inference_only=True),
        local_scaling=False,
    )
    assert edited.rope == hwfa2.replace(rope={"scaling": {"window": 16}}).rope
    replaced = hwfa2.replace(
        **typed_overrides(ModelConfig, {"rope.scaling.kind": "linear", "rope.scaling.factor": "2"})
    )
    assert (
        replaced.rope.scaling == RopeScaling("linear", 2.0) and replaced.rope.local_scaling is False
    )
    assert ModelConfig().replace(rope={"theta": 5e5}).rope == Rope(theta=5e5)
    assert build_preset("olmo2").replace(rope={"fraction": 0.5}).rope == Rope(
        theta=5e5, fraction=0.5
    )


def test_a_preset_group_is_dropped_with_its_switch_and_a_callers_is_refused() -> None:
    assert build_preset("olmo2", position="alibi").rope is None
    with pytest.raises(
        ConfigError,
        match=r"^ModelConfig.rope=Rope\(theta=20000.0.* is not allowed: only with "
        r"position='rope' \(position='alibi'\)$",
    ):
        build_preset("olmo2", position="alibi", rope={"theta": 2e4})
    assert Cosine() == build_preset("llama", cosine={}).cosine
