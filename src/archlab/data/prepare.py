"""Prepared data folders: a corpus tokenized once into a folder, reused while nothing changed.

A prepared folder holds `train.bin` and `val.bin` (token ids, encode.py), `tokenizer.json` and
`meta.json` (source hash, tokenizer description, dtype, token counts). `meta.json`'s request (source
hash, tokenizer, split, BPE-dropout p) is the cache key: the same request reuses the folder as is,
another one rebuilds it in a temp folder beside it and renames it into place, and a resumed run
(`reuse_only`) refuses any other. p is part of the key, so a run resumes on the folder it was
prepared with and a different p is refused there. Non-UTF-8 bytes decode to U+FFFD and are counted.
The corpora (`--data`: files, folders, JSONL, `stdlib`, `hf:NAME`) are read by `corpus.py`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from archlab.data.corpus import FileCorpus, HubCorpus, open_corpus
from archlab.data.encode import SPLITS, encode_splits, is_val
from archlab.data.tokenizer import build_tokenizer
from archlab.storage import writing

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1  # bump when the folder layout or split rule changes, so old caches are rebuilt


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
            f"data.bpe_dropout={bpe_dropout!r} is not the {held!r} {folder} was prepared "
            "with: a prepared folder trains on its own tokens; drop --data.bpe_dropout, or "
            "prepare another folder"
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
            text for i, (text, _) in enumerate(corpus.documents()) if not is_val(i, val_fraction)
        )
    tok = build_tokenizer(tokenizer, vocab_size, texts)
    # after training: see with_dropout
    train_tok = tok.with_dropout(bpe_dropout) if bpe_dropout else None
    counts = encode_splits(corpus, tok, val_fraction, out, train_tok)
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
    """A BPE-dropout folder whose tail split was cut from the dropout stream (before archlab
    wrote `val_plain`): its val.bin is not the plain encoding, so it is rebuilt (a resumed run
    refuses it instead)."""
    dropout = meta.get("request", {}).get("bpe_dropout", 0.0)
    return bool(dropout) and meta.get("split_rule") == "tail" and not meta.get("val_plain")


def prepared_hash(folder: str | Path) -> str:
    """sha256 of what a run reads from a prepared folder: meta.json's request (not its timings),
    tokenizer.json, train.bin and val.bin, in that order (a file that is missing adds nothing).
    Equal hashes mean the same tokens under the same tokenizer; the lab's pages (`data` in their
    provenance) and each run's record (train/provenance.py) use it."""
    folder = Path(folder)
    digest = hashlib.sha256()
    meta = read_meta(folder) or {}
    digest.update(json.dumps(meta.get("request", {}), sort_keys=True).encode())
    for name in ("tokenizer.json", *(f"{split}.bin" for split in SPLITS)):
        path = folder / name
        if path.is_file():
            with path.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


def read_meta(folder: Path) -> dict | None:
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
    out: Path,
    corpus: FileCorpus | HubCorpus,
    request: dict,
    tokenizer: str,
    vocab_size: int,
    min_tokens: int = 0,
) -> dict:
    """Prepare into a temp folder beside `out`, then publish it; return its meta. A corpus too short
    for `min_tokens` per split, or a write the disk refuses, publishes nothing and logs nothing: the
    temp folder goes, and a folder already at `out` stays as it was."""
    with writing(out, "the prepared data", "; nothing was kept"):
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            meta = _build_into(tmp, out, corpus, request, tokenizer, vocab_size, min_tokens)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    logger.info(
        "prepared %s -> %s: %s tokens (%s)", corpus.spec, out, meta["tokens"], meta["dtype"]
    )
    if meta.get("split_rule") == "tail":
        logger.info(
            "fewer documents than 1/val_fraction: val is the last %d tokens of the plain stream",
            meta["tokens"]["val"],
        )
    return meta


def _build_into(
    tmp: Path,
    out: Path,
    corpus: FileCorpus | HubCorpus,
    request: dict,
    tokenizer: str,
    vocab_size: int,
    min_tokens: int,
) -> dict:
    tmp.chmod(0o755)  # mkdtemp makes it private; the published folder should read like any other
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
    _check_sizes(corpus.spec, meta, min_tokens)  # before anything is published
    meta["seconds"] = round(time.perf_counter() - start, 3)
    # val.bin is the plain encoding under every split rule (see _leaked)
    meta["val_plain"] = True
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    try:
        _publish(tmp, out)
    except OSError:
        # Another process (e.g. a second rank) published the same folder first: use theirs.
        theirs = read_meta(out)
        if theirs is None or theirs.get("request") != request:
            raise
        meta = theirs
    return meta


def _refusal(out: Path, meta: dict, data: str, request: dict) -> str:
    """Why a prepared folder may not be rebuilt for `request`, naming what it holds and
    what was asked."""
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
                f"corpus {spec}: {split} split has {have} tokens, need at least {need} (one "
                "context window + 1); use more text, a smaller block size or another val_fraction"
            )


def _check_request(out: Path, tokenizer: str, val_fraction: float, bpe_dropout: float) -> None:
    """Refuse, one line each, a split or dropout out of range and an output folder that is not a
    prepared data folder."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1) (got {val_fraction})")
    if not 0 <= bpe_dropout < 1 or (bpe_dropout and tokenizer == "byte"):
        raise ValueError(
            f"bpe_dropout={bpe_dropout!r} is not allowed: a probability in [0, 1), and 0 for the "
            "byte tokenizer (it has no merges to drop)"
        )
    if out.is_file() or (out.is_dir() and any(out.iterdir()) and read_meta(out) is None):
        raise ValueError(
            f"out dir {out} exists and is not a prepared data folder (no meta.json); choose another"
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

    `bpe_dropout` p > 0 encodes the train split with BPE-dropout (val and
    tokenizer.json stay plain).

    Cached: when `out_dir/meta.json` records the same source hash, tokenizer request and split, the
    folder is reused as is. Otherwise it is built in a temp folder beside `out_dir` and renamed into
    place. `min_tokens` (the trainer passes block_size + 1) is the least each split must hold.
    `reuse_only=True` (a resumed run) refuses to replace a folder prepared from another corpus or
    tokenizer. Under torchrun, call it on rank 0 and barrier before the other ranks open the folder.
    """
    out = Path(out_dir)
    _check_request(out, tokenizer, val_fraction, bpe_dropout)
    corpus = open_corpus(data, text_field, max_files)
    request = {
        "format": FORMAT_VERSION,
        "source_hash": corpus.fingerprint(),
        "tokenizer": tokenizer_request(tokenizer, vocab_size),
        "val_fraction": val_fraction,
        # absent at 0: folders prepared before still match
        **({"bpe_dropout": bpe_dropout} if bpe_dropout else {}),
    }
    meta = read_meta(out)
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
        meta = _build(out, corpus, request, tokenizer, vocab_size, min_tokens)
    _check_sizes(data, meta, min_tokens)
    return out
