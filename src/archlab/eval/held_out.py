"""Held-out tokens for the evaluations, from any `--data` of the one data grammar (eval/source.py
says which text each kind gives): a text file as it is, a prepared folder's val split (refused when
it was prepared with another tokenizer than the model's), or a corpus's validation documents encoded
with the model's tokenizer.

A corpus is read document by document in its own order, each validation document (every
1/val_fraction-th, the rule of data/encode.py) encoded with its separator as preparation would,
until `need` tokens are in hand. A corpus with fewer documents than 1/val_fraction has none: its
stream's last val_fraction of tokens is held out, as preparation does.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from archlab.data.corpus import open_corpus
from archlab.data.encode import is_val  # the split rule itself: eval holds out what training did
from archlab.data.tokenizer import Tokenizer
from archlab.data.tokens import TokenData

VAL_FRACTION = 0.05  # data.val_fraction's default: the documents `train --data CORPUS` holds out


def held_out_tokens(
    data: str, tokenizer: Tokenizer, need: int | None = None, val_fraction: float = VAL_FRACTION
) -> np.ndarray:
    """The held-out token ids (int64) of `data` under `tokenizer` (module doc); a corpus is read
    until `need` tokens are in hand (None: all of its validation documents)."""
    path = Path(data).expanduser()
    if (path / "meta.json").is_file():
        check_same_tokenizer(path, tokenizer)
        return np.asarray(TokenData(path).splits["val"], dtype=np.int64)
    if path.is_file() and path.suffix != ".jsonl":
        return np.asarray(
            tokenizer.encode(path.read_text(encoding="utf-8", errors="replace")), dtype=np.int64
        )
    return corpus_val_tokens(data, tokenizer, need, val_fraction)


def corpus_val_tokens(
    data: str, tokenizer: Tokenizer, need: int | None, val_fraction: float
) -> np.ndarray:
    """The validation documents of corpus `data`, encoded (module doc)."""
    corpus = open_corpus(data)
    held, have, every = [], 0, []
    for index, (text, _) in enumerate(corpus.documents()):
        if is_val(index, val_fraction):
            held.append(tokenizer.encode_documents([text]))
            have += len(held[-1])
            if need is not None and have >= need:
                break
        # kept until a validation document shows up
        elif not held and index < math.ceil(1 / val_fraction):
            every.append(text)
    if held:
        return np.concatenate(held)
    # too few documents: the stream's tail, as preparation holds out
    stream = tokenizer.encode_documents(every)
    return stream[len(stream) - math.ceil(val_fraction * len(stream)) :]


def check_same_tokenizer(folder: Path, tokenizer: Tokenizer) -> None:
    """Refuse a prepared folder whose tokenizer is not the model's: its ids would
    mean other text."""
    theirs = Tokenizer.load(folder).describe()
    ours = tokenizer.describe()
    if theirs["hash"] != ours["hash"]:
        raise ValueError(
            f"--data {folder} was prepared with another tokenizer ({theirs['kind']}, "
            f"{theirs['vocab_size']} ids) than the model's ({ours['kind']}, {ours['vocab_size']} "
            "ids): give the raw corpus instead (it is encoded with the model's tokenizer)"
        )


def held_out_text(data: str, tokenizer: Tokenizer, tokens: int) -> str:
    """Text to cut (eval continuation): a text file as it is, else the first `tokens` held-out
    tokens decoded (a byte cut mid-character decodes to U+FFFD, which is dropped)."""
    path = Path(data).expanduser()
    if path.is_file() and path.suffix != ".jsonl":
        return path.read_text(encoding="utf-8", errors="replace")
    ids = held_out_tokens(data, tokenizer, need=tokens)[:tokens]
    return tokenizer.decode(ids.tolist()).replace("\ufffd", "")
