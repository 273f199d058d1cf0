"""Token healing: continue a prompt that ends mid-token as the training text would have.

A large vocabulary merges frequent strings ("import numpy as np" may be one token), so the greedy
tokenisation of a prompt cut mid-word is one the model never saw followed by the rest of the word
(Su, "a problem of large-vocabulary LMs in continuation", https://kexue.fm/archives/9762; Lundberg &
Ribeiro's "prompt boundary" and guidance's token healing; llama.cpp's simple-token-healing rolls
back N tokens). The remedy: back the prompt off by N tokens and let the first generated tokens
re-spell the removed bytes R.

Which tokens a constrained step allows, with R' the removed bytes not yet re-spelled (`allowed`):
- every token whose bytes start with R' (it completes R' and may run past it: the healed merge), and
- every token whose bytes are a proper prefix of R' ending on one of the prompt's own token
  boundaries (the removed tokens themselves, or merges of whole removed tokens), after
  which R' shrinks.
So N = 1 allows exactly the tokens extending the last one (Su's and guidance's rule, the token
itself included), and a prompt ending on a clean boundary with nothing longer in the vocabulary is
unchanged. The allowed sets come from a byte-level trie over the vocabulary (`ByteTrie`), keyed by
raw bytes: a ByteLevel tokenizer's characters are mapped back to bytes (data/tokenizer.py
`Tokenizer.token_bytes`). Special tokens have no bytes and are never allowed while healing.

Shapes: B batch, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class _Node:
    children: dict[int, _Node] = field(default_factory=dict)
    ids: list[int] = field(default_factory=list)  # tokens whose bytes end exactly here
    below: list[int] | None = None  # every token at or under this node (filled on first use)


class ByteTrie:
    """The vocabulary's byte strings in a trie: which tokens extend a byte string, which
    are its prefixes."""

    def __init__(self, token_bytes: Sequence[bytes | None]) -> None:
        self.vocab_size = len(token_bytes)
        self.root = _Node()
        for token, data in enumerate(token_bytes):
            # special tokens (None) and empty strings are never part of a healed spelling
            if not data:
                continue
            node = self.root
            for byte in data:
                node = node.children.setdefault(byte, _Node())
            node.ids.append(token)

    def _under(self, node: _Node) -> list[int]:
        if node.below is None:
            found, stack = [], [node]
            while stack:
                n = stack.pop()
                found += n.ids
                stack += n.children.values()
            node.below = sorted(found)
        return node.below

    def allowed(self, rest: bytes, cuts: Sequence[int]) -> tuple[list[int], dict[int, int]]:
        """(the tokens a step may take, {token: bytes it consumes}) for the remaining bytes `rest`;
        `cuts` are the lengths into `rest` where the prompt had a token boundary (proper prefixes
        may end only there)."""
        consumed, node = {}, self.root
        cut_set = set(cuts)
        for depth, byte in enumerate(rest):
            if depth and depth in cut_set:
                consumed.update((t, depth) for t in node.ids)
            node = node.children.get(byte)
            if node is None:
                return sorted(consumed), consumed
        extending = self._under(node)
        consumed.update((t, len(rest)) for t in extending)
        return sorted(consumed), consumed


@dataclass
class _Row:
    rest: bytes  # removed bytes not yet re-spelled
    cuts: list[int]  # token boundaries inside `rest` (lengths from its start)


class Healing:
    """Per-row healing state through the first decode steps: masks the logits, then advances
    on the sample."""

    def __init__(
        self, trie: ByteTrie, removed: Sequence[bytes], cuts: Sequence[Sequence[int]]
    ) -> None:
        self.trie = trie
        self.rows = [_Row(r, list(c)) for r, c in zip(removed, cuts)]
        self._consumed: list[dict[int, int] | None] = []

    @property
    def active(self) -> bool:
        return any(row.rest for row in self.rows)

    def mask(self) -> torch.Tensor:
        """(B, V) True where a token is allowed this step (every token for rows that
        are healed already)."""
        mask = torch.ones(len(self.rows), self.trie.vocab_size, dtype=torch.bool)
        self._consumed = []
        for b, row in enumerate(self.rows):
            if not row.rest:
                self._consumed.append(None)
                continue
            tokens, consumed = self.trie.allowed(row.rest, row.cuts)
            mask[b] = False
            mask[b, tokens] = True
            self._consumed.append(consumed)
        return mask

    def constrain(self, logits: torch.Tensor) -> torch.Tensor:
        """logits (B, V) with the disallowed tokens at -inf: sampling renormalises over
        the allowed ones."""
        return logits.masked_fill(~self.mask().to(logits.device), float("-inf"))  # (B, V)

    def advance(self, tokens: list[int]) -> None:
        """Record each row's sampled token: it consumes a prefix of the removed bytes, or
        all of them."""
        for row, consumed, token in zip(self.rows, self._consumed, tokens):
            if consumed is None:
                continue
            used = consumed[token]
            row.rest = row.rest[used:]
            row.cuts = [c - used for c in row.cuts if c > used]


def back_off(
    prompt: list[int], n: int, token_bytes: Sequence[bytes | None]
) -> tuple[int, bytes, list[int]]:
    """How many tokens to remove from `prompt` (at most n, always leaving one), the removed bytes
    R, and the token boundaries inside R. Special tokens are never removed; the back-off stops
    short of splitting a UTF-8 character between what stays and R, so R is whole characters of
    the prompt text."""
    k = 0
    while k < min(n, len(prompt) - 1) and token_bytes[prompt[-k - 1]]:
        k += 1
    while k and _continuation(token_bytes[prompt[-k]]):  # R would start inside a character
        k -= 1
    removed = [token_bytes[t] or b"" for t in prompt[len(prompt) - k :]]
    cuts, total = [], 0
    for piece in removed[:-1]:
        total += len(piece)
        cuts.append(total)
    return k, b"".join(removed), cuts


def _continuation(data: bytes | None) -> bool:
    return bool(data) and 0x80 <= data[0] < 0xC0  # a UTF-8 continuation byte 10xxxxxx
