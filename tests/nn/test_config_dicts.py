"""A ModelConfig from dicts (nn/config_dicts.py): configs saved with the flat keys of older code load and are
spelled back exactly as that code saved them, the old keys are aliases on the command line and in suites, and a
group's sub-keys edit the group below."""

from __future__ import annotations

import dataclasses
import json

import pytest

from archlab.nn.attention.options import VQ, Favor
from archlab.nn.config import LEGACY_KEYS, ConfigError, ModelConfig, from_legacy
from archlab.nn.presets import PRESETS, build_preset
from archlab.overrides import typed_overrides
from archlab.train.config import resolve_config
from tests.nn.attention.test_options import LEGACY, OLD_FIELDS


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
    assert flat["favor_features"] is defaults["features"] and flat["vq_codes"] == VQ().codes  # off: the defaults


def test_from_legacy_moves_keys_into_groups_and_drops_the_defaults_of_a_group_that_is_off() -> None:
    assert from_legacy({"attn_kernel": "vq", "vq_codes": 8, "favor_features": None, "favor_feature": "positive"}) \
        == {"attn_kernel": "vq", "vq": {"codes": 8}}
    assert from_legacy({"cosine_attention": True, "cosine_scale": "fixed"}) == {"cosine_attention": True,
                                                                               "cosine": {"scale": "fixed"}}
    assert from_legacy({"gau_attention": "relu2"}) == {"gau": {"attention": "relu2"}}  # then refused: block is off
    with pytest.raises(ConfigError, match="'vq_codes' is the old spelling of vq.codes; give 'vq' alone"):
        from_legacy({"attn_kernel": "vq", "vq": {"codes": 4}, "vq_codes": 8})
    flat_kernel_keys = [k for k in OLD_FIELDS if k.startswith(("favor_", "vq_"))]
    assert set(LEGACY_KEYS) == {"gau_attention", "cosine_scale", *flat_kernel_keys}


def test_python_callers_are_told_the_new_spelling() -> None:
    with pytest.raises(ConfigError) as err:
        build_preset("llama", attn_kernel="favor", favor_features=64)
    assert str(err.value) == ("ModelConfig has no field 'favor_features': it is favor.features now (favor=Favor("
                              "features=...), or --model.favor.features on the command line)")
    with pytest.raises(ConfigError, match="'vq_block': it is vq.block now"):
        ModelConfig(attn_kernel="vq").replace(vq_block=8)


@pytest.mark.parametrize(("old", "new"), [
    ({"model.favor_features": "64", "model.favor_redraw": "3"},
     {"model.favor.features": "64", "model.favor.redraw": "3"}),
    ({"model.vq_codes": "8", "model.vq_assign": "soft"}, {"model.vq.codes": "8", "model.vq.assign": "soft"}),
])
def test_the_old_flat_keys_are_aliases_on_the_command_line_and_in_suites(old: dict, new: dict) -> None:
    kernel = "favor" if "model.favor_features" in old else "vq"
    common = {"model.attn_kernel": kernel, "data.source": "unused"}
    assert resolve_config([{**common, **old}])[1] == resolve_config([{**common, **new}])[1]


def test_sub_keys_of_a_group_edit_the_group_below() -> None:
    """`--model.favor.redraw 3` on a resumed FAVOR+ run keeps its other settings (the layer below), as
    `--model.rope_scaling.window` keeps a preset's ReRoPE kind."""
    assert typed_overrides(ModelConfig, {"favor.redraw": "3"}) == {"favor": {"redraw": 3}}
    base = ModelConfig(attn_kernel="favor", favor=Favor(features=8, feature="hyperbolic"))
    assert base.replace(**typed_overrides(ModelConfig, {"favor.redraw": "3"})).favor == \
        Favor(features=8, feature="hyperbolic", redraw=3)
    saved = {"model": base.to_dict(), "train": resolve_config([{"data.source": "unused"}])[0].to_dict()}
    assert resolve_config([{"model.favor.features": "8"}], saved=saved)[1] == base  # the same run: resumable
