"""The presets (nn/presets.py) and the Hugging Face family tables (interop/families/) hold some architectures twice;
each preset with a family (`HF_FAMILIES`) is tied to it: the family's fixed fields hold in the preset at every size,
and the preset exports to that family and reads back as itself, so a change to either recipe alone fails here."""

from __future__ import annotations

import pytest

from archlab.interop.families import FAMILIES
from archlab.interop.hf_config import TRAINING_ONLY, config_diff, config_from_hf, config_to_hf
from archlab.nn.presets import HF_FAMILIES, PRESETS, SIZES, build_preset

WITHOUT_A_FAMILY = {"original", "palm", "hwfa", "hwfa2"}  # no transformers class: nothing to tie to


def test_every_preset_has_a_family_or_is_known_not_to() -> None:
    assert set(HF_FAMILIES) | WITHOUT_A_FAMILY == set(PRESETS) and not set(HF_FAMILIES) & WITHOUT_A_FAMILY
    assert set(HF_FAMILIES.values()) <= set(FAMILIES)


@pytest.mark.parametrize("size", [s for s in SIZES if s != "1b"])  # 1b brings GQA: GPT-2, GPT-J, NeoX have none
@pytest.mark.parametrize("preset", sorted(HF_FAMILIES))
def test_a_family_preset_is_its_familys_recipe(preset: str, size: str) -> None:
    family = FAMILIES[HF_FAMILIES[preset]]
    config = build_preset(preset, size)
    assert {k: getattr(config, k) for k in family.fixed} == family.fixed
    assert config_diff(config, family) == []  # exports exactly (what `archlab convert` checks)
    back = config_from_hf(config_to_hf(config, family)[0], family)
    # HF has no key for how weights are drawn or the bias default (it stores attn_bias and mlp_bias themselves)
    differ = {k for k, v in config.to_dict().items() if getattr(back, k) != v and k not in TRAINING_ONLY}
    assert differ == set()


def test_the_tie_sees_a_recipe_that_drifted() -> None:
    """The check above fails for a preset that differs from its family in a fixed field."""
    family = FAMILIES["olmo2"]
    drifted = build_preset("olmo2", norm_position="pre")
    assert {k: getattr(drifted, k) for k in family.fixed} != family.fixed
