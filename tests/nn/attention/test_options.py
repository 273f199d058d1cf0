"""The option groups of nn/attention/options.py (`favor`, `vq`, `gau`, `cosine`): each validated in its own
`__post_init__` in one line, filled with its defaults when its switch is on and refused when it is off; the flat
keys of older configs (`favor_features`, ...) mapped into them by `ModelConfig.from_dict` and the dotted-key
grammar, and spelled back by `to_flat_dict` exactly as the old code saved them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from archlab.nn.attention.options import GAU, GROUPS, VQ, Cosine, Favor, OptionError, default_favor_features
from archlab.nn.config import LEGACY_KEYS, ConfigError, ModelConfig, from_legacy
from archlab.nn.presets import PRESETS, build_preset
from archlab.overrides import typed_overrides
from archlab.train.config import resolve_config

LEGACY = Path(__file__).resolve().parents[2] / "fixtures" / "legacy_runs"
# the fields ModelConfig had before the option groups (main at 92d7561), in their order
OLD_FIELDS = (
    "vocab_size d_model n_layers n_heads n_kv_heads head_dim d_ff d_ff_multiple_of max_seq_len norm norm_eps norm_bias "
    "norm_unit_offset norm_position final_norm block gau_attention parallel_norms parallel_fused ffn activation "
    "swish_beta bias attn_bias mlp_bias lm_head_bias position rope_theta rope_layout rope_fraction rope_scaling "
    "position_pattern rope_theta_local rope_scaling_local relative_buckets relative_max_distance qk_norm "
    "qk_norm_scope key_norm query_norm cosine_attention cosine_scale attn_softcap attn_scale sliding_window "
    "window_pattern full_layers attn_impl attn_logn attn_logn_base attn_logn_clip attn_kernel favor_features "
    "favor_orthogonal favor_feature favor_redraw vq_codes vq_block vq_commit vq_ema vq_assign vq_tau "
    "vq_cache_grad tie_embeddings tied_head tied_embed_init embed_scale final_softcap dropout attn_dropout init"
).split()


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Favor(features=0), "ModelConfig.favor.features=0 is not allowed: a positive integer or None"),
    (lambda: Favor(features=True), "ModelConfig.favor.features=True is not allowed: a positive integer or None"),
    (lambda: Favor(redraw=-1), "ModelConfig.favor.redraw=-1 is not allowed: a positive integer or None"),
    (lambda: Favor(feature="trig"), "ModelConfig.favor.feature='trig' is not allowed: one of positive, hyperbolic"),
    (lambda: Favor(features=7, feature="hyperbolic"),
     "ModelConfig.favor.features=7 is not allowed: an even number with feature='hyperbolic'"),
    (lambda: VQ(codes=0), "ModelConfig.vq.codes=0 is not allowed: a positive integer"),
    (lambda: VQ(block=2.5), "ModelConfig.vq.block=2.5 is not allowed: a positive integer"),
    (lambda: VQ(commit=-1.0), "ModelConfig.vq.commit=-1.0 is not allowed: a number >= 0"),
    (lambda: VQ(ema=0.0), "ModelConfig.vq.ema=0.0 is not allowed: a decay in (0, 1] (1 = frozen codebook)"),
    (lambda: VQ(tau=float("nan")), "ModelConfig.vq.tau=nan is not allowed: a finite number"),
    (lambda: VQ(assign="gumbel"), "ModelConfig.vq.assign='gumbel' is not allowed: one of hard, soft"),
    (lambda: GAU(attention="relu"), "ModelConfig.gau.attention='relu' is not allowed: one of softmax, relu2"),
    (lambda: Cosine(scale="per_head"), "ModelConfig.cosine.scale='per_head' is not allowed: one of fixed, dynamic"),
])
def test_each_group_refuses_a_bad_value_in_one_line(make, message: str) -> None:
    with pytest.raises(OptionError) as err:
        make()
    assert str(err.value) == message


def test_a_group_given_as_a_dict_is_refused_as_a_config_error_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^ModelConfig.vq.codes=0 is not allowed: a positive integer$"):
        ModelConfig(attn_kernel="vq", vq={"codes": 0})
    with pytest.raises(ConfigError, match=r"^ModelConfig.favor has no field 'feature_count'; Favor has the fields"):
        ModelConfig(attn_kernel="favor", favor={"feature_count": 8})


@pytest.mark.parametrize("name", list(GROUPS))
def test_the_switch_fills_its_group_and_refuses_it_when_off(name: str) -> None:
    cls, switch, on = GROUPS[name]
    fields = {switch: on, **({"n_heads": 1} if name == "gau" else {})}
    config = ModelConfig(**fields)
    assert getattr(config, name) == cls().resolved(config.head_dim)
    assert all(getattr(ModelConfig(), other) is None for other in GROUPS)
    with pytest.raises(ConfigError, match=rf"^ModelConfig.{name}={cls.__name__}\(.* is not allowed: only with "
                                          rf"{switch}={on!r}"):
        ModelConfig(**{name: cls()})


def test_favor_features_are_derived_from_the_head_dim_and_kept_when_given() -> None:
    assert ModelConfig(attn_kernel="favor").favor.features == default_favor_features(16, "positive") == 44
    assert ModelConfig(attn_kernel="favor", favor=Favor(feature="hyperbolic"), d_model=40, n_heads=4).favor == \
        Favor(features=24, feature="hyperbolic")  # round(10 ln 10) = 23, even for hyperbolic
    assert ModelConfig(attn_kernel="favor", favor=Favor(features=7)).favor.features == 7


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
