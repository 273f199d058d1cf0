"""interop/hf_config.py: keys a config.json leaves out take transformers' defaults (the parity tests
in test_families.py set every key, so a wrong default would pass there)."""

from __future__ import annotations

import pytest
import transformers

from archlab.interop.families import FAMILIES, READ_ONLY
from archlab.interop.family import Key
from archlab.interop.hf_config import canonical, config_diff, config_from_hf, config_to_hf
from archlab.nn.presets import build_preset

ALL = {**FAMILIES, **READ_ONLY}


def eps_key(model_type: str) -> str:
    keys = [
        k
        for k, spec in ALL[model_type].keys.items()
        if isinstance(spec, Key) and spec.field == "norm_eps"
    ]
    assert len(keys) == 1, f"{model_type}: one config.json key carries norm_eps, found {keys}"
    return keys[0]


@pytest.mark.parametrize("model_type", sorted(ALL))
def test_a_config_json_without_its_norm_eps_reads_transformers_default(model_type: str) -> None:
    """transformers' default config of the family, written without its eps key (rms_norm_eps,
    layer_norm_eps, ...), reads as the eps the config class fills in: Llama-named families 1e-6,
    OLMo 2 and the LayerNorm families 1e-5."""
    family = ALL[model_type]
    hf = transformers.AutoConfig.for_model(model_type).to_dict()
    text = hf[family.text_config] if family.text_config else hf
    key = eps_key(model_type)
    expected = text.pop(key)
    assert isinstance(expected, float) and expected in (1e-5, 1e-6)
    assert config_from_hf(hf, family).norm_eps == expected
    text[key] = 3e-4  # and a given value is read, not the default
    assert config_from_hf(hf, family).norm_eps == 3e-4


def test_full_layers_export_as_the_layer_types_they_place() -> None:
    """`full_layers` (HWFA2's middle full layers) is one spelling of which layers are full: it
    exports as layer_types and compares equal to the window_pattern that spells the same layers, so
    the round trip (config.json back to a ModelConfig, which has no full_layers) is exact."""
    config = build_preset("llama", n_layers=6, sliding_window=8, full_layers=1)
    hf, problems = config_to_hf(config, FAMILIES["smollm3"])
    assert not problems and not config_diff(config, FAMILIES["smollm3"])
    assert (
        hf["layer_types"]
        == ["sliding_attention"] * 3 + ["full_attention"] + ["sliding_attention"] * 2
    )
    assert canonical(config) == canonical(config.replace(full_layers=None, window_pattern="SSSFSS"))
    assert canonical(config) != canonical(config.replace(full_layers=2))


def test_a_model_no_family_expresses_is_refused_for_its_own_switches() -> None:
    """The `original` preset (post-norm, sinusoidal positions, no RoPE): every family names the
    switches it lacks, never a RoPE key the model does not have (gptj used to read its own default
    rotary_dim back and blame it)."""
    from archlab.interop.family import InteropError
    from archlab.interop.hf import pick_family
    from archlab.interop.hf_config import fixed_diff
    from archlab.nn.presets import HF_FAMILIES

    config = build_preset("original", "tiny")
    diffs = {mt: config_diff(config, family) for mt, family in FAMILIES.items()}
    named = {d.split("=")[0] for ds in diffs.values() for d in ds}  # the switches the refusals name
    assert not any(name.startswith("rope") for name in named), diffs
    assert not any("rotary" in d for ds in diffs.values() for d in ds), diffs
    assert "position='sinusoidal' (gptj gives 'rope')" in diffs["gptj"]
    assert "norm_position='post' (gptj gives 'pre')" in diffs["gptj"]
    assert diffs["gpt2"] == [
        "norm_position='post' (gpt2 gives 'pre')",
        "final_norm=False (gpt2 gives True)",
        "position='sinusoidal' (gpt2 gives 'learned')",
        "embed_scale='sqrt_d' (gpt2 gives 'none')",
    ]
    with pytest.raises(InteropError) as caught:
        pick_family(config)
    assert "position='sinusoidal'" in str(caught.value) and "norm_position='post'" in str(
        caught.value
    )
    assert "rotary_dim" not in str(caught.value)
    # the other side: each preset a family reads has none of the switches that
    # family fixes otherwise
    assert all(
        fixed_diff(build_preset(p, "tiny"), FAMILIES[mt]) == [] for p, mt in HF_FAMILIES.items()
    )
    with pytest.raises(
        InteropError, match="model_type 'gptj' cannot express this model: norm_position='post'"
    ):
        pick_family(config, "gptj")
