"""interop/hf_config.py: keys a config.json leaves out take transformers' defaults (the parity tests in
test_families.py set every key, so a wrong default would pass there)."""

from __future__ import annotations

import pytest
import transformers

from archlab.interop.families import FAMILIES, READ_ONLY
from archlab.interop.family import Key
from archlab.interop.hf_config import config_from_hf

ALL = {**FAMILIES, **READ_ONLY}


def eps_key(model_type: str) -> str:
    keys = [k for k, spec in ALL[model_type].keys.items() if isinstance(spec, Key) and spec.field == "norm_eps"]
    assert len(keys) == 1, f"{model_type}: one config.json key carries norm_eps, found {keys}"
    return keys[0]


@pytest.mark.parametrize("model_type", sorted(ALL))
def test_a_config_json_without_its_norm_eps_reads_transformers_default(model_type: str) -> None:
    """transformers' default config of the family, written without its eps key (rms_norm_eps, layer_norm_eps,
    ...), reads as the eps the config class fills in: Llama-named families 1e-6, OLMo 2 and the LayerNorm
    families 1e-5."""
    family = ALL[model_type]
    hf = transformers.AutoConfig.for_model(model_type).to_dict()
    text = hf[family.text_config] if family.text_config else hf
    key = eps_key(model_type)
    expected = text.pop(key)
    assert isinstance(expected, float) and expected in (1e-5, 1e-6)
    assert config_from_hf(hf, family).norm_eps == expected
    text[key] = 3e-4  # and a given value is read, not the default
    assert config_from_hf(hf, family).norm_eps == 3e-4
