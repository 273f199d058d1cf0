"""Data preparation speed: the built-in stdlib corpus (or any --data) into token memmaps,
cold and cached.

python benchmarks/bench_data.py # stdlib, byte tokenizer (target: under 60 s) python
benchmarks/bench_data.py --tokenizer bpe # stdlib, trains an 8192-id byte-level BPE first
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from archlab.data.prepare import prepare_data

TARGET_SECONDS = 60.0  # issue 3: stdlib + byte tokenizer must prepare in under a minute on 2 cores


def bench(data: str, tokenizer: str, vocab_size: int) -> dict[str, float | int | str]:
    """Prepare `data` into a fresh temp folder, then again (cache hit); return the figures."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        out = prepare_data(data, Path(tmp) / "prepared", tokenizer=tokenizer, vocab_size=vocab_size)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        prepare_data(data, out, tokenizer=tokenizer, vocab_size=vocab_size)
        cached = time.perf_counter() - start
        meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    tokens = meta["tokens"]["train"] + meta["tokens"]["val"]
    return {
        "data": data,
        "tokenizer": f"{meta['tokenizer']['kind']} ({meta['tokenizer']['vocab_size']} ids)",
        "files": meta["source"]["files"] or 0,
        "bytes": meta["source"]["bytes"] or 0,
        "tokens": tokens,
        "seconds_cold": round(cold, 2),
        "seconds_cached": round(cached, 2),
        "tokens_per_s": round(tokens / cold),
    }


def main(argv: list[str] | None = None) -> dict[str, float | int | str]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default="stdlib")
    parser.add_argument("--tokenizer", default="byte")
    parser.add_argument("--vocab-size", type=int, default=8192)
    args = parser.parse_args(argv)
    result = bench(args.data, args.tokenizer, args.vocab_size)
    print(f"python {platform.python_version()}, {os.cpu_count()} cores")
    print(
        f"{result['data']} / {result['tokenizer']}: {result['files']} files, {result['bytes']:,} "
        f"bytes, {result['tokens']:,} tokens; prepared in {result['seconds_cold']} s "
        f"({result['tokens_per_s']:,} tokens/s), cache hit in {result['seconds_cached']} s"
    )
    if args.data == "stdlib" and args.tokenizer == "byte":
        verdict = "ok" if result["seconds_cold"] < TARGET_SECONDS else "TOO SLOW"
        print(f"target: under {TARGET_SECONDS:.0f} s -> {verdict}")
    return result


if __name__ == "__main__":
    main()
