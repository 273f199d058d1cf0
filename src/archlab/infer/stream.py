"""Streaming detokenization: tokens in, confirmed text out, never half a UTF-8 character and never
text that may still turn out to start a stop string (stop strings are matched in O(1) Python
work per token).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

# a UTF-8 character spans <= 4 byte tokens; longer unfinished tails are invalid bytes
MAX_PENDING_TOKENS = 8


class TextStream:
    """Turns one row's tokens into text as they come (the incremental detokenizer of vLLM).

    Each push decodes only the few tokens since the last confirmed text, together with the token
    before them (tokenizers such as SentencePiece drop a leading space at the start of a decode), so
    the work per token does not grow with the text. Text is held back while it ends in an unfinished
    UTF-8 character or might be the beginning of a stop string.
    """

    def __init__(
        self, decode: Callable[[list[int]], str], stop: tuple[str, ...] = (), skip: int = 0
    ) -> None:
        self.decode, self.stop = decode, stop
        # leading characters that are not new text (token healing re-spells the prompt's tail)
        self.skip = skip
        self.hold = max((len(s) for s in stop), default=1) - 1  # chars that may start a stop string
        self.ids: list[int] = []
        self.prefix_offset = self.read_offset = 0
        self.held = ""
        self.chunks: list[str] = []
        self.stopped = False

    def push(self, token: int) -> str:
        """Add a token; return the text it confirms ("" while undecided or after a stop string)."""
        if self.stopped:
            return ""
        self.ids.append(token)
        prefix = self.decode(self.ids[self.prefix_offset : self.read_offset])
        text = self.decode(self.ids[self.prefix_offset :])
        unfinished = (
            text.endswith("\ufffd") and len(self.ids) - self.read_offset < MAX_PENDING_TOKENS
        )
        if len(text) <= len(prefix) or unfinished:
            return ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return self._emit(self.held + self._skipped(text[len(prefix) :]))

    def _skipped(self, piece: str) -> str:
        """`piece` without what is left of the `skip` leading characters (before stop
        strings are matched)."""
        cut = min(self.skip, len(piece))
        self.skip -= cut
        return piece[cut:]

    def _emit(self, pending: str) -> str:
        hits = [i for i in (pending.find(s) for s in self.stop) if i >= 0]
        if hits:
            self.stopped, self.held = True, ""
            return self._keep(pending[: min(hits)])
        cut = len(pending) - self.hold
        self.held = pending[max(cut, 0) :]
        return self._keep(pending[: max(cut, 0)])

    def _keep(self, text: str) -> str:
        self.chunks.append(text)
        return text

    def finish(self) -> str:
        """The row has ended: flush held-back text and any unfinished tail
        (as replacement characters)."""
        if self.stopped:
            return ""
        tail = ""
        if self.read_offset < len(self.ids):
            prefix = self.decode(self.ids[self.prefix_offset : self.read_offset])
            tail = self._skipped(self.decode(self.ids[self.prefix_offset :])[len(prefix) :])
        self.hold = 0  # nothing can follow any more, so nothing needs holding back
        return self._emit(self.held + tail)

    @property
    def text(self) -> str:
        return "".join(self.chunks)


class TokenizerLike(Protocol):
    """What generate_text needs of a tokenizer (archlab.data.tokenizer.Tokenizer has it)."""

    eos_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...
