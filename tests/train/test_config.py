"""TrainConfig sections: every float field refuses NaN and inf with one line naming the dotted key."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from archlab.data.prepare import prepare_data
from archlab.train.config import TrainConfig, resolve_config

SECTIONS = {f.name: f.default_factory for f in dataclasses.fields(TrainConfig)
            if f.default_factory is not dataclasses.MISSING}
FLOAT_KEYS = [f"{name}.{f.name}" for name, cls in SECTIONS.items()
              for f in dataclasses.fields(cls) if "float" in str(f.type)]
FLOAT_KEYS += [f.name for f in dataclasses.fields(TrainConfig) if "float" in str(f.type)]


def test_there_are_float_keys_to_check() -> None:
    assert {"optimizer.lr", "optimizer.weight_decay", "schedule.min_lr_ratio", "z_loss_coef"} <= set(FLOAT_KEYS)


@pytest.mark.parametrize("key", FLOAT_KEYS)
@pytest.mark.parametrize("text", ["nan", "inf", "-inf"])
def test_float_keys_reject_non_finite(key: str, text: str) -> None:
    value = "inf,0.9" if key == "optimizer.betas" else text
    with pytest.raises(ValueError) as err:
        resolve_config([{key: value}])
    message = str(err.value)
    assert message.startswith(f"{key}=") and "is not allowed" in message and "\n" not in message
    assert math.isnan(float(text)) or "inf" in message


def test_a_prepared_folder_refuses_another_tokenizer_instead_of_ignoring_it(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("def f(x):\n    return x + 1\n\n" * 200)
    folder = prepare_data(str(corpus), tmp_path / "data", "byte", val_fraction=0.2)
    keys = {"data.source": str(folder)}
    assert resolve_config([keys])[0].data.tokenizer == "byte"  # not asked for: the folder's own is used
    assert resolve_config([{**keys, "data.tokenizer": "byte"}])[1].vocab_size == 256  # the same one: fine
    with pytest.raises(ValueError, match=r"^data.tokenizer='bpe' with data.vocab_size=512 is not the tokenizer "
                                         r".* was prepared with \(byte, 256 ids\)"):
        resolve_config([keys, {"data.tokenizer": "bpe", "data.vocab_size": "512"}])
    bpe = prepare_data(str(corpus), tmp_path / "bpe", "bpe", vocab_size=300, val_fraction=0.2)
    resolve_config([{"data.source": str(bpe), "data.tokenizer": "bpe", "data.vocab_size": "300"}])
    with pytest.raises(ValueError, match=r"data.vocab_size=400 is not the tokenizer"):
        resolve_config([{"data.source": str(bpe), "data.tokenizer": "bpe", "data.vocab_size": "400"}])
