"""The passkey retrieval task: a number hidden at some depth of filler text, asked for at the end.

The format of Mohtashami and Jaggi ("Landmark Attention", arXiv 2305.16300, appendix), which later
context-extension papers (Position Interpolation, YaRN) use: repeated filler sentences, the needle
"The pass key is N. Remember it. N is the pass key." at a chosen depth, and the question "What is
the pass key? The pass key is" whose continuation must be N. Lengths are in characters, which are
tokens under the byte tokenizer.

`PasskeyCorpus` (`--data passkey`) is a synthetic training corpus of such documents, seeded and so
reproducible, for teaching a small model the task at a short length and measuring it far beyond
(`archlab eval passkey`).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator

PASSKEY = "passkey"  # the corpus spec
FILLER = (
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
)
QUESTION = "What is the pass key? The pass key is "
KEY_DIGITS = 5


def needle(key: str) -> str:
    return f"The pass key is {key}. Remember it. {key} is the pass key. "


def min_length() -> int:
    """The shortest passkey prompt in characters: the needle of a KEY_DIGITS-digit key
    and the question."""
    return len(needle("0" * KEY_DIGITS)) + len(QUESTION)


def passkey_prompt(length: int, depth: float, key: str) -> str:
    """A prompt of exactly `length` characters ending with QUESTION, the needle starting at fraction
    `depth` (0 = first, 1 = last) of the filler."""
    room = length - len(needle(key)) - len(QUESTION)
    if room < 0:
        raise ValueError(
            f"passkey length {length} is too short: at least {len(needle(key)) + len(QUESTION)}"
        )
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"passkey depth {depth} is not allowed: a fraction in [0, 1]")
    filler = FILLER * (room // len(FILLER) + 1)
    before = round(depth * room)
    return filler[:before] + needle(key) + filler[before:room] + QUESTION


def random_key(rng: random.Random) -> str:
    return str(rng.randrange(10 ** (KEY_DIGITS - 1), 10**KEY_DIGITS))


class PasskeyCorpus:
    """`documents` passkey documents of `length` characters (prompt + key + "."), random
    depths and keys."""

    def __init__(self, documents: int = 20000, length: int = 256, seed: int = 0) -> None:
        self.spec, self.n_docs, self.length, self.seed = PASSKEY, documents, length, seed
        self.total_bytes = documents * length
        self.replaced = 0

    def fingerprint(self) -> str:
        return hashlib.sha256(
            f"passkey\0{self.n_docs}\0{self.length}\0{self.seed}\0{FILLER}".encode()
        ).hexdigest()

    def documents(self) -> Iterator[tuple[str, int]]:
        rng = random.Random(self.seed)
        for _ in range(self.n_docs):
            key = random_key(rng)
            text = passkey_prompt(self.length - KEY_DIGITS - 1, rng.random(), key) + key + "."
            yield text, len(text)
