"""The passkey task (data/passkey.py): prompts of exact length with the needle at the asked depth,
and the `passkey` corpus: seeded, every document a prompt followed by its own key."""

from __future__ import annotations

import re

import pytest

from archlab.data.corpus import open_corpus
from archlab.data.passkey import FILLER, QUESTION, PasskeyCorpus, needle, passkey_prompt


@pytest.mark.parametrize("length", [120, 256, 1000])
@pytest.mark.parametrize("depth", [0.0, 0.5, 1.0])
def test_prompt_has_its_length_and_the_needle_at_its_depth(length: int, depth: float) -> None:
    prompt = passkey_prompt(length, depth, "12345")
    assert (
        len(prompt) == length and prompt.endswith(QUESTION) and prompt.count(needle("12345")) == 1
    )
    start, room = prompt.index(needle("12345")), length - len(needle("12345")) - len(QUESTION)
    assert start == round(depth * room)
    assert prompt.replace(needle("12345"), "").removesuffix(QUESTION) == (FILLER * 20)[:room]


def test_bad_lengths_and_depths_fail() -> None:
    with pytest.raises(ValueError, match="passkey length 50 is too short"):
        passkey_prompt(50, 0.5, "12345")
    with pytest.raises(ValueError, match="passkey depth 1.5 is not allowed"):
        passkey_prompt(200, 1.5, "12345")


def test_corpus_documents_answer_their_own_needle() -> None:
    corpus = open_corpus("passkey")
    assert isinstance(corpus, PasskeyCorpus)
    docs = [text for text, _ in list(PasskeyCorpus(50).documents())]
    assert docs == [text for text, _ in PasskeyCorpus(50).documents()]  # seeded
    for text in docs:
        key = re.search(r"The pass key is (\d{5})\. Remember", text).group(1)
        assert len(text) == 256 and text.endswith(QUESTION + key + ".")
    assert len({re.search(r"is (\d{5})\.$", t).group(1) for t in docs}) > 40  # keys vary
    assert PasskeyCorpus(50).fingerprint() != PasskeyCorpus(50, seed=1).fingerprint()
