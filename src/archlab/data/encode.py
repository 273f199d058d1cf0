"""Corpus -> token ids on disk: the memmap dtype, the train / val split of documents, the encoding.

Split: document i (in corpus order) goes to val when floor((i+1)*f) > floor(i*f), i.e. every 1/f-th
document. Fallback: when that gives no val document (a single file, or fewer than 1/f documents),
the last ceil(f * tokens) tokens of the stream become val. Documents are separated by the
tokenizer's EOS id, or by "\\n\\n" when it has none (the byte tokenizer). BPE-dropout (`bpe_dropout`
p > 0, Provilkov et al., arXiv 1910.13267) segments the train split stochastically and leaves val as
the plain tokenizer has it, under either split rule. The token files are raw uint16/uint32 ids
(`dtype_for_vocab`), written here and read back by tokens.py.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
from tqdm import tqdm

from archlab.data.corpus import FileCorpus, HubCorpus
from archlab.data.tokenizer import Tokenizer

SPLITS = ("train", "val")
# encode ~8M characters at a time: enough for encode_batch's threads, bounded memory
BATCH_CHARS = 8 << 20
UINT16_VOCAB = 2**16
UINT32_VOCAB = 2**32


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab <= 65536), else uint32; larger vocabularies are refused."""
    if vocab_size <= UINT16_VOCAB:
        return np.dtype(np.uint16)
    if vocab_size <= UINT32_VOCAB:
        return np.dtype(np.uint32)
    raise ValueError(
        f"tokenizer vocab_size {vocab_size} does not fit a uint32 token memmap "
        f"(at most {UINT32_VOCAB})"
    )


def to_token_array(ids: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Cast ids to the memmap dtype, refusing any id that would wrap around."""
    limit = np.iinfo(dtype).max
    if ids.size and (ids.max() > limit or ids.min() < 0):
        bad = int(ids.max()) if ids.max() > limit else int(ids.min())
        raise ValueError(
            f"token id {bad} does not fit the memmap dtype {dtype} (ids must be in 0..{limit})"
        )
    return ids.astype(dtype)


def is_val(index: int, val_fraction: float) -> bool:
    """Every 1/f-th document goes to val, spread evenly and fixed by the document's position."""
    return math.floor((index + 1) * val_fraction) > math.floor(index * val_fraction)


def encode_splits(
    corpus: FileCorpus | HubCorpus,
    tok: Tokenizer,
    val_fraction: float,
    out: Path,
    train_tok: Tokenizer | None = None,
) -> dict:
    """Stream the corpus through the tokenizer (the train split through `train_tok` if given:
    BPE-dropout) into out/{train,val}.bin; return counts for meta.json."""
    dtype = dtype_for_vocab(tok.vocab_size)
    sinks = _TokenFiles(out, dtype, tok, train_tok)
    try:
        docs, chars = _stream(corpus, val_fraction, sinks)
    finally:
        sinks.close()
    try:
        if chars == 0:
            raise ValueError(
                f"corpus {corpus.spec} is empty (no text in {sum(docs.values())} documents)"
            )
        rule = (
            "documents"
            if docs["val"]
            else _split_tail(out, dtype, sinks.tokens, val_fraction, tok, train_tok)
        )
    finally:
        (out / PLAIN_TRAIN).unlink(missing_ok=True)
    return {"dtype": dtype.name, "tokens": sinks.tokens, "documents": docs, "split_rule": rule}


class _TokenFiles:
    """The files a corpus is encoded into, each split through its tokenizer: train.bin and val.bin,
    and with BPE-dropout the train text's plain stream too (if the corpus has too few documents for
    a document split, val is cut from the plain stream's tail, never from the dropout one: val stays
    plain at any p)."""

    def __init__(
        self, out: Path, dtype: np.dtype, tok: Tokenizer, train_tok: Tokenizer | None
    ) -> None:
        self.dtype, self.tok = dtype, tok
        self.by_split = {"train": train_tok or tok, "val": tok}
        self.tokens = dict.fromkeys(SPLITS, 0)
        self.sinks = {split: (out / f"{split}.bin").open("wb") for split in SPLITS}
        self.plain_train = (out / PLAIN_TRAIN).open("wb") if train_tok is not None else None

    def write(self, batch: dict[str, list[str]]) -> None:
        """Encode and append each split's texts, then empty the batch."""
        for split, texts in batch.items():
            ids = to_token_array(self.by_split[split].encode_documents(texts), self.dtype)
            # file.write, not ndarray.tofile: a full disk then raises with its errno (tofile
            # reports only "N requested and M written")
            self.sinks[split].write(memoryview(ids))
            self.tokens[split] += len(ids)
            if split == "train" and self.plain_train is not None:
                plain = to_token_array(self.tok.encode_documents(texts), self.dtype)
                self.plain_train.write(memoryview(plain))
            texts.clear()

    def close(self) -> None:
        for sink in [*self.sinks.values(), *([self.plain_train] if self.plain_train else [])]:
            sink.close()


def _stream(
    corpus: FileCorpus | HubCorpus, val_fraction: float, files: _TokenFiles
) -> tuple[dict[str, int], int]:
    """Every document of the corpus to its split's file, in batches of BATCH_CHARS characters, with
    a progress bar over its bytes; the documents per split and the characters read."""
    docs, chars, pending = dict.fromkeys(SPLITS, 0), 0, 0
    batch: dict[str, list[str]] = {split: [] for split in SPLITS}
    bar = tqdm(
        total=corpus.total_bytes,
        unit="B",
        unit_scale=True,
        desc=f"tokenizing {corpus.spec}",
        disable=None,
        leave=False,  # on a terminal: gone when done, so a refusal after it is the only line
    )
    try:
        for index, (text, nbytes) in enumerate(corpus.documents()):
            split = "val" if is_val(index, val_fraction) else "train"
            batch[split].append(text)
            docs[split] += 1
            pending += len(text)
            chars += len(text)
            bar.update(nbytes)
            if pending >= BATCH_CHARS:
                files.write(batch)
                pending = 0
        files.write(batch)
    finally:
        bar.close()
    return docs, chars


# the train text's plain stream while a BPE-dropout folder is being prepared
PLAIN_TRAIN = "train.plain.bin"


def _split_tail(
    out: Path,
    dtype: np.dtype,
    tokens: dict[str, int],
    val_fraction: float,
    tok: Tokenizer,
    train_tok: Tokenizer | None = None,
) -> str:
    """Fallback split for corpora with too few documents: the plain stream's last tokens become val.
    With BPE-dropout (`train_tok`), the split is made on the plain stream, exactly as without it,
    and the text before the cut is encoded again with dropout: val.bin is then byte for byte the p
    = 0 folder's."""
    plain = out / (PLAIN_TRAIN if train_tok is not None else "train.bin")
    total = os.path.getsize(plain) // dtype.itemsize
    n_val = math.ceil(val_fraction * total)
    n_train = total - n_val
    np.fromfile(plain, dtype=dtype, offset=n_train * dtype.itemsize).tofile(out / "val.bin")
    if train_tok is None:
        os.truncate(out / "train.bin", n_train * dtype.itemsize)
    else:
        # special tokens kept
        head = tok.decode(np.fromfile(plain, dtype=dtype, count=n_train).tolist())
        ids = to_token_array(np.asarray(train_tok.encode(head), dtype=np.int64), dtype)
        ids.tofile(out / "train.bin")
        n_train = len(ids)
    tokens.update(train=n_train, val=n_val)  # data/prepare.py says so once the folder is published
    return "tail"
