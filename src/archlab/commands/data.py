"""`archlab data prepare`: tokenize a corpus into a prepared folder (see `archlab.data.prepare`)."""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

from archlab.data.corpus import check_source
from archlab.train.lock import check_folder


def default_out_dir(data: str, tokenizer: str, vocab_size: int) -> Path:
    """data/<corpus>-<tokenizer>, e.g. data/stdlib-byte or data/tinystories-bpe8192.

    Two runs that share this folder with different settings rebuild it (the cache key
    is in meta.json).
    """
    corpus = Path(data.removeprefix("hf:").rstrip("/")).stem or "corpus"
    tok = f"bpe{vocab_size}" if tokenizer == "bpe" else tokenizer
    # a tokenizer.json path: name it after its folder (e.g. gpt2)
    if tokenizer not in ("byte", "bpe"):
        path = Path(tokenizer).resolve()
        tok = (path if path.is_dir() else path.parent).name
    return Path("data") / re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{corpus}-{tok}".lower())


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("data", help="prepare training data (token memmaps)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    prepare = actions.add_parser(
        "prepare", help="tokenize a corpus into train.bin / val.bin / meta.json"
    )
    prepare.add_argument(
        "--data", default="stdlib", help="text/JSONL file, folder, 'stdlib' or 'hf:NAME[:CONFIG]'"
    )
    prepare.add_argument(
        "--tokenizer", default="byte", help="'byte', 'bpe' or a path to a tokenizer.json"
    )
    prepare.add_argument(
        "--vocab-size", type=int, default=8192, help="ids of a trained bpe tokenizer"
    )
    prepare.add_argument(
        "--val-fraction", type=float, default=0.05, help="share of documents held out"
    )
    prepare.add_argument(
        "--bpe-dropout",
        "--data.bpe_dropout",
        dest="bpe_dropout",
        type=float,
        default=0.0,
        help="BPE-dropout p on the train split only (arXiv 1910.13267); val stays plain",
    )
    prepare.add_argument("--text-field", default="text", help="JSONL / hub field holding the text")
    prepare.add_argument(
        "--max-files", type=int, default=None, help="use only the first N files (sorted)"
    )
    prepare.add_argument(
        "--out", type=Path, default=None, help="output folder (default data/<corpus>-<tokenizer>)"
    )
    prepare.set_defaults(func=run_prepare)


def run_prepare(args: argparse.Namespace) -> int:
    out = args.out or default_out_dir(args.data, args.tokenizer, args.vocab_size)
    if args.bpe_dropout and args.out is None:  # beside the plain folder, not over it
        out = out.with_name(f"{out.name}-dropout{args.bpe_dropout:g}")
    # the corpus and the folder in one line each, before anything is read or imported
    check_source(args.data)
    check_folder(out)
    from archlab.data.prepare import (
        prepare_data,  # numpy, tokenizers: imported when it runs, not for --help
    )

    started = time.time()
    folder = prepare_data(
        args.data,
        out,
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        val_fraction=args.val_fraction,
        text_field=args.text_field,
        max_files=args.max_files,
        bpe_dropout=args.bpe_dropout,
    )
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    tok = meta["tokenizer"]
    # written by an earlier run, not this one
    reused = (folder / "meta.json").stat().st_mtime < started
    when = (
        f"reused (prepared earlier in {meta['seconds']} s)"
        if reused
        else f"prepared in {meta['seconds']} s"
    )
    print(
        f"{folder}: train {meta['tokens']['train']:,} / val {meta['tokens']['val']:,} tokens "
        f"({meta['dtype']}), tokenizer {tok['kind']} vocab {tok['vocab_size']}, {when}; train on "
        f"it with `archlab train --data {folder}`"
    )
    return 0
