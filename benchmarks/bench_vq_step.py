"""The Transformer-VQ training step, profiled: tokens/s of a whole training step (forward with the
loss, backward, AdamW) for softmax, FAVOR+ and VQ attention at the `tiny` size, how VQ's step time
grows with the length (the paper's claim is linear time: Lingle, arXiv 2309.16354), and where a VQ
step's time goes (torch.profiler, the operators and their input shapes).

The model is `build_preset("llama", "tiny")` (64 wide, 2 layers, 4 heads of 16) with the byte
vocabulary; VQ at its defaults (512 codes, blocks of 64, hard assignment), FAVOR+ at its defaults.
Batch x length is held at `--tokens` tokens per step so every row of the length table does the same
work per token if the kernel is linear. Each figure is the median of `--repeats` timed steps after
two warm-up steps, the kernels interleaved step by step, one thread.

    python benchmarks/bench_vq_step.py                   # ~2 minutes on a loaded 2-core machine
    python benchmarks/bench_vq_step.py --lengths 128,256 --repeats 3 --no-profile

The machine may be shared: compare the rows of one run (ratios), not runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from archlab import TransformerLM, build_preset

KERNELS = ("softmax", "favor", "vq")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=4096, help="batch x length of every step")
    p.add_argument("--lengths", default="128,256,512,1024", help="lengths of the scaling table")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--no-profile", action="store_true", help="skip the operator profile of a VQ step"
    )
    p.add_argument("--assign", default="hard", help="VQ assignment: hard or soft")
    p.add_argument(
        "--codes", type=int, default=512, help="VQ codebook size (vq.codes; 512 is the default)"
    )
    return p.parse_args()


def train_step(
    kernel: str, length: int, tokens: int, assign: str = "hard", codes: int = 512
) -> Callable[[], None]:
    """One training step of a fresh tiny model at `length`, batch tokens // length."""
    torch.manual_seed(0)
    extra = {"vq": {"assign": assign, "codes": codes}} if kernel == "vq" else {}
    config = build_preset(
        "llama", "tiny", attn_kernel=kernel, vocab_size=256, max_seq_len=length, **extra
    )
    model = TransformerLM(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(
        0, 256, (max(1, tokens // length), length + 1), generator=torch.Generator().manual_seed(1)
    )

    def step() -> None:
        model(ids[:, :-1], targets=ids[:, 1:]).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def timed(steps: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Median seconds per step of each, after two warm-up steps, interleaved step by step."""
    for step in steps.values():
        step()
        step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    lengths = [int(n) for n in args.lengths.split(",")]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); llama/tiny, "
        f"{args.tokens} tokens per step, VQ {args.assign} with {args.codes} codes, median "
        f"of {args.repeats} steps\n"
    )
    print(
        "| length | "
        + " | ".join(f"{k} tokens/s" for k in KERNELS)
        + " | vq / favor | vq / softmax |"
    )
    print("|---" * (len(KERNELS) + 3) + "|")
    for length in lengths:
        s = timed(
            {k: train_step(k, length, args.tokens, args.assign, args.codes) for k in KERNELS},
            args.repeats,
        )
        rate = {k: args.tokens / s[k] for k in KERNELS}
        print(
            f"| {length} | "
            + " | ".join(f"{rate[k]:,.0f}" for k in KERNELS)
            + f" | {s['favor'] / s['vq']:.2f} | {s['softmax'] / s['vq']:.2f} |"
        )
    if args.no_profile:
        return
    from torch.profiler import ProfilerActivity, profile

    step = train_step("vq", lengths[0], args.tokens, args.assign, args.codes)
    step()
    step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(2):
            step()
    print(f"\nA VQ step at length {lengths[0]}, by operator and input shape (2 steps):\n")
    print(
        prof.key_averages(group_by_input_shape=True).table(
            sort_by="self_cpu_time_total",
            row_limit=15,
            max_name_column_width=28,
            max_shapes_column_width=60,
        )
    )


if __name__ == "__main__":
    main()
