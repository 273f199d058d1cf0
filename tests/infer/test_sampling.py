"""SamplingConfig validation: every field rejects values outside its domain, NaN and inf included, in one line."""

from __future__ import annotations

import math

import pytest

from archlab.infer.sampling import SamplingConfig

BAD = [
    ("temperature", math.inf), ("temperature", math.nan), ("temperature", -0.1), ("temperature", True),
    ("top_p", math.nan), ("top_p", math.inf), ("top_p", 0.0), ("top_p", 1.5),
    ("top_k", 0), ("top_k", 2.5), ("max_new_tokens", 0), ("max_new_tokens", 1.5), ("max_new_tokens", math.inf),
    ("seed", 1.5), ("stop", ("",)), ("stop", (3,)),
]


@pytest.mark.parametrize("field,value", BAD)
def test_bad_values_fail_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError) as err:
        SamplingConfig(**{field: value})
    message = str(err.value)
    assert message.startswith(f"SamplingConfig.{field}=") and "\n" not in message


@pytest.mark.parametrize("fields", [dict(temperature=0), dict(temperature=0.7, top_k=1, top_p=1.0, seed=0),
                                    dict(max_new_tokens=1, stop=["\n\n"])])
def test_edge_values_are_accepted(fields: dict) -> None:
    config = SamplingConfig(**fields)
    assert config.stop == tuple(fields.get("stop", ()))
