"""A safetensors file whose bytes depend on its tensors and metadata only.

safetensors (0.4 and later) orders the tensors by dtype alignment then name, but keeps the header's
`__metadata__` in a Rust `HashMap`, whose iteration order is seeded afresh for every map: the same
state saved twice, in one process or two, could hash differently (three identical fresh runs wrote
`model.safetensors` with two hashes). `save_file_sorted` lets safetensors write the file, then
rewrites the header with the metadata keys sorted, so a resumed run's weights hash like an
uninterrupted run's. The header format is the one in the spec
(https://github.com/huggingface/safetensors#format): an 8-byte little-endian length, that many bytes
of JSON (padded with spaces), then the tensor data, whose offsets are relative to the data's start.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

LENGTH_BYTES = 8  # the header's length: an unsigned 64-bit little-endian integer
ALIGN = 8  # safetensors pads the header with spaces to a multiple of 8 bytes
COPY_CHUNK = 1 << 24  # bytes per read when the data must move (a header grown by re-encoding)


def canonical_header(header: dict) -> bytes:
    """The header's JSON with `__metadata__`'s keys sorted, tensors in the order given, compact and
    ASCII-only (the same text whatever the locale or the Rust encoder's choices)."""
    ordered = dict(header)
    if "__metadata__" in ordered:
        ordered["__metadata__"] = dict(sorted(ordered["__metadata__"].items()))
    return json.dumps(ordered, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def save_file_sorted(
    tensors: dict[str, torch.Tensor], file: Path, metadata: dict[str, str] | None = None
) -> None:
    """`safetensors.torch.save_file`, with the header rewritten deterministically (module doc)."""
    save_file(tensors, file, metadata=metadata)
    sort_header(Path(file))


def sort_header(file: Path) -> None:
    """Rewrite `file`'s header in canonical form: in place, space-padded to its old length, when it
    fits (it always does for ASCII names and metadata); otherwise the data moves behind a header
    padded to a multiple of 8, written beside and renamed over the file."""
    with file.open("r+b") as handle:
        length = int.from_bytes(handle.read(LENGTH_BYTES), "little")
        text = canonical_header(json.loads(handle.read(length)))
        if len(text) <= length:
            handle.seek(LENGTH_BYTES)
            handle.write(text.ljust(length, b" "))
            return
    padded = text.ljust(-(-len(text) // ALIGN) * ALIGN, b" ")
    tmp = file.with_name(f".{file.name}.header")
    try:
        with file.open("rb") as src, tmp.open("wb") as dst:
            src.seek(LENGTH_BYTES + length)
            dst.write(len(padded).to_bytes(LENGTH_BYTES, "little") + padded)
            shutil.copyfileobj(src, dst, COPY_CHUNK)
        os.replace(tmp, file)
    finally:
        tmp.unlink(missing_ok=True)
