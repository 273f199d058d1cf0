"""Shared by the inference tests: a tiny GQA model builder and the byte tokenizer."""

from __future__ import annotations

import pytest
import torch

from archlab.data.tokenizer import build_tokenizer
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM


def tiny(**fields: object) -> TransformerLM:
    """A seeded 2-layer GQA model in eval mode; `fields` change its ModelConfig."""
    torch.manual_seed(0)
    base = dict(d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, max_seq_len=48, vocab_size=256)
    return TransformerLM(ModelConfig(**{**base, **fields})).eval()


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer("byte", 256, None)
