"""Fixtures of the training tests: one thread per worker and a small prepared corpus."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from archlab.data.prepare import prepare_data


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Two test workers share two cores: one thread each avoids oversubscription."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    words = (
        "def class return import self if else for while in not and or None True print lambda yield"
    ).split()
    gen = torch.Generator().manual_seed(0)
    picks = [torch.randint(0, len(words), (8,), generator=gen).tolist() for _ in range(3000)]
    lines = [" ".join(words[i] for i in pick) for pick in picks]
    (root / "corpus.txt").write_text("\n".join(lines))
    return prepare_data(str(root / "corpus.txt"), root / "prepared")
