"""The presets (nn/presets.py): every preset at every size, an override of any preset field wins;
and since the presets and the Hugging Face family tables (interop/families/) hold some architectures
twice, each preset with a family (`HF_FAMILIES`) is tied to it: the family's fixed fields hold in
the preset at every size, and the preset exports to that family and reads back as itself, so a
change to either recipe alone fails here."""

from __future__ import annotations

import dataclasses
import json

import pytest

from archlab import ConfigError
from archlab.interop.families import FAMILIES
from archlab.interop.hf_config import TRAINING_ONLY, config_diff, config_from_hf, config_to_hf
from archlab.nn.config.choices import FFNS
from archlab.nn.presets import HF_FAMILIES, PRESETS, SIZES, build_preset
from archlab.train.config import resolve_config
from tests.nn.test_config import PRESET_FIELDS, _other_value

WITHOUT_A_FAMILY = {"original", "palm", "hwfa", "hwfa2"}  # no transformers class: nothing to tie to


def test_every_preset_has_a_family_or_is_known_not_to() -> None:
    assert (
        set(HF_FAMILIES) | WITHOUT_A_FAMILY == set(PRESETS)
        and not set(HF_FAMILIES) & WITHOUT_A_FAMILY
    )
    assert set(HF_FAMILIES.values()) <= set(FAMILIES)


# 1b brings GQA: GPT-2, GPT-J, NeoX have none
@pytest.mark.parametrize("size", [s for s in SIZES if s != "1b"])
@pytest.mark.parametrize("preset", sorted(HF_FAMILIES))
def test_a_family_preset_is_its_familys_recipe(preset: str, size: str) -> None:
    family = FAMILIES[HF_FAMILIES[preset]]
    config = build_preset(preset, size)
    assert {k: getattr(config, k) for k in family.fixed} == family.fixed
    assert config_diff(config, family) == []  # exports exactly (what `archlab convert` checks)
    back = config_from_hf(config_to_hf(config, family)[0], family)
    # HF has no key for how weights are drawn or the bias default (it stores attn_bias
    # and mlp_bias themselves)
    theirs = back.to_dict()
    differ = {k for k, v in config.to_dict().items() if theirs[k] != v and k not in TRAINING_ONLY}
    assert differ == set()


def test_the_tie_sees_a_recipe_that_drifted() -> None:
    """The check above fails for a preset that differs from its family in a fixed field."""
    family = FAMILIES["olmo2"]
    drifted = build_preset("olmo2", norm_position="pre")
    assert {k: getattr(drifted, k) for k in family.fixed} != family.fixed


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
    assert (g.norm_position, g.attn_softcap, g.final_softcap, g.embed_scale) == (
        "double",
        50.0,
        30.0,
        "sqrt_d",
    )
    assert [g.layer_is_sliding(i) for i in range(4)] == [True, False, True, False]
    o = build_preset("original")
    assert (o.norm_position, o.position, o.dropout, o.final_norm) == (
        "post",
        "sinusoidal",
        0.1,
        False,
    )


def test_a_shorthand_override_beats_the_presets_activation():
    assert build_preset("llama", activation="gelu").activation == "gelu"  # the bug: was silu
    assert (build_preset("gemma2", ffn="swiglu").activation, build_preset("gemma2").activation) == (
        "silu",
        "gelu_tanh",
    )
    # presets store explicit fields, never a shorthand that rewrites another field
    for name in PRESETS:
        assert PRESETS[name](SIZES["tiny"]).get("ffn") in FFNS, name


@pytest.mark.parametrize("name,field", PRESET_FIELDS, ids=[f"{n}.{f}" for n, f in PRESET_FIELDS])
def test_an_override_of_any_preset_field_is_what_the_config_holds(name, field):
    value = _other_value(field, getattr(build_preset(name), field))
    direct = build_preset(name, **{field: value})
    assert getattr(direct, field) == value
    # the CLI's spelling: archlab train --model.FIELD TEXT (a group as a JSON object)
    text = (
        "none"
        if value is None
        else json.dumps(dataclasses.asdict(value))
        if field == "rope"
        else str(value)
    )
    _, model = resolve_config([{"preset": name, f"model.{field}": text}])
    assert getattr(model, field) == value and model == direct


def test_derivations_are_beaten_by_an_override():
    g = build_preset("gemma2", max_seq_len=64, n_heads=8)  # window and GQA follow the shape
    assert (g.sliding_window, g.n_kv_heads) == (32, 4)
    g = build_preset("gemma2", sliding_window=None, n_kv_heads=1)
    assert (g.sliding_window, g.n_kv_heads, g.layer_is_sliding(0)) == (None, 1, False)
    # the size's, not 32 // 2
    assert build_preset("qwen3", "1b").n_kv_heads == SIZES["1b"]["n_kv_heads"]
    original = build_preset("original")
    assert (original.final_norm, build_preset("original", norm_position="pre").final_norm) == (
        False,
        True,
    )
    assert build_preset("original", final_norm=True).final_norm is True
    gptj = build_preset("gptj")
    assert (gptj.attn_bias, gptj.mlp_bias) == (False, True)
    assert (
        build_preset("gptj", mlp_bias=False).mlp_bias,
        build_preset("gpt2", bias=False).attn_bias,
        build_preset("gpt2", attn_bias=False).mlp_bias,
    ) == (False, False, True)
    assert (build_preset("llama").d_ff, build_preset("llama", ffn="mlp").d_ff) == (192, 256)
    assert build_preset("llama", ffn="mlp", d_ff=100).d_ff == 100


def test_a_presets_field_of_a_switched_off_variant_is_dropped_but_the_callers_fails():
    c = build_preset("gpt2", norm="rmsnorm")
    assert (c.norm, c.norm_bias) == ("rmsnorm", False)
    c = build_preset("olmo2", position="alibi")
    assert (c.position, c.rope) == ("alibi", None)  # olmo2's base went with its RoPE
    with pytest.raises(
        ConfigError, match=r"norm_bias=True is not allowed: only with norm='layernorm'"
    ):
        build_preset("gpt2", norm="rmsnorm", norm_bias=True)
    with pytest.raises(
        ConfigError, match=r"rope=Rope\(theta=20000.0, .* is not allowed: only with position='rope'"
    ):
        build_preset("olmo2", position="alibi", rope=dict(theta=2e4))
