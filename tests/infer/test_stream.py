"""infer/stream.py: incremental detokenization never emits half a character or a stop string's
prefix, and decodes a window that does not grow with the text."""

from __future__ import annotations

import pytest

from archlab.infer.stream import TextStream


def test_text_stream_waits_for_whole_characters_and_holds_back_stop_prefixes(tokenizer) -> None:
    text = "héllo €uro — ok"
    stream = TextStream(tokenizer.decode, stop=("uro —",))
    pieces = [stream.push(b) for b in text.encode("utf-8")] + [stream.finish()]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == stream.text == "héllo €"
    assert stream.stopped
    bad = TextStream(tokenizer.decode)
    # a cut-off character
    assert "".join([bad.push(0xE2), bad.push(0x82), bad.finish()]) == "\ufffd"


def test_text_stream_decodes_a_bounded_window(tokenizer) -> None:
    windows: list[int] = []

    def decode(ids: list[int]) -> str:
        windows.append(len(ids))
        return tokenizer.decode(ids)

    stream = TextStream(decode, stop=("zz",))
    for b in ("ab€" * 200).encode("utf-8"):
        stream.push(b)
    stream.finish()
    assert max(windows) <= 4 and stream.text == "ab€" * 200  # the window never grows with the text


@pytest.mark.parametrize("stop", [("ab", "xyz"), ("xyz", "ab")])
def test_stop_strings_of_different_lengths_each_stop(stop: tuple[str, ...]) -> None:
    """With stop strings of lengths 2 and 3 the stream must hold back enough text for the
    longer one: the text stops right before "xyz" (and right before "ab" in the other text),
    whatever the order."""
    decode = lambda ids: bytes(ids).decode("utf-8", errors="replace")  # noqa: E731 - one byte per token

    def run(text: str) -> tuple[str, int]:
        stream, pushed = TextStream(decode, stop), 0
        for ch in text.encode():
            stream.push(ch)
            pushed += 1
            if stream.stopped:
                break
        stream.finish()
        return stream.text, pushed

    assert run("hello xyz and more") == ("hello ", len("hello xyz"))
    assert run("hello xy ab xyz") == ("hello xy ", len("hello xy ab"))
    # no stop string: everything, nothing held
    assert run("x y z a b") == ("x y z a b", len("x y z a b"))
