"""Peak memory of `from_hf` on a bigger random Llama-shaped folder: how close loading stays
to one copy.

python benchmarks/bench_hf_load.py # ~0.5B parameters, float32 (~2 GB of weights) python
benchmarks/bench_hf_load.py --layers 4 --dtype bf16

The folder is written once by `save_hf` (a random model); a fresh process then loads it while a
thread samples /proc/self/status every 5 ms. RssAnon is the process's own (anonymous) memory: the
loaded parameters plus whatever the loader allocates on the way; the page cache of the memory-mapped
file is reported apart (RssFile), since the kernel can drop it at any time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def rss() -> dict[str, int]:
    """RssAnon and RssFile of this process, in bytes."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) * 1024
    return fields


def measure(folder: str) -> dict[str, float]:
    """Load `folder` in this process, sampling memory; figures in bytes and seconds."""
    from archlab import from_hf

    base, peak, done = rss(), dict(rss()), threading.Event()

    def sample() -> None:
        while not done.is_set():
            for key, value in rss().items():
                peak[key] = max(peak[key], value)
            time.sleep(0.005)

    thread = threading.Thread(target=sample)
    thread.start()
    start = time.perf_counter()
    model = from_hf(folder)
    seconds = time.perf_counter() - start
    done.set()
    thread.join()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return {
        "weights": weights,
        "peak_anon_over_base": peak["RssAnon"] - base["RssAnon"],
        "peak_file": peak["RssFile"],
        "seconds": seconds,
        "parameters": model.num_parameters(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=2048)
    parser.add_argument("--dtype", default="fp32", choices=list(DTYPES))
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # internal: the child process
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    from archlab import ModelConfig, TransformerLM, save_hf

    config = ModelConfig(
        vocab_size=32000,
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=16,
        n_kv_heads=4,
        d_ff=4 * args.d_model,
        max_seq_len=2048,
    )
    with tempfile.TemporaryDirectory() as tmp:
        with torch.device("meta"):
            model = TransformerLM(config)
        model.to_empty(device="cpu")
        # random values, cheaply (init_weights' trunc_normal takes minutes here)
        for p in model.parameters():
            p.data = torch.randn(p.shape, dtype=DTYPES[args.dtype]) * 0.02
        save_hf(model, tmp)
        del model
        out = subprocess.run(
            [sys.executable, __file__, "--measure", tmp], check=True, capture_output=True, text=True
        )
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    gb = 1e9
    print(
        f"{figures['parameters'] / 1e9:.2f}B parameters, {args.dtype}: "
        f"weights {figures['weights'] / gb:.2f} GB; peak RssAnon over the "
        f"pre-load baseline {figures['peak_anon_over_base'] / gb:.2f} GB "
        f"({figures['peak_anon_over_base'] / figures['weights']:.2f}x the weights); "
        f"peak RssFile (page cache of the mmap) {figures['peak_file'] / gb:.2f} GB; "
        f"load {figures['seconds']:.1f} s"
    )


if __name__ == "__main__":
    main()
