"""Reading a model at 8x its training length with ReRoPE / Leaky ReRoPE (Su,
kexue.fm/archives/9708): one forward of one long window, the eager kernel scoring all queries
at once against query chunks of `attention_kernels.SCORE_CHUNK` (each chunk over the keys up to
its last query), with plain RoPE through SDPA as the floor. This is what `eval length` and the
`long-context` suite's 8x measures cost per window.

One Llama-shaped model (seed 0, d 128, 4 layers, trained length N = 256: the suite's `small` shape),
read at 8N. The settings alternate A B C ... in one process, one thread, so drift hits them alike;
a setting's time is its best of the rounds (other load only adds time). Chunked and one-pass logits
are checked equal first.

    # 8 x 256 = 2048 tokens, 3 rounds (~2 min, 1 core)
    python benchmarks/bench_rerope_read.py
    # 4 x 128 = 512 tokens, 2 rounds
    python benchmarks/bench_rerope_read.py --quick

Writes benchmarks/results/rerope_read.json and .md.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from archlab import TransformerLM, build_preset
from archlab.lab.measures.long_context import inference_config
from archlab.nn.attention import kernels as attention_kernels

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = {"rope (sdpa)": "none", "rerope": "rerope", "leaky rerope": "leaky_rerope"}


def forward_s(model: TransformerLM, x: torch.Tensor) -> float:
    with torch.no_grad():
        start = time.perf_counter()
        model(x)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N 128, 4x, 2 rounds")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n, factor = (128, 4) if args.quick else (256, 8)
    rounds = args.rounds or (2 if args.quick else 3)
    base = build_preset("llama", "small").replace(max_seq_len=n, n_layers=4)
    torch.manual_seed(0)
    weights = TransformerLM(base).state_dict()
    x = torch.randint(
        0, base.vocab_size, (1, factor * n), generator=torch.Generator().manual_seed(1)
    )
    models = {}
    for name, method in METHODS.items():
        models[name] = TransformerLM(inference_config(base, method, factor * n)).eval()
        models[name].load_state_dict(weights)
    chunk = attention_kernels.SCORE_CHUNK
    settings = [("rope (sdpa)", chunk)] + [
        (m, c) for m in ("rerope", "leaky rerope") for c in (factor * n, chunk)
    ]
    for name in ("rerope", "leaky rerope"):  # the two paths agree before anything is timed
        with torch.no_grad():
            attention_kernels.SCORE_CHUNK = factor * n
            whole = models[name](x)
            attention_kernels.SCORE_CHUNK = chunk
            torch.testing.assert_close(models[name](x), whole, rtol=1e-4, atol=1e-4)
    best = {s: float("inf") for s in settings}
    for _ in range(rounds):
        for name, size in settings:
            attention_kernels.SCORE_CHUNK = size
            forward_s(models[name], x[:, :64])  # warm the path
            best[name, size] = min(best[name, size], forward_s(models[name], x))
    attention_kernels.SCORE_CHUNK = chunk
    floor = best["rope (sdpa)", chunk]
    rows = [
        {
            "method": name,
            "queries_per_chunk": "sdpa" if name.startswith("rope ") else size,
            "forward_s": round(best[name, size], 3),
            "vs_sdpa": round(best[name, size] / floor, 2),
        }
        for name, size in settings
    ]
    result = {
        "length": factor * n,
        "trained_length": n,
        "d_model": base.d_model,
        "n_layers": base.n_layers,
        "threads": 1,
        "rounds": rounds,
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "rows": rows,
    }
    lines = [
        f"One forward of {factor * n} tokens (trained at {n}), d {base.d_model}, {base.n_layers} "
        f"layers, 1 thread, best of {rounds} alternating rounds.",
        "",
        "| method | queries per chunk | forward (s) | x SDPA RoPE |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['method']} | {r['queries_per_chunk']} | {r['forward_s']} | {r['vs_sdpa']} |"
        for r in rows
    ]
    print("\n".join(lines))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "rerope_read.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "rerope_read.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
