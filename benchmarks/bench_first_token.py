"""Time to first token: `archlab generate --max-new-tokens 1` on a Hugging Face folder vs
its converted checkpoint.

python benchmarks/bench_first_token.py # SmolLM2-135M shapes, random weights, 3 interleaved
pairs python benchmarks/bench_first_token.py --pairs 5 --compare-src /path/to/old/src # also
time another checkout

The folder is a random model of SmolLM2-135M's shapes (transformers' LlamaConfig: d 576, 30 layers,
9 heads, 3 KV heads, d_ff 1536, vocab 49152, tied), saved by transformers itself with a word-level
tokenizer of as many ids: nothing is downloaded. `archlab convert --from-hf` turns it into an
archlab checkpoint. Each pair runs the two commands as fresh processes, in alternating order, and
times the whole command (Python start, imports, loading, one prefill + one token), which is what a
user waits for.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
SMOLLM2_135M = dict(
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    vocab_size=49152,
    max_position_embeddings=8192,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    hidden_act="silu",
)


def write_folders(root: Path) -> tuple[Path, Path]:
    """The random HF folder and its `archlab convert --from-hf` run folder."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    hf = root / "hf"
    LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M)).save_pretrained(hf)
    # a word-level tokenizer with one entry per id, so any token the random model picks decodes
    vocab = {"[UNK]": 0, "def": 1} | {f"w{i}": i for i in range(2, SMOLLM2_135M["vocab_size"])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(hf / "tokenizer.json"))
    run = root / "run"
    subprocess.run(
        [sys.executable, "-m", "archlab", "convert", "--from-hf", str(hf), "--out", str(run)],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        check=True,
        capture_output=True,
    )
    return hf, run


def time_generate(checkpoint: Path, src: Path) -> float:
    argv = [
        sys.executable,
        "-m",
        "archlab",
        "generate",
        "--checkpoint",
        str(checkpoint),
        "--prompt",
        "def ",
        "--max-new-tokens",
        "1",
        "--temperature",
        "0",
    ]
    start = time.perf_counter()
    subprocess.run(
        argv, env={**os.environ, "PYTHONPATH": str(src)}, check=True, capture_output=True
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument(
        "--compare-src",
        type=Path,
        default=None,
        help="another checkout's src/ (e.g. before a change)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        hf, run = write_folders(Path(tmp))
        arms = {"HF folder": (hf, SRC), "converted checkpoint": (run, SRC)}
        if args.compare_src is not None:
            arms["converted checkpoint, --compare-src"] = (run, args.compare_src)
        times: dict[str, list[float]] = {name: [] for name in arms}
        for i in range(args.pairs):
            order = list(arms) if i % 2 == 0 else list(reversed(arms))
            for name in order:
                times[name].append(time_generate(*arms[name]))
    base = statistics.median(times["HF folder"])
    print("| source | median s | runs (s) | vs HF folder |")
    print("|---|---|---|---|")
    for name, values in times.items():
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(
            f"| {name} | {statistics.median(values):.2f} | {runs} "
            f"| {statistics.median(values) / base:.2f}x |"
        )


if __name__ == "__main__":
    main()
