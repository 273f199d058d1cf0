"""Peak memory of a fine-tune at SmolLM2-135M shapes: full AdamW vs LoRA vs the last layers only.

python benchmarks/bench_finetune_memory.py # batch 1 x 128 tokens, 2 steps per arm python
benchmarks/bench_finetune_memory.py --batch 8 --block 512

Each arm is `archlab train --init-from FOLDER ...` in a fresh process (a random model of
SmolLM2-135M's shapes, benchmarks/bench_first_token.py writes it; nothing is downloaded), run under
a wrapper process that reports its child's peak resident memory (getrusage ru_maxrss). The trainer's
own estimate (train/memory.py) is printed beside the measurement. A process also holds the Python
runtime, torch's libraries and, when it saves the checkpoint, copies of the weights being written;
the first line measures a process that only loads the model, for scale.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_first_token import SMOLLM2_135M, SRC, write_folders  # noqa: E402

WRAPPER = (
    "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], "
    "capture_output=True, text=True); sys.stderr.write(r.stderr[-4000:]); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)
LOAD_ONLY = (
    "import sys; from archlab.interop import from_hf; m = from_hf(sys.argv[1]); "
    "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
)
ARMS = {
    "full fine-tune (AdamW, fp32)": [],
    "LoRA rank 8 on q/k/v, o, gate/up, down": ["--lora_rank", "8"],
    "last 2 layers + final norm (--trainable)": ["--trainable", "layers.28.*,layers.29.*,norm.*"],
}


def run_arm(
    hf: Path, corpus: Path, out: Path, extra: list[str], batch: int, block: int
) -> tuple[float, str]:
    argv = [
        sys.executable,
        "-m",
        "archlab",
        "train",
        "--init-from",
        str(hf),
        "--data",
        str(corpus),
        "--steps",
        "2",
        "--out",
        str(out),
        "--data.batch_size",
        str(batch),
        "--data.block_size",
        str(block),
        "--logging.eval_batches",
        "1",
        "--logging.samples",
        "0",
        "--logging.tensorboard",
        "false",
        "--logging.progress",
        "false",
        "--checkpoint.save_every",
        "0",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    result = subprocess.run(
        [sys.executable, "-c", WRAPPER, *argv], env=env, capture_output=True, text=True, check=True
    )
    estimate = re.search(r"memory estimate per process: (.*)", result.stderr)
    return int(result.stdout.split()[-1]) * 1024 / 1e9, estimate.group(
        1
    ) if estimate else result.stderr[-300:]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--block", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hf, _ = write_folders(root)
        words = [f"w{i}" for i in range(2, SMOLLM2_135M["vocab_size"])]
        rng = random.Random(0)
        (root / "corpus.txt").write_text(
            "\n".join(" ".join(rng.choices(words, k=64)) for _ in range(2000))
        )
        loaded = subprocess.run(
            [sys.executable, "-c", LOAD_ONLY, str(hf)],
            env={**os.environ, "PYTHONPATH": str(SRC)},
            capture_output=True,
            text=True,
            check=True,
        )
        print(
            "process that only loads the model: peak "
            f"RSS {int(loaded.stdout.split()[-1]) * 1024 / 1e9:.2f} GB\n"
        )
        print(
            f"| arm (batch {args.batch} x {args.block} tokens) | peak RSS (GB) | "
            "archlab's estimate |"
        )
        print("|---|---|---|")
        for i, (name, extra) in enumerate(ARMS.items()):
            peak, estimate = run_arm(
                hf, root / "corpus.txt", root / f"run{i}", extra, args.batch, args.block
            )
            print(f"| {name} | {peak:.2f} | {estimate} |", flush=True)


if __name__ == "__main__":
    main()
