"""resolve_config: a prepared folder's own tokenizer is used, and another one asked
for is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from archlab.data.prepare import prepare_data
from archlab.train.config import resolve_config


def test_a_prepared_folder_refuses_another_tokenizer_instead_of_ignoring_it(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("def f(x):\n    return x + 1\n\n" * 200)
    folder = prepare_data(str(corpus), tmp_path / "data", "byte", val_fraction=0.2)
    keys = {"data.source": str(folder)}
    # not asked for: the folder's own is used
    assert resolve_config([keys])[0].data.tokenizer == "byte"
    # the same one: fine
    assert resolve_config([{**keys, "data.tokenizer": "byte"}])[1].vocab_size == 256
    with pytest.raises(
        ValueError,
        match=r"^data.tokenizer='bpe' with data.vocab_size=512 is not the tokenizer "
        r".* was prepared with \(byte, 256 ids\)",
    ):
        resolve_config([keys, {"data.tokenizer": "bpe", "data.vocab_size": "512"}])
    bpe = prepare_data(str(corpus), tmp_path / "bpe", "bpe", vocab_size=300, val_fraction=0.2)
    resolve_config([{"data.source": str(bpe), "data.tokenizer": "bpe", "data.vocab_size": "300"}])
    with pytest.raises(ValueError, match=r"data.vocab_size=400 is not the tokenizer"):
        resolve_config(
            [{"data.source": str(bpe), "data.tokenizer": "bpe", "data.vocab_size": "400"}]
        )
