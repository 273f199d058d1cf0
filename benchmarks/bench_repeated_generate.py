"""Compiled decoding over successive `generate` calls: measured once per model and
reused, against eager.

A notebook, an eval loop or a chat loop calls `generate(model, ..., compile_decode=True)` again and
again, each call opening its own `Decoder`. The decoder's choice (compiled step or eager, and the
compiled step's kind) is measured on the first call and kept per model (infer/engine.py), so later
calls decode at once. Three ways, each on a fresh copy of the same model, `--calls` successive calls
each, wall-clock seconds per call:
- eager: `compile_decode=False`;
- compiled, measured once (now): `compile_decode=True`, the first call compiles and measures,
  the rest reuse;
- compiled, measured every call (before): the same, but the per-model record is cleared before each
  call, as every call re-measured before the record existed (the compiled graphs stay in torch's
  compile cache, so this row pays the probe, not the compilation, from its second call on).
Each row starts from an empty compile cache (`torch._dynamo.reset()`), so each pays its own first
compile. The `picked` column is the mode the decoder chose. Calls 2..N are the ones a loop keeps
paying; the first pays the one-off compile.

    # small (256 x 6), 128 new tokens, 5 calls
    python benchmarks/bench_repeated_generate.py
    python benchmarks/bench_repeated_generate.py --size llama --new-tokens 256

CPU threads default to 1 (a shared machine); the machine may be loaded: compare the rows of one
run, not runs.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

from archlab import ModelConfig, TransformerLM
from archlab.infer import engine
from archlab.infer.generate import generate
from archlab.infer.sampling import SamplingConfig

# (d_model, n_layers, n_heads, vocab_size): bench_generate.py's `small` and `llama` rows
SIZES = {"tiny": (64, 2, 4, 256), "small": (256, 6, 8, 256), "llama": (512, 8, 8, 8192)}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="small", choices=list(SIZES))
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args()


def calls(
    model: TransformerLM,
    prompt: list[int],
    args: argparse.Namespace,
    compile_decode: bool,
    forget: bool,
) -> tuple[list[float], str]:
    """Seconds of each of `args.calls` successive generate calls, and the mode the last
    one decoded with."""
    sampling = SamplingConfig(max_new_tokens=args.new_tokens, temperature=0)
    seconds, mode = [], "eager"
    for _ in range(args.calls):
        if forget:
            engine._MEASURED.pop(model, None)
        start = time.perf_counter()
        out = generate(model, [prompt], sampling, compile_decode=compile_decode)
        seconds.append(time.perf_counter() - start)
        mode = out.mode
    return seconds, mode


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    d, n_layers, n_heads, vocab = SIZES[args.size]
    torch.manual_seed(0)
    model = TransformerLM(
        ModelConfig(
            d_model=d,
            n_layers=n_layers,
            n_heads=n_heads,
            vocab_size=vocab,
            max_seq_len=args.prompt_len + args.new_tokens,
        )
    ).eval()
    prompt = torch.randint(
        0, vocab, (args.prompt_len,), generator=torch.Generator().manual_seed(1)
    ).tolist()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); {args.size} ({d} x "
        f"{n_layers}, vocab {vocab}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
        f"parameters), prompt {args.prompt_len}, {args.new_tokens} new tokens, {args.calls} "
        "successive generate() calls\n"
    )
    rows = [
        ("eager", False, False),
        ("compiled, measured once (now)", True, False),
        ("compiled, measured every call (before)", True, True),
    ]
    results = {}
    for name, compiled, forget in rows:
        # each row compiles on its own first call: no graph left by the row before
        torch._dynamo.reset()
        results[name] = calls(copy.deepcopy(model), prompt, args, compiled, forget)
    eager_later = sum(results["eager"][0][1:])
    print(
        "| decoding | picked | "
        + " | ".join(f"call {i + 1} s" for i in range(args.calls))
        + " | calls 2.. s | vs eager (calls 2..) |"
    )
    print("|---" * (args.calls + 4) + "|")
    for name, (seconds, mode) in results.items():
        later = sum(seconds[1:])
        print(
            f"| {name} | {mode} | " + " | ".join(f"{s:.2f}" for s in seconds) + f" | {later:.2f} | "
            f"{eager_later / later:.2f}x |"
        )


if __name__ == "__main__":
    main()
