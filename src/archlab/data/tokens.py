"""Training data: corpora -> token memmaps (`prepare_data`); random training windows and fixed,
evenly strided evaluation windows from them (`TokenData`).

A prepared folder holds `train.bin` and `val.bin` (raw uint16/uint32 token ids, read back with
`np.memmap`), `tokenizer.json` and `meta.json` (source hash, tokenizer description, dtype, token
counts).

The corpora (`--data`: files, folders, JSONL, `stdlib`, `hf:NAME`) are read by `corpus.py`.

Split: document i (in corpus order) goes to val when floor((i+1)*f) > floor(i*f), i.e. every 1/f-th
document. Fallback: when that gives no val document (a single file, or fewer than 1/f documents),
the last ceil(f * tokens) tokens of the stream become val. Non-UTF-8 bytes decode to U+FFFD and are
counted. Documents are separated by the tokenizer's EOS id, or by "\\n\\n" when it has none (the
byte tokenizer). BPE-dropout (`bpe_dropout` p > 0, Provilkov et al., arXiv 1910.13267) segments the
train split stochastically and leaves val (and the saved tokenizer.json) as the plain tokenizer has
them; p is part of the cache key in meta.json, so a run resumes on the folder it was prepared with
and a different p is refused there.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from archlab.data.corpus import FileCorpus, HubCorpus, open_corpus, stdlib_files
from archlab.data.tokenizer import Tokenizer, build_tokenizer

__all__ = [
    "TokenData",
    "dtype_for_vocab",
    "open_corpus",
    "prepare_data",
    "stdlib_files",
    "to_token_array",
]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1  # bump when the folder layout or split rule changes, so old caches are rebuilt
SPLITS = ("train", "val")
# encode ~8M characters at a time: enough for encode_batch's threads, bounded memory
BATCH_CHARS = 8 << 20
UINT16_VOCAB = 2**16
UINT32_VOCAB = 2**32


# ------------------------------------------------------------------------------------------
# preparation
def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab <= 65536), else uint32; larger vocabularies are refused."""
    if vocab_size <= UINT16_VOCAB:
        return np.dtype(np.uint16)
    if vocab_size <= UINT32_VOCAB:
        return np.dtype(np.uint32)
    raise ValueError(
        f"tokenizer vocab_size {vocab_size} does not fit a uint32 token memmap (at most "
        f"{UINT32_VOCAB})"
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


def _is_val(index: int, val_fraction: float) -> bool:
    """Every 1/f-th document goes to val, spread evenly and fixed by the document's position."""
    return math.floor((index + 1) * val_fraction) > math.floor(index * val_fraction)


def tokenizer_request(tokenizer: str, vocab_size: int) -> dict[str, str | int | None]:
    """What the user asked for, known before any training: the cache key's tokenizer half."""
    if tokenizer == "bpe":
        return {"kind": "bpe", "vocab_size": vocab_size}
    return build_tokenizer(tokenizer, vocab_size, None).describe()  # byte or a file: cheap to build


def check_prepared_dropout(folder: Path, bpe_dropout: float) -> None:
    """Refuse a data.bpe_dropout that is not the one `folder`'s train split was encoded with."""
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    held = meta.get("request", {}).get("bpe_dropout", 0.0)
    if held != bpe_dropout:
        raise ValueError(
            f"data.bpe_dropout={bpe_dropout!r} is not the {held!r} {folder} was prepared with: a "
            "prepared folder trains on its own tokens; drop --data.bpe_dropout, or prepare another "
            "folder"
        )


def check_prepared_tokenizer(folder: Path, tokenizer: str, vocab_size: int) -> None:
    """Refuse a tokenizer asked for that is not the one `folder` was prepared with. A prepared
    folder always trains with its own tokenizer.json, so a different request would otherwise be
    ignored without a word."""
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    held = meta.get("request", {}).get("tokenizer") or meta.get("tokenizer", {})
    asked = tokenizer_request(tokenizer, vocab_size)
    if all(held.get(key) == value for key, value in asked.items()):
        return
    what = f"data.tokenizer={tokenizer!r}" + (
        f" with data.vocab_size={vocab_size}" if tokenizer == "bpe" else ""
    )
    raise ValueError(
        f"{what} is not the tokenizer {folder} was prepared with ({held.get('kind')}, "
        f"{held.get('vocab_size')} ids): a prepared folder trains with its own tokenizer; drop "
        f"--data.tokenizer, or prepare another folder from the raw corpus"
    )


def _encode_splits(
    corpus: FileCorpus | HubCorpus,
    tok: Tokenizer,
    val_fraction: float,
    out: Path,
    train_tok: Tokenizer | None = None,
) -> dict:
    """Stream the corpus through the tokenizer (the train split through `train_tok` if given:
    BPE-dropout) into out/{train,val}.bin; return counts for meta.json."""
    dtype = dtype_for_vocab(tok.vocab_size)
    by_split = {"train": train_tok or tok, "val": tok}
    tokens, docs, chars = dict.fromkeys(SPLITS, 0), dict.fromkeys(SPLITS, 0), 0
    sinks = {split: (out / f"{split}.bin").open("wb") for split in SPLITS}
    # with BPE-dropout the train text is also kept plain: if the corpus has too few documents for a
    # document split, val is cut from the plain stream's tail, never from the dropout one (val stays
    # plain at any p)
    plain_train = (out / PLAIN_TRAIN).open("wb") if train_tok is not None else None
    bar = tqdm(
        total=corpus.total_bytes,
        unit="B",
        unit_scale=True,
        desc=f"tokenizing {corpus.spec}",
        disable=None,
    )

    def flush(batch: dict[str, list[str]]) -> None:
        for split, texts in batch.items():
            ids = to_token_array(by_split[split].encode_documents(texts), dtype)
            ids.tofile(sinks[split])
            tokens[split] += len(ids)
            if split == "train" and plain_train is not None:
                to_token_array(tok.encode_documents(texts), dtype).tofile(plain_train)
            texts.clear()

    try:
        batch: dict[str, list[str]] = {split: [] for split in SPLITS}
        pending = 0
        for index, (text, nbytes) in enumerate(corpus.documents()):
            split = "val" if _is_val(index, val_fraction) else "train"
            batch[split].append(text)
            docs[split] += 1
            pending += len(text)
            chars += len(text)
            bar.update(nbytes)
            if pending >= BATCH_CHARS:
                flush(batch)
                pending = 0
        flush(batch)
    finally:
        bar.close()
        for sink in [*sinks.values(), *([plain_train] if plain_train is not None else [])]:
            sink.close()
    try:
        if chars == 0:
            raise ValueError(
                f"corpus {corpus.spec} is empty (no text in {sum(docs.values())} documents)"
            )
        rule = (
            "documents"
            if docs["val"]
            else _split_tail(out, dtype, tokens, val_fraction, tok, train_tok)
        )
    finally:
        (out / PLAIN_TRAIN).unlink(missing_ok=True)
    return {"dtype": dtype.name, "tokens": tokens, "documents": docs, "split_rule": rule}


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
    and the text before the cut is encoded again with dropout: val.bin is then byte for byte the p =
    0 folder's."""
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
    tokens.update(train=n_train, val=n_val)
    logger.info(
        "fewer documents than 1/val_fraction: val is the last %d tokens of the plain stream", n_val
    )
    return "tail"


def _prepare_into(
    out: Path,
    corpus: FileCorpus | HubCorpus,
    tokenizer: str,
    vocab_size: int,
    val_fraction: float,
    bpe_dropout: float = 0.0,
) -> dict:
    """Build the tokenizer (training BPE on the train documents), encode, and save it into `out`."""
    texts = None
    if tokenizer == "bpe":  # train on the documents that will be train, so val stays unseen
        texts = (
            text for i, (text, _) in enumerate(corpus.documents()) if not _is_val(i, val_fraction)
        )
    tok = build_tokenizer(tokenizer, vocab_size, texts)
    # after training: see with_dropout
    train_tok = tok.with_dropout(bpe_dropout) if bpe_dropout else None
    counts = _encode_splits(corpus, tok, val_fraction, out, train_tok)
    tok.save(out)
    if corpus.replaced:
        logger.warning(
            "%s: %d invalid UTF-8 sequences replaced by U+FFFD", corpus.spec, corpus.replaced
        )
    files = len(corpus.files) if isinstance(corpus, FileCorpus) else None
    source = {
        "spec": corpus.spec,
        "files": files,
        "bytes": corpus.total_bytes,
        "replaced_sequences": corpus.replaced,
    }
    return {"source": source, "tokenizer": tok.describe(), **counts}


def _is_complete(folder: Path, meta: dict) -> bool:
    """Whether both token files are there with the sizes meta.json promises (a reusable cache)."""
    itemsize = np.dtype(meta["dtype"]).itemsize
    sizes = {split: folder / f"{split}.bin" for split in SPLITS}
    return all(
        p.is_file() and p.stat().st_size == meta["tokens"][s] * itemsize for s, p in sizes.items()
    )


def _leaked(meta: dict) -> bool:
    """A BPE-dropout folder whose tail split was cut from the dropout stream (before archlab wrote
    `val_plain`): its val.bin is not the plain encoding, so it is rebuilt (a resumed run refuses it
    instead)."""
    dropout = meta.get("request", {}).get("bpe_dropout", 0.0)
    return bool(dropout) and meta.get("split_rule") == "tail" and not meta.get("val_plain")


def _read_meta(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _publish(tmp: Path, out: Path) -> None:
    """Move the finished temp folder to `out` (same filesystem, so each rename is atomic)."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.rename(out, old)
    os.rename(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _build(
    out: Path, corpus: FileCorpus | HubCorpus, request: dict, tokenizer: str, vocab_size: int
) -> dict:
    """Prepare into a temp folder beside `out`, then publish it; return its meta."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the published folder should read like any other
    try:
        start = time.perf_counter()
        meta = {
            "request": request,
            **_prepare_into(
                tmp,
                corpus,
                tokenizer,
                vocab_size,
                request["val_fraction"],
                request.get("bpe_dropout", 0.0),
            ),
        }
        meta["seconds"] = round(time.perf_counter() - start, 3)
        # val.bin is the plain encoding under every split rule (see _leaked)
        meta["val_plain"] = True
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        try:
            _publish(tmp, out)
        except OSError:
            # Another process (e.g. a second rank) published the same folder first: use theirs.
            theirs = _read_meta(out)
            if theirs is None or theirs.get("request") != request:
                raise
            meta = theirs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info(
        "prepared %s -> %s: %s tokens (%s)", corpus.spec, out, meta["tokens"], meta["dtype"]
    )
    return meta


def _refusal(out: Path, meta: dict, data: str, request: dict) -> str:
    """Why a prepared folder may not be rebuilt for `request`, naming what it holds and what was
    asked."""
    spec, kind = meta.get("source", {}).get("spec", "?"), meta.get("tokenizer", {}).get("kind", "?")
    old = f"{spec} with tokenizer {kind}"
    new = f"{data} with tokenizer {request['tokenizer'].get('kind', '?')}"
    if old == new:
        why = f"{data} changed since {out} was prepared from it (or its tokenizer or split did)"
    else:
        why = f"{out} holds {old}, not {new}"
    return (
        f"{why}; a run's prepared data is never replaced: restore the corpus or start a new --out"
    )


def _check_sizes(spec: str, meta: dict, min_tokens: int) -> None:
    need = max(min_tokens, 2)  # one (x, y) pair needs two tokens even with block_size 1
    for split in SPLITS:
        have = meta["tokens"][split]
        if have < need:
            raise ValueError(
                f"corpus {spec}: {split} split has {have} tokens, need at least {need} "
                "(one context window + 1); use more text, a smaller block size or another "
                "val_fraction"
            )


def prepare_data(
    data: str,
    out_dir: str | Path,
    tokenizer: str = "byte",
    vocab_size: int = 8192,
    val_fraction: float = 0.05,
    min_tokens: int = 0,
    *,
    text_field: str = "text",
    max_files: int | None = None,
    reuse_only: bool = False,
    bpe_dropout: float = 0.0,
) -> Path:
    """Tokenize `data` into the folder `out_dir` (train.bin, val.bin, meta.json, tokenizer.json).

    `bpe_dropout` p > 0 encodes the train split with BPE-dropout (val and tokenizer.json stay
    plain).

    Cached: when `out_dir/meta.json` records the same source hash, tokenizer request and split, the
    folder is reused as is. Otherwise it is built in a temp folder beside `out_dir` and renamed into
    place. `min_tokens` (the trainer passes block_size + 1) is the least each split must hold.
    `reuse_only=True` (a resumed run) refuses to replace a folder prepared from another corpus or
    tokenizer. Under torchrun, call it on rank 0 and barrier before the other ranks open the folder.
    """
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1) (got {val_fraction})")
    if not 0 <= bpe_dropout < 1 or (bpe_dropout and tokenizer == "byte"):
        raise ValueError(
            f"bpe_dropout={bpe_dropout!r} is not allowed: a probability in [0, 1), and 0 for the "
            "byte "
            "tokenizer (it has no merges to drop)"
        )
    out = Path(out_dir)
    if out.is_file() or (out.is_dir() and any(out.iterdir()) and _read_meta(out) is None):
        raise ValueError(
            f"out dir {out} exists and is not a prepared data folder (no meta.json); choose another"
        )
    corpus = open_corpus(data, text_field, max_files)
    request = {
        "format": FORMAT_VERSION,
        "source_hash": corpus.fingerprint(),
        "tokenizer": tokenizer_request(tokenizer, vocab_size),
        "val_fraction": val_fraction,
        # absent at 0: folders prepared before still match
        **({"bpe_dropout": bpe_dropout} if bpe_dropout else {}),
    }
    meta = _read_meta(out)
    if (
        meta is not None
        and meta.get("request") == request
        and _is_complete(out, meta)
        and not _leaked(meta)
    ):
        logger.info("reusing prepared data in %s", out)
    elif meta is not None and reuse_only:
        raise ValueError(_refusal(out, meta, data, request))
    else:
        meta = _build(out, corpus, request, tokenizer, vocab_size)
    _check_sizes(data, meta, min_tokens)
    return out


# -------------------------------------------------------------------------------------------
# batches
class TokenData:
    """Read-only view of a prepared folder that draws random (x, y) windows, sharded by rank.

    Each call draws `batch_size * world_size` window starts from `generator` and keeps this rank's
    slice, so the ranks of a run together see exactly the batch a single process with the global
    batch would, and every rank must hold an identically seeded generator.
    """

    def __init__(self, data_dir: str | Path, rank: int = 0, world_size: int = 1) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in 0..{world_size - 1} (world_size {world_size})")
        self.data_dir, self.rank, self.world_size = Path(data_dir), rank, world_size
        meta = _read_meta(self.data_dir)
        if meta is None:
            raise FileNotFoundError(
                f"{self.data_dir / 'meta.json'} does not exist; run `archlab data prepare` first"
            )
        self.meta = meta
        dtype = np.dtype(meta["dtype"])
        self.splits = {
            split: _open_tokens(self.data_dir / f"{split}.bin", dtype) for split in SPLITS
        }

    @property
    def vocab_size(self) -> int:
        return int(self.meta["tokenizer"]["vocab_size"])

    def tokenizer(self) -> Tokenizer:
        return Tokenizer.load(self.data_dir)

    def num_tokens(self, split: str) -> int:
        return len(self._split(split))

    def _split(self, split: str) -> np.ndarray:
        if split not in self.splits:
            raise ValueError(f"split {split!r} is not one of {SPLITS}")
        return self.splits[split]

    def batch_starts(
        self, split: str, batch_size: int, block_size: int, generator: torch.Generator
    ) -> np.ndarray:
        """The window starts of one draw for all ranks together (batch_size * world_size of them):
        what `get_batch` slices its rank's windows from, and what a replay of a run's batches draws
        (lab/drift.py)."""
        # start i needs tokens i .. i + block_size inclusive
        n_starts = len(self._split(split)) - block_size
        if batch_size < 1 or block_size < 1 or n_starts < 1:
            raise ValueError(
                f"cannot draw batch_size {batch_size} x block_size {block_size} from split "
                f"{split!r} of "
                f"{self.data_dir} ({len(self._split(split))} tokens; need block_size + 1 and sizes "
                ">= 1)"
            )
        return torch.randint(n_starts, (batch_size * self.world_size,), generator=generator).numpy()

    def get_batch(
        self,
        split: str,
        batch_size: int,
        block_size: int,
        generator: torch.Generator,
        device: str | torch.device = "cpu",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random windows x (B, T) and targets y = x shifted left by one, both int64 on `device`."""
        starts = self.batch_starts(split, batch_size, block_size, generator)
        starts = starts[self.rank * batch_size : (self.rank + 1) * batch_size]  # this rank's slice
        return self._windows(split, starts, block_size, device)

    def strided_windows(self, split: str, n: int, block_size: int) -> np.ndarray:
        """`n` window starts spread evenly over the split, from its first token to its last full
        window (start i = round(i * (len - block_size - 1) / (n - 1))): fixed by the split alone,
        with no generator, so every run on this data (any seed, any arm) is scored on the same text.
        Windows overlap only when n * block_size exceeds the split."""
        last = len(self._split(split)) - block_size - 1  # the last start with block_size + 1 tokens
        if n < 1 or block_size < 1 or last < 0:
            raise ValueError(
                f"cannot lay {n} windows of block_size {block_size} over split {split!r} of "
                f"{self.data_dir} ({len(self._split(split))} tokens; need block_size + 1, n >= 1)"
            )
        if n == 1:
            return np.zeros(1, dtype=np.int64)
        return np.round(np.arange(n) * (last / (n - 1))).astype(np.int64)

    def windows_at(
        self,
        split: str,
        starts: np.ndarray,
        block_size: int,
        device: str | torch.device = "cpu",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The windows x (B, T) starting at `starts` and their targets y (x shifted left by one),
        int64."""
        return self._windows(split, np.asarray(starts), block_size, device)

    def _windows(
        self,
        split: str,
        starts: np.ndarray,
        block_size: int,
        device: str | torch.device,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # (B, T + 1), one gather
        window = self._split(split)[starts[:, None] + np.arange(block_size + 1)]
        xy = torch.from_numpy(window.astype(np.int64))
        x, y = xy[:, :-1], xy[:, 1:]  # (B, T) each
        # pinned memory lets the copy overlap the previous step
        if torch.device(device).type == "cuda":
            return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(
                device, non_blocking=True
            )
        return x.contiguous().to(device), y.contiguous().to(device)


def _open_tokens(path: Path, dtype: np.dtype) -> np.ndarray:
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; re-run `archlab data prepare`")
    if path.stat().st_size == 0:  # np.memmap refuses empty files
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")
