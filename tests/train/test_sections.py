"""TrainConfig sections: every float field refuses NaN and inf with one line naming
the dotted key."""

from __future__ import annotations

import dataclasses
import math

import pytest

from archlab.train.config import TrainConfig, resolve_config

SECTIONS = {
    f.name: f.default_factory
    for f in dataclasses.fields(TrainConfig)
    if f.default_factory is not dataclasses.MISSING
}
FLOAT_KEYS = [
    f"{name}.{f.name}"
    for name, cls in SECTIONS.items()
    for f in dataclasses.fields(cls)
    if "float" in str(f.type)
]
FLOAT_KEYS += [f.name for f in dataclasses.fields(TrainConfig) if "float" in str(f.type)]


def test_there_are_float_keys_to_check() -> None:
    assert {
        "optimizer.lr",
        "optimizer.weight_decay",
        "schedule.min_lr_ratio",
        "z_loss_coef",
    } <= set(FLOAT_KEYS)


@pytest.mark.parametrize("key", FLOAT_KEYS)
@pytest.mark.parametrize("text", ["nan", "inf", "-inf"])
def test_float_keys_reject_non_finite(key: str, text: str) -> None:
    value = "inf,0.9" if key == "optimizer.betas" else text
    with pytest.raises(ValueError) as err:
        resolve_config([{key: value}])
    message = str(err.value)
    assert message.startswith(f"{key}=") and "is not allowed" in message and "\n" not in message
    assert math.isnan(float(text)) or "inf" in message
